//! The backend side of the fast path: one request forwarded over a pooled HTTP/1.1
//! connection, and its answer streamed back to the client in the same task.
//!
//! Failures answer as the hyper path does (503 when no connection could be made, 502 for a
//! failed TLS handshake or a broken exchange, 504 when the response head did not arrive in
//! time), with the same log line and `cftunnel_proxy_backend_errors_total` reason. A request
//! that a reused connection could not carry (the backend had closed it) is sent again on
//! another one when that cannot do harm: nothing was written, or the method is idempotent
//! and nothing came back.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use http1_wire::{ChunkedDecoder, ChunkedLimits};

use super::codec::{self, Framing, ResponseHead};
use crate::metrics::BackendErrorReason;
use crate::proxy::answer::{
    Completion, Local, backend_failure, connect_reason, error_chain, local,
};
use crate::proxy::conn::Stop;
use crate::proxy::headers::{
    X_FORWARDED_FOR, X_FORWARDED_PROTO, filter_request_headers, forwarding, strip_hop_by_hop,
    upstream_target,
};
use crate::proxy::route::Routed;
use crate::upstream::{ConnectError, EndpointPool, RawConn};

const READ_CHUNK: usize = 8 * 1024;
/// Read size while streaming a body; the buffer is given back after a body this large.
const STREAM_CHUNK: usize = 256 * 1024;

/// Buffers a client connection reuses from request to request.
#[derive(Default)]
pub(super) struct Buffers {
    /// A head (and small body) on its way out.
    pub out: Vec<u8>,
    /// Bytes read from the backend.
    backend: BytesMut,
    pub scratch: codec::Scratch,
}

/// The client connection's side of an exchange.
pub(super) struct Client<'a> {
    pub stream: &'a mut TcpStream,
    pub peer_ip: &'a HeaderValue,
    pub stop: &'a Stop,
    /// The client asked to close after this exchange.
    pub close: bool,
}

/// Why no response head came from the backend.
#[derive(Debug)]
enum Failure {
    Connect(ConnectError),
    /// The backend broke the exchange (or sent something that is not HTTP/1.1).
    Protocol(String),
    Timeout(std::time::Duration),
}

