//! `tunnel-proxy` binary: flags, logging, the two listeners, and SIGTERM drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use service_support::logging::{self, LogFormat};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use tunnel_config::compile::parse_duration;
use tunnel_proxy::admin::{self, AdminOptions};
use tunnel_proxy::config_tls::{self, DEFAULT_RELOAD_INTERVAL, ReloadingTls, TlsFiles};
use tunnel_proxy::proxy;
use tunnel_proxy::state::{MIN_MAX_REQUEST_HEAD, State};

/// L7 data plane of the tunnel gateway.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Data-plane listen address (traffic from the connector).
    #[arg(long, env = "TUNNEL_PROXY_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Admin listen address (config API, health, metrics).
    #[arg(
        long,
        env = "TUNNEL_PROXY_ADMIN_LISTEN",
        default_value = "0.0.0.0:8081"
    )]
    admin_listen: SocketAddr,
    /// Config API listen address (mutual TLS; with --config-tls-dir).
    #[arg(
        long,
        env = "TUNNEL_PROXY_CONFIG_LISTEN",
        default_value = "0.0.0.0:8443"
    )]
    config_listen: SocketAddr,
    /// Directory with the config API's `tls.crt`, `tls.key` (serving certificate) and `ca.crt`
    /// (the controller's CA bundle); re-read when the files change.
    /// Without it /config is served in plain HTTP on the admin port (bearer token only).
    #[arg(long, env = "PROXY_CONFIG_TLS_DIR")]
    config_tls_dir: Option<PathBuf>,
    /// Bearer token required on /config. Set but empty refuses to start.
    #[arg(
        long,
        env = "PROXY_AUTH_TOKEN",
        hide_env_values = true,
        conflicts_with = "auth_token_file"
    )]
    auth_token: Option<String>,
    /// File holding the bearer token (trailing newline ignored).
    #[arg(long, env = "PROXY_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// Connector token; only its presence matters here: it switches on tunnel mode, where
    /// /readyz also waits for the connector.
    #[arg(long, env = "TUNNEL_TOKEN", hide_env_values = true)]
    tunnel_token: Option<String>,
    /// The connector's readiness URL (cloudflared `--metrics 127.0.0.1:20241` serves `/ready`).
    #[arg(
        long,
        env = "TUNNEL_PROXY_CONNECTOR_READY_URL",
        default_value = "http://127.0.0.1:20241/ready"
    )]
    connector_ready_url: http::Uri,
    /// After SIGTERM keep serving this long (the connector unregisters meanwhile).
    #[arg(long, env = "PROXY_GRACE_PERIOD", default_value = "30s", value_parser = duration)]
    grace_period: Duration,
    /// After the grace period, wait at most this long for in-flight requests.
    #[arg(long, env = "PROXY_DRAIN_TIMEOUT", default_value = "30s", value_parser = duration)]
    drain_timeout: Duration,
    /// Largest client request head (request line and header fields; HTTP/2: header list), in
    /// bytes or with a `KiB`/`MiB` suffix; larger ones are answered with 431.
    #[arg(long, env = "PROXY_MAX_REQUEST_HEAD", default_value = "64KiB", value_parser = size)]
    max_request_head: usize,
    #[arg(long, env = "PROXY_LOG_FORMAT", default_value = "json")]
    log_format: LogFormat,
}

// Every request allocates a few small objects (read buffers, header maps, futures);
// mimalloc's per-thread free lists serve them in fewer instructions than glibc's malloc.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).ok_or_else(|| format!("`{s}` is not a duration like 30s, 1m, 500ms"))
}

/// A byte count: digits, optionally followed by `KiB` or `MiB`; at least
/// [`MIN_MAX_REQUEST_HEAD`].
fn size(s: &str) -> Result<usize, String> {
    let (digits, unit) = match (s.strip_suffix("KiB"), s.strip_suffix("MiB")) {
        (Some(d), _) => (d, 1024),
        (_, Some(d)) => (d, 1024 * 1024),
        _ => (s, 1),
    };
    let n = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("`{s}` is not a size like 65536, 64KiB, 1MiB"))?;
    if n < MIN_MAX_REQUEST_HEAD {
        return Err(format!("`{s}` is less than {MIN_MAX_REQUEST_HEAD} bytes"));
    }
    Ok(n)
}

