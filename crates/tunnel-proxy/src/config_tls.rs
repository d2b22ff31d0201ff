//! The config API over mutual TLS: its own listener, serving only `/config`, with the rustls
//! server config of [`tunnel_config::config_api::server_config`] (client certificate of the
//! controller's CA with the controller's identity, required at the handshake). The certificate
//! files (a mounted Secret: `tls.crt`, `tls.key`, `ca.crt`) are re-read when they change, so a
//! renewed certificate or a rotated CA takes effect without a restart; a set that does not load
//! (a half-written update) leaves the last good one serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};
use tunnel_config::config_api::{ConfigTlsError, server_config};

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
}

fn read(path: &Path) -> Result<String, TlsFilesError> {
    std::fs::read_to_string(path).map_err(|source| TlsFilesError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn load(files: &TlsFiles) -> Result<([u8; 32], rustls::ServerConfig), TlsFilesError> {
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
    Ok((h.finalize().into(), server_config(&cert, &key, &ca)?))
}

impl ReloadingTls {
    /// Loads the files; an error here stops the proxy from starting.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsFilesError> {
        let (digest, config) = load(&files)?;
        Ok(Arc::new(Self {
            files,
            current: ArcSwap::from_pointee(config),
            loaded: Mutex::new(digest),
        }))
    }

    /// Re-reads the files; returns whether a new config took over. A set that does not load
    /// keeps the current one (and is logged).
    pub fn reload(&self) -> bool {
        match load(&self.files) {
            Ok((digest, config)) => {
                let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
                if *loaded == digest {
                    return false;
                }
                self.current.store(Arc::new(config));
                *loaded = digest;
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