/// Forwards one request and streams the answer; whether the client connection stays open.
pub(super) async fn forward(
    client: Client<'_>,
    mut parts: Parts,
    content_length: Option<u64>,
    body: Bytes,
    routed: &Routed<'_>,
    done: Completion,
    bufs: &mut Buffers,
) -> bool {
    let rule = routed.rule;
    filter_request_headers(&mut parts.headers, rule, false);
    let fwd = forwarding(&parts.headers, rule, &routed.authority, client.peer_ip);
    let Some(target) = upstream_target(rule, &parts.uri, routed.matched_prefix) else {
        let answer = local(StatusCode::BAD_REQUEST, "invalid request target\n");
        return answer_locally(client, answer, routed, done, bufs).await;
    };
    let endpoint = routed.upstream.next_endpoint();
    let pool = endpoint.pool().expect("HTTP/1 endpoints have an idle list");
    let out = &mut bufs.out;
    out.clear();
    // Written in place of the client's fields rather than inserted into the map.
    let host = (&header::HOST, &fwd.host);
    let proto = (&X_FORWARDED_PROTO, &fwd.forwarded_proto);
    let (with_for, without_for);
    let set: &[(&HeaderName, &HeaderValue)] = match &fwd.forwarded_for {
        Some(v) => {
            with_for = [host, (&X_FORWARDED_FOR, v), proto];
            &with_for
        }
        None => {
            without_for = [host, proto];
            &without_for
        }
    };
    codec::write_request_head(
        out,
        &parts.method,
        target.as_str(),
        &parts.headers,
        set,
        content_length.map(|_| body.len() as u64),
    );
    out.extend_from_slice(&body);
    let sent = send(
        pool,
        out,
        &parts.method,
        &mut bufs.backend,
        &mut bufs.scratch,
    );
    let result = match rule.response_timeout() {
        Some(d) => tokio::time::timeout(d, sent)
            .await
            .unwrap_or(Err(Failure::Timeout(d))),
        None => sent.await,
    };
    let (backend, resp) = match result {
        Ok(answer) => answer,
        Err(failure) => {
            let reason = match &failure {
                Failure::Connect(e) => connect_reason(e),
                Failure::Protocol(_) => BackendErrorReason::Protocol,
                Failure::Timeout(_) => BackendErrorReason::Timeout,
            };
            match &failure {
                Failure::Timeout(d) => warn!(route = %rule.route, backend = %routed.backend.name,
                    %endpoint, reason = "timeout", timeout_ms = d.as_millis() as u64,
                    "backend request failed"),
                Failure::Connect(e) => warn!(route = %rule.route, backend = %routed.backend.name,
                    %endpoint, reason = reason.as_str(), error = %error_chain(e),
                    "backend request failed"),
                Failure::Protocol(e) => warn!(route = %rule.route, backend = %routed.backend.name,
                    %endpoint, reason = reason.as_str(), error = %e, "backend request failed"),
            }
            done.host.backend_error(reason);
            bufs.backend.clear();
            let answer = backend_failure(reason);
            return answer_locally(client, answer, routed, done, bufs).await;
        }
    };
    // Most rules change no response field: the backend's head is then copied, not parsed
    // into a map.
    let modified = if !routed.changes_response() {
        None
    } else {
        match resp.header_map(&bufs.scratch) {
            Some(mut headers) => {
                strip_hop_by_hop(&mut headers, false);
                routed.change_response(&mut headers);
                Some(headers)
            }
            None => {
                warn!(route = %rule.route, backend = %routed.backend.name, %endpoint,
                    reason = "protocol", "backend response has a field that cannot be represented");
                done.host.backend_error(BackendErrorReason::Protocol);
                bufs.backend.clear();
                let answer = backend_failure(BackendErrorReason::Protocol);
                return answer_locally(client, answer, routed, done, bufs).await;
            }
        }
    };
    done.host.response(resp.status);
    let close = client.close || client.stop.is_raised() || resp.framing == Framing::CloseDelimited;
    let out = &mut bufs.out;
    out.clear();
    match &modified {
        None => resp.write_forwarded_head(&bufs.scratch, out, close),
        Some(headers) => codec::write_response_head(out, resp.status, headers, resp.framing, close),
    }
    let streamed = stream_body(
        client.stream,
        backend,
        resp.framing,
        resp.keep_alive,
        out,
        &mut bufs.backend,
    )
    .await;
    if bufs.backend.capacity() > STREAM_CHUNK / 2 {
        bufs.backend = BytesMut::new();
    }
    match streamed {
        Ok(Some(backend)) => pool.put_raw(backend),
        Ok(None) => {}
        Err(Broken::Client(e)) => {
            debug!(route = %rule.route, error = %e, "client went away during the response");
            return false;
        }
        Err(Broken::Backend(e)) => {
            warn!(route = %rule.route, backend = %routed.backend.name, %endpoint,
                reason = "protocol", error = %e, "backend response broke off; closing the client connection");
            done.host.backend_error(BackendErrorReason::Protocol);
            return false;
        }
    }
    drop(done);
    !close
}

/// A local answer (with the rule's response header changes) in place of the backend's.
async fn answer_locally(
    client: Client<'_>,
    mut answer: Local,
    routed: &Routed<'_>,
    done: Completion,
    bufs: &mut Buffers,
) -> bool {
    routed.change_response(&mut answer.headers);
    let close = client.close || client.stop.is_raised();
    write_local(client.stream, &mut bufs.out, answer, close, done).await
}

/// Writes an answer the proxy makes itself (counted for `done`'s route); whether the client
/// connection stays open. An answer that says `Connection: close` closes it.
pub(super) async fn write_local(
    stream: &mut TcpStream,
    out: &mut Vec<u8>,
    mut answer: Local,
    close: bool,
    done: Completion,
) -> bool {
    done.host.response(answer.status);
    let close = answer.headers.remove(header::CONNECTION).is_some() || close;
    out.clear();
    codec::write_response_head(
        out,
        answer.status,
        &answer.headers,
        Framing::Length(answer.body.len() as u64),
        close,
    );
    out.extend_from_slice(answer.body.as_bytes());
    stream.write_all(out).await.is_ok() && !close
}

/// Sends the request (head and body, in `request`) on an idle connection or a new one and
/// reads the response head into `buf`.
async fn send(
    pool: &EndpointPool,
    request: &[u8],
    method: &Method,
    buf: &mut BytesMut,
    scratch: &mut codec::Scratch,
) -> Result<(RawConn, codec::Response), Failure> {
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    loop {
        let (mut conn, reused) = match pool.take_raw().await {
            Some(conn) => (conn, true),
            // Boxed: keeps the dial's state out of every request's future.
            None => (
                Box::pin(pool.connect_raw())
                    .await
                    .map_err(Failure::Connect)?,
                false,
            ),
        };
        buf.clear();
        if let Err(e) = conn.write_all(request).await {
            if reused {
                continue;
            }
            return Err(Failure::Protocol(format!("writing the request: {e}")));
        }
        match read_head(&mut conn, buf, method, scratch).await {
            Ok(resp) => return Ok((conn, resp)),
            Err(HeadError::NothingBack(_)) if reused && idempotent => {
                debug!("an idle backend connection closed under the request; sending it again");
                continue;
            }
            Err(HeadError::NothingBack(e)) => {
                return Err(Failure::Protocol(format!(
                    "the connection closed before a response: {e}"
                )));
            }
            Err(HeadError::Invalid(e)) => return Err(Failure::Protocol(e)),
        }
    }
}

