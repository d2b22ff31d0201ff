//! The install as deployed, on a cluster with the node agent: the Cloudflare double (API, edge and
//! connector port) in this process on host loopback, a cluster whose node runs the controller's
//! Deployment and the shared plane's Pods from the built binaries (or from the project's images:
//! [`Binaries::from_images`]), and the operator's part of the install (the namespace, the two
//! Secrets, then either `kubectl apply -k deploy/tunnel-gateway` with the controller pointed at the
//! double and the GatewayClassConfig, or `helm install` of charts/tunnel-gateway with those as
//! values: [`Method`]). Used by the controller's `on_node` test and by `make conformance`.
//!
//! The node's private network namespace sees the double's API and connector port at
//! [`NODE_ADDR`] under the names [`API_HOST`] and [`EDGE_HOST`] (every Pod's `/etc/hosts`); the
//! relays run on the caller's tokio runtime and end with it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cloudflare_double::{CloudflareDouble, ControlError, Options, TokenScope, TunnelInfo};
use test_cluster::netns::World;
use test_cluster::node::NodeSpec;
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ControlPlaneBuilder};

/// The install's namespace.
pub const NS: &str = crate::SYSTEM_NS;
/// The images as the chart's default values (and so deploy/) write them.
pub const CONTROLLER_IMAGE: &str = "ghcr.io/kube-tenancy/tunnel-gateway-controller:0.1.0";
pub const PROXY_IMAGE: &str = "ghcr.io/kube-tenancy/tunnel-proxy:0.1.0";
pub const CONNECTOR_IMAGE: &str = "cloudflare/cloudflared:2025.11.1";
/// Where the Pods find the double's API (the controller's `CF_API_URL`).
pub const API_HOST: &str = "api.cloudflare-double.invalid";
pub const API_PORT: u16 = 8787;
/// The connector stand-in's default edge (`TUNNEL_EDGE`), port included.
pub const EDGE_HOST: &str = "edge.cloudflare-double.invalid";
pub const CONNECTOR_PORT: u16 = 7844;
/// The node's address in its private network namespace (the bridge).
pub const NODE_ADDR: Ipv4Addr = test_cluster::netns::GATEWAY;
/// The Cloudflare API token the install's Secret holds.
pub const API_TOKEN: &str = "on-node-api-token";
/// The Helm release of [`Method::Helm`].
pub const RELEASE: &str = "tunnel-gateway";

/// How the operator installs the tunnel gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `kubectl apply -k deploy/tunnel-gateway`, `kubectl set env` for the API URL, the
    /// GatewayClassConfig applied.
    Kustomize,
    /// `helm install` of charts/tunnel-gateway (release [`RELEASE`]), the API URL and the
    /// GatewayClassConfig as values.
    Helm,
}

/// Why the install could not be brought up.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("the Cloudflare double: {0}")]
    Double(#[from] ControlError),
    #[error("the Cloudflare double did not start: {0}")]
    DoubleStart(std::io::Error),
    #[error("the cluster: {0}")]
    Cluster(#[from] test_cluster::Error),
    /// A wait that timed out, with every Pod and Event of the cluster.
    #[error("{0}")]
    Wait(String),
}

/// The executables the node runs for the install's images, and any more images.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub controller: PathBuf,
    pub proxy: PathBuf,
    pub connector: PathBuf,
    /// Further image → executable mappings (echo-basic under the names Pods use).
    pub images: Vec<(String, PathBuf)>,
    /// A directory of OCI image layouts the node runs [`CONTROLLER_IMAGE`] and [`PROXY_IMAGE`]
    /// from, instead of `controller` and `proxy`.
    pub image_store: Option<PathBuf>,
}

impl Binaries {
    /// The workspace's binaries next to `controller` (cargo puts every package's bins in one
    /// directory), and echo-basic as the image `echo-basic`.
    pub fn beside(controller: &Path) -> Result<Self, NodeError> {
        let sibling = |name: &str| {
            let path = controller.with_file_name(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(test_cluster::Error::MissingBinary(path))
            }
        };
        Ok(Self {
            controller: controller.to_owned(),
            proxy: sibling("tunnel-proxy")?,
            connector: sibling("cloudflared-standin")?,
            images: vec![("echo-basic".into(), test_cluster::echo_basic()?)],
            image_store: None,
        })
    }

    /// [`Self::beside`], with the controller and the proxy run from the images
    /// `make images-test` built ([`test_cluster::test_images`]), as a cluster runs them: unpacked,
    /// chrooted, as the image's non-root user. `controller` and `proxy` stay for other tags.
    pub fn from_images(controller: &Path) -> Result<Self, NodeError> {
        Ok(Self {
            image_store: Some(test_cluster::test_images()?),
            ..Self::beside(controller)?
        })
    }
}

