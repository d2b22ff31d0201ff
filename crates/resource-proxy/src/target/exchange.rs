//! Non-watch requests to a target: one request and its whole answer over a pooled HTTP/1.1
//! connection, written and read by the calling task itself.
//!
//! Why not the HTTP/2 connections of [`crate::target::pool`] (which carry the watches): there a request
//! hands its frames to the connection's own task and is woken again when that task has read the
//! answer, two task hops (across tokio workers, thread wake-ups) and an HTTP/2 state machine per
//! request, which made up most of what the proxy added to a GET. Here the request's task writes
//! the request and reads the answer on a connection it holds alone, like the caller's side of
//! the proxy does. Non-watch answers are read whole by the handler anyway (ownership check,
//! owner references), so reading them whole here costs nothing, and they are bounded by the
//! 60 s deadline.
//!
//! A connection goes back to its peer's idle list when its answer was read to the end and the
//! target keeps it open; an idle connection is used for at most [`IDLE_FOR_AT_MOST`] (API
//! servers close theirs after 90 s) and is checked for a close by the target before it is
//! reused. A request that finds its reused connection closed before anything of it was written,
//! or (for a method that may be repeated) before any byte of the answer came, is sent again on
//! another connection, as HTTP clients do.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use http1_wire::{
    ChunkedDecoder, ChunkedLimits, Framing, FramingError, HeadError, Limits, ResponseFraming, Step,
    TransferCoding,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

use super::conn::{Dial, DialError, ExchangeError, SendError};
use super::pool::TargetBody;
use crate::config::PeerAddress;

/// The longest a connection waits idle before it is used again; older ones are closed.
pub const IDLE_FOR_AT_MOST: Duration = Duration::from_secs(30);
/// Idle connections kept per peer; a connection beyond them is closed when its answer is read.
const IDLE_PER_PEER: usize = 128;
/// The largest answer head, and its header fields.
const HEAD_LIMITS: Limits = Limits {
    max_head: 256 * 1024,
    max_fields: 128,
};
/// A chunk-size line and the trailer section of a chunked answer.
const CHUNKED_LIMITS: ChunkedLimits = ChunkedLimits {
    max_size_line: 1024,
    max_trailers: 256 * 1024,
};
/// Connections closed under a request before it could be answered, before the request fails.
const ATTEMPTS: usize = 3;

/// Boxed: a TLS stream is large (rustls' connection state), and a request's future holds the
/// connection across its awaits and moves it in and out of the idle lists; a pointer keeps those
/// moves (and the future) small.
type Io = Box<TlsStream<TcpStream>>;

struct Idle<C> {
    io: C,
    since: Instant,
}

/// The idle HTTP/1.1 connections of one target, by peer.
#[derive(Default)]
pub struct Exchanges {
    idle: Mutex<IdleLists<Io>>,
}

struct IdleLists<C> {
    by_peer: HashMap<PeerAddress, Vec<Idle<C>>>,
    /// When connections too old to be used were last closed, for every peer (a peer that left
    /// the peer list is never asked for a connection again).
    swept: Option<Instant>,
}

impl<C> Default for IdleLists<C> {
    fn default() -> Self {
        Self {
            by_peer: HashMap::new(),
            swept: None,
        }
    }
}

impl<C> IdleLists<C> {
    /// Keeps `conn` as the most recently used idle connection to `addr` (unless the peer has
    /// [`IDLE_PER_PEER`] already), after closing the connections idle for longer than
    /// [`IDLE_FOR_AT_MOST`] (every peer's, at most once per that period).
    fn put(&mut self, addr: &PeerAddress, conn: C, now: Instant) {
        self.sweep(now);
        if !self.by_peer.contains_key(addr) {
            self.by_peer.insert(addr.clone(), Vec::new());
        }
        let list = self.by_peer.get_mut(addr).expect("inserted above");
        if list.len() < IDLE_PER_PEER {
            list.push(Idle {
                io: conn,
                since: now,
            });
        }
    }

    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < IDLE_FOR_AT_MOST)
        {
            return;
        }
        self.swept = Some(now);
        self.by_peer.retain(|_, list| {
            list.retain(|c| now.duration_since(c.since) <= IDLE_FOR_AT_MOST);
            !list.is_empty()
        });
    }
}

impl Exchanges {
    /// Idle connections to `addr`.
    pub fn idle_connections(&self, addr: &PeerAddress) -> usize {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.by_peer.get(addr).map_or(0, Vec::len)
    }

