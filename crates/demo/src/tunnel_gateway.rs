//! The tunnel gateway in the demo: a Gateway and an HTTPRoute in the `client` cluster, published
//! through a Cloudflare Tunnel, with every part a local process.
//!
//! - `cloudflare-double` stands in for the Cloudflare API, seeded with one account, one tunnel
//!   (a fixed id) and one API token;
//! - `tunnel-proxy` is the shared data plane (config-API token from a file; the same token is in
//!   the Secret `tunnel-proxy-auth` the controller reads). No `cloudflared` runs: a request to
//!   the proxy's traffic port stands in for what the connector delivers to `localhost:8080`;
//! - a backend inside the demo process answers `hello from the demo backend <path>`;
//! - `tunnel-gateway-controller` runs as its ServiceAccount with exactly the RBAC of
//!   `deploy/tunnel-gateway/rbac.yaml`, and the API server holds the project CRDs, the Secrets,
//!   the shared plane's headless config Service, the GatewayClassConfig and the GatewayClass
//!   (`deploy/tunnel-gateway/gatewayclass.yaml`), as an install would. Those objects, and the
//!   controller's arguments, are the ones the controller's end-to-end tests and benchmark use
//!   (`tunnel-gateway-fixtures`).
//!
//! The API server refuses loopback IPs in EndpointSlices; the slices of the shared plane and of
//! the backend use the FQDN `127.1`, which passes and resolves to 127.0.0.1.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use test_cluster::{Cluster, ControlPlane, ManagedProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tunnel_gateway_fixtures::{
    CLASS, CONFIG_SERVICE, Install, RBAC_YAML, SYSTEM_NS, config_endpoint_slice, controller_args,
    controller_kubeconfig, service_yaml,
};

use crate::sibling_binary;
use crate::steps::{Expect, On, Step};

/// The Cloudflare account of the seed.
const ACCOUNT_ID: &str = "0123456789abcdef0123456789abcdef";
/// The tunnel of the seed: the shared plane's, so the Gateway's address is `<id>.cfargotunnel.com`.
const TUNNEL_ID: &str = "6ff42ae2-765d-4adf-8112-31c55c1551ef";
/// The Cloudflare API token of the seed (in the Secret `cloudflare-api-token`).
const API_TOKEN: &str = "demo-api-token";
/// The shared plane's config-API token (file and Secret `tunnel-proxy-auth`).
const SHARED_PLANE_TOKEN: &str = "demo-shared-plane-token";
/// Namespace of the Gateway, the route and the backend. Not the resource proxy's `demo`: its
/// steps create that namespace themselves.
const NAMESPACE: &str = "gateway-demo";
/// The Gateway, the HTTPRoute and the backend Service.
const NAME: &str = "hello";
/// The route's hostname.
const HOSTNAME: &str = "hello.demo.example";
/// What the backend answers, followed by the request path.
const GREETING: &str = "hello from the demo backend";

const CRDS_YAML: &str = include_str!("../../../deploy/tunnel-gateway/crds.yaml");

fn seed_yaml() -> String {
    format!(
        "# Written by the demo (crates/demo/src/tunnel_gateway.rs). Format: crates/cloudflare-double/src/seed.rs\n\
         accounts:\n\
         \x20 - id: {ACCOUNT_ID}\n\
         \x20   name: demo\n\
         \x20   tunnels:\n\
         \x20     - id: {TUNNEL_ID}\n\
         \x20       name: demo\n\
         tokens:\n\
         \x20 - value: {API_TOKEN}\n\
         \x20   accounts: [{ACCOUNT_ID}]\n"
    )
}

/// The install of the class with the seed's values.
fn class_install() -> Install<'static> {
    Install {
        tunnel_id: TUNNEL_ID,
        account_id: Some(ACCOUNT_ID),
        api_token: API_TOKEN,
        plane_token: SHARED_PLANE_TOKEN,
    }
}

/// The backend's namespace, Service (port 80) and EndpointSlice (the in-process backend).
fn backend_yaml(backend_port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n---{}",
        service_yaml(NAMESPACE, NAME, backend_port)
    )
}

