//! HTTP/1.1 message heads for the fast path, without I/O: a request head parsed into `http`
//! parts (or declined, so hyper takes the connection), request and response heads written, a
//! response head parsed with its framing. Parsing, framing and the hop-by-hop rules are
//! [`http1_wire`]'s; what is here is the fast path's own policy (what it declines) and the
//! conversion to and from `http` types.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};
pub use http1_wire::Framing;
use http1_wire::{ContentLength, Field, FramingError, HeadError, Limits, ResponseFraming};

/// Header fields per request, as hyper's default (more are left to hyper, which answers 431).
const MAX_REQUEST_FIELDS: usize = 100;
/// Response heads longer than this are a broken backend.
const RESPONSE_LIMITS: Limits = Limits {
    max_head: 64 * 1024,
    max_fields: 100,
};
/// Request bodies up to this size are read whole and sent with the head; larger ones (and
/// chunked ones) are left to hyper, which streams them.
pub const MAX_FAST_BODY: u64 = 64 * 1024;

/// Where each field of a head lies in it, kept by the connection so parsing allocates
/// nothing once it has grown.
#[derive(Debug, Default)]
pub struct Scratch {
    fields: Vec<Field>,
}

/// What the start of the buffer holds.
// Returned once per request and taken apart at once: boxing would cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RequestHead {
    /// Not a complete head yet.
    Partial,
    /// The head is longer than the limit (complete or not): answered with 431, never
    /// forwarded.
    TooLarge,
    /// Not for the fast path: hyper takes the connection from this request on and answers
    /// it (including its error responses for malformed requests). The reason is for logs.
    Declined(&'static str),
    Complete(Request),
}

/// A parsed request head. The header values and the target share the buffer's memory.
#[derive(Debug)]
pub struct Request {
    pub parts: http::request::Parts,
    /// The head as received (for handing the request to hyper after all).
    pub head: Bytes,
    /// `Content-Length`, when the request had one.
    pub content_length: Option<u64>,
    /// The client asked to close the connection after this exchange.
    pub close: bool,
}

/// Parses the request head at the start of `buf`, of at most `max_head` bytes. On `Complete`
/// the head's bytes are split off `buf`.
pub fn parse_request(buf: &mut BytesMut, max_head: usize, scratch: &mut Scratch) -> RequestHead {
    let limits = Limits {
        max_head,
        max_fields: MAX_REQUEST_FIELDS,
    };
    let head = match http1_wire::parse_request_head(buf, limits, &mut scratch.fields) {
        Ok(Some(head)) => head,
        Ok(None) => return RequestHead::Partial,
        Err(HeadError::TooLarge { .. }) => return RequestHead::TooLarge,
        Err(_) => return RequestHead::Declined("malformed head"),
    };
    if head.minor_version != 1 {
        return RequestHead::Declined("HTTP/1.0");
    }
    let Ok(method) = Method::from_bytes(head.method.of_buf(buf)) else {
        return RequestHead::Declined("malformed method");
    };
    if method == Method::CONNECT {
        return RequestHead::Declined("CONNECT");
    }
    let fields = &head.fields;
    if fields.upgrade || fields.connection_upgrade {
        return RequestHead::Declined("Upgrade");
    }
    if fields.expect {
        return RequestHead::Declined("Expect");
    }
    let content_length = match head.framing() {
        Ok(Framing::Length(n)) if n > MAX_FAST_BODY => return RequestHead::Declined("large body"),
        Ok(Framing::Length(n)) => (fields.content_length != ContentLength::Absent).then_some(n),
        Ok(_) | Err(FramingError::LengthAndEncoding | FramingError::NotChunked) => {
            return RequestHead::Declined("Transfer-Encoding");
        }
        Err(FramingError::RepeatedLength) => {
            return RequestHead::Declined("repeated Content-Length");
        }
        Err(_) => return RequestHead::Declined("invalid Content-Length"),
    };
    let close = fields.close;
    let head_bytes = buf.split_to(head.len).freeze();
    let Some((uri, headers)) = request_parts(&head_bytes, head.target, &scratch.fields) else {
        restore(buf, head_bytes);
        return RequestHead::Declined("request target or field hyper may read differently");
    };
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    RequestHead::Complete(Request {
        parts,
        head: head_bytes,
        content_length,
        close,
    })
}

/// The target and fields of a head `httparse` accepted, sharing its memory.
fn request_parts(
    head: &Bytes,
    target: http1_wire::Span,
    fields: &[Field],
) -> Option<(Uri, HeaderMap)> {
    let uri = Uri::from_maybe_shared(head.slice(target.range())).ok()?;
    // Room for the forwarding fields the proxy adds.
    let mut headers = HeaderMap::with_capacity(fields.len() + 3);
    for f in fields {
        let name = HeaderName::from_bytes(f.name.of_buf(head)).ok()?;
        let value = HeaderValue::from_maybe_shared(head.slice(f.value.range())).ok()?;
        headers.append(name, value);
    }
    Some((uri, headers))
}

/// Puts a split-off head back in front of the buffer.
fn restore(buf: &mut BytesMut, head: Bytes) {
    let mut whole = match head.try_into_mut() {
        Ok(head) => head,
        Err(head) => BytesMut::from(&head[..]),
    };
    whole.unsplit(std::mem::take(buf));
    *buf = whole;
}

