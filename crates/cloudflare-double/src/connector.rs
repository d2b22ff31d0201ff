//! The connector stand-in: what the `cloudflared` image runs in this project's harness.
//!
//! [`run`] dials the double's connector port, registers with the token's tunnel and secret
//! ([`crate::wire`]), then serves the edge's requests on that connection, relaying each to the
//! ingress rule's service URL (sent by the edge in [`SERVICE_HEADER`]) from its own network
//! namespace. Like cloudflared's first tunnel connection, a refused registration
//! (`Unauthorized: ...`) or an unreachable edge is retried with back-off `retries` times, then
//! [`run`] fails and the process exits non-zero; once registered, a lost connection is retried
//! for as long as it takes. `/ready` on the metrics address answers 200 while registered, 503 otherwise. When
//! `shutdown` resolves, the connection is closed to new requests (HTTP/2 GOAWAY: the edge stops
//! using it), requests in flight get up to the grace period, then [`run`] returns.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cloudflare_api::ConnectorToken;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

use crate::upgrade::{self, UPGRADE_HEADER};
use crate::wire::{self, Register, Registered, SERVICE_HEADER};

/// Where the stand-in dials when neither `--edge` nor `TUNNEL_EDGE` says otherwise: a name that
/// never resolves in public DNS (`.invalid`), which the harness maps in `/etc/hosts`.
pub const DEFAULT_EDGE: &str = "edge.cloudflare-double.invalid:7844";

/// First and largest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

type RelayBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// The client towards origins (HTTP/1.1, any body: a relayed one, or none for an upgrade).
type OriginClient = Client<HttpConnector, RelayBody>;

/// What the stand-in needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port` of the double's connector port.
    pub edge: String,
    /// The connector token, as given.
    pub token: String,
    /// Address of the metrics server serving `/ready`, if any.
    pub metrics: Option<String>,
    /// How long requests in flight may take after shutdown begins.
    pub grace_period: Duration,
    /// Failed attempts retried before the first registration; then [`run`] gives up.
    pub retries: u32,
}

/// Why the stand-in stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The token could not be parsed.
    #[error("invalid tunnel token: {0}")]
    Token(#[from] cloudflare_api::TokenError),
    /// The edge refused the registration (unknown tunnel, wrong secret) on the last attempt.
    #[error("Register tunnel error from server side: {0}")]
    Refused(String),
    /// The edge could not be reached on the last attempt.
    #[error("Unable to establish connection with the edge: {0}")]
    Unreachable(String),
    /// The metrics address could not be bound.
    #[error("binding the metrics server on {0}: {1}")]
    Metrics(String, std::io::Error),
}

/// Registration state shared with the metrics server.
struct Status {
    connector_id: String,
    connections: AtomicUsize,
    draining: AtomicBool,
}

/// Parses a Go duration (`30s`, `1m30s`, `500ms`, `0`), the format of cloudflared's flags.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?} (use e.g. 30s, 1m30s, 500ms)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| bad())?;
    }
    Ok(total)
}