fn main() -> anyhow::Result<()> {
    // First, before anything can build a TLS config.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        bail!("a rustls crypto provider was already installed");
    }
    let args = Args::parse();
    logging::init(args.log_format);
    service_support::runtime::build()
        .context("building the tokio runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let auth_token = match (&args.auth_token, &args.auth_token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        ),
        (None, None) => None,
    };
    if auth_token.is_none() {
        warn!("no auth token configured: the config API accepts unauthenticated pushes");
    }
    let tunnel_mode = args.tunnel_token.as_deref().is_some_and(|t| !t.is_empty());
    if !tunnel_mode {
        info!("standalone mode: no tunnel token, /readyz does not wait for a connector");
    }
    // Before anything is announced, so an early SIGTERM is a drain and not a kill.
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let state = Arc::new(State::new().with_max_request_head(args.max_request_head));
    let options = AdminOptions {
        auth_token,
        connector_ready_url: tunnel_mode.then(|| args.connector_ready_url.clone()),
    };
    let router = match &args.config_tls_dir {
        Some(dir) => {
            let expiry = state.metrics().config_tls_expiry().clone();
            let tls = ReloadingTls::load(TlsFiles::in_dir(dir), expiry).with_context(|| {
                format!("loading the config API certificates in {}", dir.display())
            })?;
            let (status, config) = admin::split(state.clone(), options)?;
            let listener = TcpListener::bind(args.config_listen)
                .await
                .with_context(|| format!("binding {}", args.config_listen))?;
            info!(config_api = %listener.local_addr()?, "config API listening (mutual TLS)");
            tls.watch(DEFAULT_RELOAD_INTERVAL);
            tokio::spawn(config_tls::serve(listener, config, tls));
            status
        }
        None => {
            warn!(
                "no --config-tls-dir: the config API is plain HTTP on the admin port; pushes cross the network in clear"
            );
            admin::router(state.clone(), options)?
        }
    };
    let data = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let (admin_addr, admin_task) =
        service_support::admin::serve(args.admin_listen, router, std::future::pending()).await?;
    info!(
        data_plane = %data.local_addr()?,
        admin = %admin_addr,
        "listening"
    );
    tokio::spawn(async move {
        if let Ok(Err(e)) = admin_task.await {
            error!(error = %e, "admin server failed");
        }
    });

    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let grace = args.grace_period;
    let drain_state = state.clone();
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        drain_state.set_draining();
        info!(
            grace_ms = grace.as_millis() as u64,
            "termination signal: serving through the grace period"
        );
        // A second signal cuts the drain short.
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            warn!("second termination signal: exiting now");
            std::process::exit(1);
        });
        tokio::time::sleep(grace).await;
        let _ = drain_tx.send(());
    };
    let serving = proxy::serve(data, state, shutdown);
    let drain_limit = async move {
        if drain_rx.await.is_ok() {
            tokio::time::sleep(args.drain_timeout).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = serving => info!("drained; exiting"),
        () = drain_limit => warn!("drain timeout reached with requests in flight; exiting"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_request_head_takes_bytes_or_kib_or_mib_and_at_least_8_kib() {
        assert_eq!(size("65536"), Ok(65536));
        assert_eq!(size("64KiB"), Ok(65536));
        assert_eq!(size("1MiB"), Ok(1024 * 1024));
        for bad in [
            "4KiB",
            "8191",
            "",
            "KiB",
            "64 KiB",
            "64kb",
            "-1",
            "99999999999999999999",
        ] {
            assert!(size(bad).is_err(), "{bad:?} was accepted");
        }
        let args = Args::parse_from(["tunnel-proxy"]);
        assert_eq!(
            args.max_request_head,
            tunnel_proxy::state::DEFAULT_MAX_REQUEST_HEAD
        );
    }
}
