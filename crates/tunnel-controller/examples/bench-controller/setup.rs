//! The benchmark's world, assembled from the gateway e2e tests' fixtures
//! (`tunnel-gateway-fixtures`): a real
//! kube-apiserver with the Gateway API CRDs and ours, the Cloudflare contract double with one
//! account and the class tunnel, the GatewayClass and its GatewayClassConfig, the install's RBAC,
//! in-process tunnel-proxy instances as the shared plane's pods (published through EndpointSlices
//! of its headless config Service), local HTTP backends (one for the burst, two for the
//! propagation run), and the controller binary as a
//! process running as the install's ServiceAccount.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use cloudflare_double::{CloudflareDouble, TunnelInfo};
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ManagedProcess};
use tunnel_gateway_fixtures::in_process::{self, Cloudflare};
pub use tunnel_gateway_fixtures::{CLASS, CONTROLLER};
use tunnel_gateway_fixtures::{
    CONFIG_SERVICE, Install, RBAC_YAML, SYSTEM_NS, config_endpoint_slice, controller_args,
    controller_kubeconfig,
};
use tunnel_proxy::state::State;

use crate::propagate;

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
    /// The proxies' data ports, in the order of `proxies`.
    pub proxy_data: Vec<SocketAddr>,
    /// The port of the HTTP backend behind every benchmark Service.
    pub backend_port: u16,
    /// The two backends the propagation run switches a route between.
    pub switch_ports: [u16; 2],
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

    let Cloudflare {
        double,
        account,
        tunnel,
    } = in_process::start_cloudflare("bench", API_TOKEN).await?;

    let install = Install {
        tunnel_id: &tunnel.tunnel_id,
        account_id: None,
        api_token: API_TOKEN,
        plane_token: SHARED_TOKEN,
    };
    apply(&cluster, &install.yaml()).await?;
    apply(&cluster, RBAC_YAML).await?;

    let mut states = Vec::new();
    let mut proxy_data = Vec::new();
    for i in 0..proxies {
        // Plain HTTP (the controller runs with --config-api-tls=false): the benchmark measures
        // propagation through the controller, as it did before the config API had TLS.
        let proxy = in_process::start_proxy(SHARED_TOKEN, None).await?;
        let slice = config_endpoint_slice(
            SYSTEM_NS,
            CONFIG_SERVICE,
            &format!("tunnel-proxy-config-pod-{i}"),
            proxy.admin.port(),
            false,
        );
        apply(&cluster, &slice).await?;
        proxy_data.push(proxy.data);
        states.push(proxy.state);
    }
    Ok(Stage {
        cp,
        double: Arc::new(double),
        account,
        tunnel,
        proxies: states,
        proxy_data,
        backend_port: in_process::start_backend("backend").await?,
        switch_ports: [
            in_process::start_backend(&propagate::backend_name(0)).await?,
            in_process::start_backend(&propagate::backend_name(1)).await?,
        ],
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
        let kubeconfig = controller_kubeconfig(self.cluster())?;
        let mut args = controller_args(
            &kubeconfig,
            "bench-controller",
            admin,
            &self.double.base_url(),
        );
        args.push("--config-api-tls=false".to_owned());
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

async fn apply(cluster: &Cluster, yaml: &str) -> anyhow::Result<()> {
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], yaml)
        .await
        .with_context(|| format!("kubectl apply\n{yaml}"))?;
    Ok(())
}
