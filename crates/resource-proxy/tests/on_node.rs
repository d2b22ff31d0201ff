//! The resource proxy's install (`deploy/resource-proxy`: the host-network DaemonSet) on a
//! tenant ("client") cluster with the node agent, as it runs next to a tenant's kube-apiserver:
//! the node is the client's control-plane node; the DaemonSet's Pod runs the built
//! `resource-proxy` binary in the node's network namespace with its ConfigMap, ServiceAccount and
//! target Secret, and registers its APIService; the client's kube-apiserver reaches it through the
//! aggregation layer (its ExternalName Service `localhost`, dialled on the node through the
//! apiserver's `cluster` egress). The target is a second kube-apiserver that the Pod reaches only
//! through a relay inside the node's namespace. The operator's steps are
//! [`resource_proxy_fixtures::install`], shared with the demo.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use resource_proxy_fixtures::{
    APISERVICE, CLIENT_NAME, GROUP, LISTENER_PORT, METRICS_PORT, NS, SELECTOR, control_plane_node,
};
use test_cluster::netns::{GATEWAY, World};
use test_cluster::node::NodeSpec;
use test_cluster::{Cluster, ClusterSpec, ControlPlane};

#[path = "support/kubectl.rs"]
mod kubectl_support;
use kubectl_support::{kubectl, kubectl_err, kubectl_in, namespace};

/// The proxy Pod's `Ready` condition (`""` when there is no Pod).
async fn pod_ready(client: &Cluster) -> String {
    kubectl(
        client,
        &[
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            SELECTOR,
            "-o",
            r#"jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}"#,
        ],
    )
    .await
}

/// Polls `check` every 500 ms until it holds; panics with `what` and the last output after
/// `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if tokio::time::Instant::now() > deadline => {
                panic!("{what} not within {timeout:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn widget(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: {GROUP}/v1\nkind: Widget\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  size: 1\n"
    )
}

/// Whether something listens at `addr` in the node's namespace.
async fn listening(world: &Arc<World>, addr: SocketAddr) -> bool {
    world.connect(addr).await.is_ok()
}