enum HeadError {
    /// Closed or failed before a single byte of a response.
    NothingBack(String),
    Invalid(String),
}

async fn read_head(
    conn: &mut RawConn,
    buf: &mut BytesMut,
    method: &Method,
    scratch: &mut codec::Scratch,
) -> Result<codec::Response, HeadError> {
    let mut received = false;
    loop {
        if !buf.is_empty() {
            match codec::parse_response(buf, method, scratch) {
                ResponseHead::Complete(resp) => return Ok(resp),
                ResponseHead::Interim(len) => {
                    buf.advance(len);
                    continue;
                }
                ResponseHead::Invalid(why) => return Err(HeadError::Invalid(why.to_owned())),
                ResponseHead::Partial => {}
            }
        }
        buf.reserve(READ_CHUNK);
        match conn.read_buf(buf).await {
            Ok(0) if !received => return Err(HeadError::NothingBack("end of stream".into())),
            Ok(0) => {
                return Err(HeadError::Invalid(
                    "end of stream inside the response head".into(),
                ));
            }
            Ok(_) => received = true,
            Err(e) if !received => return Err(HeadError::NothingBack(e.to_string())),
            Err(e) => return Err(HeadError::Invalid(e.to_string())),
        }
    }
}

/// Which side broke a body transfer.
enum Broken {
    Client(std::io::Error),
    Backend(String),
}

/// Writes the response head and the body after it. `Ok(Some(conn))`: the backend connection
/// can carry another request.
async fn stream_body(
    client: &mut TcpStream,
    mut backend: RawConn,
    framing: Framing,
    keep_alive: bool,
    head: &[u8],
    buf: &mut BytesMut,
) -> Result<Option<RawConn>, Broken> {
    match framing {
        Framing::Empty => {
            client.write_all(head).await.map_err(Broken::Client)?;
        }
        Framing::Length(len) => {
            let mut left = len;
            let first = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            write_two(client, head, &buf[..first]).await?;
            buf.advance(first);
            left -= first as u64;
            while left > 0 {
                read_more(&mut backend, buf).await?;
                let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                client.write_all(&buf[..n]).await.map_err(Broken::Client)?;
                buf.advance(n);
                left -= n as u64;
            }
        }
        Framing::Chunked => {
            let mut chunked = ChunkedDecoder::new(ChunkedLimits::default());
            let mut end = chunked
                .feed(buf)
                .map_err(|e| Broken::Backend(e.to_string()))?;
            let n = end.unwrap_or(buf.len());
            write_two(client, head, &buf[..n]).await?;
            buf.advance(n);
            while end.is_none() {
                read_more(&mut backend, buf).await?;
                end = chunked
                    .feed(buf)
                    .map_err(|e| Broken::Backend(e.to_string()))?;
                let n = end.unwrap_or(buf.len());
                client.write_all(&buf[..n]).await.map_err(Broken::Client)?;
                buf.advance(n);
            }
        }
        Framing::CloseDelimited => {
            write_two(client, head, buf).await?;
            buf.clear();
            loop {
                buf.reserve(STREAM_CHUNK);
                match backend.read_buf(buf).await {
                    Ok(0) => return Ok(None),
                    Ok(_) => {
                        client.write_all(buf).await.map_err(Broken::Client)?;
                        buf.clear();
                    }
                    Err(e) => return Err(Broken::Backend(e.to_string())),
                }
            }
        }
    }
    // Bytes beyond the response: the backend is out of step, do not reuse it.
    Ok((keep_alive && buf.is_empty()).then_some(backend))
}

/// Writes the head and the first part of the body with one system call where the socket
/// takes them, without copying the body.
async fn write_two(client: &mut TcpStream, head: &[u8], body: &[u8]) -> Result<(), Broken> {
    let mut both = Buf::chain(head, body);
    client
        .write_all_buf(&mut both)
        .await
        .map_err(Broken::Client)
}

async fn read_more(backend: &mut RawConn, buf: &mut BytesMut) -> Result<(), Broken> {
    buf.reserve(STREAM_CHUNK);
    match backend.read_buf(buf).await {
        Ok(0) => Err(Broken::Backend("end of stream inside the body".into())),
        Ok(_) => Ok(()),
        Err(e) => Err(Broken::Backend(e.to_string())),
    }
}