/// What a person applies: a Gateway of the class and an HTTPRoute to the backend.
fn gateway_yaml() -> String {
    format!(
        r#"# Written by the demo (crates/demo/src/tunnel_gateway.rs). Reference: docs/tunnel-gateway.md
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: {NAME}
  namespace: {NAMESPACE}
spec:
  gatewayClassName: {CLASS}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    hostname: "*.demo.example"
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: {NAME}
  namespace: {NAMESPACE}
spec:
  parentRefs:
  - name: {NAME}
  hostnames: ["{HOSTNAME}"]
  rules:
  - backendRefs:
    - name: {NAME}
      port: 80
"#
    )
}

/// The running parts and what the demo prints about them.
pub struct TunnelGateway {
    dir: PathBuf,
    double: ManagedProcess,
    proxy: ManagedProcess,
    controller: ManagedProcess,
    double_port: u16,
    proxy_port: u16,
    proxy_admin_port: u16,
    controller_admin_port: u16,
    backend_port: u16,
    backend: tokio::task::JoinHandle<()>,
}

impl TunnelGateway {
    /// Starts the double, the shared plane and the backend, installs the tunnel gateway in the
    /// `client` cluster, starts the controller, and waits (up to 60 s) until the GatewayClass is
    /// Accepted.
    pub async fn start(cp: &ControlPlane, state_dir: &Path) -> anyhow::Result<Self> {
        let client = cp.cluster("client");
        let dir = state_dir.join("tunnel-gateway");
        std::fs::create_dir_all(&dir)?;
        let p = |n: &str| dir.join(n);

        let (backend_port, backend) = start_backend().await?;

        let double_port = test_cluster::free_port()?;
        std::fs::write(p("seed.yaml"), seed_yaml())?;
        let mut double = ManagedProcess::spawn(
            "cloudflare-double",
            &sibling_binary("cloudflare-double", "cloudflare-double")?,
            &[
                "--listen".to_owned(),
                format!("127.0.0.1:{double_port}"),
                "--seed".to_owned(),
                p("seed.yaml").display().to_string(),
            ],
            &p("cloudflare-double.log"),
        )?;
        wait_ok(
            &mut double,
            &configurations_url(double_port),
            &[("Authorization", &bearer())],
        )
        .await?;

        let proxy_port = test_cluster::free_port()?;
        let proxy_admin_port = test_cluster::free_port()?;
        std::fs::write(p("tunnel-proxy-auth-token"), SHARED_PLANE_TOKEN)?;
        let mut proxy = ManagedProcess::spawn(
            "tunnel-proxy",
            &sibling_binary("tunnel-proxy", "tunnel-proxy")?,
            &[
                "--listen".to_owned(),
                format!("127.0.0.1:{proxy_port}"),
                "--admin-listen".to_owned(),
                format!("127.0.0.1:{proxy_admin_port}"),
                "--auth-token-file".to_owned(),
                p("tunnel-proxy-auth-token").display().to_string(),
                "--log-format".to_owned(),
                "text".to_owned(),
            ],
            &p("tunnel-proxy.log"),
        )?;
        wait_ok(
            &mut proxy,
            &format!("http://127.0.0.1:{proxy_admin_port}/healthz"),
            &[],
        )
        .await?;

        install(client, proxy_admin_port, backend_port).await?;
        std::fs::write(p("gateway.yaml"), gateway_yaml())?;

        let controller_admin_port = test_cluster::free_port()?;
        let mut controller = ManagedProcess::spawn(
            "tunnel-gateway-controller",
            &sibling_binary("tunnel-gateway-controller", "tunnel-controller")?,
            &controller_args(
                &controller_kubeconfig(client)?,
                "demo",
                SocketAddr::from(([127, 0, 0, 1], controller_admin_port)),
                &format!("http://127.0.0.1:{double_port}/client/v4"),
            ),
            &p("tunnel-gateway-controller.log"),
        )?;
        wait_class_accepted(client, &mut controller).await?;

        Ok(Self {
            dir,
            double,
            proxy,
            controller,
            double_port,
            proxy_port,
            proxy_admin_port,
            controller_admin_port,
            backend_port,
            backend,
        })
    }

    /// The process ids of the double, the shared plane and the controller.
    pub fn pids(&self) -> Vec<u32> {
        vec![self.double.pid(), self.proxy.pid(), self.controller.pid()]
    }

    /// The first of its processes that has exited: its name and status.
    pub fn exited(&mut self) -> Option<(String, std::process::ExitStatus)> {
        [&mut self.double, &mut self.proxy, &mut self.controller]
            .into_iter()
            .find_map(|p| p.exited().map(|s| (p.name().to_owned(), s)))
    }

