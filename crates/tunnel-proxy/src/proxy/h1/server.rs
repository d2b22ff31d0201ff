//! The client side of the fast path: the loop of one connection, reading request heads and
//! small bodies, answering locally or forwarding (see [`super::exchange`]), or handing the
//! connection to hyper.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::debug;
use tunnel_config::config::BackendProtocol;

use super::codec::{self, RequestHead};
use super::exchange::{self, Buffers};
use crate::proxy::answer::{Completion, head_too_large};
use crate::proxy::conn::{HEADER_READ_TIMEOUT, StopHandle, peer_ip};
use crate::proxy::route::{Decision, Handed, decide};
use crate::proxy::service::{HyperServer, serve_with_hyper};
use crate::state::State;

const READ_CHUNK: usize = 8 * 1024;
/// How long, and how many bytes at most, the input of a connection closed after a refused
/// head is read and dropped.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

/// What one connection keeps between requests.
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    peer_ip: HeaderValue,
    state: Arc<State>,
    stop: StopHandle,
    /// Bytes read from the client and not yet used.
    input: BytesMut,
    bufs: Buffers,
}

/// Serves one client connection until it closes, `stop` is raised between requests, or
/// hyper takes it over.
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    hyper: Arc<HyperServer>,
    stop: StopHandle,
) {
    let mut conn = Conn {
        stream,
        peer,
        peer_ip: peer_ip(peer),
        state,
        stop,
        input: BytesMut::with_capacity(READ_CHUNK),
        bufs: Buffers::default(),
    };
    let head_timer = tokio::time::sleep(HEADER_READ_TIMEOUT);
    tokio::pin!(head_timer);
    let stop = conn.stop.clone();
    let raised = stop.raised();
    tokio::pin!(raised);
    loop {
        let deadline = Instant::now() + HEADER_READ_TIMEOUT;
        let req = loop {
            let max_head = conn.state.max_request_head();
            match codec::parse_request(&mut conn.input, max_head, &mut conn.bufs.scratch) {
                RequestHead::Complete(req) => break req,
                RequestHead::TooLarge => {
                    debug!(peer = %conn.peer, max_head, "request head too large; answering 431");
                    return refuse_large_head(conn).await;
                }
                RequestHead::Declined(why) => {
                    debug!(peer = %conn.peer, why, "hyper takes over the connection");
                    return hand_over(conn, Bytes::new(), None, &hyper).await;
                }
                RequestHead::Partial => {}
            }
            let idle = conn.input.is_empty();
            if idle && conn.stop.is_raised() {
                return;
            }
            conn.input.reserve(READ_CHUNK);
            tokio::select! {
                biased;
                read = conn.stream.read_buf(&mut conn.input) => match read {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) => {
                        debug!(peer = %conn.peer, error = %e, "client connection failed");
                        return;
                    }
                },
                () = &mut head_timer => {
                    // One timer per connection, moved only when it fires early: a request
                    // head costs no timer operation.
                    if Instant::now() >= deadline {
                        debug!(peer = %conn.peer, "no complete request head within {HEADER_READ_TIMEOUT:?}; closing");
                        return;
                    }
                    head_timer.as_mut().reset(deadline);
                }
                () = &mut raised, if idle => return,
            }
        };
        let body = match req.content_length {
            Some(n) if n > 0 => match read_body(&mut conn, n as usize).await {
                Some(body) => body,
                None => return,
            },
            _ => Bytes::new(),
        };
        let table = conn.state.table();
        let mut host = conn.state.metrics().unmatched().clone();
        let decision = match decide(conn.peer, &req.parts, table.as_ref(), &mut host) {
            Decision::Forward(routed)
                if !(routed.upstream.protocol == BackendProtocol::Http1
                    && routed.rule.mirrors.is_empty()) =>
            {
                let handed = routed.hand(host);
                drop(table);
                let mut prefix = BytesMut::with_capacity(req.head.len() + body.len());
                prefix.extend_from_slice(&req.head);
                prefix.extend_from_slice(&body);
                drop(req);
                return hand_over(conn, prefix.freeze(), Some(handed), &hyper).await;
            }
            decision => decision,
        };
        let done = Completion::begin(&conn.state, host);
        let keep = match decision {
            Decision::Respond(answer) => {
                let close = req.close || conn.stop.is_raised();
                exchange::write_local(&mut conn.stream, &mut conn.bufs.out, answer, close, done)
                    .await
            }
            Decision::Forward(routed) => {
                let client = exchange::Client {
                    stream: &mut conn.stream,
                    peer_ip: &conn.peer_ip,
                    stop: &conn.stop,
                    close: req.close,
                };
                exchange::forward(
                    client,
                    req.parts,
                    req.content_length,
                    body,
                    &routed,
                    done,
                    &mut conn.bufs,
                )
                .await
            }
        };
        if !keep {
            let _ = conn.stream.shutdown().await;
            return;
        }
    }
}

/// Answers 431 to a head over the limit (counted for no route: the head was not read) and
/// closes. The rest of the head is read and dropped for a while first: closing a socket with
/// unread input resets the connection, and the client might lose the answer.
async fn refuse_large_head(mut conn: Conn) {
    let done = Completion::begin(&conn.state, conn.state.metrics().unmatched().clone());
    let answer = head_too_large();
    // Whether it was written or not, the connection closes.
    exchange::write_local(&mut conn.stream, &mut conn.bufs.out, answer, true, done).await;
    if conn.stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut sink = [0u8; READ_CHUNK];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match conn.stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// Reads the rest of a `len`-byte request body. `None` when the client went away.
async fn read_body(conn: &mut Conn, len: usize) -> Option<Bytes> {
    while conn.input.len() < len {
        conn.input.reserve(len - conn.input.len());
        match conn.stream.read_buf(&mut conn.input).await {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => {
                debug!(peer = %conn.peer, error = %e, "client connection failed");
                return None;
            }
        }
    }
    Some(conn.input.split_to(len).freeze())
}

/// Lets hyper serve the rest of the connection: `prefix` (a declined request's head and
/// body), then whatever was read after it, then the socket. `handed`: the decision for the
/// request in `prefix`, when the fast path routed it.
async fn hand_over(conn: Conn, prefix: Bytes, handed: Option<Handed>, hyper: &HyperServer) {
    let prefix = if prefix.is_empty() {
        conn.input.freeze()
    } else {
        let mut all = BytesMut::with_capacity(prefix.len() + conn.input.len());
        all.extend_from_slice(&prefix);
        all.extend_from_slice(&conn.input);
        all.freeze()
    };
    serve_with_hyper(
        conn.stream,
        prefix,
        conn.peer,
        conn.state,
        hyper,
        conn.stop,
        handed,
    )
    .await;
}
