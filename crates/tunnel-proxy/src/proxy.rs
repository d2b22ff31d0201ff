//! The data plane: an HTTP/1.1 + h2c server that routes each request with the live table and
//! forwards it, streaming, to a backend.
//!
//! Status codes the proxy produces itself: 400 for requests it refuses to interpret (no or
//! conflicting host, `Content-Length` with `Transfer-Encoding`), 404 when no route matches
//! (gRPC: 200 with `grpc-status: 12`), 500 for rules with nothing to forward to, the rule's or
//! backend's configured failure status, 503 when no connection to the chosen endpoint could be
//! made, 502 when the TLS handshake failed or the backend broke the exchange, 504 when the
//! response headers did not arrive within the request/backend timeout.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, warn};
use tunnel_config::filters::{self, RedirectInput};
use tunnel_config::routing::{self, RequestView};

use crate::h1::rewind::Rewind;
use crate::metrics::{BackendErrorReason, HostMetrics};
use crate::smuggling::Sniffed;
use crate::state::State;
use crate::table::{Action, Backend, Mirror, RouteTable, Rule, Target};
use crate::upstream::{BoxError, ConnectError, Endpoint, ProxyBody, SendError, Upstream};

/// Frames a mirror may lag behind the primary request before it is cut off.
const MIRROR_QUEUE_FRAMES: usize = 16;
/// A mirror without a configured timeout gives up after this long.
const MIRROR_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// What the requests of one client connection share.
struct ConnCtx {
    state: Arc<State>,
    peer: SocketAddr,
    /// The peer address as an `X-Forwarded-For` element, formatted once per connection.
    peer_ip: HeaderValue,
    /// Raised by the connection's [`Sniffed`] scanner.
    conflicting_length: Arc<AtomicBool>,
}

// === server ===

/// hyper's server for what the HTTP/1.1 fast path leaves to it.
pub(crate) type HyperServer = auto::Builder<TokioExecutor>;

fn hyper_server() -> HyperServer {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .adaptive_window(true);
    builder
}

/// Raised once, when the server stops accepting: connections finish the request in flight
/// and close. Each connection also holds a `live` token, so the server knows when all are
/// gone.
pub(crate) struct Stop {
    raised: AtomicBool,
    notify: Notify,
    live: watch::Receiver<()>,
}

impl Stop {
    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Resolves when the signal is raised. Created before checking [`Stop::is_raised`], it
    /// also resolves for a signal in between (`notify_waiters` reaches every `Notified`
    /// created before it, polled or not).
    pub(crate) fn raised(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// A connection's handle: shares the signal, and counts as live while it exists.
    pub(crate) fn handle(self: &Arc<Self>) -> StopHandle {
        StopHandle {
            stop: self.clone(),
            _live: self.live.clone(),
        }
    }
}

/// What a connection holds of the [`Stop`] signal.
#[derive(Clone)]
pub(crate) struct StopHandle {
    stop: Arc<Stop>,
    _live: watch::Receiver<()>,
}

impl std::ops::Deref for StopHandle {
    type Target = Stop;

    fn deref(&self) -> &Stop {
        &self.stop
    }
}

/// How long a client may take to send a request head (slowloris protection).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections until `shutdown` resolves, then stops accepting, asks every
/// connection to finish (HTTP/1.1 closes after the response in flight, HTTP/2 sends GOAWAY)
/// and returns once all of them have.
///
/// Each connection starts on the HTTP/1.1 fast path ([`crate::h1`]); hyper takes over a
/// connection at the first request the fast path does not handle itself (HTTP/2, upgrades,
/// streamed or chunked request bodies, backends over HTTP/2, mirrors, malformed requests).
pub async fn serve(listener: TcpListener, state: Arc<State>, shutdown: impl Future<Output = ()>) {
    let hyper = Arc::new(hyper_server());
    let (live_tx, live) = watch::channel(());
    let stop = Arc::new(Stop {
        raised: AtomicBool::new(false),
        notify: Notify::new(),
        live,
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "set_nodelay failed");
        }
        tokio::spawn(crate::h1::serve_connection(
            stream,
            peer,
            state.clone(),
            hyper.clone(),
            stop.handle(),
        ));
    }
    drop(listener);
    stop.raised.store(true, Ordering::Release);
    stop.notify.notify_waiters();
    // The server's own receiver is the one in `stop`.
    info!(
        connections = live_tx.receiver_count() - 1,
        "stopped accepting; finishing in-flight requests"
    );
    drop(stop);
    live_tx.closed().await;
}

