//! The resource proxy's install as deployed (`deploy/resource-proxy`: the host-network
//! DaemonSet) on a client cluster whose node agent stands for the client's control-plane node,
//! with a second cluster as its target. Used by the resource proxy's `on_node` test and by the
//! demo.
//!
//! [`install`] does what docs/resource-proxy.md's steps ask of an operator: in the target, `kubectl
//! apply -k deploy/resource-proxy/target` and the CRD; in the client, the Secret
//! `resource-proxy-target` with a credential minted for the proxy identity, then `kubectl apply
//! -k` of an overlay of `deploy/resource-proxy` whose one change is the configuration's target
//! peer in `configmap.yaml` ([`edited_config`]). The target's kube-apiserver, on host loopback, is relayed
//! into the node's network namespace at [`TARGET_PEER`], the only way the Pod reaches it.
//!
//! The DaemonSet's Pod runs the `resource-proxy` binary in the node's namespace
//! (`hostNetwork`), listens on the node's loopback, and registers its APIService with an
//! ExternalName Service `localhost`; the client's kube-apiserver dials that through its
//! `cluster` egress, which the node relays into its namespace (see `test_cluster::node`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use test_cluster::Cluster;
use test_cluster::netns::{GATEWAY, World};
use test_cluster::node::NodeSpec;

/// The image as the kustomization writes it.
pub const IMAGE: &str = "ghcr.io/kube-tenancy/resource-proxy:0.1.0";
/// `client.name` of the configuration in `deploy/resource-proxy/configmap.yaml`.
pub const CLIENT_NAME: &str = "client-a";
/// The identity `deploy/resource-proxy/target/rbac.yaml` grants (client `client-a`, project
/// `default`).
pub const IDENTITY: &str = "loft:vcluster:p-default:client-a";
/// The group/version the shipped config proxies, and its resource.
pub const GROUP: &str = "example.com";
pub const APISERVICE: &str = "v1.example.com";
/// Where the target's kube-apiserver is in the node's namespace (the config's one peer).
pub const TARGET_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(GATEWAY), 6443);
/// `listeners.basePort` of the config: the listener on the node's loopback.
pub const LISTENER_PORT: u16 = 9100;
/// `metrics.address`'s port: metrics and probes on the node's address.
pub const METRICS_PORT: u16 = 9099;
/// The DaemonSet's namespace and Pod selector.
pub const NS: &str = "kube-system";
pub const SELECTOR: &str = "app.kubernetes.io/name=resource-proxy";