    /// Sends `req` (origin-form URI) to `addr` with `extra` headers (the proxy's credential) and
    /// reads its whole answer, on an idle connection or one made with `dial`.
    pub async fn send(
        &self,
        addr: &PeerAddress,
        authority: &str,
        req: &Request<Bytes>,
        extra: &[(HeaderName, HeaderValue)],
        dial: impl Fn() -> Dial,
    ) -> Result<Response<TargetBody>, SendError> {
        let wire = encode(req, authority, extra);
        let repeatable = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let (mut io, reused) = match self.take(addr) {
                Some(io) => (io, true),
                None => (dial_to_the_end(dial()).await?, false),
            };
            if let Err(e) = write(&mut io, &wire).await {
                // A request is read by the target only once it is whole: nothing happened.
                last = Some(ExchangeError::Io(e));
                continue;
            }
            match read_answer(&mut io, req.method()).await {
                Ok((resp, keep)) => {
                    if keep {
                        self.put(addr, io);
                    }
                    return Ok(resp);
                }
                Err(Failure::NothingCame(e)) if reused && repeatable => last = Some(e),
                Err(Failure::NothingCame(e) | Failure::Broke(e)) => {
                    return Err(SendError::Sent(Box::new(e)));
                }
                Err(Failure::BodyBroke(head, e)) => {
                    return Ok(Response::from_parts(head, TargetBody::broken(e)));
                }
            }
        }
        Err(SendError::NotSent(Box::new(
            last.unwrap_or(ExchangeError::Closed),
        )))
    }

    /// The most recently used idle connection to `addr` that is young enough and still open.
    fn take(&self, addr: &PeerAddress) -> Option<Io> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.by_peer.get_mut(addr)?;
        while let Some(mut conn) = list.pop() {
            if conn.since.elapsed() <= IDLE_FOR_AT_MOST && still_open(&mut conn.io) {
                return Some(conn.io);
            }
        }
        None
    }

    fn put(&self, addr: &PeerAddress, io: Io) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.put(addr, io, now);
    }
}

/// Runs `dial` in a task of its own: it completes (and reports its outcome to the peer health)
/// even when the request that started it goes away.
async fn dial_to_the_end(dial: Dial) -> Result<Io, SendError> {
    match tokio::spawn(dial).await {
        Ok(dialled) => dialled.map(Box::new).map_err(SendError::Dial),
        Err(e) => Err(SendError::Dial(DialError {
            timeout: false,
            message: format!("dial task: {e}"),
        })),
    }
}

/// Whether an idle connection has seen neither a close nor stray bytes from the target. Costs
/// no system call unless the connection became readable since its last read.
fn still_open(io: &mut Io) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    matches!(Pin::new(io).poll_read(&mut cx, &mut buf), Poll::Pending)
}

async fn write(io: &mut Io, wire: &[u8]) -> std::io::Result<()> {
    io.write_all(wire).await?;
    io.flush().await
}

/// The request on the wire: request line, `Host`, the request's fields and `extra`, framing by
/// `Content-Length`, and the body.
fn encode(req: &Request<Bytes>, authority: &str, extra: &[(HeaderName, HeaderValue)]) -> Vec<u8> {
    let body = req.body();
    let path = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    let fields = req
        .headers()
        .iter()
        .filter(|(name, _)| {
            !matches!(
                **name,
                HOST | CONTENT_LENGTH | TRANSFER_ENCODING | CONNECTION
            )
        })
        .chain(extra.iter().map(|(n, v)| (n, v)));
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || !matches!(*req.method(), Method::GET | Method::HEAD | Method::DELETE) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// How reading an answer failed.
enum Failure {
    /// The connection closed or failed before any byte of the answer.
    NothingCame(ExchangeError),
    /// The answer's head was cut off or is not HTTP.
    Broke(ExchangeError),
    /// The head came; the body was cut off.
    BodyBroke(http::response::Parts, ExchangeError),
}

/// Reads one answer to a request of `method`: its head and whole body, and whether the
/// connection can carry another request.
async fn read_answer<S: AsyncRead + Unpin>(
    io: &mut S,
    method: &Method,
) -> Result<(Response<TargetBody>, bool), Failure> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut received = false;
    let head = loop {
        let parsed = if buf.is_empty() {
            Ok(None)
        } else {
            parse_head(&mut buf, method)
        };
        match parsed {
            Ok(Some(head)) => {
                // An interim answer (100 Continue) is followed by the real one.
                if head.parts.status.is_informational() {
                    continue;
                }
                break head;
            }
            Ok(None) => {}
            Err(e) => return Err(Failure::Broke(e)),
        }
        match read_more(io, &mut buf).await {
            Ok(0) | Err(_) if !received => {
                return Err(Failure::NothingCame(ExchangeError::Closed));
            }
            Ok(0) => return Err(Failure::Broke(ExchangeError::Closed)),
            Ok(_) => received = true,
            Err(e) => return Err(Failure::Broke(e.into())),
        }
    };
    let Head {
        parts,
        framing,
        mut keep_alive,
    } = head;
    let body = match framing {
        Framing::Empty => Ok(Bytes::new()),
        Framing::Length(n) => match usize::try_from(n) {
            Ok(n) => read_length(io, &mut buf, n).await,
            Err(_) => Err(ExchangeError::Malformed("bad content-length")),
        },
        Framing::Chunked => read_chunked(io, &mut buf).await,
        Framing::CloseDelimited => {
            keep_alive = false;
            read_to_end(io, &mut buf).await
        }
    };
    match body {
        // Bytes beyond the answer: the connection's framing is lost.
        Ok(body) => Ok((
            Response::from_parts(parts, TargetBody::whole(body)),
            keep_alive && buf.is_empty(),
        )),
        Err(e) => Err(Failure::BodyBroke(parts, e)),
    }
}

