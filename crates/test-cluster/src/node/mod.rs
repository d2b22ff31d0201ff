//! A node agent: the kubelet (and the scheduler) of a one-node cluster, running each container
//! as a local process in its Pod's own network namespace.
//!
//! [`NodeAgent::start`] creates a private network namespace ([`World`]), registers a Node
//! (`Ready`, its address is the bridge's [`GATEWAY`]) with a heartbeat Lease in
//! `kube-node-lease`, binds every pending Pod to itself (`binding` subresource) and runs the
//! Pods bound to it (see `pod`). Images are not pulled: [`NodeSpec::image`] maps an image name
//! to an executable that stands in for it, and [`NodeSpec::image_store`] names a directory of
//! OCI image layouts whose images the node unpacks and runs chrooted as the image's user (see
//! `image`); an image in neither leaves the container `Waiting` with `ErrImagePull`.
//!
//! The agent runs on a thread with its own tokio runtime, so it outlives the runtime of the test
//! (or of the shared control plane's start) that started it; dropping the [`NodeAgent`] stops it
//! and every process and namespace it made.

mod crilog;
pub(crate) mod egress;
mod env;
mod image;
mod logs;
mod pod;
mod probe;
mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::{oneshot, watch};

use crate::Error;
use crate::netns::{GATEWAY, World};

/// The port Pods reach the cluster's API on, at the node's address ([`GATEWAY`]).
pub const API_PORT: u16 = 443;
/// The taint a new Node gets until it is Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The kubelet's port at the node's address (its log endpoint, relayed from host loopback).
pub const KUBELET_PORT: u16 = 10250;

/// What the node runs: its name, the image → executable map and its `/etc/hosts` entries.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub name: String,
    /// Image name (as written in a Pod, tag included if the Pod has one) → the executable that
    /// stands in for the image's entrypoint.
    pub images: BTreeMap<String, PathBuf>,
    /// A directory of OCI image layouts (`make images-test` writes target/images/test/): the
    /// images, by their `org.opencontainers.image.ref.name`, that are not in `images`.
    pub image_store: Option<PathBuf>,
    /// Extra `/etc/hosts` entries of every Pod: name → address.
    pub hosts: BTreeMap<String, std::net::IpAddr>,
    /// Labels of the Node besides `kubernetes.io/hostname` and `kubernetes.io/os` (e.g.
    /// `node-role.kubernetes.io/control-plane`, which DaemonSets of the control plane select).
    pub labels: BTreeMap<String, String>,
}

impl NodeSpec {
    /// A node named `name` that knows no image yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            images: BTreeMap::new(),
            image_store: None,
            hosts: BTreeMap::new(),
            labels: BTreeMap::new(),
        }
    }

    /// Gives the Node the label `key` = `value`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds `name` → `address` to every Pod's `/etc/hosts`.
    pub fn host(mut self, name: impl Into<String>, address: std::net::IpAddr) -> Self {
        self.hosts.insert(name.into(), address);
        self
    }

    /// Runs the images of the OCI layouts under `dir` (those not mapped by [`Self::image`]).
    pub fn image_store(mut self, dir: impl Into<PathBuf>) -> Self {
        self.image_store = Some(dir.into());
        self
    }

    /// Maps `image` to `executable`.
    pub fn image(mut self, image: impl Into<String>, executable: impl Into<PathBuf>) -> Self {
        self.images.insert(image.into(), executable.into());
        self
    }
}

/// What every Pod worker shares.
struct Context {
    client: kube::Client,
    spec: NodeSpec,
    world: Arc<World>,
    dir: PathBuf,
    kubelet_port: u16,
    /// The cluster's CA certificate (PEM): a Pod's `ca.crt`.
    api_ca: String,
    images: image::Images,
}

