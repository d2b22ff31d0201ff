//! The shared world: control plane, Cloudflare double, shared-plane proxies, backends and the
//! controller process, plus the helpers tests act and observe with.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cloudflare_double::{CloudflareDouble, TunnelInfo};
use serde_json::Value;
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ControlPlaneBuilder, ManagedProcess};
use tokio::sync::RwLock;
pub use tunnel_gateway_fixtures::in_process::Proxy;
use tunnel_gateway_fixtures::in_process::{self, Cloudflare};
pub use tunnel_gateway_fixtures::{CLASS, CONTROLLER, SYSTEM_NS, service_yaml};
use tunnel_gateway_fixtures::{
    CONFIG_SERVICE, Install, RBAC_YAML, SHARED_TLS_SECRET, controller_args, controller_kubeconfig,
    plane_tls_files,
};

pub const SHARED_TOKEN: &str = "shared-plane-e2e-token";
pub const PROXY_IMAGE: &str = "ghcr.io/kube-tenancy/tunnel-proxy:e2e";
pub const API_TOKEN: &str = "cf-api-token-e2e";

pub struct World {
    pub cp: &'static ControlPlane,
    pub double: CloudflareDouble,
    pub account: String,
    pub tunnel: TunnelInfo,
    /// The shared plane's pods started with the world.
    pub proxies: Vec<Proxy>,
    /// The shared plane's config API certificate files (its TLS Secret, as mounted).
    pub shared_tls: std::path::PathBuf,
    rt: tokio::runtime::Handle,
    /// Tests that break what every route depends on take this exclusively.
    pub lock: RwLock<()>,
    /// The controller replicas (one holds the Lease).
    pub replicas: Mutex<Vec<Replica>>,
}

/// Every plane TLS Secret copied into a directory (namespace, name, directory): what the
/// kubelet would keep in sync ([`resync_plane_tls`]).
static MOUNTED: Mutex<Vec<(String, String, PathBuf)>> = Mutex::new(Vec::new());

/// Copies every mounted plane TLS Secret into its directory again, as the kubelet does a while
/// after a Secret changes (Secrets gone since are skipped).
pub async fn resync_plane_tls() {
    let mounted = MOUNTED.lock().unwrap().clone();
    for (ns, name, dir) in mounted {
        let out = kubectl(&[
            "get",
            "secret",
            &name,
            "-n",
            &ns,
            "-o",
            "json",
            "--ignore-not-found",
        ])
        .await;
        if let Ok(secret) = serde_json::from_str::<Value>(&out) {
            plane_tls_files(&secret, &dir).expect("writing the certificate files");
        }
    }
}

fn spec() -> ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("gw").controller_manager())
        .gateway_api()
}

pub fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        test_cluster::install_crypto_provider();
        let cp = test_cluster::shared(spec);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let handle = rt.handle().clone();
            rt.block_on(async move {
                let w = start(cp, handle).await;
                tx.send(w).expect("world receiver");
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("world start thread")
    })
}

pub fn cluster() -> &'static Cluster {
    world().cp.cluster("gw")
}

async fn start(cp: &'static ControlPlane, rt: tokio::runtime::Handle) -> World {
    let cluster = cp.cluster("gw");
    let client = cluster.client().await.expect("client");
    test_cluster::manifests::apply_crds_yaml(&client, &tunnel_controller::api::crds_yaml())
        .await
        .expect("our CRDs");

    let Cloudflare {
        double,
        account,
        tunnel,
    } = in_process::start_cloudflare("e2e", API_TOKEN)
        .await
        .expect("double");

    let install = Install {
        tunnel_id: &tunnel.tunnel_id,
        account_id: None,
        api_token: API_TOKEN,
        plane_token: SHARED_TOKEN,
    };
    apply_on(cluster, &install.yaml()).await;
    // The controller runs with exactly the install's RBAC, as its ServiceAccount.
    apply_on(cluster, RBAC_YAML).await;
    let controller_kubeconfig = controller_kubeconfig(cluster).expect("controller kubeconfig");

    // Two replicas: leader election decides which one acts.
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_tunnel-gateway-controller"));
    let mut replicas = Vec::new();
    for i in 0..2 {
        let identity = format!("e2e-controller-{i}");
        let port = test_cluster::free_port().unwrap();
        let log = cp.state_dir().join(format!("{identity}.log"));
        let metrics = SocketAddr::from(([127, 0, 0, 1], port));
        let mut args = controller_args(
            &controller_kubeconfig,
            &identity,
            metrics,
            &double.base_url(),
        );
        args.extend(["--proxy-image".to_owned(), PROXY_IMAGE.to_owned()]);
        let process =
            ManagedProcess::spawn(&identity, &bin, &args, &log).expect("controller starts");
        eprintln!("controller log: {}", log.display());
        replicas.push(Replica {
            identity,
            metrics,
            process,
        });
    }

    // Two pods of the shared plane, serving the config API over mutual TLS from the Secret the
    // controller writes (copied into a directory as the kubelet mounts it).
    let shared_tls = cp.state_dir().join("shared-plane-tls");
    wait_plane_tls(cluster, SYSTEM_NS, SHARED_TLS_SECRET, &shared_tls).await;
    let mut proxies = Vec::new();
    for i in 0..2 {
        let p = start_proxy(SHARED_TOKEN, &shared_tls).await;
        publish_proxy(cluster, &format!("pod-{i}"), &p).await;
        proxies.push(p);
    }

    World {
        cp,
        double,
        account,
        tunnel,
        proxies,
        shared_tls,
        rt,
        lock: RwLock::new(()),
        replicas: Mutex::new(replicas),
    }
}

