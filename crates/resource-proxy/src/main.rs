//! `resource-proxy`: serves a client cluster's configured custom-resource group/versions from a
//! target cluster through the aggregation layer.
//!
//! ```text
//! resource-proxy --config FILE          # run
//! resource-proxy check-config FILE      # validate, print the listeners; exit 1 naming every error
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube_support::admin::{Readiness, router, serve as serve_admin};
use kube_support::telemetry::{self, LogFormat};
use prometheus_client::registry::Registry;
use resource_proxy::config::{ClusterAccess, Config, PeerSource, render_listeners};
use resource_proxy::listen::caller_auth::Authenticator;
use resource_proxy::listen::server::{self, ServingCert};
use resource_proxy::listen::serving;
use resource_proxy::metrics::Metrics;
use resource_proxy::owner_label_policy;
use resource_proxy::reconcile::namespaces::{self, NamespaceCleaner};
use resource_proxy::request::context::ListenerContext;
use resource_proxy::target::TargetClient;
use resource_proxy::target::peer_source;
use resource_proxy::tenancy::labels::OwnerLabels;
use resource_proxy::wiring;

#[derive(Parser)]
#[command(
    name = "resource-proxy",
    version,
    about = "Serves custom resources of a client cluster from a target cluster"
)]
struct Cli {
    /// The configuration file (docs/resource-proxy.md).
    #[arg(long, env = "RESOURCE_PROXY_CONFIG")]
    config: Option<PathBuf>,
    /// This replica's identity in leader election (the pod name in Kubernetes; host name and
    /// pid by default).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Log format: text or json.
    #[arg(long, env = "RESOURCE_PROXY_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a configuration file and print the listeners it resolves to.
    CheckConfig { file: PathBuf },
}

// Every request allocates a few small objects (buffers, header maps, futures, the answer);
// mimalloc's per-thread free lists serve them in fewer instructions than glibc's malloc.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if let Some(Cmd::CheckConfig { file }) = &cli.command {
        return match Config::load(file) {
            Ok(config) => {
                print!("{}", render_listeners(&config));
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                std::process::ExitCode::FAILURE
            }
        };
    }
    telemetry::init(cli.log_format);
    let Some(path) = cli.config else {
        eprintln!("resource-proxy: --config FILE is required (or `check-config FILE`)");
        return std::process::ExitCode::from(2);
    };
    let runtime = kube_support::runtime::build().expect("tokio runtime");
    match runtime.block_on(run(path, cli.identity)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(path: PathBuf, identity: Option<String>) -> anyhow::Result<()> {
    let config =
        Arc::new(Config::load(&path).with_context(|| format!("loading {}", path.display()))?);
    let client = client_cluster(&config.client_cluster).await?;

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let policy_metrics = owner_label_policy::PolicyMetrics::register(&mut registry);
    let readiness = Readiness::new("starting");
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let admin_shutdown = {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.changed().await;
        }
    };
    let (admin_addr, _admin) = serve_admin(
        config.metrics_address,
        router(Arc::new(registry), readiness.clone()),
        admin_shutdown,
    )
    .await?;
    tracing::info!(address = %admin_addr, "metrics and health endpoints up");

    let mut targets = BTreeMap::new();
    for (name, target) in &config.targets {
        let group_versions = config
            .listeners
            .iter()
            .filter(|l| &l.target == name)
            .map(|l| l.group_version())
            .collect();
        let tc = TargetClient::with_metrics(name, target, metrics.clone(), group_versions)?;
        tc.refresh_peer_gauges_every(std::time::Duration::from_secs(1));
        if let PeerSource::EndpointSlice {
            kubeconfig,
            namespace,
            service,
            port_name,
        } = &target.peers
        {
            let cluster = peer_source::client_from_kubeconfig(kubeconfig)
                .await
                .with_context(|| format!("peer source of target {}", tc.name()))?;
            tokio::spawn(peer_source::follow(
                tc.clone(),
                cluster,
                peer_source::EndpointSliceSource {
                    namespace: namespace.clone(),
                    service: service.clone(),
                    port_name: port_name.clone(),
                },
            ));
            wait_for_peers(&tc).await;
        }
        check_identity(&tc, &config.client.target_user()).await;
        if config.apply_owner_label_policy {
            tokio::spawn(owner_label_policy::keep_applied(
                tc.clone(),
                config.clone(),
                name.clone(),
                policy_metrics.clone(),
            ));
        }
        targets.insert(name.clone(), tc);
    }

    let auth = Authenticator::default();
    tokio::time::timeout(std::time::Duration::from_secs(30), auth.follow(client.clone()))
        .await
        .context("the client cluster's kube-system/extension-apiserver-authentication could not be read in 30 s")?;

    // One serving certificate for every replica (from files, or a Secret in the client cluster),
    // reloaded when it changes.
    let material = serving::ensure(&client, &config)
        .await
        .context("serving certificate")?;
    let cert = ServingCert::from_pem(&material.cert_chain_pem, &material.key_pem)?;
    let serving_rx = serving::watch_serving(
        client.clone(),
        config.clone(),
        material,
        serving::POLL_INTERVAL,
    );
    {
        let cert = cert.clone();
        let mut rx = serving_rx.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let m = rx.borrow_and_update().clone();
                match cert.replace(&m.cert_chain_pem, &m.key_pem) {
                    Ok(()) => tracing::info!("serving certificate reloaded"),
                    Err(e) => {
                        tracing::error!(error = %e, "new serving certificate unusable; keeping the previous one")
                    }
                }
            }
        });
    }
    let tls = server::tls_config(cert);
    let owner = OwnerLabels::for_client(&config.client);
    // One namespace cleaner per target, over every group/version the client has there.
    let cleaners: BTreeMap<_, _> = targets
        .iter()
        .map(|(name, tc)| {
            let listeners = config.listeners.iter().filter(|l| &l.target == name);
            let cleaner =
                NamespaceCleaner::new(tc.clone(), owner.clone(), listeners, metrics.clone());
            (name.clone(), Arc::new(cleaner))
        })
        .collect();
    for l in &config.listeners {
        let ctx = Arc::new(
            ListenerContext::new(
                l.clone(),
                targets[&l.target].clone(),
                auth.clone(),
                owner.clone(),
                client.clone(),
                metrics.clone(),
            )
            .with_namespaces(cleaners[&l.target].clone()),
        );
        let (addr, _task) = server::serve(ctx, l.address(), tls.clone(), shutdown_rx.clone())
            .await
            .with_context(|| format!("listening on {} for {}", l.address(), l.group_version()))?;
        tracing::info!(group_version = %l.group_version(), %addr, target = %targets[&l.target].name(), "serving");
    }
    readiness.set_ready();

    // Every replica serves; only the Lease holder writes the wiring (RP-2, RP-3, RP-16).
    let identity = identity.unwrap_or_else(wiring::default_identity);
    let wiring = wiring::Wiring::new(client.clone(), config.clone())
        .await
        .context("wiring")?;
    let leadership =
        kube_support::leader::elect(client.clone(), &wiring::lease_config(&config, identity))
            .await?;
    let namespaces_task = tokio::spawn(namespaces::run(
        cleaners.into_values().collect(),
        client.clone(),
        leadership.subscribe(),
    ));
    let (reports_tx, _reports_rx) = tokio::sync::watch::channel(None);
    let wiring_task = tokio::spawn(wiring::run(
        wiring,
        leadership.subscribe(),
        serving_rx,
        wiring::RECONCILE_INTERVAL,
        reports_tx,
        {
            let mut rx = shutdown_rx.clone();
            async move {
                let _ = rx.changed().await;
            }
        },
    ));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    let _ = shutdown_tx.send(true);
    if let Ok(Err(e)) = wiring_task.await {
        tracing::error!(error = %e, "wiring stopped with an error");
    }
    // The election ends (and releases the Lease) only once every subscriber is gone: the
    // namespace sweep holds one and never returns on its own.
    namespaces_task.abort();
    let _ = namespaces_task.await;
    leadership.release().await;
    Ok(())
}

