//! The install itself: the controller's Deployment (two replicas, one holding the Lease), the
//! shared plane through the edge (the edge's 404 and 530 included), its config API over mutual
//! TLS (a plain-HTTP push with the right token refused, the expiry series and condition),
//! tenant-a's dedicated plane answering tenant-a's hostname, and one of the shared plane's two
//! Pods deleted under traffic.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    Answers, CONNECTOR_IMAGE, Install, NS, PROXY_IMAGE, Traffic, answered_by, apply, echo_route,
    edge_get, json, kubectl, leader, pod_names, pods, tenant, token_secret, until_status, wait,
};

const HOSTNAME: &str = "echo.on-node.example.com";
const TENANT_HOSTNAME: &str = "a.on-node.example.com";

/// The controller's condition on a plane's config API certificates.
const TLS_CONDITION: &str = "cf.k8s.lex.la/ConfigAPITLS";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_serves_a_route_through_the_edge_from_pods() {
    let install = Install::start().await;
    let _logs = install.cp.logs_on_failure();
    let cluster = install.cluster();
    let (double, edge, tunnel) = (&install.double, install.edge, &install.tunnel);

    // The controller (its rollout done): both replicas Ready, one of them holding the Lease.
    wait(
        cluster,
        NS,
        "deployment/tunnel-gateway-controller",
        "condition=Available",
        "120s",
    )
    .await;
    leader(cluster).await;

    // A route to echo-basic Pods: answered through edge → connector → proxy Pod → echo Pod.
    apply(cluster, &echo_route(HOSTNAME)).await;
    wait(
        cluster,
        "echo",
        "deployment/echo",
        "condition=Available",
        "120s",
    )
    .await;
    // The shared plane: both Pods Ready (a config pushed, the connector registered). The
    // controller creates the plane's config-API Secret and pushes its first config once a
    // Gateway is on it, so only now.
    wait(
        cluster,
        NS,
        "deployment/tunnel-proxy",
        "condition=Available",
        "180s",
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while double.live_connections(&tunnel.tunnel_id) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connectors registered: {}",
            double.live_connections(&tunnel.tunnel_id)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let echo_pods = pod_names(cluster, "echo", "app=echo").await;
    let body = until_status(edge, HOSTNAME, 200, Duration::from_secs(120)).await;
    assert!(
        answered_by(&body, &echo_pods),
        "answered by none of {echo_pods:?}: {body}"
    );
    assert!(body.contains("/on-node"), "{body}");

    a_plain_http_push_is_refused_and_changes_nothing(&install, &echo_pods).await;

    // A hostname in no ingress document: the edge's own 404.
    let (status, body) = edge_get(edge, "absent.on-node.example.net", "/")
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");

    // No connector: 530 from the edge; back, and the route answers again.
    kubectl(
        cluster,
        &["-n", NS, "scale", "deployment/tunnel-proxy", "--replicas=0"],
    )
    .await;
    until_status(edge, HOSTNAME, 530, Duration::from_secs(60)).await;
    assert_eq!(double.live_connections(&tunnel.tunnel_id), 0);
    kubectl(
        cluster,
        &["-n", NS, "scale", "deployment/tunnel-proxy", "--replicas=2"],
    )
    .await;
    let body = until_status(edge, HOSTNAME, 200, Duration::from_secs(120)).await;
    assert!(
        answered_by(&body, &echo_pods),
        "answered by none of {echo_pods:?}: {body}"
    );

    // A dedicated plane: tenant-a's Gateway with a GatewayConfig on its own tunnel gets
    // `cf-proxy-a` Pods (the real proxy and the connector stand-in, as the controller renders
    // them), and tenant-a's hostname is answered by tenant-a's backend Pod.
    let tenant_tunnel = double.add_tunnel(&install.account, "tenant-a").unwrap();
    apply(
        cluster,
        &format!(
            "{}---\n{}",
            tenant("tenant-a", "a", TENANT_HOSTNAME, ""),
            token_secret("tenant-a", &tenant_tunnel.token)
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
    wait(
        cluster,
        "tenant-a",
        "deployment/cf-proxy-a",
        "condition=Available",
        "180s",
    )
    .await;
    let plane = json(
        cluster,
        &["-n", "tenant-a", "get", "deployment", "cf-proxy-a"],
    )
    .await;
    let template = &plane["spec"]["template"]["spec"];
    let images: Vec<&str> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| template[*k].as_array().unwrap())
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert!(
        images.contains(&PROXY_IMAGE) && images.contains(&CONNECTOR_IMAGE),
        "{images:?}"
    );
    let backends = pod_names(cluster, "tenant-a", "app=backend").await;
    let body = until_status(edge, TENANT_HOSTNAME, 200, Duration::from_secs(120)).await;
    assert!(
        answered_by(&body, &backends),
        "answered by none of {backends:?}: {body}"
    );
    assert!(body.contains("\"tenant-a\""), "{body}");
    assert!(double.live_connections(&tenant_tunnel.tunnel_id) >= 1);
    // Its config API runs over mutual TLS too, from the Secret the controller wrote beside it.
    let tls = json(
        cluster,
        &["-n", "tenant-a", "get", "secret", "cf-proxy-a-config-tls"],
    )
    .await;
    assert_eq!(tls["type"], "kubernetes.io/tls");
    let condition =
        crate::support::gateway_condition(cluster, "tenant-a", "a", TLS_CONDITION).await;
    assert_eq!(condition["status"], "True", "{condition}");
    // Its hostname is in its own tunnel's document only, never in the shared plane's.
    let shared_doc = double
        .configuration(&install.account, &tunnel.tunnel_id)
        .unwrap()
        .0
        .expect("the shared tunnel's document");
    assert!(
        !shared_doc.to_string().contains(TENANT_HOSTNAME),
        "{shared_doc}"
    );
    let tenant_doc = double
        .configuration(&install.account, &tenant_tunnel.tunnel_id)
        .unwrap()
        .0
        .expect("tenant-a's tunnel document");
    assert!(
        tenant_doc.to_string().contains(TENANT_HOSTNAME),
        "{tenant_doc}"
    );

    // Deleting one of the shared plane's two Pods under traffic, until its replacement is
    // Ready and its connector registered, and a while longer: the old connector unregisters and
    // finishes its requests before its proxy (a sidecar) is stopped, and the new connector
    // starts only once its proxy holds a config. So no request is lost (no 5xx, no broken
    // connection) and none is answered `404 no matching route` by a proxy without config.
    let victim = pods(cluster, NS, "app.kubernetes.io/name=tunnel-proxy")
        .await
        .iter()
        .find(|p| p["metadata"].get("deletionTimestamp").is_none())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .expect("a running plane Pod");
    let traffic = Traffic::start(edge, HOSTNAME, "/during-roll", |_| true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deleted = tokio::time::Instant::now();
    kubectl(
        cluster,
        &["-n", NS, "delete", "pod", &victim, "--wait=false"],
    )
    .await;
    let deadline = deleted + Duration::from_secs(150);
    let (mut gone, mut replaced) = (None, None);
    while gone.is_none() || replaced.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "plane Pod {victim} gone after {gone:?}, replaced after {replaced:?}"
        );
        if gone.is_none()
            && cluster
                .kubectl_ok(&["-n", NS, "get", "pod", &victim])
                .await
                .is_err()
        {
            gone = Some(deleted.elapsed());
        }
        let ready = json(cluster, &["-n", NS, "get", "deployment", "tunnel-proxy"]).await["status"]
            ["readyReplicas"]
            .as_u64();
        if gone.is_some()
            && replaced.is_none()
            && ready == Some(2)
            && double.live_connections(&tunnel.tunnel_id) == 2
        {
            replaced = Some(deleted.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The replacement's connector takes its share of the traffic for a while.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let Answers {
        ok,
        unconfigured,
        failed,
    } = traffic.stop().await;
    eprintln!(
        "deleting plane Pod {victim}: gone after {gone:?}, replacement Ready and registered after \
         {replaced:?}; {ok} requests answered, {unconfigured} answered 404 by a Pod without \
         config, {} lost",
        failed.len()
    );
    assert!(ok > 0);
    assert!(failed.is_empty(), "lost during the roll: {failed:?}");
    assert_eq!(
        unconfigured, 0,
        "requests answered `404 no matching route` by a Pod without config during the roll"
    );
}

/// The shared plane as installed takes pushes over mutual TLS only. An attacker on the pod
/// network who holds the plane's token pushes an empty config in plain HTTP, to the config
/// port (the TLS handshake fails: no HTTP answer) and to the admin port (no `/config` there):
/// nothing is loaded, and the route keeps answering. The controller exports the plane's
/// certificate dates and says they are valid on the GatewayClass.
async fn a_plain_http_push_is_refused_and_changes_nothing(
    install: &crate::support::Install,
    echo_pods: &[String],
) {
    let cluster = install.cluster();
    let secret = json(cluster, &["-n", NS, "get", "secret", "tunnel-proxy-auth"]).await;
    let token = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["auth-token"].as_str().unwrap())
        .unwrap();
    let token = String::from_utf8(token).unwrap();
    let body = r#"{"version":9007199254740991,"listeners":[],"routes":[]}"#;
    let push = format!(
        "PUT /config HTTP/1.1\r\nHost: tunnel-proxy-config\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let plane = pods(cluster, NS, "app.kubernetes.io/name=tunnel-proxy").await;
    let ips: Vec<String> = plane
        .iter()
        .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_owned))
        .collect();
    assert!(!ips.is_empty(), "no shared-plane pod IP: {plane:?}");
    for ip in &ips {
        for (port, expect) in [(8443, None), (8081, Some("HTTP/1.1 404"))] {
            let addr = SocketAddr::new(ip.parse().unwrap(), port);
            let mut stream = install.world.connect(addr).await.unwrap();
            stream.write_all(push.as_bytes()).await.unwrap();
            let mut raw = Vec::new();
            // The TLS listener answers a plain request with an alert or a close, never HTTP.
            let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
                .await
                .expect("the proxy neither answered nor closed within 10 s");
            let answer = String::from_utf8_lossy(&raw);
            match expect {
                None => assert!(
                    !answer.starts_with("HTTP/"),
                    "a plain-HTTP push to {addr} was answered: {answer}"
                ),
                Some(status) => assert!(answer.starts_with(status), "{addr}: {answer}"),
            }
        }
    }
    // Had either push loaded, the plane would hold no route and answer 404.
    for _ in 0..5 {
        let (status, body) = edge_get(install.edge, HOSTNAME, "/after-push")
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(answered_by(&body, echo_pods), "{body}");
    }

    let metrics = install.controller_metrics().await;
    for kind in ["ca", "serving", "client"] {
        let series = format!(
            "cftunnel_config_tls_expiry_timestamp_seconds{{plane=\"shared\",kind=\"{kind}\"}} "
        );
        assert!(metrics.contains(&series), "no {series}in\n{metrics}");
    }
    let class = json(cluster, &["get", "gatewayclass", "cloudflare-tunnel"]).await;
    let condition = class["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == TLS_CONDITION)
        .unwrap_or_else(|| panic!("no {TLS_CONDITION} on the GatewayClass: {class}"));
    assert_eq!(condition["status"], "True", "{condition}");
    assert_eq!(condition["reason"], "CertificatesValid", "{condition}");
}
