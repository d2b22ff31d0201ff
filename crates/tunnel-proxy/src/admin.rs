//! The admin port: config API (`PUT`/`PATCH`/`GET /config`; `PATCH` takes a delta on top of
//! the loaded version) merged into the shared admin routes
//! (`/healthz`, `/readyz`, `/metrics` from [`service_support::admin`]) with [`router`], or kept
//! apart with [`split`] (the config API then served over mutual TLS by
//! [`crate::config_tls`] on a port of its own, the admin port keeping only the status routes). Ready once a config is
//! loaded, while not draining, and in tunnel mode once the connector answers its readiness URL.
//!
//! Authentication: when a token is configured, `/config` requires
//! `Authorization: Bearer <token>`. Per RFC 7235 the scheme name is case-insensitive
//! (`bearer` works) while the token is compared exactly, in constant time (SHA-256 digests
//! compared with `subtle`, so neither content nor length leaks through timing). Health,
//! readiness and metrics are never authenticated.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State as AxumState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_client::registry::Registry;
use serde_json::json;
use service_support::admin::{Status, routes};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::{info, warn};

use crate::state::{ApplyError, State};

/// Largest accepted config document: room for TG-15's 10,000 routes on one plane (3,000 simple
/// routes are about 3.5 MiB of JSON), still a bound on what one push may make the proxy buffer.
pub const MAX_CONFIG_BYTES: usize = 32 * 1024 * 1024;
const READY_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Settings of the admin API.
#[derive(Debug, Clone, Default)]
pub struct AdminOptions {
    /// `None` = no authentication (standalone/dev use).
    pub auth_token: Option<String>,
    /// With a tunnel token: the connector's readiness URL (e.g. cloudflared's
    /// `http://127.0.0.1:20241/ready`); `/readyz` also waits for it to answer 200.
    pub connector_ready_url: Option<http::Uri>,
}

/// The admin API cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("the configured auth token is empty; unset it to disable authentication")]
    EmptyToken,
}

struct Admin {
    state: Arc<State>,
    token_digest: Option<[u8; 32]>,
    ready_url: Option<http::Uri>,
    probe: Client<HttpConnector, Empty<Bytes>>,
}

/// Builds the admin router: the config API beside the shared `/healthz`, `/readyz` and
/// `/metrics` ([`service_support::admin`]).
pub fn router(state: Arc<State>, options: AdminOptions) -> Result<Router, AdminError> {
    let (status, config) = split(state, options)?;
    Ok(status.merge(config))
}

/// The status routes (`/healthz`, `/readyz`, `/metrics`) and the config API (`/config`) as two
/// routers, for two listeners.
pub fn split(state: Arc<State>, options: AdminOptions) -> Result<(Router, Router), AdminError> {
    let token_digest = match options.auth_token {
        Some(t) if t.is_empty() => return Err(AdminError::EmptyToken),
        Some(t) => Some(Sha256::digest(t.as_bytes()).into()),
        None => None,
    };
    let admin = Arc::new(Admin {
        state,
        token_digest,
        ready_url: options.connector_ready_url,
        probe: Client::builder(TokioExecutor::new()).build_http(),
    });
    Ok((
        routes(admin.clone()),
        Router::new()
            .route(
                "/config",
                get(get_config).put(put_config).patch(patch_config),
            )
            .with_state(admin),
    ))
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, axum::Json(json!({ "error": message.to_string() }))).into_response()
}

impl Admin {
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim_start_matches(' '))
        else {
            return false;
        };
        let got: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        got.ct_eq(expected).into()
    }

    fn unauthorized() -> Response {
        let mut resp = error(StatusCode::UNAUTHORIZED, "missing or invalid bearer token");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        resp
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

async fn put_config(AxumState(admin): AxumState<Arc<Admin>>, req: Request) -> Response {
    receive(admin, req, State::apply).await
}

/// A delta ([`tunnel_config::delta`]): applied only on top of the exact version it names, else
/// 409 with the `loadedVersion`, and the sender pushes the whole document instead.
async fn patch_config(AxumState(admin): AxumState<Arc<Admin>>, req: Request) -> Response {
    receive(admin, req, State::apply_delta).await
}

/// A push of either kind: authenticated, JSON, bounded in size, compiled off the async workers.
async fn receive(
    admin: Arc<Admin>,
    req: Request,
    apply: fn(&State, &[u8]) -> Result<u64, ApplyError>,
) -> Response {
    if !admin.authorized(req.headers()) {
        return Admin::unauthorized();
    }
    if !is_json(req.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_CONFIG_BYTES as u64) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "config larger than 32 MiB");
    }
    let body = match Limited::new(req.into_body(), MAX_CONFIG_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, "config larger than 32 MiB");
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading body: {e}")),
    };
    let state = admin.state.clone();
    // Compilation parses certificates and regexes: keep it off the async workers.
    let outcome = tokio::task::spawn_blocking(move || apply(&state, &body)).await;
    match outcome {
        Ok(Ok(version)) => {
            info!(version, "config loaded");
            (StatusCode::OK, axum::Json(json!({ "version": version }))).into_response()
        }
        Ok(Err(e @ (ApplyError::Invalid(_) | ApplyError::BadDelta(_)))) => {
            warn!(error = %e, "config refused");
            error(StatusCode::BAD_REQUEST, e)
        }
        Ok(Err(e @ (ApplyError::Stale { loaded, .. } | ApplyError::Base { loaded, .. }))) => {
            info!(error = %e, "stale config refused");
            (
                StatusCode::CONFLICT,
                axum::Json(json!({ "error": e.to_string(), "loadedVersion": loaded })),
            )
                .into_response()
        }
        Err(e) => {
            warn!(error = %e, "config compilation task failed");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "config compilation failed",
            )
        }
    }
}

/// The loaded document with private keys redacted.
async fn get_config(AxumState(admin): AxumState<Arc<Admin>>, headers: HeaderMap) -> Response {
    if !admin.authorized(&headers) {
        return Admin::unauthorized();
    }
    match admin.state.document() {
        Some(doc) => axum::Json(doc.redacted()).into_response(),
        None => error(StatusCode::NOT_FOUND, "no config loaded"),
    }
}

impl Status for Admin {
    fn registry(&self) -> &Registry {
        self.state.registry()
    }

    async fn not_ready(&self) -> Option<String> {
        if self.state.draining() {
            return Some("draining".into());
        }
        if self.state.table().is_none() {
            return Some("no config loaded".into());
        }
        let url = self.ready_url.as_ref()?;
        match tokio::time::timeout(READY_PROBE_TIMEOUT, self.probe.get(url.clone())).await {
            Ok(Ok(resp)) if resp.status() == StatusCode::OK => None,
            Ok(Ok(resp)) => Some(format!("connector not ready: {}", resp.status())),
            Ok(Err(e)) => Some(format!("connector not ready: {e}")),
            Err(_) => Some("connector readiness probe timed out".into()),
        }
    }
}