/// Runs the connector until `shutdown` resolves (then drains), or fails when no first
/// registration succeeded within `retries` retries.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ConnectorError> {
    ConnectorToken::parse(&config.token)?;
    let connector_id = uuid();
    let status = Arc::new(Status {
        connector_id: connector_id.clone(),
        connections: AtomicUsize::new(0),
        draining: AtomicBool::new(false),
    });
    if let Some(addr) = &config.metrics {
        let listener = TcpListener::bind(addr.as_str())
            .await
            .map_err(|e| ConnectorError::Metrics(addr.clone(), e))?;
        tracing::info!(addr = %listener.local_addr().map_or(addr.clone(), |a| a.to_string()), "Starting metrics server");
        tokio::spawn(serve_metrics(listener, status.clone()));
    }
    // Small request and response parts must not wait for Nagle's algorithm (40 ms per request
    // on loopback otherwise), here and on the edge connection.
    let mut origin = HttpConnector::new();
    origin.set_nodelay(true);
    let client: OriginClient = Client::builder(TokioExecutor::new()).build(origin);
    tokio::pin!(shutdown);
    let mut backoff = BACKOFF_MIN;
    let mut registered_once = false;
    let mut failures = 0u32;
    loop {
        let attempt = tokio::select! {
            r = connect(&config, &connector_id) => r,
            () = &mut shutdown => {
                tracing::info!("Initiating shutdown before a connection was registered");
                return Ok(());
            }
        };
        let (stream, connection_id) = match attempt {
            Ok(pair) => pair,
            Err(failure) => {
                let error = match failure {
                    Attempt::Refused(reason) => {
                        tracing::error!(error = %reason, "Register tunnel error from server side");
                        ConnectorError::Refused(reason)
                    }
                    Attempt::Failed(reason) => {
                        tracing::warn!(edge = %config.edge, error = %reason, "Unable to establish connection with the edge");
                        ConnectorError::Unreachable(reason)
                    }
                };
                // Until the first registration, failures count against `retries` (cloudflared's
                // first tunnel connection); afterwards the connector keeps retrying.
                if !registered_once {
                    failures += 1;
                    if failures > config.retries {
                        return Err(error);
                    }
                }
                tracing::info!("Retrying connection in up to {backoff:?}");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = &mut shutdown => return Ok(()),
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        registered_once = true;
        backoff = BACKOFF_MIN;
        tracing::info!(connection = %connection_id, connector = %connector_id, edge = %config.edge, "Registered tunnel connection");
        status.connections.fetch_add(1, Ordering::SeqCst);
        let relay_client = client.clone();
        let svc = service_fn(move |req| relay(relay_client.clone(), req));
        let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), svc);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => {
                status.connections.fetch_sub(1, Ordering::SeqCst);
                tracing::warn!(connection = %connection_id, error = ?r.err(), "Connection to the edge lost; reconnecting");
            }
            () = &mut shutdown => {
                status.draining.store(true, Ordering::SeqCst);
                status.connections.fetch_sub(1, Ordering::SeqCst);
                tracing::info!(grace_period = ?config.grace_period, "Initiating graceful shutdown: unregistered from the edge, finishing requests in flight");
                conn.as_mut().graceful_shutdown();
                match tokio::time::timeout(config.grace_period, conn).await {
                    Ok(_) => tracing::info!("All requests in flight finished"),
                    Err(_) => tracing::warn!("Grace period expired with requests in flight; closing"),
                }
                return Ok(());
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = &mut shutdown => return Ok(()),
        }
    }
}

enum Attempt {
    Refused(String),
    Failed(String),
}

async fn connect(config: &Config, connector_id: &str) -> Result<(TcpStream, String), Attempt> {
    let failed = |e: std::io::Error| Attempt::Failed(e.to_string());
    let mut stream = TcpStream::connect(config.edge.as_str())
        .await
        .map_err(failed)?;
    stream.set_nodelay(true).map_err(failed)?;
    let register = Register {
        token: config.token.clone(),
        connector_id: connector_id.to_string(),
    };
    wire::write_line(&mut stream, &register)
        .await
        .map_err(failed)?;
    let line = wire::read_line(&mut stream).await.map_err(failed)?;
    let answer: Registered = serde_json::from_slice(&line)
        .map_err(|e| Attempt::Failed(format!("unreadable registration answer: {e}")))?;
    if !answer.ok {
        return Err(Attempt::Refused(
            answer
                .error
                .unwrap_or_else(|| "registration refused".into()),
        ));
    }
    Ok((stream, answer.connection_id.unwrap_or_default()))
}

