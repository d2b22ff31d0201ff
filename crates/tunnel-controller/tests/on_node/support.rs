//! What every test of this binary starts from: the Cloudflare double (API, edge and connector
//! port on host loopback), a harness cluster with the node agent running the controller and the
//! proxy from their images (`make images-test`: unpacked, chrooted, as the non-root user; other
//! tags of them and the connector map to the built binaries), the double exposed inside the
//! node's private network namespace, and the operator's part of the install done (namespace, Secrets, `kubectl apply -k
//! deploy/tunnel-gateway`, the controller pointed at the double, the GatewayClassConfig; or
//! `helm install` of the chart with those as values). Also the helpers the tests act and look
//! with: kubectl, requests through the edge and traffic counted through a change, the
//! controller's metrics read from inside the network namespace.

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use test_cluster::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tunnel_gateway_fixtures::on_node::{self, Binaries, NodeInstall};
pub use tunnel_gateway_fixtures::on_node::{
    CONNECTOR_IMAGE, CONTROLLER_IMAGE, Method, NS, PROXY_IMAGE, RELEASE,
};

/// The controller's admin port (`/metrics`), as `deploy/` declares it.
const CONTROLLER_ADMIN_PORT: u16 = 8080;

/// The proxy's answer when it holds no route for a host (its config not pushed yet).
pub const UNCONFIGURED: &str = "no matching route\n";

/// One test's install ([`tunnel_gateway_fixtures::on_node`], shared with `make conformance`);
/// the cluster (and every Pod) stops when it is dropped.
pub struct Install {
    node: NodeInstall,
    /// The edge on host loopback.
    pub edge: SocketAddr,
    /// Held for the test's life: one install at a time on this machine.
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Deref for Install {
    type Target = NodeInstall;
    fn deref(&self) -> &NodeInstall {
        &self.node
    }
}

/// The tests of this binary each start a cluster with a node and a dozen Pods; run together they
/// would compete for the CPU their timing assertions depend on.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Install {
    /// Starts the double and the cluster, does the operator's part of the install with the
    /// kustomization and waits for the controller's rollout.
    pub async fn start() -> Install {
        Self::start_with(Method::Kustomize, &[]).await
    }

    /// [`Install::start`] installing by `method`; the node also runs the controller and the
    /// proxy for their images with each of `tags` (an upgrade to a new tag).
    pub async fn start_with(method: Method, tags: &[&str]) -> Install {
        let serial = SERIAL.lock().await;
        test_cluster::install_crypto_provider();
        let mut binaries =
            Binaries::from_images(Path::new(env!("CARGO_BIN_EXE_tunnel-gateway-controller")))
                .unwrap_or_else(|e| panic!("{e}"));
        for tag in tags {
            binaries.images.extend([
                (retag(CONTROLLER_IMAGE, tag), binaries.controller.clone()),
                (retag(PROXY_IMAGE, tag), binaries.proxy.clone()),
            ]);
        }
        let node = on_node::start_with(&binaries, &[], method)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Install {
            edge: node.edge(),
            node,
            _serial: serial,
        }
    }

    /// The controllers' `/metrics`, every replica's (only the leader pushes), read from inside
    /// the private network namespace.
    pub async fn controller_metrics(&self) -> String {
        let pods = pods(
            self.cluster(),
            NS,
            "app.kubernetes.io/name=tunnel-gateway-controller",
        )
        .await;
        let mut out = String::new();
        for pod in &pods {
            let Some(ip) = pod["status"]["podIP"].as_str() else {
                continue;
            };
            let addr = SocketAddr::new(ip.parse().unwrap(), CONTROLLER_ADMIN_PORT);
            let mut stream = self.world.connect(addr).await.unwrap();
            let (status, body) = http_get(&mut stream, &addr.to_string(), "/metrics")
                .await
                .unwrap();
            assert_eq!(status, 200, "{body}");
            out.push_str(&body);
        }
        out
    }
}

/// `image` (`repository:tag`) with another tag.
pub fn retag(image: &str, tag: &str) -> String {
    let repository = image.rsplit_once(':').map_or(image, |(r, _)| r);
    format!("{repository}:{tag}")
}

pub async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

pub async fn apply(cluster: &Cluster, yaml: &str) {
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], yaml)
        .await
        .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{yaml}"));
}

pub async fn json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(cluster, &args).await).unwrap()
}

/// The Pods matching `selector` in `ns` (terminating ones included).
pub async fn pods(cluster: &Cluster, ns: &str, selector: &str) -> Vec<Value> {
    match json(cluster, &["-n", ns, "get", "pods", "-l", selector]).await["items"].take() {
        Value::Array(items) => items,
        other => panic!("pods {selector} in {ns}: {other}"),
    }
}

/// The names of the Pods matching `selector` in `ns` (terminating ones included).
pub async fn pod_names(cluster: &Cluster, ns: &str, selector: &str) -> Vec<String> {
    pods(cluster, ns, selector)
        .await
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits for `condition` on `what` in `ns` (kubectl wait).
pub async fn wait(cluster: &Cluster, ns: &str, what: &str, condition: &str, timeout: &str) {
    if let Err(e) = on_node::wait(cluster, ns, what, condition, timeout).await {
        panic!("{e}");
    }
}

/// Two echo-basic Pods (Deployment and Service `echo` in namespace `echo`) behind the Gateway
/// `web` on the shared plane and an HTTPRoute for `hostname`.
pub fn echo_route(hostname: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: echo}}
---
{backend}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: echo}}
spec:
  gatewayClassName: cloudflare-tunnel
  listeners:
  - {{name: http, protocol: HTTP, port: 80}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: echo, namespace: echo}}
