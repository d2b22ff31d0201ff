//! `tunnel-gateway-controller`: the Gateway API controller for Cloudflare Tunnel
//! (docs/tunnel-gateway.md). Every flag is also an environment variable.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube::runtime::events::{Recorder, Reporter};
use kube_support::admin::{Readiness, router, serve as serve_admin};
use kube_support::leader::{LeaseConfig, elect};
use kube_support::telemetry::{self, LogFormat};
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tunnel_controller::controller::metrics::Metrics;
use tunnel_controller::controller::{Controller, Parts};
use tunnel_controller::model::Settings;
use tunnel_controller::observe::world::Stores;
use tunnel_controller::publish::cloudflare::tunnels::TunnelSync;
use tunnel_controller::publish::config_api::tls::{ConfigTls, ConfigTlsSettings};
use tunnel_controller::publish::planes::Planes;
use tunnel_controller::publish::planes::provision::{Provisioner, RenderBase};
use tunnel_controller::publish::planes::push::Pusher;
use tunnel_controller::status::Writer;

#[derive(Parser)]
#[command(
    name = "tunnel-gateway-controller",
    version,
    about = "Gateway API controller that publishes routes through Cloudflare Tunnel"
)]
struct Cli {
    /// The GatewayClass controllerName this controller serves.
    #[arg(
        long,
        env = "CF_CONTROLLER_NAME",
        default_value = "cf.k8s.lex.la/tunnel-controller"
    )]
    controller_name: String,
    /// The controller's namespace (shared plane, its Secrets, the Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = "tunnel-gateway-system")]
    namespace: String,
    /// This replica's identity in leader election (the pod name in Kubernetes).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "CF_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,
    /// Take part in leader election (off: this replica always writes).
    #[arg(long, env = "CF_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// The Lease name (in --namespace).
    #[arg(
        long,
        env = "CF_LEASE_NAME",
        default_value = "tunnel-gateway-controller"
    )]
    lease_name: String,
    /// The shared plane's headless config Service (in --namespace).
    #[arg(
        long,
        env = "CF_SHARED_PLANE_SERVICE",
        default_value = "tunnel-proxy-config"
    )]
    shared_plane_service: String,
    /// The Secret with the shared plane's config-API token (key auth-token; created when missing).
    #[arg(
        long,
        env = "CF_SHARED_PLANE_AUTH_SECRET",
        default_value = "tunnel-proxy-auth"
    )]
    shared_plane_auth_secret: String,
    /// Push to the planes' config API over mutual TLS (the CA, the planes' serving certificates
    /// and the controller's client certificates are managed by the controller). `false` pushes
    /// in plain HTTP, bearer token and backend client keys included: only for planes that run
    /// without `--config-tls-dir`.
    #[arg(long, env = "CF_CONFIG_API_TLS", default_value_t = true, action = clap::ArgAction::Set)]
    config_api_tls: bool,
    /// The config API CA's Secret (in --namespace; created when missing).
    #[arg(
        long,
        env = "CF_CONFIG_CA_SECRET",
        default_value = tunnel_controller::publish::config_api::ca::DEFAULT_CA_SECRET
    )]
    config_ca_secret: String,
    /// The shared plane's config API TLS Secret (in --namespace; written by the controller,
    /// mounted by the shared plane's pods).
    #[arg(
        long,
        env = "CF_SHARED_PLANE_TLS_SECRET",
        default_value = "tunnel-proxy-config-tls"
    )]
    shared_plane_tls_secret: String,
    /// The Cloudflare API base URL.
    #[arg(long, env = "CF_API_URL", default_value = cloudflare_api::DEFAULT_BASE_URL)]
    cloudflare_api_url: String,
    /// The proxy image of dedicated data planes.
    #[arg(long, env = "CF_PROXY_IMAGE")]
    proxy_image: Option<String>,
    /// The cloudflared image of dedicated data planes.
    #[arg(
        long,
        env = "CF_CONNECTOR_IMAGE",
        default_value = "cloudflare/cloudflared:2026.11.0"
    )]
    connector_image: String,
    /// The controller pods' labels (`k=v,...`): dedicated planes' NetworkPolicies admit the
    /// config API only from pods with these labels in --namespace.
    #[arg(
        long,
        env = "CF_CONTROLLER_POD_LABELS",
        default_value = "app.kubernetes.io/name=tunnel-gateway-controller,app.kubernetes.io/component=controller",
        value_parser = parse_labels
    )]
    controller_pod_labels: std::collections::BTreeMap<String, String>,
    /// Labels (`k=v,...`) of a monitoring namespace additionally admitted to dedicated planes'
    /// config port (for scraping /metrics).
    #[arg(long, env = "CF_MONITORING_NAMESPACE_LABELS", value_parser = parse_labels)]
    monitoring_namespace_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Seconds a dedicated plane's connector has to finish its requests in flight after SIGTERM
    /// (cloudflared's `--grace-period`); the pods' termination grace period is this plus 15 s.
    #[arg(long, env = "CF_DRAIN_GRACE_SECONDS", default_value_t = 30)]
    drain_grace_seconds: i64,
    /// The kubeconfig to use; in-cluster configuration (or ~/.kube/config) when unset.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Log format: text or json.
    #[arg(long, env = "CF_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

