//! HTTP/1.1 message heads and body framing for the fast path, without I/O: a request head
//! parsed into `http` parts (or declined, so hyper takes the connection), request and
//! response heads written, a response head parsed with its framing, and chunked framing
//! followed byte by byte so a chunked body can be passed through unchanged.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

/// Header fields per message, as hyper's default.
pub const MAX_HEADERS: usize = 100;
/// Request bodies up to this size are read whole and sent with the head; larger ones (and
/// chunked ones) are left to hyper, which streams them.
pub const MAX_FAST_BODY: u64 = 64 * 1024;

/// Where each field of a head lies in it (name start and length, value start and length),
/// kept by the connection so parsing allocates nothing once it has grown.
#[derive(Debug, Default)]
pub struct Scratch {
    fields: Vec<(usize, usize, usize, usize)>,
}

/// What the start of the buffer holds.
// Returned once per request and taken apart at once: boxing would cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RequestHead {
    /// Not a complete head yet.
    Partial,
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

/// Parses the request head at the start of `buf`. On `Complete` the head's bytes are split
/// off `buf`.
pub fn parse_request(buf: &mut BytesMut, scratch: &mut Scratch) -> RequestHead {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return RequestHead::Partial,
        Err(_) => return RequestHead::Declined("malformed head"),
    };
    if req.version != Some(1) {
        return RequestHead::Declined("HTTP/1.0");
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return RequestHead::Declined("malformed head");
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return RequestHead::Declined("malformed method");
    };
    if method == Method::CONNECT {
        return RequestHead::Declined("CONNECT");
    }
    let base = buf.as_ptr() as usize;
    let target = span(base, target.as_bytes());
    let fields = &mut scratch.fields;
    fields.clear();
    let mut content_length = None;
    let mut close = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return RequestHead::Declined("repeated Content-Length");
            }
            match parse_length(h.value) {
                Some(n) if n <= MAX_FAST_BODY => content_length = Some(n),
                Some(_) => return RequestHead::Declined("large body"),
                None => return RequestHead::Declined("invalid Content-Length"),
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return RequestHead::Declined("Transfer-Encoding");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            return RequestHead::Declined("Upgrade");
        } else if name.eq_ignore_ascii_case(b"expect") {
            return RequestHead::Declined("Expect");
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    return RequestHead::Declined("Upgrade");
                }
            }
        }
        let (ns, nl) = span(base, name);
        let (vs, vl) = span(base, h.value);
        fields.push((ns, nl, vs, vl));
    }
    let head = buf.split_to(head_len).freeze();
    let Some((uri, headers)) = request_parts(&head, target, fields) else {
        restore(buf, head);
        return RequestHead::Declined("request target or field hyper may read differently");
    };
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    RequestHead::Complete(Request {
        parts,
        head,
        content_length,
        close,
    })
}

