//! How long a message body is (RFC 9112 §6.3), from a head's [`FieldSummary`].
//!
//! Requests are held to the rules that keep a proxy and the server behind it from reading
//! different message boundaries out of the same bytes (request smuggling, RFC 9112 §11.2):
//! `Content-Length` together with `Transfer-Encoding`, a transfer coding other than a final
//! `chunked`, an invalid `Content-Length`, and any repeated `Content-Length` (also a list of
//! equal values, which RFC 9110 §8.6 lets a recipient refuse) are errors. Responses follow the
//! RFC's reading rules: a repeated equal length is that length, `Transfer-Encoding` wins over
//! `Content-Length` (and the connection is not used again), a body without either runs to the
//! close. A 2xx to CONNECT is not framed here: neither proxy sends CONNECT upstream.
//!
//! The heads' `framing` methods are defined here, beside the rules they apply, so that
//! [`crate::head`] parses without depending on this module.

use http::{Method, StatusCode};

use crate::head::{ContentLength, FieldSummary, RequestHead, ResponseHead, TransferCoding};

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body whatever the fields say (a response to HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes (0 for a request without framing fields).
    Length(u64),
    /// Chunked transfer coding ([`crate::chunked`]).
    Chunked,
    /// Until the sender closes the connection (responses only).
    CloseDelimited,
}

/// Why a message's framing is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndEncoding,
    #[error("Transfer-Encoding does not end in chunked")]
    NotChunked,
    #[error("invalid Content-Length")]
    InvalidLength,
    #[error("conflicting Content-Length values")]
    ConflictingLength,
    #[error("repeated Content-Length")]
    RepeatedLength,
}

/// A request body's framing (RFC 9112 §6.3 rules 3-7, with the refusals above).
pub fn request_framing(fields: &FieldSummary) -> Result<Framing, FramingError> {
    match (fields.transfer_encoding, fields.content_length) {
        (Some(_), length) if length != ContentLength::Absent => {
            Err(FramingError::LengthAndEncoding)
        }
        (Some(TransferCoding::Other), _) => Err(FramingError::NotChunked),
        (Some(TransferCoding::Chunked), _) => Ok(Framing::Chunked),
        (None, ContentLength::Absent) => Ok(Framing::Length(0)),
        (None, ContentLength::One(n)) => Ok(Framing::Length(n)),
        (None, ContentLength::Repeated(_)) => Err(FramingError::RepeatedLength),
        (None, ContentLength::Invalid) => Err(FramingError::InvalidLength),
        (None, ContentLength::Conflicting) => Err(FramingError::ConflictingLength),
    }
}

/// A response body's framing, and whether the connection can carry another request once the
/// body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFraming {
    pub framing: Framing,
    /// HTTP/1.1, no `Connection: close`, a body with an end of its own, and no
    /// `Content-Length` beside `Transfer-Encoding`.
    pub keep_alive: bool,
}

/// A response body's framing (RFC 9112 §6.3 rules 1-7) to a request of `request_method`.
pub fn response_framing(
    head: &ResponseHead,
    request_method: &Method,
) -> Result<ResponseFraming, FramingError> {
    let fields = &head.fields;
    let length = match fields.content_length {
        ContentLength::Absent => None,
        ContentLength::One(n) | ContentLength::Repeated(n) => Some(n),
        ContentLength::Invalid => return Err(FramingError::InvalidLength),
        ContentLength::Conflicting => return Err(FramingError::ConflictingLength),
    };
    let status = head.status;
    // Both Content-Length and Transfer-Encoding: the connection is not trusted again, whether
    // or not this response has a body.
    let mut keep_alive = head.minor_version == 1
        && !fields.close
        && !(length.is_some() && fields.transfer_encoding.is_some());
    let framing = if *request_method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else if let Some(coding) = fields.transfer_encoding {
        // Transfer-Encoding wins over Content-Length.
        match coding {
            TransferCoding::Chunked => Framing::Chunked,
            TransferCoding::Other => Framing::CloseDelimited,
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::CloseDelimited
    };
    if framing == Framing::CloseDelimited {
        keep_alive = false;
    }
    Ok(ResponseFraming {
        framing,
        keep_alive,
    })
}

impl RequestHead {
    /// The request body's framing (see [`request_framing`]).
    pub fn framing(&self) -> Result<Framing, FramingError> {
        request_framing(&self.fields)
    }
}

impl ResponseHead {
    /// The response body's framing and whether the connection can carry another request
    /// (see [`response_framing`]).
    pub fn framing(&self, request_method: &Method) -> Result<ResponseFraming, FramingError> {
        response_framing(self, request_method)
    }
}

#[cfg(test)]
mod tests;