/// Serves the rest of a connection with hyper, starting with `prefix` (bytes the fast path
/// already read: the head of the request it declined and whatever followed).
pub(crate) async fn serve_with_hyper(
    stream: TcpStream,
    prefix: Bytes,
    peer: SocketAddr,
    state: Arc<State>,
    hyper: &HyperServer,
    stop: StopHandle,
) {
    let conflicting_length = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Sniffed::new(
        Rewind::new(prefix, stream),
        conflicting_length.clone(),
    ));
    let ctx = Arc::new(ConnCtx {
        state,
        peer,
        peer_ip: peer_ip(peer),
        conflicting_length,
    });
    let service = service_fn(move |req| handle(ctx.clone(), req));
    let conn = hyper.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let raised = stop.raised();
    tokio::pin!(raised);
    let mut stopping = stop.is_raised();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut raised, if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The peer address as an `X-Forwarded-For` element.
pub(crate) fn peer_ip(peer: SocketAddr) -> HeaderValue {
    HeaderValue::try_from(peer.ip().to_string()).expect("an IP address is a valid header value")
}

// === request handling ===

/// Metrics bookkeeping of one request; finishes when the response body is done or dropped.
pub(crate) struct Completion {
    start: Instant,
    in_flight: Gauge,
    /// The matched route's metrics (the unmatched series until a route matched).
    pub host: Arc<HostMetrics>,
}

impl Completion {
    /// Counts a request in flight from now, for the series of `host`.
    pub(crate) fn begin(state: &State, host: Arc<HostMetrics>) -> Self {
        let in_flight = state.metrics().in_flight().clone();
        in_flight.inc();
        Self {
            start: Instant::now(),
            in_flight,
            host,
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.in_flight.dec();
        self.host.duration(self.start.elapsed().as_secs_f64());
    }
}

/// A response body that keeps its request's [`Completion`] alive.
struct Tracked {
    inner: ProxyBody,
    /// Only dropped: that ends the request's metrics.
    #[allow(dead_code)]
    done: Completion,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

async fn handle(
    ctx: Arc<ConnCtx>,
    req: Request<Incoming>,
) -> Result<Response<Tracked>, Infallible> {
    let mut done = Completion::begin(&ctx.state, ctx.state.metrics().unmatched().clone());
    let resp = if ctx.conflicting_length.load(Ordering::Relaxed) && req.version() != Version::HTTP_2
    {
        debug!(peer = %ctx.peer, "refused request with both Content-Length and Transfer-Encoding");
        bad_request("both Content-Length and Transfer-Encoding").into_response()
    } else {
        route_and_forward(&ctx, req, &mut done).await
    };
    done.host.response(resp.status());
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Tracked { inner: body, done }))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

async fn route_and_forward(
    ctx: &ConnCtx,
    mut req: Request<Incoming>,
    done: &mut Completion,
) -> Response<ProxyBody> {
    let table = ctx.state.table();
    let client_upgrade = is_upgrade(&req).then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let routed = match decide(ctx.peer, &parts, table.as_deref(), &mut done.host) {
        Decision::Respond(local) => return local.into_response(),
        Decision::Forward(routed) => routed,
    };
    let fwd = Forward {
        routed: &routed,
        host_metrics: &done.host,
        peer_ip: &ctx.peer_ip,
    };
    let mut resp = fwd
        .run(Request::from_parts(parts, body), client_upgrade)
        .await;
    if let Some(modifier) = &routed.rule.response_headers {
        modifier.apply(resp.headers_mut());
    }
    resp
}

/// What the live table says to do with a request.
pub(crate) enum Decision<'t> {
    /// Answer without a backend; the rule's response header changes are applied.
    Respond(Local),
    /// Forward to a backend; the caller applies the rule's response header changes to the
    /// backend's answer.
    Forward(Routed<'t>),
}

/// A request routed to a backend.
pub(crate) struct Routed<'t> {
    pub rule: &'t Rule,
    pub backend: &'t Backend,
    pub upstream: &'t Upstream,
    /// The authority the request was routed by.
    pub authority: HeaderValue,
    pub matched_prefix: Option<&'t str>,
}