/// The target and fields of a head `httparse` accepted, sharing its memory.
fn request_parts(
    head: &Bytes,
    target: (usize, usize),
    fields: &[(usize, usize, usize, usize)],
) -> Option<(Uri, HeaderMap)> {
    let uri = Uri::from_maybe_shared(head.slice(target.0..target.0 + target.1)).ok()?;
    // Room for the forwarding fields the proxy adds.
    let mut headers = HeaderMap::with_capacity(fields.len() + 3);
    for &(ns, nl, vs, vl) in fields {
        let name = HeaderName::from_bytes(&head[ns..ns + nl]).ok()?;
        let value = HeaderValue::from_maybe_shared(head.slice(vs..vs + vl)).ok()?;
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

/// Where `part` (a sub-slice of the buffer starting at `base`) lies in it.
fn span(base: usize, part: &[u8]) -> (usize, usize) {
    (part.as_ptr() as usize - base, part.len())
}

/// A `Content-Length` value: decimal digits only.
fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
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

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body whatever the headers say (HEAD, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the backend closes the connection.
    UntilClose,
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

/// Hop-by-hop fields (RFC 9110 §7.6.1), never passed on.
fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 9] = [
        b"connection",
        b"te",
        b"transfer-encoding",
        b"trailer",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"keep-alive",
        b"proxy-connection",
        b"upgrade",
    ];
    HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

impl Response {
    /// The fields as a map (for response header filters). `None` when one is not a field
    /// `http` accepts.
    pub fn header_map(&self, scratch: &Scratch) -> Option<HeaderMap> {
        let head = &self.head;
        let mut headers = HeaderMap::with_capacity(scratch.fields.len());
        for &(ns, nl, vs, vl) in &scratch.fields {
            let name = HeaderName::from_bytes(&head[ns..ns + nl]).ok()?;
            let value = HeaderValue::from_maybe_shared(head.slice(vs..vs + vl)).ok()?;
            headers.append(name, value);
        }
        Some(headers)
    }

    /// Writes the head for the client from the backend's own bytes: hop-by-hop fields and the
    /// ones `Connection` lists are dropped, the framing is stated as [`write_response_head`]
    /// does.
    pub fn write_forwarded_head(&self, scratch: &Scratch, out: &mut Vec<u8>, close: bool) {
        let head = &self.head[..];
        let field = |&(ns, nl, vs, vl): &(usize, usize, usize, usize)| {
            (&head[ns..ns + nl], &head[vs..vs + vl])
        };
        let listed: Vec<&[u8]> = scratch
            .fields
            .iter()
            .map(field)
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .collect();
        write_status_line(out, self.status);
        write_framing(out, self.framing, None);
        for (name, value) in scratch.fields.iter().map(field) {
            let framing_field =
                self.framing != Framing::Empty && name.eq_ignore_ascii_case(b"content-length");
            if framing_field
                || is_hop_by_hop(name)
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
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return ResponseHead::Partial,
        Err(_) => return ResponseHead::Invalid("malformed response head"),
    };
    let Some(status) = resp.code.and_then(|c| StatusCode::from_u16(c).ok()) else {
        return ResponseHead::Invalid("invalid status code");
    };
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return ResponseHead::Invalid("101 to a request that asked for no upgrade");
    }
    if status.is_informational() {
        return ResponseHead::Interim(head_len);
    }
    let mut keep_alive = resp.version == Some(1);
    let mut length = None;
    let mut chunked = None;
    let base = buf.as_ptr() as usize;
    let fields = &mut scratch.fields;
    fields.clear();
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let Some(n) = h
                .value
                .split(|&b| b == b',')
                .map(|v| parse_length(v.trim_ascii()))
                .try_fold(None, |acc: Option<u64>, n| match (acc, n) {
                    (_, None) => Err(()),
                    (Some(a), Some(n)) if a != n => Err(()),
                    (_, Some(n)) => Ok(Some(n)),
                })
                .ok()
                .flatten()
            else {
                return ResponseHead::Invalid("invalid Content-Length");
            };
            if length.is_some_and(|l| l != n) {
                return ResponseHead::Invalid("conflicting Content-Length");
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding decides; an earlier `chunked` is overridden by a later field.
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection")
            && h.value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
        {
            keep_alive = false;
        }
        let (ns, nl) = span(base, name);
        let (vs, vl) = span(base, h.value);
        fields.push((ns, nl, vs, vl));
    }
    let framing = if *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else if let Some(chunked) = chunked {
        // Both framings: Transfer-Encoding wins, and the connection is not trusted again.
        if length.is_some() {
            keep_alive = false;
        }
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    if framing == Framing::UntilClose {
        keep_alive = false;
    }
    let head = buf.split_to(head_len).freeze();
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
        Framing::UntilClose => {}
    }
}

fn write_close(out: &mut Vec<u8>, framing: Framing, close: bool) {
    if close || framing == Framing::UntilClose {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A chunked body that ended badly.
#[derive(Debug, thiserror::Error)]
#[error("invalid chunked encoding: {0}")]
pub struct ChunkError(&'static str);

/// Follows chunked framing (RFC 9112 §7.1) over bytes fed in any pieces, to find where the
/// message ends; the bytes themselves are passed on unchanged.
#[derive(Debug, Clone, Copy)]
pub struct Chunked {
    state: ChunkState,
    size: u64,
    digits: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    /// After the size: extensions up to CR.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

impl Default for Chunked {
    fn default() -> Self {
        Self {
            state: ChunkState::Size,
            size: 0,
            digits: 0,
        }
    }
}

impl Chunked {
    /// Consumes `data`; `Some(n)` when the message ends after its first `n` bytes.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<usize>, ChunkError> {
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                ChunkState::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits == 15 {
                            return Err(ChunkError("chunk size too large"));
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    None if self.digits == 0 => return Err(ChunkError("missing chunk size")),
                    None if b == b'\r' => self.state = ChunkState::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => {
                        self.state = ChunkState::Extension
                    }
                    None => return Err(ChunkError("invalid chunk size")),
                },
                ChunkState::Extension => match b {
                    b'\r' => self.state = ChunkState::SizeLf,
                    b'\n' => return Err(ChunkError("bare LF in chunk extension")),
                    _ => {}
                },
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError("expected LF after chunk size"));
                    }
                    self.digits = 0;
                    self.state = if self.size == 0 {
                        ChunkState::TrailerStart
                    } else {
                        ChunkState::Data
                    };
                }
                ChunkState::Data => {
                    let take =
                        (data.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    i += take;
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError("expected CRLF after chunk data"));
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError("expected CRLF after chunk data"));
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::TrailerStart => {
                    self.state = if b == b'\r' {
                        ChunkState::EndLf
                    } else {
                        ChunkState::Trailer
                    };
                }
                ChunkState::Trailer => {
                    if b == b'\r' {
                        self.state = ChunkState::TrailerLf;
                    }
                }
                ChunkState::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError("expected LF after a trailer field"));
                    }
                    self.state = ChunkState::TrailerStart;
                }
                ChunkState::EndLf => {
                    if b != b'\n' {
                        return Err(ChunkError("expected LF at the end of the body"));
                    }
                    self.state = ChunkState::Done;
                    return Ok(Some(i + 1));
                }
                ChunkState::Done => return Ok(Some(i)),
            }
            i += 1;
        }
        Ok((self.state == ChunkState::Done).then_some(0))
    }
}

#[cfg(test)]
mod tests;
