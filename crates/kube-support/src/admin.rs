//! The admin HTTP server every process runs beside its real work: Prometheus metrics on
//! `/metrics`, liveness on `/healthz`, readiness on `/readyz` (503 with the reason until ready).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::Error;

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
        *self.0.write().expect("readiness lock") = None;
    }

    /// Not ready, for `reason`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.0.write().expect("readiness lock") = Some(reason.into());
    }

    /// `None` when ready, else the reason.
    pub fn reason(&self) -> Option<String> {
        self.0.read().expect("readiness lock").clone()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// The admin routes over `registry` and `readiness`.
pub fn router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState {
            registry,
            readiness,
        })
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
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

async fn readyz(State(s): State<AdminState>) -> (StatusCode, String) {
    match s.readiness.reason() {
        None => (StatusCode::OK, "ok".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        ),
    }
}

/// Binds `addr` and serves `router` until `shutdown` resolves. Returns the bound address (useful
/// with port 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok((bound, task))
}