    /// The last `lines` lines of each process's log, under a heading each.
    pub fn log_tails(&self, lines: usize) -> String {
        [&self.controller, &self.proxy, &self.double]
            .iter()
            .map(|p| format!("--- {} log ---\n{}", p.name(), p.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What runs, where its files are.
    pub fn describe(&self) -> String {
        let p = |n: &str| self.dir.join(n).display().to_string();
        format!(
            "Tunnel gateway: Gateway API in the client cluster, published through Cloudflare Tunnel (a local double)\n\
             \x20 controller     tunnel-gateway-controller as ServiceAccount {SYSTEM_NS}/tunnel-gateway-controller (deploy/tunnel-gateway/rbac.yaml); GatewayClass {CLASS}\n\
             \x20 metrics        http://127.0.0.1:{controller_admin}/metrics  (/healthz, /readyz)\n\
             \x20 Cloudflare API http://127.0.0.1:{double}/client/v4  (cloudflare-double: account {ACCOUNT_ID}, tunnel {TUNNEL_ID}, API token {API_TOKEN})\n\
             \x20 shared plane   tunnel-proxy: traffic http://127.0.0.1:{proxy} (what cloudflared would deliver to localhost:8080), config API http://127.0.0.1:{proxy_admin}/config, metrics http://127.0.0.1:{proxy_admin}/metrics\n\
             \x20 backend        http://127.0.0.1:{backend} in the demo process (Service {NAMESPACE}/{NAME})\n\
             \x20 gateway        {gateway}\n\
             \x20 logs           {logs}\n",
            controller_admin = self.controller_admin_port,
            double = self.double_port,
            proxy = self.proxy_port,
            proxy_admin = self.proxy_admin_port,
            backend = self.backend_port,
            gateway = p("gateway.yaml"),
            logs = p("*.log"),
        )
    }

    /// The commands to try, in order; `--check` runs them.
    pub fn steps(&self) -> Vec<Step> {
        let gateway = self.dir.join("gateway.yaml").display().to_string();
        let gateway_ref = format!("gateway/{NAME}");
        let route_ref = format!("httproute/{NAME}");
        let tunnel_address = format!("{TUNNEL_ID}.cfargotunnel.com");
        let bearer = bearer();
        vec![
            Step::new(
                "The GatewayClass of the tunnel gateway is Accepted",
                On::Client,
                &["get", "gatewayclass", CLASS],
                Expect::Contains(vec![
                    "cf.k8s.lex.la/tunnel-controller".into(),
                    "True".into(),
                ]),
            ),
            Step::new(
                "Create a Gateway and an HTTPRoute for hello.demo.example",
                On::Client,
                &["apply", "-f", &gateway],
                Expect::Contains(vec![
                    format!("gateway.gateway.networking.k8s.io/{NAME}"),
                    format!("httproute.gateway.networking.k8s.io/{NAME}"),
                ]),
            ),
            Step::new(
                "The Gateway becomes Programmed",
                On::Client,
                &[
                    "wait",
                    "-n",
                    NAMESPACE,
                    "--for=jsonpath={.status.conditions[?(@.type==\"Programmed\")].status}=True",
                    &gateway_ref,
                    "--timeout=60s",
                ],
                Expect::Contains(vec!["condition met".into()]),
            ),
            Step::new(
                "The route is Accepted",
                On::Client,
                &[
                    "wait",
                    "-n",
                    NAMESPACE,
                    "--for=jsonpath={.status.parents[0].conditions[?(@.type==\"Accepted\")].status}=True",
                    &route_ref,
                    "--timeout=60s",
                ],
                Expect::Contains(vec!["condition met".into()]),
            ),
            Step::new(
                "The Gateway's address is the tunnel's hostname (point DNS there)",
                On::Client,
                &[
                    "get",
                    "-n",
                    NAMESPACE,
                    &gateway_ref,
                    "-o",
                    "jsonpath={.status.addresses[*].value}",
                ],
                Expect::Contains(vec![tunnel_address]),
            ),
            Step::http_get(
                "A request as cloudflared delivers it reaches the backend through the shared plane",
                format!("http://127.0.0.1:{}/greet", self.proxy_port),
                &[("Host", HOSTNAME)],
                &[&format!("{GREETING} /greet")],
            ),
            Step::http_get(
                "The tunnel's ingress document at Cloudflare sends the hostname to the proxy",
                configurations_url(self.double_port),
                &[("Authorization", &bearer)],
                &[&format!(
                    r#"{{"hostname":"{HOSTNAME}","service":"http://localhost:8080"}}"#
                )],
            ),
        ]
    }
}

impl Drop for TunnelGateway {
    fn drop(&mut self) {
        self.backend.abort();
    }
}

fn bearer() -> String {
    format!("Bearer {API_TOKEN}")
}

/// The double's endpoint of the tunnel's ingress document.
fn configurations_url(double_port: u16) -> String {
    format!(
        "http://127.0.0.1:{double_port}/client/v4/accounts/{ACCOUNT_ID}/cfd_tunnel/{TUNNEL_ID}/configurations"
    )
}

/// Applies the project CRDs, the namespace and RBAC of the install, the controller's Secrets and
/// the shared plane's config Service, the GatewayClassConfig and GatewayClass, and the backend.
async fn install(client: &Cluster, proxy_admin_port: u16, backend_port: u16) -> anyhow::Result<()> {
    let admin = client.client().await?;
    test_cluster::manifests::apply_crds_yaml(&admin, CRDS_YAML)
        .await
        .context("installing deploy/tunnel-gateway/crds.yaml in the client")?;
    for (what, yaml) in [
        (
            "the namespace, the Secrets, the shared plane's config Service, the GatewayClassConfig and deploy/tunnel-gateway/gatewayclass.yaml",
            class_install().yaml(),
        ),
        ("deploy/tunnel-gateway/rbac.yaml", RBAC_YAML.to_owned()),
        (
            "the shared plane's EndpointSlice",
            config_endpoint_slice(
                SYSTEM_NS,
                CONFIG_SERVICE,
                "tunnel-proxy-config-demo",
                proxy_admin_port,
                true,
            ),
        ),
        ("the backend Service", backend_yaml(backend_port)),
    ] {
        test_cluster::manifests::apply_yaml(&admin, &yaml, SYSTEM_NS)
            .await
            .with_context(|| format!("applying {what} in the client"))?;
    }
    Ok(())
}

/// Polls `url` (with `headers`) until it answers 2xx, for up to 30 s, or until `process` exits.
async fn wait_ok(
    process: &mut ManagedProcess,
    url: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = process.exited() {
            bail!(
                "{} exited ({status}); last log lines:\n{}",
                process.name(),
                process.log_tail(40)
            );
        }
        let mut request = http.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let last = match request.send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => r.status().to_string(),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{} did not answer GET {url} within 30 s ({last}); last log lines:\n{}",
                process.name(),
                process.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the controller has accepted the GatewayClass (it has its caches, the
/// GatewayClassConfig and its credentials), for up to 60 s.
async fn wait_class_accepted(
    client: &Cluster,
    controller: &mut ManagedProcess,
) -> anyhow::Result<()> {
    let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Accepted\")].status}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = controller.exited() {
            bail!(
                "tunnel-gateway-controller exited ({status}); last log lines:\n{}",
                controller.log_tail(40)
            );
        }
        let accepted = client
            .kubectl_ok(&["get", "gatewayclass", CLASS, "-o", jsonpath])
            .await
            .unwrap_or_default();
        if accepted.trim() == "True" {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let class = client
                .kubectl_ok(&["get", "gatewayclass", CLASS, "-o", "yaml"])
                .await
                .unwrap_or_else(|e| e.to_string());
            bail!(
                "the GatewayClass {CLASS} was not Accepted within 60 s\n{class}\n--- tunnel-gateway-controller log ---\n{}",
                controller.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts the backend on a free loopback port: every request gets `200` with
/// `hello from the demo backend <path>`.
async fn start_backend() -> anyhow::Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo backend")?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream));
        }
    });
    Ok((port, task))
}

/// Reads one request head and answers it, then closes the connection (`Connection: close`, so
/// the proxy does not reuse it; GETs carry no body to skip).
async fn answer(mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|target| target.split('?').next())
        .unwrap_or("/");
    let body = format!("{GREETING} {path}\n");
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_backend_greets_with_the_request_path() {
        test_cluster::install_crypto_provider();
        let (port, backend) = start_backend().await.unwrap();
        let answer = reqwest::get(format!("http://127.0.0.1:{port}/greet?x=1"))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(
            answer.text().await.unwrap(),
            "hello from the demo backend /greet\n"
        );
        backend.abort();
    }
}
