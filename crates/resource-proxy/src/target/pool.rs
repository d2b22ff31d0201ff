//! The streamed connections to a target's peers, which carry the watches (other requests go
//! through [`crate::target::exchange`]). kube-apiserver offers HTTP/2 (ALPN `h2`), so watches share a
//! few multiplexed connections per peer instead of one TLS connection each; a peer that offers
//! only HTTP/1.1 gets one watch per connection.
//!
//! A request reserves a stream on the first connection of its peer with room, and holds it
//! until its answer has been read or dropped ([`TargetBody`]). When no connection has room, a
//! new one is dialled; requests arriving meanwhile reserve streams on that dial and wait for it
//! instead of dialling their own. hyper does not expose the peer's
//! SETTINGS_MAX_CONCURRENT_STREAMS, and a request beyond it would wait behind every later
//! request of its connection, so the pool stays at [`STREAMS_PER_CONNECTION`], at or below
//! what API servers announce.
//!
//! Dialling (TCP, TLS, timeout and peer health) is the caller's: [`Pool::send`] takes a
//! function that starts a dial.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use http1_wire::{End, Guard, GuardedBody};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::conn::{BoxError, Dial, DialError, ExchangeError, SendError};
use crate::config::PeerAddress;

/// Concurrent requests (watches included) per HTTP/2 connection. kube-apiserver announces
/// 1000 (`--http2-max-streams-per-connection`), other API servers built on the generic server
/// with that flag at 0 announce 100 (Go's limit since the 2023 rapid-reset fixes).
pub const STREAMS_PER_CONNECTION: usize = 100;
/// An HTTP/2 connection is pinged every this long; without an answer within
/// [`KEEP_ALIVE_TIMEOUT`] it is closed, and the watches on it end (clients re-watch).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The pooled connections of one target, by peer.
#[derive(Default)]
pub struct Pool {
    peers: Mutex<HashMap<PeerAddress, Vec<Arc<Conn>>>>,
}

/// One connection, or the dial that will make it.
struct Conn {
    /// Streams reserved: requests in flight and answers not yet read to the end.
    streams: AtomicUsize,
    /// [`STREAMS_PER_CONNECTION`] until the dial shows HTTP/1.1, then 1.
    capacity: Arc<AtomicUsize>,
    ready: Shared<BoxFuture<'static, Result<Sender, DialError>>>,
}

#[derive(Clone)]
enum Sender {
    H2(http2::SendRequest<Full<Bytes>>),
    H1(H1Slot),
}

/// An HTTP/1.1 connection's sender: taken by the one request using the connection, put back
/// when its answer is done.
type H1Slot = Arc<Mutex<Option<http1::SendRequest<Full<Bytes>>>>>;

impl Conn {
    fn dialing(dial: Dial) -> Self {
        let capacity = Arc::new(AtomicUsize::new(STREAMS_PER_CONNECTION));
        let cap = capacity.clone();
        // A task of its own: the dial completes even when the request that started it goes away.
        let task = tokio::spawn(async move {
            let tls = dial.await?;
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let io = TokioIo::new(tls);
            let handshake_failed = |e: hyper::Error| DialError {
                timeout: false,
                message: format!("HTTP handshake: {e}"),
            };
            if h2 {
                let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .keep_alive_interval(KEEP_ALIVE_INTERVAL)
                    .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
                    .handshake(io)
                    .await
                    .map_err(handshake_failed)?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "HTTP/2 connection to the target ended");
                    }
                });
                Ok(Sender::H2(sender))
            } else {
                cap.store(1, Ordering::Relaxed);
                let (sender, conn) = http1::handshake(io).await.map_err(handshake_failed)?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "HTTP/1.1 connection to the target ended");
                    }
                });
                Ok(Sender::H1(Arc::new(Mutex::new(Some(sender)))))
            }
        });
        let ready = async move {
            task.await.unwrap_or_else(|e| {
                Err(DialError {
                    timeout: false,
                    message: format!("dial task: {e}"),
                })
            })
        }
        .boxed()
        .shared();
        Conn {
            streams: AtomicUsize::new(0),
            capacity,
            ready,
        }
    }

    /// A failed dial, or a connection that closed.
    fn is_dead(&self) -> bool {
        match self.ready.peek() {
            None => false,
            Some(Err(_)) => true,
            Some(Ok(Sender::H2(s))) => s.is_closed(),
            Some(Ok(Sender::H1(slot))) => slot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|s| s.is_closed()),
        }
    }
}

