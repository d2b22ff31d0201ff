//! The per-Gateway isolation guide (docs/per-gateway-isolation.md) on real Pods: tenant-a's
//! dedicated plane is `Programmed` only once its Pods are Ready, survives a connector-token
//! rotation under traffic, and tenant-b's claim on tenant-a's tunnel gets no plane, no push, no
//! place in any ingress document and no traffic.

use std::time::Duration;

use cloudflare_double::TunnelInfo;
use serde_json::Value;

use crate::support::{
    Answers, Install, PROXY_IMAGE, Traffic, answered_by, apply, edge_get, gateway_condition, json,
    kubectl, pod_names, tenant, token_secret, until_status, wait, wait_gateway,
};

const HOST_A: &str = "a.isolation.example.com";
const HOST_B: &str = "b.isolation.example.com";
/// A proxy image the node cannot run: its Pods wait in `ErrImagePull`.
const UNMAPPED_IMAGE: &str = "ghcr.io/kube-tenancy/tunnel-proxy:not-built";
/// The pod template annotation carrying the connector token's hash.
const TOKEN_HASH: &str = "cf.k8s.lex.la/tunnel-token-hash";
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_isolation_guide_holds_on_real_pods() {
    let install = Install::start().await;
    let _logs = install.cp.logs_on_failure();
    let tunnel_a = install
        .double
        .add_tunnel(&install.account, "tenant-a")
        .unwrap();

    programmed_follows_the_planes_readiness(&install, &tunnel_a).await;
    let token =
        a_token_rotation_rolls_the_plane_and_traffic_keeps_flowing(&install, &tunnel_a).await;
    a_refused_claim_gets_no_plane_no_push_and_no_traffic(&install, &tunnel_a, &token).await;
}

/// The plane's Pods (the Deployment `cf-proxy-a`'s), terminating ones included.
async fn plane_pods(install: &Install) -> Vec<Value> {
    json(install.cluster(), &["-n", "tenant-a", "get", "pods"]).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("cf-proxy-a-"))
        })
        .cloned()
        .collect()
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The reasons the Pod's containers wait for (`ErrImagePull`, ...).
fn waiting_reasons(pod: &Value) -> Vec<String> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().into_iter().flatten())
        .filter_map(|s| s["state"]["waiting"]["reason"].as_str().map(str::to_owned))
        .collect()
}

