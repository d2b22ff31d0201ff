//! The resource proxy's install (`deploy/resource-proxy`: the host-network DaemonSet) on a
//! tenant ("client") cluster with the node agent, as it runs next to a tenant's kube-apiserver:
//! the node is the client's control-plane node, the DaemonSet's Pod runs the built
//! `resource-proxy` binary in the node's network namespace with its ConfigMap, ServiceAccount
//! and target Secret, registers its APIService, and the client's kube-apiserver reaches it
//! through the aggregation layer (its ExternalName Service `localhost`, dialled on the node
//! through the apiserver's `cluster` egress). The target is a second kube-apiserver, reachable
//! from inside the node's namespace only through a relay at the node's address.
//!
//! The test does what docs/resource-proxy.md's steps ask of an operator: the target's
//! kustomization and CRD, the credential Secret, `config.yaml` edited (the target's peer), then
//! `kubectl apply -k` of an overlay of `deploy/resource-proxy` that replaces only the config.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use test_cluster::netns::{GATEWAY, World};
use test_cluster::node::NodeSpec;
use test_cluster::{Cluster, ClusterSpec, ControlPlane};

#[path = "support/kubectl.rs"]
mod kubectl_support;
use kubectl_support::{crd, kubectl, kubectl_err, kubectl_in, namespace};

/// The image as the kustomization writes it.
const IMAGE: &str = "ghcr.io/kube-tenancy/resource-proxy:0.1.0";
/// The identity `deploy/resource-proxy/target/rbac.yaml` grants (client `client-a`, project
/// `default`).
const IDENTITY: &str = "loft:vcluster:p-default:client-a";
/// Where the target's kube-apiserver is in the node's namespace.
const TARGET_PORT: u16 = 6443;
/// The config's listener port (`listeners.basePort`) on the node's loopback.
const LISTENER_PORT: u16 = 9100;
const SELECTOR: &str = "app.kubernetes.io/name=resource-proxy";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/resource-proxy")
        .canonicalize()
        .unwrap()
}