#[tokio::test]
async fn the_daemonset_serves_the_client_through_the_aggregator_from_the_node() {
    test_cluster::install_crypto_provider();
    let started = std::time::Instant::now();
    let node = control_plane_node(
        NodeSpec::new("kt-node"),
        env!("CARGO_BIN_EXE_resource-proxy").as_ref(),
    );
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("client").node(node))
        .cluster(ClusterSpec::new("target"))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let client = cp.cluster("client");
    let target = cp.cluster("target");
    let world = client.node().unwrap().world().clone();
    let install = resource_proxy_fixtures::install(client, target, &world)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("installed and available after {:?}", started.elapsed());

    // The Pod is the DaemonSet's on the node, with the node's address; the listener is on the
    // node's loopback, where the aggregator dials `localhost`, behind an ExternalName Service.
    let pod = kubectl(
        client,
        &[
            "get", "pods", "-n", NS, "-l", SELECTOR, "-o",
            "jsonpath={.items[0].metadata.ownerReferences[0].kind} {.items[0].spec.nodeName} {.items[0].status.podIP} {.items[0].status.hostIP}",
        ],
    )
    .await;
    assert_eq!(pod, "DaemonSet kt-node 10.244.0.1 10.244.0.1");
    assert!(listening(&world, SocketAddr::from(([127, 0, 0, 1], LISTENER_PORT))).await);
    let service = kubectl(
        client,
        &[
            "get",
            "apiservice",
            APISERVICE,
            "-o",
            "jsonpath={.spec.service.namespace} {.spec.service.name} {.spec.service.port}",
        ],
    )
    .await;
    let service: Vec<&str> = service.split(' ').collect();
    assert_eq!(service[2], LISTENER_PORT.to_string());
    let external = kubectl(
        client,
        &[
            "get",
            "service",
            "-n",
            service[0],
            service[1],
            "-o",
            "jsonpath={.spec.type} {.spec.externalName}",
        ],
    )
    .await;
    assert_eq!(external, "ExternalName localhost");
    let resources = kubectl(client, &["api-resources", "--api-group", GROUP]).await;
    assert!(resources.contains("widgets"), "{resources}");

    // Create, list, get through the client's kubectl; the object lands labelled in the target.
    let ns = namespace(client, "on-node").await;
    kubectl_in(
        client,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("mine", ""),
    )
    .await;
    let labels = kubectl(
        target,
        &[
            "get",
            "widget",
            "mine",
            "-n",
            &ns,
            "-o",
            r"jsonpath={.metadata.labels.vcluster\.com/owner-vcluster}/{.metadata.labels.vcluster\.com/owner-project}",
        ],
    )
    .await;
    assert_eq!(labels, format!("{CLIENT_NAME}/default"));

    // Another client's object in the same target namespace (written by its own proxy identity,
    // with its owner labels, as the target's owner-label policy allows) is hidden.
    let other = target
        .kubeconfig_for("loft:vcluster:p-default:client-b", &["system:masters"])
        .unwrap();
    let theirs = widget(
        "theirs",
        "vcluster.com/owner-vcluster: client-b, vcluster.com/owner-project: default",
    );
    let mut apply = target.kubectl_with(&other);
    apply
        .args(["apply", "-n", &ns, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = apply.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(theirs.as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = kubectl(client, &["get", "widgets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(listed.trim(), "widget.example.com/mine");
    let got = kubectl(
        client,
        &[
            "get",
            "widget",
            "mine",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.size}",
        ],
    )
    .await;
    assert_eq!(got, "1");
    let hidden = kubectl_err(client, &["get", "widget", "theirs", "-n", &ns]).await;
    assert!(hidden.contains("NotFound"), "{hidden}");

    // The target stops: requests get the proxy's 503 naming the target, discovery goes on
    // (RP-13), and the Pod stays Ready: readiness says the proxy serves, not that the target
    // does (docs/resource-proxy.md, "Readiness and the target"). Back, it serves again.
    target.stop_server(0);
    let outage = std::time::Instant::now();
    let down = kubectl_err(client, &["get", "widget", "mine", "-n", &ns]).await;
    assert!(
        down.contains(
            r#"target tenant cluster "default/target" for example.com/v1 is unavailable"#
        ),
        "{down}"
    );
    for _ in 0..6 {
        assert_eq!(pod_ready(client).await, "True");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let resources = kubectl(client, &["api-resources", "--api-group", GROUP]).await;
    assert!(resources.contains("widgets"), "{resources}");
    target.restart_server(0).await.unwrap();
    eprintln!("target down and back: {:?}", outage.elapsed());
    let back = std::time::Instant::now();
    eventually(
        "the widget after the target's return",
        Duration::from_secs(60),
        || async {
            client
                .kubectl_ok(&["get", "widget", "mine", "-n", &ns, "-o", "name"])
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    eprintln!(
        "served again {:?} after the target was back",
        back.elapsed()
    );

    // Uninstalled, the Pod goes (gracefully, through the node) and nothing listens on the node
    // any more; the APIService left behind (deletion-protected) answers 503.
    let overlay = install.overlay().display().to_string();
    let uninstalled = std::time::Instant::now();
    kubectl(client, &["delete", "-k", &overlay, "--wait=true"]).await;
    eventually("the proxy Pod gone", Duration::from_secs(60), || async {
        let pods = client
            .kubectl_ok(&["get", "pods", "-n", NS, "-l", SELECTOR, "-o", "name"])
            .await
            .map_err(|e| e.to_string())?;
        pods.trim().is_empty().then_some(()).ok_or(pods)
    })
    .await;
    eprintln!(
        "the Pod gone {:?} after the uninstall",
        uninstalled.elapsed()
    );
    assert!(!listening(&world, SocketAddr::from(([127, 0, 0, 1], LISTENER_PORT))).await);
    assert!(!listening(&world, SocketAddr::from((GATEWAY, METRICS_PORT))).await);
    let gone = kubectl_err(client, &["get", "widgets", "-n", &ns]).await;
    assert!(
        gone.contains("ServiceUnavailable") || gone.contains("503"),
        "{gone}"
    );
    drop(install);
    eprintln!("whole test: {:?}", started.elapsed());
}