async fn client_cluster(access: &ClusterAccess) -> anyhow::Result<kube::Client> {
    let config = match access {
        ClusterAccess::InCluster => {
            kube::Config::incluster().context("in-cluster configuration")?
        }
        ClusterAccess::Kubeconfig(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
    };
    Ok(kube::Client::try_from(config)?)
}

/// Waits (at most 30 s) for the first publication of an EndpointSlice peer source. Without
/// one the proxy still starts: requests answer 503 `no_peer` and discovery falls back until
/// the watch publishes.
async fn wait_for_peers(target: &TargetClient) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !target.peers().is_synced() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                target = target.name(),
                "the peer source has not listed the target's endpoints in 30 s; starting without peers"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Asks the target who the proxy is there; warns loudly when it is not the client's identity.
async fn check_identity(target: &TargetClient, expected: &str) {
    let review =
        serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let req = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(bytes::Bytes::from(review.to_string()))
        .expect("valid request");
    let answer = async {
        use http_body_util::BodyExt;
        let resp = target.send(req).await?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(anyhow::Error::msg)?
            .to_bytes();
        if !status.is_success() {
            anyhow::bail!(
                "the target answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let review: SelfSubjectReview = serde_json::from_slice(&body)?;
        anyhow::Ok(
            review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .unwrap_or_default(),
        )
    };
    match answer.await {
        Ok(user) if user == expected => {
            tracing::info!(target = target.name(), user, "target identity confirmed")
        }
        Ok(user) => tracing::warn!(
            target = target.name(),
            user,
            expected,
            "THE TARGET SEES THIS PROXY AS A DIFFERENT USER: RBAC and ownership in the target will not match the client"
        ),
        Err(e) => {
            tracing::warn!(target = target.name(), error = %e, "could not confirm the identity in the target")
        }
    }
}
