//! The edge: where a visitor's request meets Cloudflare, and the port connectors register on.
//!
//! The edge listener takes any `Host`, picks the tunnel whose current ingress document claims it
//! ([`matcher::select_tunnel`]), finds the first matching rule ([`matcher::Ingress::find`]) and
//! either answers an `http_status:NNN` rule itself or forwards the request (method, path, query,
//! headers, streamed body both ways) over one of the tunnel's registered connections, round robin
//! over the live ones. No live connection: 530 with the 1033 error page. No tunnel claims the
//! host: 404 (on Cloudflare the name would not resolve at all), unless a DNS fallback tunnel is
//! set ([`crate::CloudflareDouble::route_unclaimed_hosts_to`]): the zone's operator pointed every
//! other name at that tunnel (a proxied CNAME per name, made outside the controller), so its
//! document's rules (its catch-all, for a host no rule names) decide.
//!
//! The connector port accepts registrations ([`crate::wire`]): the token's tunnel must exist in
//! the token's account and its secret must be the tunnel's current one. A rotated secret leaves
//! registered connections alone; only new registrations need the new one.

pub mod matcher;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use cloudflare_api::ConnectorToken;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http2 as client_h2;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::state::{Shared, World, lock};
use crate::upgrade;
use crate::wire::{self, Register, Registered, SERVICE_HEADER};
use matcher::{Ingress, normalize_host, select_tunnel};

/// Response header naming the registered connection that carried the request (a test
/// observable of the double; Cloudflare sends nothing like it).
pub const CONNECTION_HEADER: &str = "cf-double-connection";

/// Body of the edge's answers (a connector's streamed response or the edge's own page) and of
/// the requests it relays (a visitor's streamed body, or a WebSocket's bytes).
type EdgeBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// How long a dialer has to send its registration line.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

struct Conn {
    id: u64,
    sender: client_h2::SendRequest<EdgeBody>,
}

#[derive(Default)]
struct TunnelConns {
    next: usize,
    conns: Vec<Conn>,
}

/// Compiled ingress documents, recompiled when a tunnel's version moves.
type IngressCache = HashMap<String, (u64, Option<Arc<Ingress>>)>;