/// One controller process.
pub struct Replica {
    pub identity: String,
    pub metrics: SocketAddr,
    pub process: ManagedProcess,
}

/// The identity holding the controller's Lease.
pub async fn lease_holder() -> String {
    kubectl(&[
        "get",
        "lease",
        "tunnel-gateway-controller",
        "-n",
        SYSTEM_NS,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .await
}

/// The admin address of the replica that holds the Lease.
pub async fn leader_metrics() -> SocketAddr {
    let holder = lease_holder().await;
    world()
        .replicas
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.identity == holder)
        .map(|r| r.metrics)
        .unwrap_or_else(|| panic!("no running replica holds the Lease ({holder:?})"))
}

/// Starts an in-process proxy (data plane + config API with `token` over mutual TLS with the
/// certificate files in `tls`).
pub async fn start_proxy(token: &str, tls: &Path) -> Proxy {
    in_process::start_proxy(token, Some(tls))
        .await
        .expect("proxy starts")
}

/// Starts a pod of the shared plane on the world's runtime (it outlives the calling test).
pub async fn spawn_proxy(token: &str) -> Proxy {
    spawn_proxy_with(token, world().shared_tls.clone()).await
}

/// Starts a proxy on the world's runtime serving the config API with the files in `tls`.
pub async fn spawn_proxy_with(token: &str, tls: PathBuf) -> Proxy {
    let token = token.to_owned();
    world()
        .rt
        .spawn(async move { start_proxy(&token, &tls).await })
        .await
        .unwrap()
}

/// Starts a pod of the dedicated plane of Gateway `ns/gw` on the world's runtime, serving the
/// config API with the plane's TLS Secret (`cf-proxy-<gw>-config-tls`, once written).
pub async fn spawn_plane_proxy(token: &str, ns: &str, gw: &str) -> Proxy {
    let dir = world().cp.state_dir().join(format!("plane-tls-{ns}-{gw}"));
    wait_plane_tls(cluster(), ns, &format!("cf-proxy-{gw}-config-tls"), &dir).await;
    spawn_proxy_with(token, dir).await
}

/// Waits for the plane TLS Secret `ns/name` the controller writes and copies its keys into
/// `dir` (as the kubelet mounts a Secret); returns the Secret.
pub async fn wait_plane_tls(cluster: &Cluster, ns: &str, name: &str, dir: &Path) -> Value {
    eventually(
        &format!("the config API TLS Secret {ns}/{name}"),
        Duration::from_secs(60),
        || async {
            let out = cluster
                .kubectl()
                .args(["get", "secret", name, "-n", ns, "-o", "json"])
                .output()
                .await
                .map_err(|e| e.to_string())?;
            let secret: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
            match plane_tls_files(&secret, dir) {
                Ok(Some(())) => {
                    MOUNTED
                        .lock()
                        .unwrap()
                        .push((ns.to_owned(), name.to_owned(), dir.to_owned()));
                    Ok(secret)
                }
                Ok(None) => Err("not written yet".to_owned()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// An EndpointSlice of the shared plane's config Service for `p`.
pub async fn publish_proxy(cluster: &Cluster, pod: &str, p: &Proxy) {
    let slice = config_endpoint_slice(
        SYSTEM_NS,
        CONFIG_SERVICE,
        &format!("tunnel-proxy-config-{pod}"),
        p,
    );
    apply_on(cluster, &slice).await;
}

/// An EndpointSlice (not-ready, as a pod without config is) of the config Service `service`
/// pointing at `p`'s config API.
pub fn config_endpoint_slice(ns: &str, service: &str, slice: &str, p: &Proxy) -> String {
    tunnel_gateway_fixtures::config_endpoint_slice(ns, service, slice, p.config.port(), false)
}

/// A local HTTP backend answering `<name> <path>`; runs on the world's runtime.
pub async fn spawn_backend(name: &str) -> u16 {
    let name = name.to_owned();
    world()
        .rt
        .spawn(async move { in_process::start_backend(&name).await })
        .await
        .unwrap()
        .expect("backend starts")
}

/// A local HTTP backend that echoes what it received: `<name> <path>[?query]`, then one
/// `name: value` line per request header (lower-case names); runs on the world's runtime.
pub async fn spawn_echo_backend(name: &str) -> u16 {
    let name = name.to_owned();
    world()
        .rt
        .spawn(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = l.local_addr().unwrap().port();
            let app = axum::Router::new().fallback(
                move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                    let name = name.clone();
                    async move {
                        let mut out = format!("{name} {uri}\n");
                        for (k, v) in &headers {
                            out.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
                        }
                        out
                    }
                },
            );
            tokio::spawn(async move { axum::serve(l, app).await });
            port
        })
        .await
        .unwrap()
}

/// A namespace with a Gateway `gw` of our class (one HTTP listener, routes from all namespaces).
pub fn namespace_with_gateway(ns: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {{namespaces: {{from: All}}}}
"#
    )
}

pub fn http_route(ns: &str, name: &str, host: &str, backend_ns: &str, backend: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw, namespace: {ns}}}]
  hostnames: ["{host}"]
  rules:
  - backendRefs: [{{name: {backend}, namespace: {backend_ns}, port: 80}}]
"#
    )
}