/// Routes a request head with `table` (`None`: no config loaded). `host` becomes the matched
/// route's metrics.
pub(crate) fn decide<'t>(
    peer: SocketAddr,
    parts: &Parts,
    table: Option<&'t RouteTable>,
    host_metrics: &mut Arc<HostMetrics>,
) -> Decision<'t> {
    let grpc = is_grpc(&parts.headers);
    let authority = match routed_authority(parts) {
        Ok(a) => a,
        Err(why) => {
            debug!(%peer, why, "refused request");
            return Decision::Respond(bad_request(why));
        }
    };
    let Some(host) = authority.to_str().ok().and_then(routing::normalize_host) else {
        return Decision::Respond(local(StatusCode::BAD_REQUEST, "invalid host"));
    };
    let Some(table) = table else {
        return Decision::Respond(not_found(grpc));
    };
    let view = RequestView {
        host: &host,
        path: parts.uri.path(),
        query: parts.uri.query(),
        method: &parts.method,
        headers: &parts.headers,
        grpc,
    };
    let Some(m) = table.table.lookup(&view) else {
        return Decision::Respond(not_found(grpc));
    };
    if let Some(h) = table.host(m.hostname) {
        *host_metrics = h.clone();
    }
    let rule: &Rule = m.rule;
    let mut answer = match &rule.action {
        Action::Respond(status) => local(*status, ""),
        Action::Redirect(redirect) => {
            let port = authority
                .to_str()
                .ok()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok());
            let location = redirect.location(&RedirectInput {
                scheme: forwarded_proto(&parts.headers),
                host: &host,
                port,
                path: parts.uri.path(),
                query: parts.uri.query(),
                matched_prefix: m.matched_prefix,
            });
            let mut answer = local(redirect.status, "");
            match HeaderValue::from_str(&location) {
                Ok(v) => {
                    answer.headers.insert(header::LOCATION, v);
                }
                Err(_) => answer.status = StatusCode::BAD_REQUEST,
            }
            answer
        }
        Action::Forward { choice, backends } => {
            let backend = &backends[choice.pick(rand::random_range(0..choice.total()))];
            match &backend.target {
                Target::Fail(status) => local(*status, ""),
                Target::Upstream(upstream) => {
                    drop(host);
                    return Decision::Forward(Routed {
                        // The backendRef's own filters apply after the rule's, to this request.
                        rule: backend.rule(rule),
                        backend,
                        upstream,
                        authority,
                        matched_prefix: m.matched_prefix,
                    });
                }
            }
        }
    };
    if let Some(modifier) = &rule.response_headers {
        modifier.apply(&mut answer.headers);
    }
    Decision::Respond(answer)
}

