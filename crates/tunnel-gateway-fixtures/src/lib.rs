//! The tunnel gateway's world as the controller's end-to-end tests, its benchmark and the demo
//! assemble it: the install of the class (namespace, Secrets, the shared plane's headless config
//! Service, GatewayClassConfig, GatewayClass and the install's RBAC), EndpointSlices that point
//! the API server's Services at local ports, and the controller binary's arguments as the
//! install's ServiceAccount. With the `in-process` feature, `in_process` starts the parts the
//! tests and the benchmark run in their own process, and `on_node` brings up the install as
//! deployed on a cluster with the node agent (the `on_node` test, `make conformance`).
//!
//! The API server refuses loopback IPs in EndpointSlices; the slices here use the FQDN `127.1`,
//! which passes and resolves to 127.0.0.1.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use test_cluster::Cluster;

#[cfg(feature = "in-process")]
pub mod in_process;
#[cfg(feature = "in-process")]
pub mod on_node;

/// The controller's namespace: its Lease, the shared plane's Service and Secrets.
pub const SYSTEM_NS: &str = "tunnel-gateway-system";
/// The GatewayClass and its GatewayClassConfig.
pub const CLASS: &str = "cloudflare-tunnel";
/// The class's `controllerName`.
pub const CONTROLLER: &str = "cf.k8s.lex.la/tunnel-controller";
/// The shared plane's headless config Service.
pub const CONFIG_SERVICE: &str = "tunnel-proxy-config";
/// The controller's ServiceAccount and RBAC: the deploy manifests' own.
pub const RBAC_YAML: &str = include_str!("../../../deploy/tunnel-gateway/rbac.yaml");
const NAMESPACE_YAML: &str = include_str!("../../../deploy/tunnel-gateway/namespace.yaml");
const GATEWAY_CLASS_YAML: &str = include_str!("../../../deploy/tunnel-gateway/gatewayclass.yaml");

/// The values of one install of the class.
#[derive(Debug, Clone, Copy)]
pub struct Install<'a> {
    /// The class tunnel (the shared plane's).
    pub tunnel_id: &'a str,
    /// `accountId` of the GatewayClassConfig; without it the controller discovers the account.
    pub account_id: Option<&'a str>,
    /// The Cloudflare API token (Secret `cloudflare-api-token`).
    pub api_token: &'a str,
    /// The shared plane's config-API token (Secret `tunnel-proxy-auth`).
    pub plane_token: &'a str,
}

impl Install<'_> {
    /// The namespace (`deploy/tunnel-gateway/namespace.yaml`), the Secrets, the shared plane's
    /// headless config Service, the GatewayClassConfig and the GatewayClass
    /// (`deploy/tunnel-gateway/gatewayclass.yaml`), in the order they are applied. The RBAC
    /// ([`RBAC_YAML`]) goes in once the namespace exists.
    pub fn yaml(&self) -> String {
        let Install {
            tunnel_id,
            account_id,
            api_token,
            plane_token,
        } = self;
        let account = account_id.map_or(String::new(), |a| format!("\n  accountId: {a}"));
        format!(
            r#"{NAMESPACE_YAML}
---
apiVersion: v1
kind: Secret
metadata: {{name: cloudflare-api-token, namespace: {SYSTEM_NS}}}
stringData: {{api-token: {api_token}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: tunnel-proxy-auth, namespace: {SYSTEM_NS}}}
stringData: {{auth-token: {plane_token}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {CONFIG_SERVICE}, namespace: {SYSTEM_NS}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  ports: [{{name: config-api, port: 8081}}]
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {CLASS}}}
spec:
  tunnelID: {tunnel_id}{account}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api-token, namespace: {SYSTEM_NS}, key: api-token}}
---
{GATEWAY_CLASS_YAML}"#
        )
    }
}

/// An EndpointSlice `slice` of the config Service `service` in `ns` pointing at a config API on
/// `port` (not ready, as a pod without config is, unless `ready`).
pub fn config_endpoint_slice(
    ns: &str,
    service: &str,
    slice: &str,
    port: u16,
    ready: bool,
) -> String {
    format!(
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {service}}}
addressType: FQDN
ports: [{{name: config-api, port: {port}, protocol: TCP}}]
endpoints:
- addresses: ["127.1"]
  conditions: {{ready: {ready}}}
"#
    )
}

/// A Service `name` (port 80, `http`) in `ns` whose EndpointSlice points at a local port.
pub fn service_yaml(ns: &str, name: &str, port: u16) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: FQDN
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints:
- addresses: ["127.1"]
  conditions: {{ready: true}}
"#
    )
}

/// Writes a kubeconfig of the install's ServiceAccount `tunnel-gateway-controller`, so the
/// controller runs with exactly the install's RBAC.
pub fn controller_kubeconfig(cluster: &Cluster) -> Result<PathBuf, test_cluster::Error> {
    cluster.kubeconfig_for(
        &format!("system:serviceaccount:{SYSTEM_NS}:tunnel-gateway-controller"),
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{SYSTEM_NS}"),
        ],
    )
}

/// The arguments of the controller binary: `kubeconfig` (see [`controller_kubeconfig`]), the
/// install's namespace, its Lease `identity`, its admin address and the Cloudflare API. The
/// config API is pushed over mutual TLS (the default): proxies serve it from the files of their
/// plane's TLS Secret ([`plane_tls_files`]).
pub fn controller_args(
    kubeconfig: &Path,
    identity: &str,
    admin: SocketAddr,
    cloudflare_api_url: &str,
) -> Vec<String> {
    [
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--namespace",
        SYSTEM_NS,
        "--identity",
        identity,
        "--admin-addr",
        &admin.to_string(),
        "--cloudflare-api-url",
        cloudflare_api_url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The shared plane's config API TLS Secret (written by the controller).
pub const SHARED_TLS_SECRET: &str = "tunnel-proxy-config-tls";

/// Writes the keys of a plane's `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`, `ca.crt`) as
/// files into `dir`, as the kubelet mounts them; `None` while the Secret lacks one of them.
pub fn plane_tls_files(secret: &serde_json::Value, dir: &Path) -> std::io::Result<Option<()>> {
    use base64::Engine;
    let mut files = Vec::new();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let Some(value) = secret["data"][key].as_str() else {
            return Ok(None);
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(value) else {
            return Ok(None);
        };
        files.push((key, bytes));
    }
    std::fs::create_dir_all(dir)?;
    for (key, bytes) in files {
        // Written aside and renamed, so a reader never sees half a file.
        let tmp = dir.join(format!(".{key}.tmp"));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, dir.join(key))?;
    }
    Ok(Some(()))
}