/// `deploy/resource-proxy/config.yaml` as the operator edits it for this target: its one peer is
/// the relay at the node's address.
fn edited_config() -> String {
    let shipped = std::fs::read_to_string(deploy_dir().join("config.yaml")).unwrap();
    let peers = r#"static: ["10.0.0.10:6443", "10.0.0.11:6443"]"#;
    assert!(shipped.contains(peers), "config.yaml changed: {shipped}");
    shipped.replace(peers, &format!(r#"static: ["{GATEWAY}:{TARGET_PORT}"]"#))
}

/// An overlay of `deploy/resource-proxy` whose only change is the edited config.
fn overlay() -> tempfile::TempDir {
    let work = test_cluster::manifests::kustomization_with(&[&deploy_dir()], &[]).unwrap();
    std::fs::write(work.path().join("config.yaml"), edited_config()).unwrap();
    let file = work.path().join("kustomization.yaml");
    let mut kustomization = std::fs::read_to_string(&file).unwrap();
    kustomization.push_str(
        "configMapGenerator:\n- name: resource-proxy-config\n  namespace: kube-system\n  behavior: replace\n  files:\n  - config.yaml\n",
    );
    std::fs::write(&file, kustomization).unwrap();
    work
}

/// The proxy Pod's `Ready` condition (`""` when there is no Pod).
async fn pod_ready(client: &Cluster) -> String {
    kubectl(
        client,
        &[
            "get",
            "pods",
            "-n",
            "kube-system",
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

fn widget(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 1\n"
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
    let cp = ControlPlane::builder()
        .cluster(
            ClusterSpec::new("client").node(
                NodeSpec::new("kt-node")
                    // The DaemonSet runs on the control-plane nodes.
                    .label("node-role.kubernetes.io/control-plane", "")
                    .image(IMAGE, env!("CARGO_BIN_EXE_resource-proxy")),
            ),
        )
        .cluster(ClusterSpec::new("target"))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let client = cp.cluster("client");
    let target = cp.cluster("target");
    let world = client.node().unwrap().world().clone();
    let relay = {
        let world = world.clone();
        let inside = SocketAddr::from((GATEWAY, TARGET_PORT));
        let host = SocketAddr::from(([127, 0, 0, 1], target.server_port(0)));
        tokio::spawn(async move { world.expose(inside, host).await })
    };

    // The target: the proxy identity's RBAC and the owner-label policy, the CRD.
    let target_dir = deploy_dir().join("target");
    kubectl(target, &["apply", "-k", &target_dir.display().to_string()]).await;
    test_cluster::manifests::apply_crds_yaml(
        &target.client().await.unwrap(),
        &crd("example.com", "widgets", "Widget"),
    )
    .await
    .unwrap();

    // The client: the target credential Secret, then the install.
    let creds = tempfile::tempdir().unwrap();
    let cred = target.mint_client_cert(IDENTITY, &[]).unwrap();
    let file = |name: &str, contents: &str| {
        let path = creds.path().join(name);
        std::fs::write(&path, contents).unwrap();
        format!("--from-file={name}={}", path.display())
    };
    let (ca, crt, key) = (
        file("ca.crt", &target.ca_pem()),
        file("tls.crt", &cred.cert_pem),
        file("tls.key", &cred.key_pem),
    );
    kubectl(
        client,
        &[
            "-n",
            "kube-system",
            "create",
            "secret",
            "generic",
            "resource-proxy-target",
            &ca,
            &crt,
            &key,
        ],
    )
    .await;
    let overlay = overlay();
    let overlay_path = overlay.path().display().to_string();
    kubectl(client, &["apply", "-k", &overlay_path]).await;
    // `rollout status` passes before the DaemonSet controller has counted the node.
    eventually(
        "the DaemonSet's Pod Ready",
        Duration::from_secs(180),
        || async {
            let ready = client
                .kubectl_ok(&[
                    "get",
                    "daemonset",
                    "-n",
                    "kube-system",
                    "resource-proxy",
                    "-o",
                    "jsonpath={.status.desiredNumberScheduled}/{.status.numberReady}",
                ])
                .await
                .map_err(|e| e.to_string())?;
            if ready == "1/1" {
                return Ok(());
            }
            let pods = client
                .kubectl_ok(&["get", "pods,events", "-A", "-o", "wide"])
                .await
                .unwrap_or_default();
            Err(format!("{ready}\n{pods}"))
        },
    )
    .await;
    let pod = kubectl(
        client,
        &[
            "get", "pods", "-n", "kube-system", "-l", SELECTOR, "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].spec.nodeName} {.items[0].status.podIP} {.items[0].status.hostIP}",
        ],
    )
    .await;
    let fields: Vec<&str> = pod.split(' ').collect();
    assert_eq!(
        fields[1..],
        ["kt-node", "10.244.0.1", "10.244.0.1"],
        "{pod}"
    );
    // The listener is on the node's loopback, where the aggregator dials `localhost`.
    assert!(listening(&world, SocketAddr::from(([127, 0, 0, 1], LISTENER_PORT))).await);
    eventually(
        "the APIService Available",
        Duration::from_secs(90),
        || async {
            let out = client
                .kubectl_ok(&[
                    "get",
                    "apiservice",
                    "v1.example.com",
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="Available")].status}"#,
                ])
                .await
                .map_err(|e| e.to_string())?;
            (out == "True").then_some(()).ok_or(out)
        },
    )
    .await;
    let service = kubectl(
        client,
        &[
            "get",
            "apiservice",
            "v1.example.com",
            "-o",
            "jsonpath={.spec.service.namespace}/{.spec.service.name}:{.spec.service.port}",
        ],
    )
    .await;
    let (svc, port) = service.split_once(':').unwrap();
    assert_eq!(port, LISTENER_PORT.to_string());
    let (svc_ns, svc_name) = svc.split_once('/').unwrap();
    let external = kubectl(
        client,
        &[
            "get",
            "service",
            "-n",
            svc_ns,
            svc_name,
            "-o",
            "jsonpath={.spec.type} {.spec.externalName}",
        ],
    )
    .await;
    assert_eq!(external, "ExternalName localhost");
    let resources = kubectl(client, &["api-resources", "--api-group", "example.com"]).await;
    assert!(resources.contains("widgets"), "{resources}");
    eprintln!("installed and available after {:?}", started.elapsed());

    // Create, list, get through the client's kubectl; the object lands labelled in the target.
    let ns = namespace(client, "on-node").await;
    kubectl_in(client, &["apply", "-n", &ns, "-f", "-"], &widget("mine")).await;
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
    assert_eq!(labels, "client-a/default");

    // Another client's object in the same target namespace (written by its own proxy identity,
    // with its owner labels) is hidden from this client.
    let other = target
        .kubeconfig_for("loft:vcluster:p-default:client-b", &["system:masters"])
        .unwrap();
    let theirs = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: theirs\n  labels: {vcluster.com/owner-vcluster: client-b, vcluster.com/owner-project: default}\nspec:\n  size: 2\n";
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
    assert!(
        hidden.contains("NotFound") || hidden.contains("not found"),
        "{hidden}"
    );

    // The target stops: requests get the proxy's 503 naming the target, discovery goes on
    // (RP-13), and the Pod stays Ready: readiness says the proxy serves, not that the target
    // does (docs/resource-proxy.md, "Readiness"). Back, it serves again.
    target.stop_server(0);
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
    let resources = kubectl(client, &["api-resources", "--api-group", "example.com"]).await;
    assert!(resources.contains("widgets"), "{resources}");
    target.restart_server(0).await.unwrap();
    eventually(
        "the widget again after the target's return",
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

    // Uninstalled, the Pod goes (gracefully, through the node) and nothing listens on the node
    // any more; the APIService left behind (deletion-protected) answers 503.
    kubectl(client, &["delete", "-k", &overlay_path, "--wait=true"]).await;
    eventually("the proxy Pod gone", Duration::from_secs(60), || async {
        let out = pod_ready(client).await;
        let pods = client
            .kubectl_ok(&[
                "get",
                "pods",
                "-n",
                "kube-system",
                "-l",
                SELECTOR,
                "-o",
                "name",
            ])
            .await
            .map_err(|e| e.to_string())?;
        pods.trim()
            .is_empty()
            .then_some(())
            .ok_or(format!("{pods} {out}"))
    })
    .await;
    assert!(!listening(&world, SocketAddr::from(([127, 0, 0, 1], LISTENER_PORT))).await);
    assert!(!listening(&world, SocketAddr::from((GATEWAY, 9099))).await);
    let gone = kubectl_err(client, &["get", "widgets", "-n", &ns]).await;
    assert!(
        gone.contains("ServiceUnavailable") || gone.contains("503"),
        "{gone}"
    );
    relay.abort();
    eprintln!("whole test: {:?}", started.elapsed());
}
