//! The install itself: the controller's Deployment (two replicas, one holding the Lease), the
//! shared plane through the edge (the edge's 404 and 530 included), tenant-a's dedicated plane
//! answering tenant-a's hostname, and one of the shared plane's two Pods deleted under traffic.

use std::time::Duration;

use crate::support::{
    Answers, CONNECTOR_IMAGE, Install, NS, PROXY_IMAGE, Traffic, answered_by, apply, echo_route,
    edge_get, json, kubectl, leader, pod_names, tenant, token_secret, until_status, wait,
};

const HOSTNAME: &str = "echo.on-node.example.com";
const TENANT_HOSTNAME: &str = "a.on-node.example.com";

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
    let plane_pods = json(
        cluster,
        &[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=tunnel-proxy",
        ],
    )
    .await;
    let victim = plane_pods["items"]
        .as_array()
        .unwrap()
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