/// The authority a request is routed by: `Host` for HTTP/1, `:authority` (or `Host`) for
/// HTTP/2. Ambiguity is refused rather than resolved, so no header or request-target form
/// can make the proxy route by a name other than the one a front proxy checked.
fn routed_authority(req: &Parts) -> Result<HeaderValue, &'static str> {
    let headers = &req.headers;
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host header");
    }
    let uri_authority = req.uri.authority().map(|a| a.as_str());
    match (req.version, host, uri_authority) {
        (Version::HTTP_2, None, Some(a)) => {
            HeaderValue::from_str(a).map_err(|_| "invalid :authority")
        }
        (_, Some(h), None) => Ok(h.clone()),
        (_, Some(h), Some(a)) if h.as_bytes().eq_ignore_ascii_case(a.as_bytes()) => Ok(h.clone()),
        (_, Some(_), Some(_)) => Err("request target authority differs from Host"),
        (_, None, _) => Err("missing Host"),
    }
}

/// The scheme the client used, as told by the front proxy (`http` when unknown). It only
/// shapes redirects and `X-Forwarded-Proto`, never routing.
fn forwarded_proto(headers: &HeaderMap) -> &'static str {
    match headers.get(&X_FORWARDED_PROTO).map(HeaderValue::as_bytes) {
        Some(b"https") => "https",
        _ => "http",
    }
}

fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && connection_has(req.headers(), "upgrade")
}

fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "te"
            | "transfer-encoding"
            | "trailer"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "keep-alive"
            | "proxy-connection"
            | "upgrade"
    )
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), except what an upgrade needs and
/// `te: trailers` (gRPC needs it).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    // Most messages carry none: one pass over the names, no hashing.
    if !keep_upgrade && !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    let te_trailers = headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });
    for name in [
        header::TE,
        header::TRANSFER_ENCODING,
        header::TRAILER,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        KEEP_ALIVE.clone(),
        PROXY_CONNECTION.clone(),
    ] {
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// A response the proxy makes itself.
pub(crate) struct Local {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: &'static str,
}

impl Local {
    pub(crate) fn into_response(self) -> Response<ProxyBody> {
        let mut resp = Response::new(
            Full::new(Bytes::from_static(self.body.as_bytes()))
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }
}

/// 400 and close: after a request we refuse to interpret, the connection's framing cannot be
/// trusted either.
fn bad_request(why: &'static str) -> Local {
    let mut answer = local(StatusCode::BAD_REQUEST, why);
    answer
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

pub(crate) fn local(status: StatusCode, body: &'static str) -> Local {
    let mut headers = HeaderMap::new();
    if !body.is_empty() {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    Local {
        status,
        headers,
        body,
    }
}

fn not_found(grpc: bool) -> Local {
    if !grpc {
        return local(StatusCode::NOT_FOUND, "no matching route\n");
    }
    // gRPC trailers-only response: UNIMPLEMENTED.
    let mut answer = local(StatusCode::OK, "");
    let h = &mut answer.headers;
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from_static("12"));
    h.insert(
        "grpc-message",
        HeaderValue::from_static("no matching route"),
    );
    answer
}

// === forwarding ===

/// The hyper path's exchange with a backend.
struct Forward<'a> {
    routed: &'a Routed<'a>,
    host_metrics: &'a HostMetrics,
    peer_ip: &'a HeaderValue,
}

impl Forward<'_> {
    async fn run(
        self,
        req: Request<Incoming>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
        let upgrade = client_upgrade.is_some();
        if upgrade && self.routed.upstream.protocol != tunnel_config::config::BackendProtocol::Http1
        {
            warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, "upgrade request to an HTTP/2 backend refused");
            self.host_metrics.backend_error(BackendErrorReason::Upgrade);
            return backend_failure(BackendErrorReason::Upgrade).into_response();
        }
        prepare_request_headers(
            &mut parts.headers,
            self.routed.rule,
            &self.routed.authority,
            self.peer_ip,
            upgrade,
        );
        let Some(path_and_query) =
            upstream_target(self.routed.rule, &parts.uri, self.routed.matched_prefix)
        else {
            return local(StatusCode::BAD_REQUEST, "invalid request target\n").into_response();
        };
        let body = body.map_err(BoxError::from);
        let body: ProxyBody = if self.routed.rule.mirrors.is_empty() {
            body.boxed_unsync()
        } else {
            let senders = self.start_mirrors(&parts, &path_and_query);
            if senders.is_empty() {
                body.boxed_unsync()
            } else {
                Tee {
                    inner: body,
                    mirrors: senders,
                }
                .boxed_unsync()
            }
        };
        let endpoint = self.routed.upstream.next_endpoint();
        let uri = match self.routed.upstream.uri(endpoint, path_and_query) {
            Ok(uri) => uri,
            Err(e) => {
                warn!(route = %self.routed.rule.route, error = %e, "cannot build the upstream URI");
                return local(StatusCode::BAD_REQUEST, "invalid request target\n").into_response();
            }
        };
        parts.uri = uri;
        parts.version = match self.routed.upstream.protocol {
            tunnel_config::config::BackendProtocol::Http1 => Version::HTTP_11,
            tunnel_config::config::BackendProtocol::Http2 => Version::HTTP_2,
        };
        let request = self
            .routed
            .upstream
            .send(endpoint, Request::from_parts(parts, body));
        let deadline = match (
            self.routed.rule.request_timeout,
            self.routed.rule.backend_timeout,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let result = match deadline {
            Some(d) => match tokio::time::timeout(d, request).await {
                Ok(r) => r,
                Err(_) => {
                    warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, %endpoint,
                        reason = "timeout", timeout_ms = d.as_millis() as u64, "backend request failed");
                    self.host_metrics.backend_error(BackendErrorReason::Timeout);
                    return backend_failure(BackendErrorReason::Timeout).into_response();
                }
            },
            None => request.await,
        };
        let mut resp = match result {
            Ok(resp) => resp,
            Err(e) => {
                let reason = classify(&e);
                warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, %endpoint,
                    reason = reason.as_str(), error = %error_chain(&e), "backend request failed");
                self.host_metrics.backend_error(reason);
                return backend_failure(reason).into_response();
            }
        };
        if let Some(client_upgrade) = client_upgrade
            && resp.status() == StatusCode::SWITCHING_PROTOCOLS
        {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            let route = self.routed.rule.route.clone();
            let backend = self.routed.backend.name.clone();
            tokio::spawn(async move {
                match tokio::try_join!(client_upgrade, upstream_upgrade) {
                    Ok((client, upstream)) => {
                        let mut client = TokioIo::new(client);
                        let mut upstream = TokioIo::new(upstream);
                        if let Err(e) =
                            tokio::io::copy_bidirectional(&mut client, &mut upstream).await
                        {
                            debug!(%route, %backend, error = %e, "upgraded connection ended with an error");
                        }
                    }
                    Err(e) => {
                        warn!(%route, %backend, reason = "upgrade", error = %e, "upgrade failed")
                    }
                }
            });
            let (mut parts, _) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers, true);
            return Response::from_parts(
                parts,
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
        }
        strip_hop_by_hop(resp.headers_mut(), false);
        resp
    }

    /// Starts the selected mirrors; returns the senders feeding their bodies.
    fn start_mirrors(&self, parts: &Parts, path_and_query: &PathAndQuery) -> Vec<MirrorSender> {
        let mut senders = Vec::new();
        for mirror in &self.routed.rule.mirrors {
            if !filters::mirror_selected(mirror.percent, rand::random_range(0..100)) {
                continue;
            }
            let Target::Upstream(upstream) = &mirror.backend.target else {
                continue;
            };
            let endpoint = upstream.next_endpoint();
            let Ok(uri) = upstream.uri(endpoint, path_and_query.clone()) else {
                continue;
            };
            let (tx, rx) = mpsc::channel(MIRROR_QUEUE_FRAMES);
            let cut = Arc::new(AtomicBool::new(false));
            let mut req = Request::new(
                MirrorBody {
                    rx,
                    cut: cut.clone(),
                }
                .boxed_unsync(),
            );
            *req.method_mut() = parts.method.clone();
            *req.uri_mut() = uri;
            *req.headers_mut() = parts.headers.clone();
            *req.version_mut() = match upstream.protocol {
                tunnel_config::config::BackendProtocol::Http1 => Version::HTTP_11,
                tunnel_config::config::BackendProtocol::Http2 => Version::HTTP_2,
            };
            if parts.method == Method::GET || parts.method == Method::HEAD {
                req.headers_mut().remove(header::CONTENT_LENGTH);
            }
            spawn_mirror(
                mirror,
                upstream,
                endpoint,
                req,
                self.routed.rule.backend_timeout,
            );
            senders.push(MirrorSender { tx, cut });
        }
        senders
    }
}