pub async fn apply_on(cluster: &Cluster, yaml: &str) {
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], yaml)
        .await
        .unwrap_or_else(|e| panic!("kubectl apply failed: {e}\n{yaml}"));
}

pub async fn apply(yaml: &str) {
    apply_on(cluster(), yaml).await
}

pub async fn kubectl(args: &[&str]) -> String {
    cluster()
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {args:?} failed: {e}"))
}

pub async fn get_json(args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl(&a).await).expect("kubectl JSON")
}

/// Polls `probe` until it returns `Some`, or panics with `what` and the last observation.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match probe().await {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "timed out after {timeout:?} waiting for {what}; last seen: {last}\ncontroller log:\n{}",
        test_cluster::tail_file(&world().cp.state_dir().join("e2e-controller-0.log"), 30)
            + &test_cluster::tail_file(&world().cp.state_dir().join("e2e-controller-1.log"), 30)
    );
}

/// Our parent entry's condition `type_` on a route: (status, reason, message).
pub async fn route_condition(
    kind: &str,
    ns: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let r = get_json(&[kind, name, "-n", ns]).await;
    let parents = r["status"]["parents"].as_array()?.clone();
    let ours = parents.iter().find(|p| p["controllerName"] == CONTROLLER)?;
    let c = ours["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Waits for a route condition with this status and reason; returns its message.
pub async fn wait_route_condition(
    kind: &str,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(
        &format!("{kind} {ns}/{name} {type_}={status}/{reason}"),
        Duration::from_secs(60),
        || async {
            match route_condition(kind, ns, name, type_).await {
                Some((s, r, m)) if s == status && r == reason => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// GET through one proxy with a Host header: (status, body).
pub async fn get_via(proxy: SocketAddr, host: &str, path: &str) -> Result<(u16, String), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let r = client
        .get(format!("http://{proxy}{path}"))
        .header("host", host)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    Ok((status, r.text().await.unwrap_or_default()))
}

/// The hostnames of the tunnel's ingress document (catch-all excluded) and its PUT count.
pub fn ingress_hostnames() -> (Vec<String>, u64) {
    let w = world();
    let (doc, _) = w
        .double
        .configuration(&w.account, &w.tunnel.tunnel_id)
        .unwrap();
    let hosts = doc
        .as_ref()
        .and_then(|d| d["ingress"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["hostname"].as_str().map(str::to_owned))
        .collect();
    (hosts, w.double.put_count(&w.tunnel.tunnel_id))
}