/// The CRD of the proxied resource, in the target only.
pub const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// Why the install could not be brought up.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the cluster: {0}")]
    Cluster(#[from] test_cluster::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The shipped manifests are not what this install edits.
    #[error("{0}")]
    Manifest(String),
    /// A wait that timed out, with what the cluster showed last.
    #[error("{0}")]
    Wait(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `deploy/resource-proxy` of this workspace.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/resource-proxy")
}

/// `node` as the client's control-plane node (the label the DaemonSet selects) that runs
/// `executable` for the proxy's image.
pub fn control_plane_node(node: NodeSpec, executable: &Path) -> NodeSpec {
    node.label("node-role.kubernetes.io/control-plane", "")
        .image(IMAGE, executable)
}

/// `deploy/resource-proxy/configmap.yaml` (the ConfigMap holding the configuration) as the
/// operator edits it for this target: its one peer is [`TARGET_PEER`].
pub fn edited_config() -> Result<String, InstallError> {
    let path = deploy_dir().join("configmap.yaml");
    let shipped = std::fs::read_to_string(&path).map_err(io(&path))?;
    let peers = "          static:\n          - 10.0.0.10:6443\n          - 10.0.0.11:6443\n";
    if !shipped.contains(peers) {
        return Err(InstallError::Manifest(format!(
            "{} no longer has the peers `{peers}` this install edits",
            path.display()
        )));
    }
    Ok(shipped.replace(
        peers,
        &format!("          static:\n          - {TARGET_PEER}\n"),
    ))
}

/// The running install: the overlay applied (for `kubectl delete -k`) and the relay to the
/// target, which ends when this is dropped.
pub struct Install {
    overlay: tempfile::TempDir,
    relay: tokio::task::JoinHandle<()>,
}

impl Install {
    /// The overlay's directory (`kubectl delete -k <it>` uninstalls).
    pub fn overlay(&self) -> &Path {
        self.overlay.path()
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

/// Installs the proxy in `client` (whose node's namespace is `world`) for `target`, and waits
/// until the DaemonSet's Pod is Ready and the APIService Available.
pub async fn install(
    client: &Cluster,
    target: &Cluster,
    world: &Arc<World>,
) -> Result<Install, InstallError> {
    let relay = {
        let world = Arc::clone(world);
        let host = SocketAddr::from(([127, 0, 0, 1], target.server_port(0)));
        tokio::spawn(async move {
            if let Err(e) = world.expose(TARGET_PEER, host).await {
                eprintln!("relaying the target at {TARGET_PEER}: {e}");
            }
        })
    };
    let overlay = overlay()?;
    let install = Install { overlay, relay };

    let target_dir = deploy_dir().join("target");
    target
        .kubectl_ok(&["apply", "-k", &target_dir.display().to_string()])
        .await?;
    test_cluster::manifests::apply_crds_yaml(&target.client().await?, WIDGET_CRD).await?;

    let creds = tempfile::tempdir().map_err(io(Path::new("a temporary directory")))?;
    let cred = target.mint_client_cert(IDENTITY, &[])?;
    let mut args = vec![
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "resource-proxy-target",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    for (name, contents) in [
        ("ca.crt", target.ca_pem()),
        ("tls.crt", cred.cert_pem),
        ("tls.key", cred.key_pem),
    ] {
        let path = creds.path().join(name);
        std::fs::write(&path, contents).map_err(io(&path))?;
        args.push(format!("--from-file={name}={}", path.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    client.kubectl_ok(&args).await?;
    client
        .kubectl_ok(&["apply", "-k", &install.overlay().display().to_string()])
        .await?;

    // `rollout status` passes before the DaemonSet controller has counted the node.
    wait(
        client,
        "the DaemonSet's Pod Ready",
        Duration::from_secs(180),
        || async {
            let ready = client
                .kubectl_ok(&[
                    "get",
                    "daemonset",
                    "-n",
                    NS,
                    "resource-proxy",
                    "-o",
                    "jsonpath={.status.desiredNumberScheduled}/{.status.numberReady}",
                ])
                .await
                .unwrap_or_default();
            (ready == "1/1").then_some(()).ok_or(ready)
        },
    )
    .await?;
    wait(
        client,
        "the APIService Available",
        Duration::from_secs(90),
        || async {
            let available = client
                .kubectl_ok(&[
                    "get",
                    "apiservice",
                    APISERVICE,
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="Available")].status}"#,
                ])
                .await
                .unwrap_or_default();
            (available == "True").then_some(()).ok_or(available)
        },
    )
    .await?;
    Ok(install)
}

/// An overlay of `deploy/resource-proxy` whose only change is [`edited_config`].
fn overlay() -> Result<tempfile::TempDir, InstallError> {
    let deploy = deploy_dir().canonicalize().map_err(io(&deploy_dir()))?;
    let work = test_cluster::manifests::kustomization_with(&[&deploy], &[])?;
    let config = work.path().join("configmap.yaml");
    std::fs::write(&config, edited_config()?).map_err(io(&config))?;
    let file = work.path().join("kustomization.yaml");
    let mut kustomization = std::fs::read_to_string(&file).map_err(io(&file))?;
    kustomization.push_str("patches:\n- path: configmap.yaml\n");
    std::fs::write(&file, kustomization).map_err(io(&file))?;
    Ok(work)
}

/// Polls `check` every 500 ms until it holds; after `timeout` the error carries its last answer
/// and the cluster's Pods and Events.
async fn wait<F, Fut>(
    cluster: &Cluster,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<(), InstallError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if tokio::time::Instant::now() > deadline {
            let seen = cluster
                .kubectl_ok(&["get", "pods,events", "-A", "-o", "wide"])
                .await
                .unwrap_or_default();
            return Err(InstallError::Wait(format!(
                "{what}: not within {timeout:?} (last: {last:?})\n{seen}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