spec:
  parentRefs: [{{name: web}}]
  hostnames: ["{hostname}"]
  rules:
  - backendRefs: [{{name: echo, port: 8080}}]
"#,
        backend = on_node::echo_backend("echo", "echo", 2, 8080)
    )
}

/// A tenant on a dedicated plane: namespace `ns`, a GatewayConfig `cfg` naming the token Secret
/// `tunnel` (plus `config_extra`, lines of its spec), an echo-basic `backend` Deployment and
/// Service, the Gateway `gw` on the GatewayConfig and an HTTPRoute for `hostname`. The token
/// Secret is [`token_secret`]'s.
pub fn tenant(ns: &str, gw: &str, hostname: &str, config_extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayConfig
metadata: {{name: cfg, namespace: {ns}}}
spec:
  tunnelTokenSecretRef: {{name: tunnel}}
{config_extra}
---
{backend}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gw}, namespace: {ns}}}
spec:
  gatewayClassName: cloudflare-tunnel
  infrastructure:
    parametersRef: {{group: cf.k8s.lex.la, kind: GatewayConfig, name: cfg}}
  listeners:
  - {{name: http, protocol: HTTP, port: 80}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {gw}, namespace: {ns}}}
spec:
  parentRefs: [{{name: {gw}}}]
  hostnames: ["{hostname}"]
  rules:
  - backendRefs: [{{name: backend, port: 8080}}]
"#,
        backend = on_node::echo_backend(ns, "backend", 1, 8080)
    )
}

/// The tenant's connector token Secret (`tunnel`, key `tunnel-token`), as the guide has the
/// tenant write it, and rewrite it to rotate.
pub fn token_secret(ns: &str, token: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: tunnel, namespace: {ns}}}
stringData: {{tunnel-token: "{token}"}}
"#
    )
}

/// One condition of a Gateway's status (`Value::Null` while absent).
pub async fn gateway_condition(cluster: &Cluster, ns: &str, gw: &str, type_: &str) -> Value {
    let g = json(cluster, &["-n", ns, "get", "gateway", gw]).await;
    g["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until the Gateway's condition `type_` has `status` and `reason`; returns it.
pub async fn wait_gateway(
    cluster: &Cluster,
    ns: &str,
    gw: &str,
    type_: &str,
    (status, reason): (&str, &str),
    timeout: Duration,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let c = gateway_condition(cluster, ns, gw, type_).await;
        if c["status"] == status && c["reason"] == reason {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Gateway {ns}/{gw}: no {type_}={status}/{reason} within {timeout:?}; last: {c}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One HTTP/1.1 request to the edge with `host`: (status, body).
pub async fn edge_get(edge: SocketAddr, host: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(edge).await?;
    http_get(&mut stream, host, path).await
}

/// `GET path` with `Host: host` on `stream`, read to its close: (status, body).
async fn http_get(
    stream: &mut tokio::net::TcpStream,
    host: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::other("no answer within 20 s"))??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Sends requests for `host` until one is answered with `status`; returns its body.
pub async fn until_status(edge: SocketAddr, host: &str, status: u16, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match edge_get(edge, host, "/on-node").await {
            Ok((s, body)) if s == status => return body,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "no {status} for {host} within {timeout:?}; last: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether echo-basic's answer `body` names one of `pods` as the Pod that answered.
pub fn answered_by(body: &str, pods: &[String]) -> bool {
    pods.iter().any(|p| body.contains(&format!("\"{p}\"")))
}

/// Requests for one hostname through the edge, one every 20 ms from [`Traffic::start`] until
/// [`Traffic::stop`], counted by how they were answered.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Answers>,
}

/// How [`Traffic`]'s requests were answered.
#[derive(Debug)]
pub struct Answers {
    /// 200 with a body `ok` accepts.
    pub ok: u32,
    /// `404 no matching route` from a proxy without config.
    pub unconfigured: u32,
    /// Anything else (5xx, a broken connection, another body), as it came.
    pub failed: Vec<String>,
}

impl Traffic {
    pub fn start(
        edge: SocketAddr,
        host: &'static str,
        path: &'static str,
        ok: impl Fn(&str) -> bool + Send + 'static,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut answers = Answers {
                    ok: 0,
                    unconfigured: 0,
                    failed: Vec::new(),
                };
                while !stop.load(Ordering::Relaxed) {
                    match edge_get(edge, host, path).await {
                        Ok((200, body)) if ok(&body) => answers.ok += 1,
                        Ok((404, body)) if body == UNCONFIGURED => answers.unconfigured += 1,
                        other => answers.failed.push(format!("{other:?}")),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                answers
            }
        });
        Traffic { stop, task }
    }

    pub async fn stop(self) -> Answers {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Waits until the controller's Lease is held by one of its Pods, of which there are two (not
/// terminating); returns the holder.
pub async fn leader(cluster: &Cluster) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let controllers: Vec<String> = pods(
            cluster,
            NS,
            "app.kubernetes.io/name=tunnel-gateway-controller",
        )
        .await
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
        let lease = json(
            cluster,
            &["-n", NS, "get", "lease", "tunnel-gateway-controller"],
        )
        .await;
        let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
        if controllers.len() == 2 && controllers.iter().any(|c| c == holder) {
            return holder.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Lease is not held by one of two controller Pods ({controllers:?}): {lease}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
