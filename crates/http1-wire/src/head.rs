//! Request and response heads (RFC 9112 §2-§5): parsed by `httparse` under explicit
//! [`Limits`], with each field recorded as [`Span`]s of the caller's buffer (nothing is
//! copied) and summarised in a [`FieldSummary`] for framing and connection handling.
//!
//! Refused as malformed, as `httparse` does by default: obs-fold (a field line starting with
//! whitespace, RFC 9112 §5.2), whitespace between a field name and its colon (§5.1), invalid
//! tokens and control characters, HTTP versions other than 1.x. What a caller accepts of
//! the rest (HTTP/1.0, methods, framing) is its own decision.

use std::mem::MaybeUninit;

use http::StatusCode;

/// The most header fields any [`Limits`] can allow (the parser's slots, on the stack).
pub const MAX_FIELDS: usize = 128;

/// How large a head may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the whole head, request or status line to the empty line included.
    pub max_head: usize,
    /// Header fields; at most [`MAX_FIELDS`].
    pub max_fields: usize,
}

impl Default for Limits {
    /// 64 KiB and 100 fields (hyper's default field count).
    fn default() -> Self {
        Self {
            max_head: 64 * 1024,
            max_fields: 100,
        }
    }
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("head longer than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("more than {limit} header fields")]
    TooManyFields { limit: usize },
    #[error("malformed head: {0}")]
    Malformed(&'static str),
    #[error("invalid status code")]
    InvalidStatus,
}

/// Where a part of a head lies in the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

impl Span {
    /// The span of `part`, a sub-slice of a buffer starting at address `base`.
    fn of(base: usize, part: &[u8]) -> Self {
        Self {
            start: part.as_ptr() as usize - base,
            len: part.len(),
        }
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }

    /// The bytes of this span in `buf` (the buffer it was parsed from, or a copy of the head
    /// starting at the same place).
    pub fn of_buf(self, buf: &[u8]) -> &[u8] {
        &buf[self.range()]
    }
}

/// One header field, as received (the value without surrounding whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Field {
    pub name: Span,
    pub value: Span,
}

/// A value of `Content-Length`, over all the fields of one message (RFC 9110 §8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentLength {
    #[default]
    Absent,
    /// One field with one value.
    One(u64),
    /// The same value more than once: several fields, or a list in one.
    Repeated(u64),
    /// A value that is not a non-negative decimal integer.
    Invalid,
    /// Values that differ.
    Conflicting,
}

/// The final transfer coding of a message (of the last `Transfer-Encoding` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferCoding {
    Chunked,
    /// Anything else: the body then has no length of its own (RFC 9112 §6.3).
    Other,
}

/// What the fields of a head say about its body and connection. Built field by field with
/// [`FieldSummary::observe`] (a head parser does it; so can a line scanner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FieldSummary {
    pub content_length: ContentLength,
    /// `None` without `Transfer-Encoding`.
    pub transfer_encoding: Option<TransferCoding>,
    /// `Connection` lists `close`.
    pub close: bool,
    /// `Connection` lists `upgrade`.
    pub connection_upgrade: bool,
    /// An `Upgrade` field is present.
    pub upgrade: bool,
    /// An `Expect` field is present.
    pub expect: bool,
}

impl FieldSummary {
    /// No fields seen (the same as `default()`, usable in constants).
    pub const EMPTY: Self = Self {
        content_length: ContentLength::Absent,
        transfer_encoding: None,
        close: false,
        connection_upgrade: false,
        upgrade: false,
        expect: false,
    };

    /// Takes one field into account. Names compare case-insensitively.
    pub fn observe(&mut self, name: &[u8], value: &[u8]) {
        // The length first: most fields are none of these.
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => self.observe_length(value),
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
                self.transfer_encoding =
                    Some(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                        TransferCoding::Chunked
                    } else {
                        TransferCoding::Other
                    });
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        self.close = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        self.connection_upgrade = true;
                    }
                }
            }
            7 if name.eq_ignore_ascii_case(b"upgrade") => self.upgrade = true,
            6 if name.eq_ignore_ascii_case(b"expect") => self.expect = true,
            _ => {}
        }
    }

    fn observe_length(&mut self, value: &[u8]) {
        let mut this = ContentLength::Absent;
        for part in value.split(|&b| b == b',') {
            let Some(n) = parse_decimal(part.trim_ascii()) else {
                this = ContentLength::Invalid;
                break;
            };
            this = match this {
                ContentLength::Absent => ContentLength::One(n),
                ContentLength::One(m) | ContentLength::Repeated(m) if m == n => {
                    ContentLength::Repeated(n)
                }
                _ => ContentLength::Conflicting,
            };
        }
        use ContentLength::*;
        self.content_length = match (self.content_length, this) {
            (Invalid, _) | (_, Invalid) => Invalid,
            (Conflicting, _) | (_, Conflicting) => Conflicting,
            (Absent, this) => this,
            (One(a) | Repeated(a), One(b) | Repeated(b)) if a == b => Repeated(a),
            _ => Conflicting,
        };
    }
}