/// The edge's state: registered connections per tunnel and the compiled documents.
pub(crate) struct Edge {
    world: Shared,
    tunnels: Mutex<HashMap<String, TunnelConns>>,
    cache: Mutex<IngressCache>,
    /// The tunnel that hosts no document claims resolve to (the operator's own DNS records).
    unclaimed: Mutex<Option<String>>,
    next_id: AtomicU64,
    shutdown: watch::Receiver<bool>,
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Edge {
    pub(crate) fn new(world: Shared, shutdown: watch::Receiver<bool>) -> Arc<Edge> {
        Arc::new(Edge {
            world,
            tunnels: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            unclaimed: Mutex::new(None),
            next_id: AtomicU64::new(1),
            shutdown,
        })
    }

    /// Live registered connections of a tunnel.
    pub(crate) fn live_connections(&self, tunnel_id: &str) -> usize {
        guard(&self.tunnels)
            .get(&tunnel_id.to_ascii_lowercase())
            .map_or(0, |t| {
                t.conns.iter().filter(|c| !c.sender.is_closed()).count()
            })
    }

    /// Sends hosts that no tunnel's document claims to `tunnel_id` (`None`: answer 404).
    pub(crate) fn route_unclaimed_hosts_to(&self, tunnel_id: Option<&str>) {
        *guard(&self.unclaimed) = tunnel_id.map(str::to_ascii_lowercase);
    }

    /// The tunnel serving `host` (normalized) and its document: the one whose rules claim it
    /// best, else the DNS fallback tunnel if it has a document.
    fn select(&self, host: &str) -> Option<(String, Arc<Ingress>)> {
        let documents = self.documents();
        let chosen = match select_tunnel(documents.iter().map(|(id, i)| (id, &**i)), host) {
            Some((id, _)) => id.clone(),
            None => guard(&self.unclaimed).clone()?,
        };
        documents.into_iter().find(|(id, _)| *id == chosen)
    }

    /// Every tunnel with a usable document, in account then tunnel order.
    fn documents(&self) -> Vec<(String, Arc<Ingress>)> {
        let world = lock(&self.world);
        let mut cache = guard(&self.cache);
        let mut out = Vec::new();
        for account in world.accounts.values() {
            for t in account.tunnels.values() {
                let Some(config) = &t.config else { continue };
                let entry = cache.entry(t.id.clone()).or_insert((u64::MAX, None));
                if entry.0 != t.version {
                    let compiled = match Ingress::from_config(config) {
                        Ok(i) => Some(Arc::new(i)),
                        Err(e) => {
                            tracing::warn!(tunnel = %t.id, version = t.version, error = %e, "edge ignores the tunnel's document");
                            None
                        }
                    };
                    *entry = (t.version, compiled);
                }
                if let Some(ingress) = &entry.1 {
                    out.push((t.id.clone(), ingress.clone()));
                }
            }
        }
        out
    }

    /// The tunnel's live connections, starting at the round-robin position.
    fn pick(&self, tunnel_id: &str) -> Vec<(u64, client_h2::SendRequest<EdgeBody>)> {
        let mut tunnels = guard(&self.tunnels);
        let Some(t) = tunnels.get_mut(tunnel_id) else {
            return Vec::new();
        };
        t.conns.retain(|c| !c.sender.is_closed());
        if t.conns.is_empty() {
            return Vec::new();
        }
        let start = t.next % t.conns.len();
        t.next = t.next.wrapping_add(1);
        let n = t.conns.len();
        (0..n)
            .map(|i| &t.conns[(start + i) % n])
            .map(|c| (c.id, c.sender.clone()))
            .collect()
    }

    fn remove(&self, tunnel_id: &str, id: u64) {
        if let Some(t) = guard(&self.tunnels).get_mut(tunnel_id) {
            t.conns.retain(|c| c.id != id);
        }
    }
}

/// Checks a registration against the world: the tunnel, then its current secret.
fn authorize(world: &World, token: &str) -> Result<String, &'static str> {
    let token = ConnectorToken::parse(token).map_err(|_| "Unauthorized: Invalid tunnel token")?;
    let current = world
        .tunnel_token(token.account_tag(), token.tunnel_id())
        .map_err(|_| "Unauthorized: Failed to get tunnel")?;
    let current =
        ConnectorToken::parse(&current).map_err(|_| "Unauthorized: Failed to get tunnel")?;
    if !token.secret_matches(&current) {
        return Err("Unauthorized: Invalid tunnel secret");
    }
    Ok(token.tunnel_id().to_string())
}

pub(crate) fn spawn_connector_port(listener: TcpListener, edge: Arc<Edge>) {
    tokio::spawn(async move {
        let mut stop = edge.shutdown.clone();
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "connector accept failed");
                        continue;
                    }
                },
                _ = stop.wait_for(|s| *s) => return,
            };
            tokio::spawn(register(stream, peer, edge.clone()));
        }
    });
}