/// Writes a request head: `target` is origin-form; the fields of `set` replace any of the
/// same name among `headers`, and `content_length` any `Content-Length`.
pub fn write_request_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    set: &[(&HeaderName, &HeaderValue)],
    content_length: Option<u64>,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH || set.iter().any(|(n, _)| *n == name) {
            continue;
        }
        write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    for (name, value) in set {
        write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(n) = content_length {
        write_length(out, n);
    }
    out.extend_from_slice(b"\r\n");
}

fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Every field except `Content-Length` (the writer states the framing itself).
fn write_fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        if name != header::CONTENT_LENGTH {
            write_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
}

fn write_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"content-length: ");
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// A parsed response head. Its fields stay as received (their offsets are in the
/// [`Scratch`] that parsed it) until a filter needs them as a map.
#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub framing: Framing,
    /// The connection can carry another request once the body is read.
    pub keep_alive: bool,
    head: Bytes,
}

impl Response {
    /// The fields as a map (for response header filters). `None` when one is not a field
    /// `http` accepts.
    pub fn header_map(&self, scratch: &Scratch) -> Option<HeaderMap> {
        let head = &self.head;
        let mut headers = HeaderMap::with_capacity(scratch.fields.len());
        for f in &scratch.fields {
            let name = HeaderName::from_bytes(f.name.of_buf(head)).ok()?;
            let value = HeaderValue::from_maybe_shared(head.slice(f.value.range())).ok()?;
            headers.append(name, value);
        }
        Some(headers)
    }

    /// Writes the head for the client from the backend's own bytes: hop-by-hop fields and the
    /// ones `Connection` lists are dropped, the framing is stated as [`write_response_head`]
    /// does.
    pub fn write_forwarded_head(&self, scratch: &Scratch, out: &mut Vec<u8>, close: bool) {
        let head = &self.head[..];
        let field = |f: &Field| (f.name.of_buf(head), f.value.of_buf(head));
        let listed: Vec<&[u8]> = http1_wire::hop::connection_tokens(
            scratch
                .fields
                .iter()
                .map(field)
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
                .map(|(_, v)| v),
        )
        .collect();
        write_status_line(out, self.status);
        write_framing(out, self.framing, None);
        for (name, value) in scratch.fields.iter().map(field) {
            let framing_field =
                self.framing != Framing::Empty && name.eq_ignore_ascii_case(b"content-length");
            if framing_field
                || http1_wire::is_hop_by_hop(name)
                || listed.iter().any(|l| l.eq_ignore_ascii_case(name))
            {
                continue;
            }
            write_field(out, name, value);
        }
        write_close(out, self.framing, close);
    }
}

/// What the start of a backend's buffer holds.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ResponseHead {
    Partial,
    Invalid(&'static str),
    /// A 1xx other than 101, `len` bytes long: skipped, as hyper's client does.
    Interim(usize),
    Complete(Response),
}

/// Parses the response head at the start of `buf` to a request with `method`. On `Complete`
/// the head's bytes are split off `buf`.
pub fn parse_response(buf: &mut BytesMut, method: &Method, scratch: &mut Scratch) -> ResponseHead {
    let head = match http1_wire::parse_response_head(buf, RESPONSE_LIMITS, &mut scratch.fields) {
        Ok(Some(head)) => head,
        Ok(None) => return ResponseHead::Partial,
        Err(HeadError::TooLarge { .. }) => return ResponseHead::Invalid("response head too large"),
        Err(HeadError::InvalidStatus) => return ResponseHead::Invalid("invalid status code"),
        Err(_) => return ResponseHead::Invalid("malformed response head"),
    };
    let status = head.status;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return ResponseHead::Invalid("101 to a request that asked for no upgrade");
    }
    if status.is_informational() {
        return ResponseHead::Interim(head.len);
    }
    let ResponseFraming {
        framing,
        keep_alive,
    } = match head.framing(method) {
        Ok(f) => f,
        Err(FramingError::ConflictingLength) => {
            return ResponseHead::Invalid("conflicting Content-Length");
        }
        Err(_) => return ResponseHead::Invalid("invalid Content-Length"),
    };
    let head = buf.split_to(head.len).freeze();
    ResponseHead::Complete(Response {
        status,
        head,
        framing,
        keep_alive,
    })
}

/// Writes a response head for the client. `Content-Length` and `Transfer-Encoding` follow
/// `framing` (for [`Framing::Empty`] a `Content-Length` among `headers` is kept: it describes
/// the representation a HEAD or 304 stands for).
pub fn write_response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    framing: Framing,
    close: bool,
) {
    write_status_line(out, status);
    write_framing(out, framing, headers.get(header::CONTENT_LENGTH));
    write_fields(out, headers);
    write_close(out, framing, close);
}

fn write_status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The framing field; for [`Framing::Empty`], `empty_length` (the length of what a HEAD or
/// 304 stands for) when given.
fn write_framing(out: &mut Vec<u8>, framing: Framing, empty_length: Option<&HeaderValue>) {
    match framing {
        Framing::Empty => {
            if let Some(v) = empty_length {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(v.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        Framing::Length(n) => write_length(out, n),
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::CloseDelimited => {}
    }
}

fn write_close(out: &mut Vec<u8>, framing: Framing, close: bool) {
    if close || framing == Framing::CloseDelimited {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
