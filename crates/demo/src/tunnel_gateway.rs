//! The tunnel gateway in the demo, installed as deployed on the client cluster's node
//! (`tunnel_gateway_fixtures::on_node`, which the controller's `on_node` test and `make
//! conformance` share): `kubectl apply -k deploy/tunnel-gateway` runs the controller's
//! Deployment (2 replicas, leader election) and the shared plane's Pods (the real `tunnel-proxy`
//! with the connector stand-in that the `cloudflared` image maps to) from the built binaries. The
//! Cloudflare double (API, edge and connector port) runs in the demo process on host loopback,
//! relayed into the node's network namespace.
//!
//! The demo adds a backend (an `echo-basic` Deployment and its Service) and writes the Gateway
//! and HTTPRoute a person applies. A request sent to the edge on host loopback for the route's
//! hostname travels edge → connector → proxy Pod → backend Pod, and the backend names the Pod
//! that answered.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tunnel_gateway_fixtures::CLASS;
use tunnel_gateway_fixtures::on_node::{self, API_TOKEN, NS, NodeInstall};

use crate::steps::{Expect, On, Step};

/// Namespace of the Gateway, the route and the backend. Not the resource proxy's `demo`: its
/// steps create that namespace themselves.
const NAMESPACE: &str = "gateway-demo";
/// The Gateway, the HTTPRoute, the backend's Deployment and Service.
const NAME: &str = "hello";
/// The route's hostname.
const HOSTNAME: &str = "hello.demo.example";

/// The backend: echo-basic Pods (they answer with their name, namespace and the request) and
/// their Service.
fn backend_yaml() -> String {
    format!(
        r#"# Written by the demo (crates/demo/src/tunnel_gateway.rs).
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
{backend}"#,
        backend = on_node::echo_backend(NAMESPACE, NAME, 2, 80)
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

/// Where the demo's files are and what it prints about the install.
pub struct TunnelGateway {
    dir: PathBuf,
    edge: String,
    api: String,
    account: String,
    tunnel_id: String,
}

impl TunnelGateway {
    /// Writes the backend and the Gateway files for the running `install`.
    pub fn new(install: &NodeInstall, state_dir: &Path) -> anyhow::Result<Self> {
        let dir = state_dir.join("tunnel-gateway");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("backend.yaml"), backend_yaml()).context("writing backend.yaml")?;
        std::fs::write(dir.join("gateway.yaml"), gateway_yaml()).context("writing gateway.yaml")?;
        Ok(Self {
            dir,
            edge: install.edge().to_string(),
            api: install.double.base_url(),
            account: install.account.clone(),
            tunnel_id: install.tunnel.tunnel_id.clone(),
        })
    }

    /// What runs, where.
    pub fn describe(&self) -> String {
        format!(
            "Tunnel gateway: Gateway API in the client cluster, published through Cloudflare Tunnel (a local double)\n\
             \x20 install        kubectl apply -k deploy/tunnel-gateway on the node: Deployments tunnel-gateway-controller (2 replicas) and tunnel-proxy (the shared plane: tunnel-proxy + cloudflared stand-in) in {NS}; GatewayClass {CLASS}\n\
             \x20 Cloudflare API {api}  (account {account}, tunnel {tunnel}, API token {API_TOKEN}; in the Pods: http://api.cloudflare-double.invalid:8787/client/v4)\n\
             \x20 edge           http://{edge}  (Cloudflare's edge: any hostname, routed by the tunnels' ingress documents over the connectors)\n\
             \x20 files          {files}\n",
            api = self.api,
            account = self.account,
            tunnel = self.tunnel_id,
            edge = self.edge,
            files = self.dir.display(),
        )
    }

    /// The commands to try, in order; `--check` runs them.
    pub fn steps(&self) -> Vec<Step> {
        let backend = self.dir.join("backend.yaml").display().to_string();
        let gateway = self.dir.join("gateway.yaml").display().to_string();
        let gateway_ref = format!("gateway/{NAME}");
        let route_ref = format!("httproute/{NAME}");
        let deployment_ref = format!("deployment/{NAME}");
        let tunnel_address = format!("{}.cfargotunnel.com", self.tunnel_id);
        let bearer = format!("Bearer {API_TOKEN}");
        vec![
            Step::new(
                "The controller and the shared plane run as Pods on the node",
                On::Client,
                &["get", "pods", "-n", NS, "-o", "wide"],
                Expect::Contains(vec![
                    "tunnel-gateway-controller-".into(),
                    "Running".into(),
                    "kt-node".into(),
                ]),
            ),
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
                "Run the backend: two echo-basic Pods and their Service",
                On::Client,
                &["apply", "-f", &backend],
                Expect::Contains(vec![format!("deployment.apps/{NAME}")]),
            ),
            Step::new(
                "The backend is Available",
                On::Client,
                &[
                    "wait",
                    "-n",
                    NAMESPACE,
                    "--for=condition=Available",
                    &deployment_ref,
                    "--timeout=120s",
                ],
                Expect::Contains(vec!["condition met".into()]),
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
                "The Gateway becomes Programmed (once the shared plane's Pods are Ready)",
                On::Client,
                &[
                    "wait",
                    "-n",
                    NAMESPACE,
                    "--for=jsonpath={.status.conditions[?(@.type==\"Programmed\")].status}=True",
                    &gateway_ref,
                    "--timeout=180s",
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
                "A request to the edge travels edge -> connector -> proxy Pod -> backend Pod (it names the Pod)",
                format!("http://{}/greet", self.edge),
                &[("Host", HOSTNAME)],
                &[
                    "\"/greet\"",
                    &format!("\"{NAME}-"),
                    &format!("\"{NAMESPACE}\""),
                ],
            ),
            Step::http_get(
                "The tunnel's ingress document at Cloudflare sends the hostname to the proxy",
                format!(
                    "{}/accounts/{}/cfd_tunnel/{}/configurations",
                    self.api, self.account, self.tunnel_id
                ),
                &[("Authorization", &bearer)],
                &[&format!(
                    r#"{{"hostname":"{HOSTNAME}","service":"http://localhost:8080"}}"#
                )],
            ),
        ]
    }
}