/// A running node agent. Dropping it stops every container and removes every namespace.
pub struct NodeAgent {
    name: String,
    dir: PathBuf,
    world: Arc<World>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeAgent {
    /// Creates the private network namespace, registers the Node with the cluster that
    /// `kubeconfig` (kubeconfig text) points at, and starts running its Pods. Containers' logs
    /// and working directories live under `dir`. `egress` is the socket the cluster's
    /// kube-apiserver sends its `cluster` egress to (see [`egress`]).
    pub(crate) async fn start(
        spec: NodeSpec,
        kubeconfig: String,
        dir: &Path,
        egress: std::os::unix::net::UnixListener,
    ) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let world = Arc::new(World::create(&spec.name, &dir.join("netns"))?);
        let (ready_tx, ready_rx) = oneshot::channel();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let context_world = Arc::clone(&world);
        let context_dir = dir.to_owned();
        let name = spec.name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("node-{name}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("node agent runtime");
                runtime.block_on(run(
                    spec,
                    kubeconfig,
                    context_world,
                    context_dir,
                    egress,
                    ready_tx,
                    shutdown_rx,
                ));
                // Dropping the runtime drops every Pod worker, and with them their processes
                // and namespaces.
            })
            .map_err(|e| Error::io(Path::new("node agent thread"), e))?;
        let agent = Self {
            name,
            dir: dir.to_owned(),
            world,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        };
        ready_rx
            .await
            .map_err(|_| Error::Network("the node agent stopped while registering".into()))??;
        Ok(agent)
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The private network namespace the Pods live in (reach them with [`World::connect`]).
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// Where a container's stdout and stderr go.
    pub fn container_log_path(&self, namespace: &str, pod: &str, container: &str) -> PathBuf {
        pod::log_path(&self.dir, namespace, pod, container)
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn run(
    spec: NodeSpec,
    kubeconfig: String,
    world: Arc<World>,
    dir: PathBuf,
    egress: std::os::unix::net::UnixListener,
    ready: oneshot::Sender<Result<(), Error>>,
    shutdown: oneshot::Receiver<()>,
) {
    let registered = async {
        let images = image::Images::open(spec.image_store.as_deref(), dir.join("images"))?;
        let endpoint = logs::Endpoint::bind(&spec.name)?;
        let client = crate::kubeconfig::client_from_yaml(&kubeconfig).await?;
        let api = api_server(&kubeconfig)?;
        register(&client, &spec.name, &spec.labels).await?;
        Ok::<_, Error>((client, endpoint, api, images))
    }
    .await;
    let (client, endpoint, (api_addr, api_ca), images) = match registered {
        Ok(registered) => {
            let _ = ready.send(Ok(()));
            registered
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let context = Arc::new(Context {
        client,
        spec,
        world,
        kubelet_port: endpoint.port(),
        dir,
        api_ca,
        images,
    });
    let inside = std::net::SocketAddr::from((GATEWAY, API_PORT));
    let kubelet = std::net::SocketAddr::from((GATEWAY, KUBELET_PORT));
    let kubelet_host = std::net::SocketAddr::from(([127, 0, 0, 1], context.kubelet_port));
    tokio::select! {
        _ = shutdown => {}
        Err(e) = context.world.expose(inside, api_addr) => {
            tracing::error!(error = %e, "relaying the API into the node's namespace");
        }
        Err(e) = context.world.expose(kubelet, kubelet_host) => {
            tracing::error!(error = %e, "relaying the kubelet port into the node's namespace");
        }
        () = egress::serve(egress, Arc::clone(&context.world)) => {}
        () = endpoint.serve(context.dir.clone()) => {}
        () = heartbeat(&context) => {}
        () = pods(&context) => {}
    }
}

/// The kube-apiserver's address (on host loopback) and CA certificate (PEM), from the
/// kubeconfig the agent was given.
fn api_server(kubeconfig: &str) -> Result<(std::net::SocketAddr, String), Error> {
    use base64::Engine;
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig)
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| Error::Kubeconfig("no cluster".into()))?;
    let server = cluster.server.as_deref().unwrap_or_default();
    let addr = server
        .strip_prefix("https://")
        .and_then(|a| a.trim_end_matches('/').parse().ok())
        .ok_or_else(|| {
            Error::Kubeconfig(format!("server {server:?} is not https://<ip>:<port>"))
        })?;
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .and_then(|d| String::from_utf8(d).ok())
        .ok_or_else(|| Error::Kubeconfig("no certificate-authority-data".into()))?;
    Ok((addr, ca))
}

/// The Node's status as the agent reports it (also every heartbeat).
fn node_status(since: &str) -> serde_json::Value {
    let now = now();
    json!({
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kube-tenancy test node agent is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": since,
            }],
            // kube-apiserver reaches the kubelet (its log endpoint) at this address through its
            // `cluster` egress (see `egress`). No `Hostname` address: the apiserver would
            // prefer it, and the relay resolves no names.
            "addresses": [
                {"type": "InternalIP", "address": GATEWAY.to_string()},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "250"},
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "250"},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "", "osImage": "kube-tenancy test node",
                "containerRuntimeVersion": "process://0", "kubeletVersion": "v0.0.0-kube-tenancy",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
            },
        }
    })
}