/// The running install: control plane, node, double and the class tunnel.
pub struct NodeInstall {
    pub cp: ControlPlane,
    /// The cluster with the node and the install.
    cluster: String,
    pub double: CloudflareDouble,
    pub account: String,
    /// The class tunnel (the shared plane's).
    pub tunnel: TunnelInfo,
    pub world: Arc<World>,
}

impl NodeInstall {
    /// The cluster with the node and the install (`install` with [`start`]).
    pub fn cluster(&self) -> &Arc<Cluster> {
        self.cp.cluster(&self.cluster)
    }

    /// The double's edge on host loopback.
    pub fn edge(&self) -> SocketAddr {
        self.double
            .edge_addr()
            .expect("the double was started with an edge")
    }

    /// Relays `inside` (in the node's network namespace) to `host` until the caller's runtime
    /// ends; a failure to listen is logged.
    pub fn expose(&self, inside: SocketAddr, host: SocketAddr) {
        let world = self.world.clone();
        tokio::spawn(async move {
            if let Err(e) = world.expose(inside, host).await {
                eprintln!("exposing {host} at {inside}: {e}");
            }
        });
    }
}

/// Brings up the double, the cluster `install` with its node (every Pod's `/etc/hosts` also
/// gets `hosts`), the install with the kustomization, and waits for the controller's rollout.
pub async fn start(
    binaries: &Binaries,
    hosts: &[(&str, IpAddr)],
) -> Result<NodeInstall, NodeError> {
    start_with(binaries, hosts, Method::Kustomize).await
}

/// [`start`], installing by `method`.
pub async fn start_with(
    binaries: &Binaries,
    hosts: &[(&str, IpAddr)],
    method: Method,
) -> Result<NodeInstall, NodeError> {
    start_on(binaries, hosts, "install", method, |node| {
        ControlPlane::builder()
            .cluster(ClusterSpec::new("install").controller_manager().node(node))
            .gateway_api()
    })
    .await
}

/// [`start_with`] on the caller's control plane: `control_plane` gets the node's spec and
/// returns the control plane to start, whose cluster `cluster` has that node (and the Gateway
/// API CRDs); the caller may add to the node (images, labels) and add clusters.
pub async fn start_on(
    binaries: &Binaries,
    hosts: &[(&str, IpAddr)],
    cluster: &str,
    method: Method,
    control_plane: impl FnOnce(NodeSpec) -> ControlPlaneBuilder,
) -> Result<NodeInstall, NodeError> {
    let double = CloudflareDouble::start_with(Options {
        edge: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        connectors: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Options::default()
    })
    .await
    .map_err(NodeError::DoubleStart)?;
    let account = double.add_account("on-node")?;
    let tunnel = double.add_tunnel(&account, "shared")?;
    double.add_token(API_TOKEN, TokenScope::User(vec![account.clone()]))?;

    let mut node = NodeSpec::new("kt-node");
    node = match &binaries.image_store {
        Some(dir) => node.image_store(dir),
        None => node
            .image(CONTROLLER_IMAGE, &binaries.controller)
            .image(PROXY_IMAGE, &binaries.proxy),
    };
    let mut node = node
        .image(CONNECTOR_IMAGE, &binaries.connector)
        .host(API_HOST, NODE_ADDR.into())
        .host(EDGE_HOST, NODE_ADDR.into());
    for (image, path) in &binaries.images {
        node = node.image(image.clone(), path);
    }
    for (host, addr) in hosts {
        node = node.host(*host, *addr);
    }
    let cp = control_plane(node).start().await?;
    let world = cp
        .cluster(cluster)
        .node()
        .ok_or_else(|| NodeError::Wait(format!("the cluster {cluster} has no node")))?
        .world()
        .clone();
    let install = NodeInstall {
        cp,
        cluster: cluster.to_owned(),
        double,
        account,
        tunnel,
        world,
    };
    let api: SocketAddr = install
        .double
        .base_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("the double's base URL is http://<addr>/...");
    install.expose(SocketAddr::from((NODE_ADDR, API_PORT)), api);
    install.expose(
        SocketAddr::from((NODE_ADDR, CONNECTOR_PORT)),
        install
            .double
            .connector_addr()
            .expect("the double was started with a connector port"),
    );
    apply_install(&install, method).await?;
    Ok(install)
}