async fn register(mut stream: TcpStream, peer: SocketAddr, edge: Arc<Edge>) {
    // No Nagle delay for the small frames of relayed requests.
    let _ = stream.set_nodelay(true);
    let line = match tokio::time::timeout(REGISTER_TIMEOUT, wire::read_line(&mut stream)).await {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "registration not read");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "no registration within the timeout");
            return;
        }
    };
    let verdict = match serde_json::from_slice::<Register>(&line) {
        Ok(reg) => authorize(&lock(&edge.world), &reg.token).map(|t| (t, reg.connector_id)),
        Err(_) => Err("malformed registration"),
    };
    let (tunnel_id, connector_id) = match verdict {
        Ok(v) => v,
        Err(reason) => {
            tracing::info!(%peer, reason, "connector registration refused");
            let answer = Registered {
                ok: false,
                connection_id: None,
                error: Some(reason.to_string()),
            };
            let _ = wire::write_line(&mut stream, &answer).await;
            return;
        }
    };
    let id = edge.next_id.fetch_add(1, Ordering::Relaxed);
    let answer = Registered {
        ok: true,
        connection_id: Some(format!("{id}")),
        error: None,
    };
    if wire::write_line(&mut stream, &answer).await.is_err() {
        return;
    }
    let (sender, conn) = match client_h2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
    {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "HTTP/2 with the connector failed");
            return;
        }
    };
    guard(&edge.tunnels)
        .entry(tunnel_id.clone())
        .or_default()
        .conns
        .push(Conn { id, sender });
    tracing::info!(%peer, tunnel = %tunnel_id, connector = %connector_id, connection = id, "connector registered");
    let mut stop = edge.shutdown.clone();
    tokio::select! {
        r = conn => if let Err(e) = r {
            tracing::debug!(connection = id, error = %e, "connector connection ended");
        },
        _ = stop.wait_for(|s| *s) => {}
    }
    edge.remove(&tunnel_id, id);
    tracing::info!(tunnel = %tunnel_id, connection = id, "connector connection closed");
}

pub(crate) fn spawn_edge(listener: TcpListener, edge: Arc<Edge>) {
    tokio::spawn(async move {
        let mut stop = edge.shutdown.clone();
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "edge accept failed");
                        continue;
                    }
                },
                _ = stop.wait_for(|s| *s) => return,
            };
            let _ = stream.set_nodelay(true);
            let edge = edge.clone();
            tokio::spawn(async move {
                let mut stop = edge.shutdown.clone();
                let svc_edge = edge.clone();
                let svc = service_fn(move |req| serve(svc_edge.clone(), peer, req));
                let conn = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades();
                tokio::select! {
                    r = conn => if let Err(e) = r {
                        tracing::debug!(error = %e, %peer, "edge connection ended");
                    },
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        }
    });
}

/// A `Host` value that is a hostname or IP literal with an optional port, nothing else: the
/// value also becomes the relayed request's authority, so a `/`, `@` or space in it could
/// make the origin see a different host than the one the tunnel was chosen for.
fn is_host_and_port(value: &str) -> bool {
    let (host, port) = match value.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) => (addr, rest.strip_prefix(':')),
            None => return false,
        },
        None => match value.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (value, None),
        },
    };
    let host_ok = if value.starts_with('[') {
        host.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    host_ok && port_ok && (value.starts_with('[') || value.matches(':').count() <= 1)
}

fn ray_id() -> String {
    format!("{:016x}-DBL", rand::random::<u64>())
}

fn page(
    status: StatusCode,
    ray: &str,
    content_type: &'static str,
    body: String,
) -> Response<EdgeBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    stamp(h, ray);
    resp
}

fn stamp(h: &mut hyper::HeaderMap, ray: &str) {
    h.insert(header::SERVER, HeaderValue::from_static("cloudflare"));
    if let Ok(v) = HeaderValue::from_str(ray) {
        h.insert("cf-ray", v);
    }
}