/// `Programmed` follows the plane's readiness: False while the configuration does not resolve
/// (no token Secret: nothing rendered), False while the rendered Pods cannot become Ready (an
/// image the node cannot pull), True once a Pod is really Ready, and then the hostname answers.
async fn programmed_follows_the_planes_readiness(install: &Install, tunnel_a: &TunnelInfo) {
    let cluster = install.cluster();
    apply(
        cluster,
        &tenant(
            "tenant-a",
            "a",
            HOST_A,
            &format!("  image: {UNMAPPED_IMAGE}"),
        ),
    )
    .await;
    wait(
        cluster,
        "tenant-a",
        "deployment/backend",
        "condition=Available",
        "120s",
    )
    .await;

    // No token Secret: the configuration does not resolve, nothing is rendered.
    let accepted = wait_gateway(
        cluster,
        "tenant-a",
        "a",
        "Accepted",
        ("False", "InvalidParameters"),
        WAIT,
    )
    .await;
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("Secret tenant-a/tunnel does not exist"),
        "{accepted}"
    );
    let programmed = gateway_condition(cluster, "tenant-a", "a", "Programmed").await;
    assert_eq!(programmed["status"], "False", "{programmed}");
    assert!(
        cluster
            .kubectl_ok(&["-n", "tenant-a", "get", "deployment", "cf-proxy-a"])
            .await
            .is_err(),
        "a plane rendered without its token"
    );

    // The Secret: the plane is rendered, but its proxy image cannot be pulled.
    apply(cluster, &token_secret("tenant-a", &tunnel_a.token)).await;
    wait_gateway(
        cluster,
        "tenant-a",
        "a",
        "Accepted",
        ("True", "Accepted"),
        WAIT,
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pods = plane_pods(install).await;
        if !pods.is_empty()
            && pods.iter().all(|p| {
                waiting_reasons(p)
                    .iter()
                    .any(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
            })
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "plane Pods not stuck on their image: {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The round after the Deployment's creation says so (the Pods may be stuck before it
    // ran); from then on, watched for a while, Programmed stays False and says it waits for a
    // ready replica.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let programmed = gateway_condition(cluster, "tenant-a", "a", "Programmed").await;
        if programmed["message"]
            .as_str()
            .is_some_and(|m| m.contains("0 of 2 Pods ready"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Programmed never counted the plane's Pods: {programmed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..10 {
        let programmed = gateway_condition(cluster, "tenant-a", "a", "Programmed").await;
        assert_eq!(
            (&programmed["status"], &programmed["reason"]),
            (&Value::from("False"), &Value::from("Pending")),
            "{programmed}"
        );
        assert!(
            programmed["message"]
                .as_str()
                .unwrap()
                .contains("waiting for a ready replica of the dedicated data plane Deployment tenant-a/cf-proxy-a: 0 of 2 Pods ready"),
            "{programmed}"
        );
        assert!(plane_pods(install).await.iter().all(|p| !pod_ready(p)));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The tenant drops the image override: the plane rolls onto the real proxy. Programmed is
    // True only with a Ready Pod of the new template; and then the route answers.
    kubectl(
        cluster,
        &[
            "-n",
            "tenant-a",
            "patch",
            "gatewayconfig",
            "cfg",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/image"}]"#,
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let programmed = gateway_condition(cluster, "tenant-a", "a", "Programmed").await;
        let pods = plane_pods(install).await;
        if programmed["status"] == "True" {
            assert!(
                pods.iter().any(|p| pod_ready(p)
                    && ["initContainers", "containers"]
                        .iter()
                        .flat_map(|k| p["spec"][*k].as_array().into_iter().flatten())
                        .any(|c| c["image"] == PROXY_IMAGE)),
                "Programmed=True without a Ready Pod of the real proxy: {programmed} {pods:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never Programmed: {programmed}; {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let backends = pod_names(cluster, "tenant-a", "app=backend").await;
    let body = until_status(install.edge, HOST_A, 200, Duration::from_secs(30)).await;
    assert!(answered_by(&body, &backends), "{backends:?}: {body}");
}

/// Rotating the connector token the way the guide tells an operator (a new tunnel secret at
/// Cloudflare, the new token written into the Secret) rolls the plane's Pods onto it, and a
/// steady request stream through the edge keeps being answered by tenant-a's backend. Returns
/// the new token.
async fn a_token_rotation_rolls_the_plane_and_traffic_keeps_flowing(
    install: &Install,
    tunnel_a: &TunnelInfo,
) -> String {
    let cluster = install.cluster();
    let (double, edge) = (&install.double, install.edge);
    kubectl(
        cluster,
        &[
            "-n",
            "tenant-a",
            "rollout",
            "status",
            "deployment/cf-proxy-a",
            "--timeout=180s",
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while double.live_connections(&tunnel_a.tunnel_id) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "connectors missing");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let hash = |d: &Value| d["spec"]["template"]["metadata"]["annotations"][TOKEN_HASH].clone();
    let plane = json(
        cluster,
        &["-n", "tenant-a", "get", "deployment", "cf-proxy-a"],
    )
    .await;
    let before = hash(&plane);
    assert!(before.is_string(), "{plane}");
    let old_pods: Vec<String> = plane_pods(install)
        .await
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let backends = pod_names(cluster, "tenant-a", "app=backend").await;

    let traffic = Traffic::start(edge, HOST_A, "/during-rotation", move |body| {
        answered_by(body, &backends)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = tokio::time::Instant::now();
    let rotated = double
        .rotate_tunnel_secret(&install.account, &tunnel_a.tunnel_id)
        .unwrap();
    apply(cluster, &token_secret("tenant-a", &rotated)).await;

    // The template changes, the rollout completes, and every old Pod is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let plane = json(
            cluster,
            &["-n", "tenant-a", "get", "deployment", "cf-proxy-a"],
        )
        .await;
        if hash(&plane) != before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the plane did not roll: {plane}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    kubectl(
        cluster,
        &[
            "-n",
            "tenant-a",
            "rollout",
            "status",
            "deployment/cf-proxy-a",
            "--timeout=180s",
        ],
    )
    .await;
    for pod in &old_pods {
        while cluster
            .kubectl_ok(&["-n", "tenant-a", "get", "pod", pod])
            .await
            .is_ok()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "old plane Pod {pod} still there"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let took = started.elapsed();
    let Answers {
        ok,
        unconfigured,
        failed,
    } = traffic.stop().await;
    eprintln!(
        "token rotation of tenant-a's plane ({took:.0?} until the old Pods were gone): {ok} \
         requests answered by tenant-a's backend, {unconfigured} answered 404 by a Pod without \
         config, {} failed",
        failed.len()
    );
    assert!(ok > 0);
    assert!(failed.is_empty(), "failed during the rotation: {failed:?}");
    // The new Pods' connectors start only once their proxy (a sidecar) holds a config.
    assert_eq!(
        unconfigured, 0,
        "requests answered `404 no matching route` by a Pod without config during the rotation"
    );

    // Only Pods of the new template remain, each with its connector on the new token.
    let new_pods = plane_pods(install).await;
    assert!(
        new_pods.iter().all(|p| !old_pods
            .iter()
            .any(|o| p["metadata"]["name"].as_str() == Some(o))),
        "{old_pods:?}"
    );
    assert_eq!(double.live_connections(&tunnel_a.tunnel_id), 2);
    let accepted = gateway_condition(cluster, "tenant-a", "a", "Accepted").await;
    assert_eq!(accepted["status"], "True", "{accepted}");
    let programmed = gateway_condition(cluster, "tenant-a", "a", "Programmed").await;
    assert_eq!(programmed["status"], "True", "{programmed}");
    rotated
}

/// tenant-b's Gateway names tenant-a's tunnel with a real token of it (so verification passes
/// and the claim rule decides): refused, told who holds the tunnel, no plane and so no Pod to
/// push to, no push for its partition, its hostname in no ingress document, and a request for
/// it through the edge never reaches its backend. tenant-a keeps serving.
async fn a_refused_claim_gets_no_plane_no_push_and_no_traffic(
    install: &Install,
    tunnel_a: &TunnelInfo,
    token: &str,
) {
    let cluster = install.cluster();
    let (double, edge) = (&install.double, install.edge);
    apply(
        cluster,
        &format!(
            "{}---\n{}",
            tenant("tenant-b", "b", HOST_B, ""),
            token_secret("tenant-b", token)
        ),
    )
    .await;
    wait(
        cluster,
        "tenant-b",
        "deployment/backend",
        "condition=Available",
        "120s",
    )
    .await;
    let refused = wait_gateway(
        cluster,
        "tenant-b",
        "b",
        "Accepted",
        ("False", "InvalidParameters"),
        WAIT,
    )
    .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("already served by Gateway tenant-a/a"),
        "{refused}"
    );
    let programmed = gateway_condition(cluster, "tenant-b", "b", "Programmed").await;
    assert_eq!(programmed["status"], "False", "{programmed}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let route = json(cluster, &["-n", "tenant-b", "get", "httproute", "b"]).await;
        let events = kubectl(cluster, &["-n", "tenant-b", "get", "events"]).await;
        let says = route["status"]["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["conditions"].as_array().into_iter().flatten())
            .any(|c| c["type"] == "Accepted" && c["reason"] == "TunnelClaimRejected");
        if says && events.contains("TunnelClaimRejected") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the route and an Event should say TunnelClaimRejected: {route}\n{events}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Watched under traffic: tenant-b's hostname is the edge's own 404 (no tunnel names it),
    // never answered by anything else; tenant-b has no plane at any time.
    for _ in 0..20 {
        let (status, body) = edge_get(edge, HOST_B, "/refused-claim").await.unwrap();
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("no ingress rule of any tunnel"), "{body}");
        let pods = pod_names(cluster, "tenant-b", "app!=backend").await;
        assert!(pods.is_empty(), "Pods beside tenant-b's backend: {pods:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (kind, name) in [
        ("deployment", "cf-proxy-b"),
        ("service", "cf-proxy-b-config"),
        ("secret", "cf-proxy-b-auth"),
    ] {
        assert!(
            cluster
                .kubectl_ok(&["-n", "tenant-b", "get", kind, name])
                .await
                .is_err(),
            "{kind} {name} rendered for a refused claim"
        );
    }
    let backend_b = pod_names(cluster, "tenant-b", "app=backend").await;
    for pod in &backend_b {
        let logs = kubectl(cluster, &["-n", "tenant-b", "logs", pod]).await;
        assert!(!logs.contains("/refused-claim"), "reached {pod}: {logs}");
    }

    // No ingress document names tenant-b's hostname; tenant-a's still names tenant-a's.
    for t in [&install.tunnel.tunnel_id, &tunnel_a.tunnel_id] {
        let doc = double
            .configuration(&install.account, t)
            .unwrap()
            .0
            .map(|d| d.to_string())
            .unwrap_or_default();
        assert!(!doc.contains(HOST_B), "{t}: {doc}");
    }
    let doc_a = double
        .configuration(&install.account, &tunnel_a.tunnel_id)
        .unwrap()
        .0
        .expect("tenant-a's document")
        .to_string();
    assert!(doc_a.contains(HOST_A), "{doc_a}");

    // The controller pushed to tenant-a's plane and never for tenant-b's partition.
    let metrics = install.controller_metrics().await;
    assert!(
        metrics.contains(r#"partition="gateway:tenant-a/a",result="loaded""#),
        "{metrics}"
    );
    assert!(!metrics.contains("gateway:tenant-b/b"), "{metrics}");

    // tenant-a is untouched: still Accepted and answered by its own backend.
    let accepted = gateway_condition(cluster, "tenant-a", "a", "Accepted").await;
    assert_eq!(accepted["status"], "True", "{accepted}");
    let backends = pod_names(cluster, "tenant-a", "app=backend").await;
    let body = until_status(edge, HOST_A, 200, Duration::from_secs(10)).await;
    assert!(answered_by(&body, &backends), "{backends:?}: {body}");
}