// A round with thousands of routes allocates its model and documents anew and frees the last
// round's; mimalloc gives freed pages back to the system, where glibc's per-thread arenas kept
// them (docs/benchmarks.md).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let client = match &cli.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            kube::Client::try_from(config)?
        }
        None => kube::Client::try_default().await?,
    };

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::new("caches are syncing");
    let (admin, _admin_task) = serve_admin(
        cli.admin_addr,
        router(Arc::new(registry), readiness.clone()),
        std::future::pending(),
    )
    .await?;
    tracing::info!(%admin, "admin endpoints (/metrics, /healthz, /readyz) listening");

    let identity = cli.identity.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "tunnel-gateway-controller".into()),
            std::process::id()
        )
    });
    let changed = Arc::new(Notify::new());
    let stores = Stores::start(&client, changed.clone());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tunnel-gateway-controller".into(),
            instance: Some(identity.clone()),
        },
    );
    let settings = Settings {
        controller_name: cli.controller_name.clone(),
        namespace: cli.namespace.clone(),
        shared_plane_service: cli.shared_plane_service.clone(),
        shared_plane_auth_secret: cli.shared_plane_auth_secret.clone(),
    };
    let tunnels = TunnelSync::new(
        cli.cloudflare_api_url.clone(),
        metrics.api.clone(),
        cloudflare_api::RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(5),
        },
    );
    let controller = Arc::new(Controller::new(Parts {
        client: client.clone(),
        stores: stores.clone(),
        settings,
        writer: Writer::new(client.clone(), recorder),
        tunnels,
        planes: Planes::new(Pusher::new().context("building the config pusher")?),
        provisioner: Provisioner::new(
            client.clone(),
            RenderBase {
                controller_namespace: cli.namespace.clone(),
                controller_pod_labels: cli.controller_pod_labels.clone(),
                monitoring_namespace_selector: cli.monitoring_namespace_labels.clone().map(|l| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                        match_labels: Some(l),
                        ..Default::default()
                    }
                }),
                default_proxy_image: cli.proxy_image.clone(),
                connector_image: cli.connector_image.clone(),
                drain_grace_seconds: cli.drain_grace_seconds,
                config_tls: cli.config_api_tls,
            },
        ),
        config_tls: cli.config_api_tls.then(|| {
            ConfigTls::new(
                client.clone(),
                ConfigTlsSettings {
                    namespace: cli.namespace.clone(),
                    ca_secret: cli.config_ca_secret.clone(),
                    shared_plane_secret: cli.shared_plane_tls_secret.clone(),
                },
            )
        }),
        metrics,
        changed,
    }));
    if !cli.config_api_tls {
        tracing::warn!(
            "--config-api-tls=false: config pushes (tokens, backend client keys) travel in plain HTTP"
        );
    }

    let (leader_tx, leader_rx) = tokio::sync::watch::channel(!cli.leader_election);
    let leadership = if cli.leader_election {
        let lease = LeaseConfig::new(&cli.namespace, &cli.lease_name, &identity);
        let leadership = elect(client.clone(), &lease)
            .await
            .context("joining leader election")?;
        let mut rx = leadership.subscribe();
        let tx = leader_tx.clone();
        tokio::spawn(async move {
            loop {
                let leader = *rx.borrow_and_update();
                tracing::info!(leader, "leadership changed");
                let _ = tx.send(leader);
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        Some(leadership)
    } else {
        None
    };

    // One waiter on the stores: kube-runtime's readiness latch wakes a single waiter.
    let run = tokio::spawn(async move {
        stores.ready().await;
        tracing::info!("caches synced");
        readiness.set_ready();
        controller.run(leader_rx).await
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    run.abort();
    drop(leader_tx);
    if let Some(l) = leadership {
        l.release().await;
    }
    Ok(())
}

/// `k=v,k2=v2` into a map.
fn parse_labels(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("{p:?} is not key=value"))
        })
        .collect()
}
