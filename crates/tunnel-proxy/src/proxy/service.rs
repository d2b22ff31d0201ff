//! hyper's server, for what the fast path leaves to it: the rest of a connection from the
//! request the fast path declined, each request routed and forwarded by [`super::forward`]
//! with its metrics ended by the response body ([`Tracked`]). A request the fast path already
//! routed keeps its decision ([`Handed`]). Requests the [`super::smuggling`] guard flagged are
//! refused.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http1_wire::GuardedBody;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tracing::debug;

use super::answer::{Completion, bad_request, head_too_large};
use super::conn::{HEADER_READ_TIMEOUT, StopHandle, peer_ip};
use super::forward::Forward;
use super::rewind::Rewind;
use super::route::{Decision, Handed, decide};
use super::smuggling::{Flags, Sniffed};
use crate::state::State;
use crate::upstream::ProxyBody;

/// What the requests of one client connection share.
struct ConnCtx {
    state: Arc<State>,
    peer: SocketAddr,
    /// The peer address as an `X-Forwarded-For` element, formatted once per connection.
    peer_ip: HeaderValue,
    /// Raised by the connection's [`Sniffed`] scanner.
    flags: Arc<Flags>,
    /// The fast path's decision for the connection's first request, until its handler takes it.
    handed: Mutex<Option<Handed>>,
}

/// hyper's server for what the HTTP/1.1 fast path leaves to it.
pub(crate) type HyperServer = auto::Builder<TokioExecutor>;

/// hyper's server, with request heads bounded at `max_head` bytes: over HTTP/1.1 hyper
/// answers 431 when its read buffer holds that much of an unfinished head; over HTTP/2 the
/// limit is the advertised `SETTINGS_MAX_HEADER_LIST_SIZE`, and `h2` answers 431 (then resets
/// the stream) to a header list beyond it.
pub(crate) fn hyper_server(max_head: usize) -> HyperServer {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(max_head);
    builder
        .http2()
        .timer(TokioTimer::new())
        .adaptive_window(true)
        .max_header_list_size(u32::try_from(max_head).unwrap_or(u32::MAX));
    builder
}

/// Serves the rest of a connection with hyper, starting with `prefix` (bytes the fast path
/// already read: the head of the request it declined and whatever followed). `handed`: the
/// decision for the request at the start of `prefix`, when the fast path routed it.
pub(crate) async fn serve_with_hyper(
    stream: TcpStream,
    prefix: Bytes,
    peer: SocketAddr,
    state: Arc<State>,
    hyper: &HyperServer,
    stop: StopHandle,
    handed: Option<Handed>,
) {
    let flags = Arc::new(Flags::default());
    let io = TokioIo::new(Sniffed::new(
        Rewind::new(prefix, stream),
        flags.clone(),
        state.max_request_head(),
    ));
    let metrics_state = state.clone();
    let ctx = Arc::new(ConnCtx {
        state,
        peer,
        peer_ip: peer_ip(peer),
        flags,
        handed: Mutex::new(handed),
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
                    // hyper answered 431 (or 414) itself; the handler never saw the request.
                    if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse_too_large) {
                        metrics_state.metrics().unmatched().response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
                    }
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

/// A response body that ends its request's [`Completion`] with it.
type Tracked = GuardedBody<ProxyBody, Completion>;

async fn handle(
    ctx: Arc<ConnCtx>,
    req: Request<Incoming>,
) -> Result<Response<Tracked>, Infallible> {
    let mut done = Completion::begin(&ctx.state, ctx.state.metrics().unmatched().clone());
    let handed = ctx
        .handed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let http1 = req.version() != Version::HTTP_2;
    let resp = if http1 && ctx.flags.head_too_large.load(Ordering::Relaxed) {
        debug!(peer = %ctx.peer, "refused request with a head over the limit");
        head_too_large().into_response()
    } else if http1 && ctx.flags.conflicting_length.load(Ordering::Relaxed) {
        debug!(peer = %ctx.peer, "refused request with both Content-Length and Transfer-Encoding");
        bad_request("both Content-Length and Transfer-Encoding").into_response()
    } else {
        route_and_forward(&ctx, req, handed, &mut done).await
    };
    done.host.response(resp.status());
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, GuardedBody::new(body, done)))
}

/// Routes the request (unless `handed` has its decision) and forwards it.
async fn route_and_forward(
    ctx: &ConnCtx,
    mut req: Request<Incoming>,
    handed: Option<Handed>,
    done: &mut Completion,
) -> Response<ProxyBody> {
    let client_upgrade = is_upgrade(&req).then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let table;
    let routed = match &handed {
        Some(handed) => {
            done.host = handed.host.clone();
            handed.routed()
        }
        None => {
            table = ctx.state.table();
            match decide(ctx.peer, &parts, table.as_ref(), &mut done.host) {
                Decision::Respond(local) => return local.into_response(),
                Decision::Forward(routed) => routed,
            }
        }
    };
    let fwd = Forward {
        routed: &routed,
        host_metrics: &done.host,
        peer_ip: &ctx.peer_ip,
    };
    let mut resp = fwd
        .run(Request::from_parts(parts, body), client_upgrade)
        .await;
    routed.change_response(resp.headers_mut());
    resp
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