fn text(status: StatusCode, body: String) -> Response<RelayBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Relays one request from the edge to the rule's service, with the visitor's `Host`.
async fn relay(
    client: OriginClient,
    req: Request<Incoming>,
) -> Result<Response<RelayBody>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let Some(service) = parts
        .headers
        .remove(SERVICE_HEADER)
        .and_then(|v| v.to_str().ok().map(str::to_string))
    else {
        return Ok(text(
            StatusCode::BAD_GATEWAY,
            "the edge named no service\n".into(),
        ));
    };
    let origin: Uri = match service.parse() {
        Ok(u) => u,
        Err(_) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("bad service {service:?}\n"),
            ));
        }
    };
    let (Some(scheme), Some(authority)) = (origin.scheme_str(), origin.authority()) else {
        return Ok(text(
            StatusCode::BAD_GATEWAY,
            format!("bad service {service:?}\n"),
        ));
    };
    if scheme != "http" {
        return Ok(text(
            StatusCode::BAD_GATEWAY,
            format!("the connector stand-in relays only http:// services, not {service:?}\n"),
        ));
    }
    let host = parts.uri.authority().map(|a| a.to_string());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match format!("http://{authority}{path}").parse() {
        Ok(u) => u,
        Err(_) => return Ok(text(StatusCode::BAD_GATEWAY, "bad request path\n".into())),
    };
    parts.version = hyper::Version::HTTP_11;
    if let Some(host) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
        parts.headers.insert(header::HOST, host);
    }
    if parts.headers.contains_key(UPGRADE_HEADER) {
        upgrade::set_upgrade_headers(&mut parts.headers);
        return Ok(relay_websocket(&client, parts, body, &service).await);
    }
    match client
        .request(Request::from_parts(parts, body.boxed_unsync()))
        .await
    {
        Ok(resp) => Ok(resp.map(BodyExt::boxed_unsync)),
        Err(e) => {
            tracing::error!(%service, error = %e, "Unable to reach the origin service");
            Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("Unable to reach the origin service {service}\n"),
            ))
        }
    }
}

/// A WebSocket the edge marked ([`UPGRADE_HEADER`]): the HTTP/1.1 upgrade request to the origin;
/// when it switches protocols, `200` with the marker and the origin's bytes as the body, and the
/// edge's body (the visitor's bytes) written to the origin. Any other answer goes back as is.
async fn relay_websocket(
    client: &OriginClient,
    parts: hyper::http::request::Parts,
    from_edge: Incoming,
    service: &str,
) -> Response<RelayBody> {
    let empty = Empty::new()
        .map_err(|never: Infallible| match never {})
        .boxed_unsync();
    let mut resp = match client.request(Request::from_parts(parts, empty)).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(%service, error = %e, "Unable to reach the origin service");
            return text(
                StatusCode::BAD_GATEWAY,
                format!("Unable to reach the origin service {service}\n"),
            );
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return resp.map(BodyExt::boxed_unsync);
    }
    let origin = hyper::upgrade::on(&mut resp);
    let (mut parts, _) = resp.into_parts();
    parts.status = StatusCode::OK;
    upgrade::strip_upgrade_headers(&mut parts.headers);
    parts
        .headers
        .insert(UPGRADE_HEADER, HeaderValue::from_static("websocket"));
    let (to_edge, body) = upgrade::channel();
    tokio::spawn(async move {
        match origin.await {
            Ok(io) => upgrade::splice(io, to_edge, from_edge),
            Err(e) => tracing::warn!(error = %e, "the origin's WebSocket was not handed over"),
        }
    });
    Response::from_parts(parts, body)
}

async fn serve_metrics(listener: TcpListener, status: Arc<Status>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let status = status.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let status = status.clone();
                async move { Ok::<_, Infallible>(metrics_answer(&status, req.uri().path())) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// cloudflared's `/ready`: `{"status", "readyConnections", "connectorId"}`, 200 with at least one
/// registered connection, else 503.
fn metrics_answer(status: &Status, path: &str) -> Response<RelayBody> {
    if path != "/ready" {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    }
    let ready = if status.draining.load(Ordering::SeqCst) {
        0
    } else {
        status.connections.load(Ordering::SeqCst)
    };
    let code = if ready > 0 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({
        "status": code.as_u16(),
        "readyConnections": ready,
        "connectorId": status.connector_id,
    })
    .to_string();
    let mut resp = text(code, body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn uuid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (text, want) in [
            ("30s", Duration::from_secs(30)),
            ("0", Duration::ZERO),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
        ] {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "30", "s", "10x", "-1s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