/// Request headers as a backend gets them: hop-by-hop fields removed, the rule's header
/// changes applied, then the [`Forwarding`] fields set.
pub(crate) fn prepare_request_headers(
    h: &mut HeaderMap,
    rule: &Rule,
    authority: &HeaderValue,
    peer_ip: &HeaderValue,
    upgrade: bool,
) {
    filter_request_headers(h, rule, upgrade);
    let f = forwarding(h, rule, authority, peer_ip);
    h.insert(header::HOST, f.host);
    if let Some(v) = f.forwarded_for {
        h.insert(X_FORWARDED_FOR.clone(), v);
    }
    h.insert(X_FORWARDED_PROTO.clone(), f.forwarded_proto);
}

/// Hop-by-hop fields removed and the rule's request header changes applied.
pub(crate) fn filter_request_headers(h: &mut HeaderMap, rule: &Rule, upgrade: bool) {
    strip_hop_by_hop(h, upgrade);
    if let Some(m) = &rule.request_headers {
        m.apply(h);
    }
}

/// The fields the proxy sets on every forwarded request, replacing the client's.
pub(crate) struct Forwarding {
    /// The routed authority, or the URL rewrite's hostname.
    pub host: HeaderValue,
    /// The client's value with the peer appended; `None` keeps the client's (it could not
    /// be extended).
    pub forwarded_for: Option<HeaderValue>,
    pub forwarded_proto: HeaderValue,
}

pub(crate) fn forwarding(
    h: &HeaderMap,
    rule: &Rule,
    authority: &HeaderValue,
    peer_ip: &HeaderValue,
) -> Forwarding {
    let host = rule
        .rewrite
        .as_ref()
        .and_then(|r| r.hostname.clone())
        .unwrap_or_else(|| authority.clone());
    let forwarded_for = match h.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => {
            let peer_ip = peer_ip.to_str().unwrap_or_default();
            HeaderValue::try_from(format!("{prev}, {peer_ip}")).ok()
        }
        None => Some(peer_ip.clone()),
    };
    Forwarding {
        host,
        forwarded_for,
        forwarded_proto: HeaderValue::from_static(forwarded_proto(h)),
    }
}

