//! The benchmark's world, assembled as the gateway e2e tests assemble theirs: a real
//! kube-apiserver with the Gateway API CRDs and ours, the Cloudflare contract double with one
//! account and the class tunnel, the GatewayClass and its GatewayClassConfig, the install's RBAC,
//! in-process tunnel-proxy instances as the shared plane's pods (published through EndpointSlices
//! of its headless config Service), one local HTTP backend, and the controller binary as a
//! process running as the install's ServiceAccount.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use cloudflare_double::{CloudflareDouble, TokenScope, TunnelInfo};
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ManagedProcess};
use tokio::net::TcpListener;
use tunnel_proxy::admin::{self, AdminOptions};
use tunnel_proxy::state::State;

pub const SYSTEM_NS: &str = "tunnel-gateway-system";
pub const CLASS: &str = "cloudflare-tunnel";
pub const CONTROLLER: &str = "cf.k8s.lex.la/tunnel-controller";
const SHARED_TOKEN: &str = "shared-plane-bench-token";
const API_TOKEN: &str = "cf-api-token-bench";

/// Everything started before the controller.
pub struct Stage {
    pub cp: ControlPlane,
    pub double: Arc<CloudflareDouble>,
    pub account: String,
    pub tunnel: TunnelInfo,
    /// The shared plane's pods.
    pub proxies: Vec<Arc<State>>,
    /// One proxy's data port, for the sanity request after convergence.
    pub proxy_data: SocketAddr,
    /// The port of the HTTP backend behind every benchmark Service.
    pub backend_port: u16,
}

/// Starts the control plane, the double, the shared plane and the backend, and installs the
/// class and RBAC.
pub async fn stage(state_dir: &Path, proxies: usize) -> anyhow::Result<Stage> {
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("bench"))
        .gateway_api()
        .state_dir(state_dir)
        .start()
        .await
        .context("starting the control plane")?;
    let cluster = cp.cluster("bench").clone();
    let client = cluster.client().await?;
    test_cluster::manifests::apply_crds_yaml(&client, &tunnel_controller::api::crds_yaml())
        .await
        .context("installing our CRDs")?;

    let double = CloudflareDouble::start().await?;
    let account = double.add_account("bench")?;
    let tunnel = double.add_tunnel(&account, "shared")?;
    double.add_token(API_TOKEN, TokenScope::User(vec![account.clone()]))?;

    apply(
        &cluster,
        &format!(
            r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {SYSTEM_NS}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: cloudflare-api, namespace: {SYSTEM_NS}}}
stringData: {{api-token: {API_TOKEN}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: tunnel-proxy-auth, namespace: {SYSTEM_NS}}}
stringData: {{auth-token: {SHARED_TOKEN}}}
---
apiVersion: v1
kind: Service
metadata: {{name: tunnel-proxy-config, namespace: {SYSTEM_NS}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  ports: [{{name: config-api, port: 8081}}]
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {CLASS}}}
spec:
  tunnelID: {tunnel}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api, namespace: {SYSTEM_NS}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {CLASS}}}
spec:
  controllerName: {CONTROLLER}
  parametersRef: {{group: cf.k8s.lex.la, kind: GatewayClassConfig, name: {CLASS}}}
"#,
            tunnel = tunnel.tunnel_id
        ),
    )
    .await?;
    apply(
        &cluster,
        include_str!("../../../../deploy/tunnel-gateway/rbac.yaml"),
    )
    .await?;

    let mut states = Vec::new();
    let mut proxy_data = None;
    for i in 0..proxies {
        let (state, data, admin) = start_proxy().await?;
        publish_proxy(&cluster, i, admin.port()).await?;
        proxy_data.get_or_insert(data);
        states.push(state);
    }
    Ok(Stage {
        cp,
        double: Arc::new(double),
        account,
        tunnel,
        proxies: states,
        proxy_data: proxy_data.context("at least one proxy")?,
        backend_port: start_backend().await?,
    })
}

impl Stage {
    pub fn cluster(&self) -> &Arc<Cluster> {
        self.cp.cluster("bench")
    }

    /// Starts the controller binary as the install's ServiceAccount; its log goes to the state
    /// directory and `RUST_LOG` is inherited.
    pub fn start_controller(
        &self,
        bin: &Path,
        admin: SocketAddr,
    ) -> anyhow::Result<ManagedProcess> {
        let kubeconfig = self.cluster().kubeconfig_for(
            &format!("system:serviceaccount:{SYSTEM_NS}:tunnel-gateway-controller"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{SYSTEM_NS}"),
            ],
        )?;
        let args: Vec<String> = [
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--namespace",
            SYSTEM_NS,
            "--identity",
            "bench-controller",
            "--admin-addr",
            &admin.to_string(),
            "--cloudflare-api-url",
            &self.double.base_url(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Ok(ManagedProcess::spawn(
            "tunnel-gateway-controller",
            bin,
            &args,
            &self.controller_log(),
        )?)
    }

    pub fn controller_log(&self) -> std::path::PathBuf {
        self.cp.state_dir().join("tunnel-gateway-controller.log")
    }
}

/// An in-process proxy: (state, data address, config-API address).
async fn start_proxy() -> anyhow::Result<(Arc<State>, SocketAddr, SocketAddr)> {
    let state = Arc::new(State::new());
    let data = TcpListener::bind("127.0.0.1:0").await?;
    let admin_l = TcpListener::bind("127.0.0.1:0").await?;
    let (data_addr, admin_addr) = (data.local_addr()?, admin_l.local_addr()?);
    let router = admin::router(
        state.clone(),
        AdminOptions {
            auth_token: Some(SHARED_TOKEN.to_owned()),
            connector_ready_url: None,
        },
    )?;
    tokio::spawn(async move { axum::serve(admin_l, router).await });
    tokio::spawn(tunnel_proxy::proxy::serve(
        data,
        state.clone(),
        std::future::pending(),
    ));
    Ok((state, data_addr, admin_addr))
}

/// The shared plane's config Service gets an EndpointSlice for the proxy (the API server refuses
/// loopback IPs in slices; the FQDN `127.1` passes and resolves to 127.0.0.1).
async fn publish_proxy(cluster: &Cluster, i: usize, port: u16) -> anyhow::Result<()> {
    apply(
        cluster,
        &format!(
            r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: tunnel-proxy-config-pod-{i}
  namespace: {SYSTEM_NS}
  labels: {{kubernetes.io/service-name: tunnel-proxy-config}}
addressType: FQDN
ports: [{{name: config-api, port: {port}, protocol: TCP}}]
endpoints:
- addresses: ["127.1"]
  conditions: {{ready: false}}
"#
        ),
    )
    .await
}

/// A backend answering `backend <path>`.
async fn start_backend() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let port = l.local_addr()?.port();
    let app = axum::Router::new()
        .fallback(|uri: axum::http::Uri| async move { format!("backend {}", uri.path()) });
    tokio::spawn(async move { axum::serve(l, app).await });
    Ok(port)
}

async fn apply(cluster: &Cluster, yaml: &str) -> anyhow::Result<()> {
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], yaml)
        .await
        .with_context(|| format!("kubectl apply\n{yaml}"))?;
    Ok(())
}
