//! The admin HTTP server every process runs beside its real work: Prometheus metrics on
//! `/metrics`, liveness on `/healthz`, readiness on `/readyz` (503 with the reason until ready).
//!
//! [`router`] serves a [`Registry`] and a [`Readiness`] flag; [`routes`] serves any [`Status`]
//! (a process whose readiness is computed, such as the tunnel proxy's). A process with more
//! admin endpoints merges its own routes into the returned [`Router`]; [`serve`] binds and runs
//! it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// What the admin routes report: the process's metrics and whether it is ready.
pub trait Status: Send + Sync + 'static {
    /// The metrics `/metrics` encodes.
    fn registry(&self) -> &Registry;

    /// `None` when ready, else the reason `/readyz` answers 503 with.
    fn not_ready(&self) -> impl Future<Output = Option<String>> + Send;
}

/// Whether the process is ready, and if not, why.
#[derive(Clone)]
pub struct Readiness(Arc<RwLock<Option<String>>>);

impl Readiness {
    /// Not ready, for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(Arc::new(RwLock::new(Some(reason.into()))))
    }

    /// Ready.
    pub fn set_ready(&self) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Not ready, for `reason`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(reason.into());
    }

    /// `None` when ready, else the reason.
    pub fn reason(&self) -> Option<String> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A [`Registry`] and a [`Readiness`] flag: the [`Status`] of a process that sets its readiness
/// itself.
struct Flagged {
    registry: Arc<Registry>,
    readiness: Readiness,
}

impl Status for Flagged {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    async fn not_ready(&self) -> Option<String> {
        self.readiness.reason()
    }
}

/// The admin routes over `registry` and `readiness`.
pub fn router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    routes(Arc::new(Flagged {
        registry,
        readiness,
    }))
}

/// The admin routes over `status`.
pub fn routes<S: Status>(status: Arc<S>) -> Router {
    Router::new()
        .route("/metrics", get(metrics::<S>))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<S>))
        .with_state(status)
}

async fn metrics<S: Status>(State(s): State<Arc<S>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, s.registry()) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}"),
        ),
    }
}

async fn readyz<S: Status>(State(s): State<Arc<S>>) -> (StatusCode, String) {
    match s.not_ready().await {
        None => (StatusCode::OK, "ok".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        ),
    }
}

/// The admin address cannot be bound.
#[derive(Debug, thiserror::Error)]
#[error("admin server on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr` and serves `router` until `shutdown` resolves. Returns the bound address (useful
/// with port 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>), BindError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| BindError { addr, source })?;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok((bound, task))
}
