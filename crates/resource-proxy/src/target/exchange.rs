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
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
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
/// Header fields of an answer, and the largest answer head.
const MAX_HEADERS: usize = 128;
const MAX_HEAD: usize = 256 * 1024;
/// Connections closed under a request before it could be answered, before the request fails.
const ATTEMPTS: usize = 3;

type Io = TlsStream<TcpStream>;

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
        Ok(dialled) => dialled.map_err(SendError::Dial),
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

/// How the body of an answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
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
            Ok(None) if buf.len() > MAX_HEAD => {
                return Err(Failure::Broke(ExchangeError::Malformed("head too large")));
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
        Framing::Length(n) => read_length(io, &mut buf, n).await,
        Framing::Chunked => read_chunked(io, &mut buf).await,
        Framing::UntilClose => {
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
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ExchangeError::Malformed("too many header fields"));
        }
        Err(_) => return Err(ExchangeError::Malformed("unparsable head")),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(ExchangeError::Malformed("bad status code"))?;
    let mut keep_alive = resp.version == Some(1);
    let mut chunked = false;
    let mut length: Option<usize> = None;
    // The fields to keep, with where their values are in the head.
    let mut kept = Vec::with_capacity(resp.headers.len());
    let start = buf.as_ptr() as usize;
    for field in resp.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ExchangeError::Malformed("bad header name"))?;
        if name == CONNECTION {
            if has_token(field.value, "close") {
                keep_alive = false;
            }
            continue;
        }
        if name == TRANSFER_ENCODING {
            // Only `chunked` (last) frames a body this proxy can read.
            chunked = field
                .value
                .rsplit(|b| *b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            if !chunked {
                return Err(ExchangeError::Malformed("unsupported transfer coding"));
            }
            continue;
        }
        if name == CONTENT_LENGTH {
            let n = std::str::from_utf8(field.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or(ExchangeError::Malformed("bad content-length"))?;
            if length.is_some_and(|m| m != n) {
                return Err(ExchangeError::Malformed("conflicting content-length"));
            }
            length = Some(n);
        }
        let at = field.value.as_ptr() as usize - start;
        kept.push((name, at..at + field.value.len()));
    }
    let head = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(kept.len());
    for (name, at) in kept {
        let value = HeaderValue::from_maybe_shared(head.slice(at))
            .map_err(|_| ExchangeError::Malformed("bad header value"))?;
        headers.append(name, value);
    }
    let bodyless = *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if bodyless {
        Framing::Length(0)
    } else if chunked {
        headers.remove(CONTENT_LENGTH);
        Framing::Chunked
    } else {
        length.map_or(Framing::UntilClose, Framing::Length)
    };
    let mut parts = Response::new(()).into_parts().0;
    parts.status = status;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        framing,
        keep_alive,
    }))
}

fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
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

async fn read_chunked<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Bytes, ExchangeError> {
    let mut body = BytesMut::new();
    loop {
        let size = loop {
            match decode_chunk_size(buf)? {
                Some(size) => break size,
                None => {
                    if read_more(io, buf).await? == 0 {
                        return Err(ExchangeError::Closed);
                    }
                }
            }
        };
        if size == 0 {
            // Trailer fields, ended by an empty line; none of them is kept.
            loop {
                match memchr::memmem::find(buf, b"\r\n") {
                    Some(0) => {
                        buf.advance(2);
                        return Ok(body.freeze());
                    }
                    Some(i) => buf.advance(i + 2),
                    None if buf.len() > MAX_HEAD => {
                        return Err(ExchangeError::Malformed("trailers too large"));
                    }
                    None => {
                        if read_more(io, buf).await? == 0 {
                            return Err(ExchangeError::Closed);
                        }
                    }
                }
            }
        }
        while buf.len() < size + 2 {
            if read_more(io, buf).await? == 0 {
                return Err(ExchangeError::Closed);
            }
        }
        if &buf[size..size + 2] != b"\r\n" {
            return Err(ExchangeError::Malformed("chunk not ended by CRLF"));
        }
        if body.is_empty() {
            // The first chunk (often the only one) is not copied.
            body = buf.split_to(size);
        } else {
            body.extend_from_slice(&buf[..size]);
            buf.advance(size);
        }
        buf.advance(2);
    }
}

/// The size of the chunk at the start of `buf` (its size line consumed), or `None` while the
/// line is incomplete.
fn decode_chunk_size(buf: &mut BytesMut) -> Result<Option<usize>, ExchangeError> {
    match httparse::parse_chunk_size(buf) {
        Ok(httparse::Status::Complete((consumed, size))) => {
            buf.advance(consumed);
            usize::try_from(size)
                .ok()
                .filter(|s| *s < usize::MAX - 2)
                .map(Some)
                .ok_or(ExchangeError::Malformed("chunk too large"))
        }
        Ok(httparse::Status::Partial) if buf.len() > 1024 => {
            Err(ExchangeError::Malformed("chunk size line too long"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(ExchangeError::Malformed("bad chunk size")),
    }
}

#[cfg(test)]
mod tests;