/// A stream reserved on a connection; released when dropped (however the answer's body
/// ended: a connection broken by an unread body is seen dead). An HTTP/1.1 connection's
/// sender goes back to the connection with it.
struct Reservation {
    conn: Arc<Conn>,
    h1: Option<(H1Slot, http1::SendRequest<Full<Bytes>>)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((slot, sender)) = self.h1.take() {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        }
        self.conn.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Guard for Reservation {
    fn finish(self, _: End) {}
}

/// The body of a target's answer: a stream on an HTTP/2 connection, held until it is read to
/// the end or dropped, or an answer read whole ([`crate::target::exchange`]).
pub struct TargetBody(Kind);

enum Kind {
    Stream(GuardedBody<Incoming, Reservation>),
    Whole(Option<Bytes>),
    /// The head came, the body broke off: the error is the body's one frame.
    Broken(Option<ExchangeError>),
}

impl TargetBody {
    pub(crate) fn whole(body: Bytes) -> Self {
        Self(Kind::Whole(Some(body).filter(|b| !b.is_empty())))
    }

    pub(crate) fn broken(e: ExchangeError) -> Self {
        Self(Kind::Broken(Some(e)))
    }
}

impl std::fmt::Debug for TargetBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetBody").finish_non_exhaustive()
    }
}

impl Body for TargetBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.0 {
            Kind::Stream(inner) => Pin::new(inner).poll_frame(cx).map_err(Into::into),
            Kind::Whole(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            Kind::Broken(e) => Poll::Ready(e.take().map(|e| Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Kind::Stream(inner) => inner.is_end_stream(),
            Kind::Whole(body) => body.is_none(),
            Kind::Broken(e) => e.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Kind::Stream(inner) => inner.size_hint(),
            Kind::Whole(body) => SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Broken(_) => SizeHint::default(),
        }
    }
}

/// How often a request may meet a connection that closed before it was written (the peer's
/// idle timeout, a GOAWAY) before the pool gives up.
const UNSENT_ATTEMPTS: usize = 3;

impl Pool {
    /// Connections per peer (tests and metrics of the pool's shape).
    pub fn connections(&self, addr: &PeerAddress) -> usize {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.get_mut(addr).map_or(0, |list| {
            list.retain(|c| !c.is_dead());
            list.len()
        })
    }

    /// Sends `req` (absolute URI) to `addr` over a pooled connection, dialling one with `dial`
    /// when none has room.
    pub async fn send(
        &self,
        addr: &PeerAddress,
        mut req: Request<Full<Bytes>>,
        dial: impl Fn() -> Dial,
    ) -> Result<Response<TargetBody>, SendError> {
        let mut last = None;
        let mut attempts = 0;
        while attempts < UNSENT_ATTEMPTS {
            let mut reservation = self.reserve(addr, &dial);
            let sender = match reservation.conn.ready.clone().await {
                Ok(s) => s,
                Err(e) => return Err(SendError::Dial(e)),
            };
            let sent = match sender {
                Sender::H2(mut s) => s.try_send_request(req).await,
                Sender::H1(slot) => {
                    let taken = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                    // Another request reserved this connection while it was dialled, before it
                    // turned out to be HTTP/1.1: find another.
                    let Some(s) = taken else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    // From here the reservation owns the sender: however this request ends
                    // (answered, failed, dropped), it goes back to the connection.
                    let (_, s) = reservation.h1.insert((slot, s));
                    if s.ready().await.is_err() {
                        // Closed: the next reservation sees it dead.
                        attempts += 1;
                        continue;
                    }
                    to_origin_form(&mut req);
                    s.try_send_request(req).await
                }
            };
            match sent {
                Ok(resp) => {
                    return Ok(resp.map(|inner| {
                        TargetBody(Kind::Stream(GuardedBody::new(inner, reservation)))
                    }));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => {
                        req = unsent;
                        attempts += 1;
                        last = Some(e.into_error());
                    }
                    None => return Err(SendError::Sent(e.into_error().into())),
                },
            }
        }
        match last {
            Some(e) => Err(SendError::NotSent(e.into())),
            None => Err(SendError::Dial(DialError {
                timeout: false,
                message: "every connection closed before the request was sent".into(),
            })),
        }
    }

    /// A stream on the first connection of `addr` with room, or on a new dial.
    fn reserve(&self, addr: &PeerAddress, dial: &impl Fn() -> Dial) -> Reservation {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let list = peers.entry(addr.clone()).or_default();
        list.retain(|c| !c.is_dead());
        let conn = match list
            .iter()
            .find(|c| c.streams.load(Ordering::Acquire) < c.capacity.load(Ordering::Relaxed))
        {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(Conn::dialing(dial()));
                list.push(c.clone());
                c
            }
        };
        conn.streams.fetch_add(1, Ordering::AcqRel);
        Reservation { conn, h1: None }
    }
}

/// HTTP/1.1 requests carry the path and a `Host` header, not the absolute URI HTTP/2 needs.
fn to_origin_form(req: &mut Request<Full<Bytes>>) {
    let uri = req.uri().clone();
    if let Some(authority) = uri.authority()
        && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
    {
        req.headers_mut().insert(http::header::HOST, host);
    }
    if let Some(pq) = uri.path_and_query() {
        *req.uri_mut() = http::Uri::from(pq.clone());
    }
}