async fn read_more<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    io.read_buf(buf).await
}

struct Head {
    parts: http::response::Parts,
    framing: Framing,
    keep_alive: bool,
}

/// The answer's head at the start of `buf`, taken off it, or `None` while it is incomplete.
/// Field values are slices of the head's bytes, not copies.
fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, ExchangeError> {
    let mut fields = Vec::new();
    let head = match http1_wire::parse_response_head(buf, HEAD_LIMITS, &mut fields) {
        Ok(Some(head)) => head,
        Ok(None) => return Ok(None),
        Err(HeadError::TooLarge { .. }) => return Err(ExchangeError::Malformed("head too large")),
        Err(HeadError::TooManyFields { .. }) => {
            return Err(ExchangeError::Malformed("too many header fields"));
        }
        Err(HeadError::InvalidStatus) => return Err(ExchangeError::Malformed("bad status code")),
        Err(HeadError::Malformed(_)) => return Err(ExchangeError::Malformed("unparsable head")),
    };
    // Only `chunked` (last) frames a body this proxy can read.
    if head.fields.transfer_encoding == Some(TransferCoding::Other) {
        return Err(ExchangeError::Malformed("unsupported transfer coding"));
    }
    let ResponseFraming {
        framing,
        keep_alive,
    } = head.framing(method).map_err(|e| match e {
        FramingError::ConflictingLength => ExchangeError::Malformed("conflicting content-length"),
        _ => ExchangeError::Malformed("bad content-length"),
    })?;
    let bytes = buf.split_to(head.len).freeze();
    // The connection's own fields (RFC 9110 §7.6.1) are not part of the answer.
    let listed: Vec<&[u8]> = http1_wire::hop::connection_tokens(
        fields
            .iter()
            .filter(|f| f.name.of_buf(&bytes).eq_ignore_ascii_case(b"connection"))
            .map(|f| f.value.of_buf(&bytes)),
    )
    .collect();
    let mut headers = HeaderMap::with_capacity(fields.len());
    for field in &fields {
        let name = HeaderName::from_bytes(field.name.of_buf(&bytes))
            .map_err(|_| ExchangeError::Malformed("bad header name"))?;
        if name == CONNECTION
            || name == TRANSFER_ENCODING
            || listed
                .iter()
                .any(|l| l.eq_ignore_ascii_case(name.as_str().as_bytes()))
        {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(bytes.slice(field.value.range()))
            .map_err(|_| ExchangeError::Malformed("bad header value"))?;
        headers.append(name, value);
    }
    if framing == Framing::Chunked {
        headers.remove(CONTENT_LENGTH);
    }
    let mut parts = Response::new(()).into_parts().0;
    parts.status = head.status;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        framing,
        keep_alive,
    }))
}

async fn read_length<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    n: usize,
) -> Result<Bytes, ExchangeError> {
    if buf.len() < n {
        // Bounded: a wrong length must not reserve memory the answer never fills.
        buf.reserve((n - buf.len()).min(16 << 20));
    }
    while buf.len() < n {
        if read_more(io, buf).await? == 0 {
            return Err(ExchangeError::Closed);
        }
    }
    Ok(buf.split_to(n).freeze())
}

async fn read_to_end<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Bytes, ExchangeError> {
    while read_more(io, buf).await? != 0 {}
    Ok(buf.split().freeze())
}

/// A chunked body, decoded; its trailer fields are dropped.
async fn read_chunked<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Bytes, ExchangeError> {
    let mut decoder = ChunkedDecoder::new(CHUNKED_LIMITS);
    let mut body = BytesMut::new();
    loop {
        match decoder.decode(buf)? {
            Step::Data { framing, data } => {
                buf.advance(framing);
                if body.is_empty() {
                    // The first chunk (often the only one) is not copied.
                    body = buf.split_to(data);
                } else {
                    body.extend_from_slice(&buf[..data]);
                    buf.advance(data);
                }
            }
            Step::End { framing } => {
                buf.advance(framing);
                return Ok(body.freeze());
            }
            Step::NeedMore => {
                buf.clear();
                if read_more(io, buf).await? == 0 {
                    return Err(ExchangeError::Closed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