/// Cloudflare's "Error 1033: Cloudflare Tunnel error" page, answered with 530 when the tunnel
/// has no healthy connector.
fn error_1033(host: &str, ray: &str) -> Response<EdgeBody> {
    let host = html_escape(host);
    let body = format!(
        "<!DOCTYPE html>\n<html><head><title>Cloudflare Tunnel error | {host} | Cloudflare</title></head>\n\
         <body><h1><span>Error</span> <span>1033</span></h1>\n<h2>Cloudflare Tunnel error</h2>\n\
         <p>You've requested a page on a website ({host}) that is on the Cloudflare network. \
         The host is configured as a Cloudflare Tunnel, and Cloudflare is currently unable to resolve it.</p>\n\
         <p>Cloudflare Ray ID: <strong>{ray}</strong></p></body></html>\n"
    );
    page(
        StatusCode::from_u16(530).expect("530 is a status"),
        ray,
        "text/html; charset=UTF-8",
        body,
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn serve(
    edge: Arc<Edge>,
    peer: SocketAddr,
    mut req: Request<Incoming>,
) -> Result<Response<EdgeBody>, Infallible> {
    let ray = ray_id();
    let raw_host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    let Some(raw_host) = raw_host.filter(|h| is_host_and_port(h)) else {
        return Ok(page(
            StatusCode::BAD_REQUEST,
            &ray,
            "text/plain; charset=utf-8",
            "error code: 400 (missing or malformed Host)\n".into(),
        ));
    };
    let host = normalize_host(&raw_host);
    let path = req.uri().path().to_string();

    let Some((tunnel_id, ingress)) = edge.select(&host) else {
        tracing::debug!(%host, "no tunnel claims the host");
        return Ok(page(
            StatusCode::NOT_FOUND,
            &ray,
            "text/plain; charset=utf-8",
            format!(
                "no ingress rule of any tunnel names {host} (on Cloudflare this hostname would not resolve)\n"
            ),
        ));
    };
    let service = ingress.find(&host, &path).service.clone();

    let conns = edge.pick(&tunnel_id);
    if conns.is_empty() {
        tracing::info!(%host, tunnel = %tunnel_id, "no live connector: 1033");
        return Ok(error_1033(&host, &ray));
    }
    if let Some(code) = service.strip_prefix("http_status:") {
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::BAD_GATEWAY);
        return Ok(page(
            status,
            &ray,
            "text/plain; charset=utf-8",
            String::new(),
        ));
    }

    let visitor_upgrade =
        upgrade::is_websocket_request(req.headers()).then(|| hyper::upgrade::on(&mut req));
    let mut req = match to_connector_request(req, &raw_host, &service, peer, &ray) {
        Ok(r) => r,
        Err(reason) => {
            return Ok(page(
                StatusCode::BAD_REQUEST,
                &ray,
                "text/plain; charset=utf-8",
                format!("{reason}\n"),
            ));
        }
    };
    // A WebSocket's bytes from the visitor go to the connector in the request's body.
    let mut to_connector = None;
    if visitor_upgrade.is_some() {
        let (tx, body) = upgrade::channel();
        upgrade::strip_upgrade_headers(req.headers_mut());
        req.headers_mut().insert(
            upgrade::UPGRADE_HEADER,
            HeaderValue::from_static("websocket"),
        );
        *req.body_mut() = body;
        to_connector = Some(tx);
    }
    // A request without a body can be sent again as it was: kept for a connection that
    // refuses it unprocessed.
    let replay = req.body().is_end_stream().then(|| {
        let mut head = Request::new(());
        *head.method_mut() = req.method().clone();
        *head.uri_mut() = req.uri().clone();
        *head.version_mut() = req.version();
        *head.headers_mut() = req.headers().clone();
        head
    });
    for (id, mut sender) in conns {
        match sender.try_send_request(req).await {
            Ok(resp) => {
                let switched = resp.status() == StatusCode::OK
                    && resp.headers().contains_key(upgrade::UPGRADE_HEADER);
                if let (true, Some(on_upgrade), Some(tx)) =
                    (switched, visitor_upgrade, to_connector)
                {
                    return Ok(switch_protocols(resp, on_upgrade, tx, &ray, id));
                }
                let mut resp = resp.map(BodyExt::boxed_unsync);
                resp.headers_mut().remove(upgrade::UPGRADE_HEADER);
                stamp(resp.headers_mut(), &ray);
                resp.headers_mut()
                    .insert(CONNECTION_HEADER, HeaderValue::from(id));
                return Ok(resp);
            }
            Err(mut e) => match e.take_message() {
                Some(unsent) => {
                    tracing::debug!(connection = id, "connection not ready, trying the next");
                    edge.remove(&tunnel_id, id);
                    req = unsent;
                }
                None if replay.is_some() && refused_unprocessed(e.error()) => {
                    // The connector is going away (GOAWAY) and did not take the request:
                    // Cloudflare's edge sends it over another connection of the tunnel.
                    tracing::debug!(connection = id, error = %e.error(), "request refused unprocessed, trying the next connection");
                    edge.remove(&tunnel_id, id);
                    let head = replay.as_ref().expect("checked above").clone();
                    req =
                        head.map(|()| Empty::new().map_err(|never| match never {}).boxed_unsync());
                }
                None => {
                    tracing::warn!(%host, connection = id, error = %e.error(), "request over the tunnel failed");
                    return Ok(page(
                        StatusCode::BAD_GATEWAY,
                        &ray,
                        "text/plain; charset=utf-8",
                        "error code: 502\n".into(),
                    ));
                }
            },
        }
    }
    Ok(error_1033(&host, &ray))
}

/// Whether the connector refused a request without processing it: a stream above the last one
/// its GOAWAY accepted (a graceful shutdown) or reset with `REFUSED_STREAM` (RFC 9113 §8.7:
/// safe to retry).
fn refused_unprocessed(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR));
        }
        source = e.source();
    }
    false
}