async fn register(
    client: &kube::Client,
    name: &str,
    extra_labels: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = extra_labels.clone();
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
    }))
    .map_err(|e| Error::Manifest(e.to_string()))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(node_status(&now())),
        )
        .await?;
    // The API server taints a new Node `not-ready` (admission plugin TaintNodesByCondition);
    // the node lifecycle controller, which does not run here, lifts it once the Node reports
    // Ready. DaemonSet Pods do not tolerate it.
    let registered = nodes.get(name).await?;
    let taints = registered.spec.and_then(|s| s.taints).unwrap_or_default();
    if taints.iter().any(|t| t.key == NOT_READY_TAINT) {
        let kept: Vec<_> = taints
            .into_iter()
            .filter(|t| t.key != NOT_READY_TAINT)
            .collect();
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": kept}})),
            )
            .await?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()},
    }))
    .map_err(|e| Error::Manifest(e.to_string()))?;
    match leases.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => renew(client, name).await,
        Err(e) => Err(e.into()),
    }
}

async fn renew(client: &kube::Client, name: &str) -> Result<(), Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let patch = json!({"spec": {"holderIdentity": name, "renewTime": now_micro()}});
    leases
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Renews the Lease every 10 s and re-posts the Node's status every minute, as a kubelet does.
async fn heartbeat(context: &Context) {
    let name = &context.spec.name;
    let since = now();
    let nodes: Api<Node> = Api::all(context.client.clone());
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    for n in 0u64.. {
        tick.tick().await;
        if let Err(e) = renew(&context.client, name).await {
            tracing::warn!(node = %name, error = %e, "renewing the node lease");
        }
        if n % 6 == 5
            && let Err(e) = nodes
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(node_status(&since)),
                )
                .await
        {
            tracing::warn!(node = %name, error = %e, "posting the node status");
        }
    }
}

/// Watches every Pod: binds the pending ones, hands the node's own to their workers.
async fn pods(context: &Arc<Context>) {
    let api: Api<Pod> = Api::all(context.client.clone());
    let mut workers: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
    let mut events =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, "watching pods");
                continue;
            }
        };
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                match node_name {
                    None => bind(context, &pod).await,
                    Some(n) if n == context.spec.name => {
                        if let Some(tx) = workers.get(&uid) {
                            let _ = tx.send(Some(pod));
                        } else {
                            let (tx, rx) = watch::channel(Some(pod));
                            workers.insert(uid, tx);
                            tokio::spawn(pod::run(Arc::clone(context), rx));
                        }
                    }
                    Some(_) => {}
                }
            }
            watcher::Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(tx) = workers.remove(&uid) {
                    let _ = tx.send(None);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

/// Binds a pending Pod to this node, as the scheduler would.
async fn bind(context: &Context, pod: &Pod) {
    let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
    if pod.metadata.deletion_timestamp.is_some()
        || scheduler.is_some_and(|s| s != "default-scheduler")
    {
        return;
    }
    let (Some(name), Some(namespace)) = (&pod.metadata.name, &pod.metadata.namespace) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": context.spec.name},
    });
    let bound: Result<serde_json::Value, _> = api
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await;
    match bound {
        Ok(_) => tracing::debug!(%namespace, %name, "bound"),
        // Already bound (a stale event) or gone.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(e) => tracing::warn!(%namespace, %name, error = %e, "binding a pod"),
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn now_micro() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Microsecond)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_default()
}