/// A decimal integer of digits only (no sign, no whitespace), as `Content-Length` is.
pub fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// A parsed request head. The spans point into the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, its final empty line included.
    pub len: usize,
    pub method: Span,
    pub target: Span,
    /// 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub minor_version: u8,
    pub fields: FieldSummary,
}

/// A parsed response head. The spans point into the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// Bytes of the head, its final empty line included.
    pub len: usize,
    pub status: StatusCode,
    /// 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub minor_version: u8,
    pub fields: FieldSummary,
}

/// Parses the request head at the start of `buf`: `Ok(None)` while it is incomplete. The
/// fields are written to `fields` (cleared first), in order.
pub fn parse_request_head(
    buf: &[u8],
    limits: Limits,
    fields: &mut Vec<Field>,
) -> Result<Option<RequestHead>, HeadError> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let parsed = req.parse_with_uninit_headers(buf, &mut slots);
    let Some(len) = complete(parsed, buf, limits)? else {
        return Ok(None);
    };
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version)
    else {
        return Err(HeadError::Malformed("incomplete request line"));
    };
    let base = buf.as_ptr() as usize;
    let summary = record(req.headers, base, limits, fields)?;
    Ok(Some(RequestHead {
        len,
        method: Span::of(base, method.as_bytes()),
        target: Span::of(base, target.as_bytes()),
        minor_version,
        fields: summary,
    }))
}

/// Parses the response head at the start of `buf`: `Ok(None)` while it is incomplete. The
/// fields are written to `fields` (cleared first), in order.
pub fn parse_response_head(
    buf: &[u8],
    limits: Limits,
    fields: &mut Vec<Field>,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let Some(len) = complete(parsed, buf, limits)? else {
        return Ok(None);
    };
    let (Some(code), Some(minor_version)) = (resp.code, resp.version) else {
        return Err(HeadError::Malformed("incomplete status line"));
    };
    let status = StatusCode::from_u16(code).map_err(|_| HeadError::InvalidStatus)?;
    let base = buf.as_ptr() as usize;
    let summary = record(resp.headers, base, limits, fields)?;
    Ok(Some(ResponseHead {
        len,
        status,
        minor_version,
        fields: summary,
    }))
}

/// The head's length once complete, within `limits`.
fn complete(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    buf: &[u8],
    limits: Limits,
) -> Result<Option<usize>, HeadError> {
    let too_large = HeadError::TooLarge {
        limit: limits.max_head,
    };
    match parsed {
        Ok(httparse::Status::Complete(len)) if len > limits.max_head => Err(too_large),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        // The head is longer than what came so far.
        Ok(httparse::Status::Partial) if buf.len() >= limits.max_head => Err(too_large),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields {
            limit: limits.max_fields.min(MAX_FIELDS),
        }),
        Err(e) => Err(HeadError::Malformed(match e {
            httparse::Error::HeaderName => "invalid header field name",
            httparse::Error::HeaderValue => "invalid header field value",
            httparse::Error::NewLine => "invalid line ending",
            httparse::Error::Status => "invalid status",
            httparse::Error::Token => "invalid token",
            httparse::Error::Version => "invalid HTTP version",
            httparse::Error::TooManyHeaders => "too many header fields",
        })),
    }
}

fn record(
    headers: &[httparse::Header<'_>],
    base: usize,
    limits: Limits,
    fields: &mut Vec<Field>,
) -> Result<FieldSummary, HeadError> {
    if headers.len() > limits.max_fields {
        return Err(HeadError::TooManyFields {
            limit: limits.max_fields,
        });
    }
    fields.clear();
    let mut summary = FieldSummary::default();
    for h in headers {
        let name = h.name.as_bytes();
        summary.observe(name, h.value);
        fields.push(Field {
            name: Span::of(base, name),
            value: Span::of(base, h.value),
        });
    }
    Ok(summary)
}

#[cfg(test)]
mod tests;