/// The operator's part (docs/tunnel-gateway.md): the namespace, the two Secrets, then the
/// kustomization, the controller pointed at the double, the GatewayClassConfig (or the chart with
/// those as values); then the controller's rollout.
async fn apply_install(install: &NodeInstall, method: Method) -> Result<(), NodeError> {
    let cluster = install.cluster();
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], crate::NAMESPACE_YAML)
        .await?;
    let secrets = format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: cloudflare-api-token, namespace: {NS}}}
stringData: {{api-token: {API_TOKEN}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: cloudflare-tunnel-token, namespace: {NS}}}
stringData: {{tunnel-token: {token}}}
"#,
        token = install.tunnel.token
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], &secrets)
        .await?;
    let api_url = format!("http://{API_HOST}:{API_PORT}/client/v4");
    if method == Method::Helm {
        let chart = chart_dir();
        let values = format!(
            "controller.cloudflareApiUrl={api_url},gatewayClassConfig.create=true,\
             gatewayClassConfig.name={class},gatewayClassConfig.tunnelID={tunnel_id},\
             gatewayClassConfig.accountId={account}",
            class = crate::CLASS,
            tunnel_id = install.tunnel.tunnel_id,
            account = install.account,
        );
        cluster
            .helm_ok(&[
                "install",
                RELEASE,
                &chart.to_string_lossy(),
                "-n",
                NS,
                "--set",
                &values,
            ])
            .await?;
        return wait_for_controller(cluster).await;
    }
    let deploy = deploy_dir();
    let deploy_str = deploy.to_string_lossy();
    cluster.kubectl_ok(&["apply", "-k", &deploy_str]).await?;
    cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "set",
            "env",
            "deployment/tunnel-gateway-controller",
            &format!("CF_API_URL={api_url}"),
        ])
        .await?;
    let class_config = format!(
        r#"apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {class}}}
spec:
  tunnelID: {tunnel_id}
  accountId: {account}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api-token, namespace: {NS}, key: api-token}}
"#,
        class = crate::CLASS,
        tunnel_id = install.tunnel.tunnel_id,
        account = install.account,
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], &class_config)
        .await?;
    wait_for_controller(cluster).await
}

/// The controller's rollout done and its Deployment Available.
async fn wait_for_controller(cluster: &Cluster) -> Result<(), NodeError> {
    cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "rollout",
            "status",
            "deployment/tunnel-gateway-controller",
            "--timeout=180s",
        ])
        .await?;
    wait(
        cluster,
        NS,
        "deployment/tunnel-gateway-controller",
        "condition=Available",
        "120s",
    )
    .await
}

/// An echo-basic Deployment `name` of `replicas` Pods in `ns` and its Service `name` (port
/// `port` to the Pods' 3000), as two YAML documents: the backend of the on-node tests and the
/// demo. Each answer names its Pod (`POD_NAME`, `NAMESPACE` from the downward API); the Pods are
/// ready once they answer.
pub fn echo_backend(ns: &str, name: &str, replicas: u32, port: u16) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: echo
        image: echo-basic
        env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
        readinessProbe: {{httpGet: {{path: /, port: 3000}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{app: {name}}}
  ports: [{{port: {port}, targetPort: 3000}}]
"#
    )
}

/// `deploy/tunnel-gateway` of this workspace.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tunnel-gateway")
}

/// `charts/tunnel-gateway` of this workspace.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/tunnel-gateway")
}

/// Waits for `condition` on `what` in namespace `ns` (`""` for a cluster-scoped object) with
/// kubectl wait; the error carries every Pod and Event of the cluster.
///
/// A named object (`kind/name`) that a controller has yet to create is waited for first
/// (`--for=create`): `kubectl wait --for=condition=…` on an absent object fails at once.
pub async fn wait(
    cluster: &Cluster,
    ns: &str,
    what: &str,
    condition: &str,
    timeout: &str,
) -> Result<(), NodeError> {
    let for_ = format!("--for={condition}");
    let timeout = format!("--timeout={timeout}");
    let mut args = vec!["wait", &for_, what, &timeout];
    if what.contains('/') && condition != "delete" {
        args.push("--for=create");
    }
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    let outcome = cluster.kubectl_ok(&args).await;
    match outcome {
        Ok(_) => Ok(()),
        Err(error) => {
            let pods = cluster
                .kubectl_ok(&["get", "pods", "-A", "-o", "wide"])
                .await
                .unwrap_or_default();
            let events = cluster
                .kubectl_ok(&["get", "events", "-A"])
                .await
                .unwrap_or_default();
            Err(NodeError::Wait(format!(
                "waiting for {condition} on {what}: {error}\n{pods}\n{events}"
            )))
        }
    }
}
