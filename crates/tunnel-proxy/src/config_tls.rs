//! The config API over mutual TLS: its own listener, serving only `/config`, with the rustls
//! server config of [`tunnel_config::config_api::server_config`] (client certificate of the
//! controller's CA with the controller's identity, required at the handshake). The certificate
//! files (a mounted Secret: `tls.crt`, `tls.key`, `ca.crt`) are re-read when they change, so a
//! renewed certificate or a rotated CA takes effect without a restart; a set that does not load
//! (a half-written update) leaves the last good one serving. Each load sets
//! `cftunnel_proxy_config_tls_expiry_timestamp_seconds{kind}` (`serving`, `client_ca`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};
use tunnel_config::config_api::{ConfigTlsError, not_after, server_config};

use crate::metrics::TlsKindLabel;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are checked for a change.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The serving certificate, its key and the CA bundle that verifies the controller, PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

impl TlsFiles {
    /// The files of a mounted `kubernetes.io/tls` Secret with a `ca.crt` key.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: dir.join("ca.crt"),
        }
    }
}

/// The files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFilesError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Invalid(#[from] ConfigTlsError),
}

/// The current server config, replaced when the files change.
pub struct ReloadingTls {
    files: TlsFiles,
    current: ArcSwap<rustls::ServerConfig>,
    /// Digest of the files the current config was built from.
    loaded: Mutex<[u8; 32]>,
    expiry: Family<TlsKindLabel, Gauge>,
}

/// A loaded set: its digest, config and expiries (serving, client CA).
struct Loaded {
    digest: [u8; 32],
    config: rustls::ServerConfig,
    expiry: [(&'static str, Option<i64>); 2],
}

fn read(path: &Path) -> Result<String, TlsFilesError> {
    std::fs::read_to_string(path).map_err(|source| TlsFilesError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn load(files: &TlsFiles) -> Result<Loaded, TlsFilesError> {
    let (cert, key, ca) = (
        read(&files.cert)?,
        read(&files.key)?,
        read(&files.client_ca)?,
    );
    let mut h = Sha256::new();
    for part in [&cert, &key, &ca] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    Ok(Loaded {
        digest: h.finalize().into(),
        config: server_config(&cert, &key, &ca)?,
        expiry: [("serving", not_after(&cert)), ("client_ca", not_after(&ca))],
    })
}

impl ReloadingTls {
    /// Loads the files; an error here stops the proxy from starting. `expiry` is the gauge
    /// of [`crate::metrics::Metrics::config_tls_expiry`].
    pub fn load(
        files: TlsFiles,
        expiry: Family<TlsKindLabel, Gauge>,
    ) -> Result<Arc<Self>, TlsFilesError> {
        let loaded = load(&files)?;
        let this = Self {
            files,
            current: ArcSwap::from_pointee(loaded.config),
            loaded: Mutex::new(loaded.digest),
            expiry,
        };
        this.set_expiry(&loaded.expiry);
        Ok(Arc::new(this))
    }

    fn set_expiry(&self, expiry: &[(&'static str, Option<i64>)]) {
        for (kind, at) in expiry {
            self.expiry
                .get_or_create(&TlsKindLabel { kind })
                .set(at.unwrap_or_default());
        }
    }

    /// Re-reads the files; returns whether a new config took over. A set that does not load
    /// keeps the current one (and is logged).
    pub fn reload(&self) -> bool {
        match load(&self.files) {
            Ok(new) => {
                let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
                if *loaded == new.digest {
                    return false;
                }
                self.current.store(Arc::new(new.config));
                *loaded = new.digest;
                self.set_expiry(&new.expiry);
                info!("config API certificate files changed; reloaded");
                true
            }
            Err(e) => {
                warn!(error = %e, "config API certificate files do not load; keeping the last good ones");
                false
            }
        }
    }

    /// Checks the files every `every`, for as long as the returned task runs.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let that = this.clone();
                let _ = tokio::task::spawn_blocking(move || that.reload()).await;
            }
        })
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }
}

/// Serves `router` over TLS on `listener` until the task is dropped or aborted. Each
/// connection gets the config current when it was accepted.
pub async fn serve(listener: TcpListener, router: Router, tls: Arc<ReloadingTls>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "config API accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = tls.acceptor();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        warn!(%peer, error = %e, "config API TLS handshake refused");
                        return;
                    }
                    Err(_) => {
                        debug!(%peer, "config API TLS handshake timed out");
                        return;
                    }
                };
            let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .http1_only()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = conn {
                debug!(%peer, error = %e, "config API connection ended with an error");
            }
        });
    }
}