/// The visitor's `101 Switching Protocols` once the origin switched (the connector's `200` with
/// [`upgrade::UPGRADE_HEADER`]): its headers, and the two streams spliced once the visitor's
/// connection is handed over.
fn switch_protocols(
    resp: Response<Incoming>,
    on_upgrade: hyper::upgrade::OnUpgrade,
    to_connector: tokio::sync::mpsc::Sender<Bytes>,
    ray: &str,
    connection: u64,
) -> Response<EdgeBody> {
    let (mut parts, from_connector) = resp.into_parts();
    parts.status = StatusCode::SWITCHING_PROTOCOLS;
    upgrade::set_upgrade_headers(&mut parts.headers);
    stamp(&mut parts.headers, ray);
    parts
        .headers
        .insert(CONNECTION_HEADER, HeaderValue::from(connection));
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(visitor) => upgrade::splice(visitor, to_connector, from_connector),
            Err(e) => tracing::debug!(error = %e, "the visitor's connection was not handed over"),
        }
    });
    Response::from_parts(
        parts,
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    )
}

/// The request as the connector receives it: absolute URI on the visitor's host, the rule's
/// service in [`SERVICE_HEADER`] (a visitor's own value is dropped), and the headers
/// Cloudflare adds for the origin.
fn to_connector_request(
    req: Request<Incoming>,
    raw_host: &str,
    service: &str,
    peer: SocketAddr,
    ray: &str,
) -> Result<Request<EdgeBody>, String> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("http://{raw_host}{path}")
        .parse()
        .map_err(|_| format!("error code: 400 (bad Host {raw_host:?})"))?;
    parts.version = hyper::Version::HTTP_2;
    let h = &mut parts.headers;
    h.remove(header::HOST);
    h.remove(SERVICE_HEADER);
    let ip = peer.ip().to_string();
    let xff = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip.clone(),
    };
    let value = |s: &str| {
        HeaderValue::from_str(s).map_err(|_| format!("error code: 400 (bad header value {s:?})"))
    };
    h.insert(SERVICE_HEADER, value(service)?);
    h.insert("cf-connecting-ip", value(&ip)?);
    h.insert("x-forwarded-for", value(&xff)?);
    h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    h.insert(
        "cf-visitor",
        HeaderValue::from_static(r#"{"scheme":"http"}"#),
    );
    h.insert("cf-ray", value(ray)?);
    h.remove(upgrade::UPGRADE_HEADER);
    Ok(Request::from_parts(parts, body.boxed_unsync()))
}

#[cfg(test)]
mod tests {
    use super::is_host_and_port;

    #[test]
    fn host_values() {
        for ok in [
            "app.example.test",
            "App.Example.Test:8080",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "a_b.test",
        ] {
            assert!(is_host_and_port(ok), "{ok}");
        }
        for bad in [
            "",
            "x/a.wild.test",
            "user@a.wild.test",
            "a b.test",
            "a.test:",
            "a.test:99999",
            "a.test:1:2",
            "[::1",
            "[zz]:80",
            ":80",
        ] {
            assert!(!is_host_and_port(bad), "{bad}");
        }
    }
}