/// The upstream path and query: the client's (shared, not copied) unless a URL rewrite
/// changes the path. `None` when the rewritten target is not a valid one.
pub(crate) fn upstream_target(
    rule: &Rule,
    uri: &http::Uri,
    matched_prefix: Option<&str>,
) -> Option<PathAndQuery> {
    let Some(rewrite) = rule.rewrite.as_ref().and_then(|r| r.path.as_ref()) else {
        return Some(
            uri.path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
    };
    let path = rewrite.apply(uri.path(), matched_prefix);
    let target = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    PathAndQuery::try_from(target).ok()
}

fn spawn_mirror(
    mirror: &Mirror,
    upstream: &Upstream,
    endpoint: &Endpoint,
    req: Request<ProxyBody>,
    timeout: Option<Duration>,
) {
    let name = mirror.backend.name.clone();
    let fut = upstream.send(endpoint, req);
    tokio::spawn(async move {
        match tokio::time::timeout(timeout.unwrap_or(MIRROR_TIMEOUT), fut).await {
            Ok(Ok(resp)) => {
                // Read the body so the connection goes back to the pool.
                let _ = resp.into_body().collect().await;
            }
            Ok(Err(e)) => debug!(mirror = %name, error = %error_chain(&e), "mirror request failed"),
            Err(_) => debug!(mirror = %name, "mirror request timed out"),
        }
    });
}

/// The answer to a request whose backend exchange failed: 503 when no connection could be
/// made (the backend is unavailable), 504 when the response head did not arrive in time, 502
/// for a failed TLS handshake, a broken exchange or a refused upgrade.
pub(crate) fn backend_failure(reason: BackendErrorReason) -> Local {
    match reason {
        BackendErrorReason::Connect => {
            local(StatusCode::SERVICE_UNAVAILABLE, "backend unavailable\n")
        }
        BackendErrorReason::Timeout => local(StatusCode::GATEWAY_TIMEOUT, "backend timeout\n"),
        BackendErrorReason::Tls | BackendErrorReason::Protocol => {
            local(StatusCode::BAD_GATEWAY, "backend unavailable\n")
        }
        BackendErrorReason::Upgrade => local(StatusCode::BAD_GATEWAY, "backend cannot upgrade\n"),
    }
}

fn classify(e: &SendError) -> BackendErrorReason {
    let e = match e {
        SendError::Connect(c) => return connect_reason(c),
        SendError::Http1(_) => return BackendErrorReason::Protocol,
        SendError::Http2(e) => e,
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return connect_reason(c);
        }
        source = s.source();
    }
    if e.is_connect() {
        BackendErrorReason::Connect
    } else {
        BackendErrorReason::Protocol
    }
}

pub(crate) fn connect_reason(e: &ConnectError) -> BackendErrorReason {
    match e {
        ConnectError::Tcp(_) => BackendErrorReason::Connect,
        ConnectError::Tls(_) => BackendErrorReason::Tls,
    }
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

// === mirroring ===

struct MirrorSender {
    tx: mpsc::Sender<Frame<Bytes>>,
    cut: Arc<AtomicBool>,
}

pin_project_lite::pin_project! {
    /// The primary request body, copying each frame to the mirrors without ever waiting for
    /// them: a mirror whose queue is full is cut off (its request fails) and the primary
    /// carries on.
    struct Tee<B> {
        #[pin]
        inner: B,
        mirrors: Vec<MirrorSender>,
    }
}

impl<B: Body<Data = Bytes, Error = BoxError>> Body for Tee<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let copy = || {
                    if let Some(data) = frame.data_ref() {
                        Some(Frame::data(data.clone()))
                    } else {
                        frame.trailers_ref().map(|t| Frame::trailers(t.clone()))
                    }
                };
                this.mirrors
                    .retain(|m| match copy().map(|f| m.tx.try_send(f)) {
                        None | Some(Ok(())) => true,
                        Some(Err(_)) => {
                            m.cut.store(true, Ordering::Relaxed);
                            false
                        }
                    });
            }
            Poll::Ready(Some(Err(_))) => {
                for m in this.mirrors.drain(..) {
                    m.cut.store(true, Ordering::Relaxed);
                }
            }
            Poll::Ready(None) => this.mirrors.clear(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A mirror's request body: the frames the [`Tee`] copied.
struct MirrorBody {
    rx: mpsc::Receiver<Frame<Bytes>>,
    cut: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("mirror fell behind the primary request and was cut off")]
struct MirrorCut;

impl Body for MirrorBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(None) if self.cut.load(Ordering::Relaxed) => {
                Poll::Ready(Some(Err(MirrorCut.into())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_removed_including_connection_listed_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers, deflate"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false);
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["te", "x-keep"]);
        assert_eq!(h[header::TE], "trailers");
    }

    #[test]
    fn upgrade_keeps_upgrade_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[header::UPGRADE], "websocket");
        assert_eq!(h[header::CONNECTION], "upgrade");
    }
}
