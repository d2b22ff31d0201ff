//! The HTTP/1.1 wire rules (`http1_wire`): request and response heads under small limits, the
//! body framing they imply, and the chunked decoder.
//!
//! Heads never panic; a parsed head lies inside the input (its method, target and fields are
//! spans of it, within the head's length), holds at most the allowed fields, each a non-empty
//! name and a value without surrounding whitespace, and its [`FieldSummary`] is what observing
//! those fields gives; the head alone parses the same as the head followed by anything, and a
//! part of it is incomplete (`Ok(None)`), never an error, however the bytes arrive.
//!
//! Framing: a request with both `Content-Length` and `Transfer-Encoding` fields, or two
//! `Content-Length` fields, is refused (counted from the raw fields, not the summary); an
//! accepted request body is chunked exactly when `Transfer-Encoding` ends in `chunked`, and is
//! otherwise the one `Content-Length` (or nothing). A response to HEAD, a 1xx, 204 or 304 is
//! empty; a kept-alive connection is HTTP/1.1 without `Connection: close` and with a body that
//! ends by itself.
//!
//! The chunked decoder (on the body after a head, and on the whole input): fed the input in
//! pieces (split points from the fuzz input), it gives the same data, the same end and the same
//! error as fed at once, and as [`ChunkedDecoder::feed`]; its data and framing are within each
//! piece, and data plus framing is where the body ends.
//!
//! Input: four control bytes (head kind and method, `max_head`, `max_fields` and the chunked
//! limits, the number of split points), the split points (one byte each: the distance to the
//! previous one), then the message.
#![no_main]

use http::{Method, StatusCode};
use http1_wire::{
    ChunkedDecoder, ChunkedError, ChunkedLimits, ContentLength, Field, FieldSummary, Framing,
    FramingError, Limits, Span, Step, TransferCoding, parse_request_head, parse_response_head,
    request_framing, response_framing,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [kind, head_size, fields_max, splits, rest @ ..] = data else {
        return;
    };
    let splits = usize::from(*splits % 16).min(rest.len());
    let (splits, message) = rest.split_at(splits);
    let limits = Limits {
        max_head: (usize::from(*head_size) + 1) * 8,
        // Above MAX_FIELDS too: the parser's slots bound it then.
        max_fields: usize::from(*fields_max % 160),
    };
    let chunked_limits = if kind & 0x80 != 0 {
        ChunkedLimits::UNBOUNDED
    } else {
        ChunkedLimits {
            max_size_line: 1 + usize::from(*fields_max % 32),
            max_trailers: 1 + usize::from(*head_size) * 4,
        }
    };
    let method = [Method::GET, Method::HEAD, Method::POST, Method::PUT]
        [usize::from((kind >> 1) & 3)]
    .clone();

    let body = if kind & 1 == 0 {
        request(message, limits, splits)
    } else {
        response(message, limits, &method, splits)
    };
    if let Some(body) = body {
        chunked(body, chunked_limits, splits);
    }
    chunked(message, chunked_limits, splits);
});

/// Split points of `input` from the fuzz input's distances (0 for a piece of nothing).
fn pieces<'a>(input: &'a [u8], splits: &[u8]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::with_capacity(splits.len() + 1);
    let mut at = 0;
    for &d in splits {
        let end = (at + usize::from(d)).min(input.len());
        pieces.push(&input[at..end]);
        at = end;
    }
    pieces.push(&input[at..]);
    pieces
}

/// Checks a request head; the body after it when its framing is chunked.
fn request<'a>(message: &'a [u8], limits: Limits, splits: &[u8]) -> Option<&'a [u8]> {
    let mut fields = Vec::new();
    let parsed = parse_request_head(message, limits, &mut fields);
    let head = match parsed {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert!(
                message.len() < limits.max_head,
                "incomplete beyond the limit"
            );
            return None;
        }
        Err(_) => return None,
    };
    let len = head.len;
    check_head(message, len, limits, &fields, &head.fields);
    within(head.method, len, "method");
    within(head.target, len, "target");
    assert!(!head.method.of_buf(message).is_empty());
    assert!(!head.target.of_buf(message).is_empty());
    assert!(head.minor_version <= 1);
    // The head alone, and its parts as they may arrive.
    let mut again = Vec::new();
    assert_eq!(
        parse_request_head(&message[..len], limits, &mut again),
        parsed
    );
    assert_eq!(again, fields);
    for part in prefixes(len, splits) {
        assert_eq!(
            parse_request_head(&message[..part], limits, &mut again),
            Ok(None),
            "the first {part} bytes of a {len}-byte head"
        );
    }

    let raw = RawCounts::of(message, &fields);
    let framing = request_framing(&head.fields);
    assert_eq!(framing, head.framing());
    if raw.content_length > 0 && raw.transfer_encoding > 0 {
        assert_eq!(framing, Err(FramingError::LengthAndEncoding));
    }
    if raw.content_length > 1 {
        assert!(
            framing.is_err(),
            "{} Content-Length fields",
            raw.content_length
        );
    }
    match framing {
        Ok(Framing::Chunked) => {
            assert_eq!(head.fields.transfer_encoding, Some(TransferCoding::Chunked));
            assert_eq!(raw.content_length, 0);
            Some(&message[len..])
        }
        Ok(Framing::Length(n)) => {
            assert_eq!(raw.transfer_encoding, 0);
            match head.fields.content_length {
                ContentLength::Absent => assert_eq!((n, raw.content_length), (0, 0)),
                ContentLength::One(m) => assert_eq!((n, raw.content_length), (m, 1)),
                other => panic!("Length({n}) from {other:?}"),
            }
            None
        }
        Ok(other) => panic!("a request framed {other:?}"),
        Err(_) => None,
    }
}

/// Checks a response head to a `method` request; the body after it when it is chunked.
fn response<'a>(
    message: &'a [u8],
    limits: Limits,
    method: &Method,
    splits: &[u8],
) -> Option<&'a [u8]> {
    let mut fields = Vec::new();
    let parsed = parse_response_head(message, limits, &mut fields);
    let head = match parsed {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert!(
                message.len() < limits.max_head,
                "incomplete beyond the limit"
            );
            return None;
        }
        Err(_) => return None,
    };
    let len = head.len;
    check_head(message, len, limits, &fields, &head.fields);
    assert!(head.minor_version <= 1);
    let mut again = Vec::new();
    assert_eq!(
        parse_response_head(&message[..len], limits, &mut again),
        parsed
    );
    assert_eq!(again, fields);
    for part in prefixes(len, splits) {
        assert_eq!(
            parse_response_head(&message[..part], limits, &mut again),
            Ok(None),
            "the first {part} bytes of a {len}-byte head"
        );
    }

    let raw = RawCounts::of(message, &fields);
    let framing = response_framing(&head, method);
    assert_eq!(framing, head.framing(method));
    let Ok(framing) = framing else {
        assert!(raw.content_length > 0, "refused without Content-Length");
        return None;
    };
    let status = head.status;
    let empty = *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    assert_eq!(
        framing.framing == Framing::Empty,
        empty,
        "{status} to {method}"
    );
    if framing.keep_alive {
        assert_eq!(head.minor_version, 1);
        assert!(!head.fields.close);
        assert_ne!(framing.framing, Framing::CloseDelimited);
        assert!(raw.content_length == 0 || raw.transfer_encoding == 0);
    }
    match framing.framing {
        Framing::Chunked => {
            assert_eq!(head.fields.transfer_encoding, Some(TransferCoding::Chunked));
            Some(&message[len..])
        }
        Framing::Length(_) => {
            assert_eq!(raw.transfer_encoding, 0);
            assert!(raw.content_length > 0);
            None
        }
        Framing::CloseDelimited => {
            assert!(
                raw.content_length == 0
                    || head.fields.transfer_encoding == Some(TransferCoding::Other)
            );
            None
        }
        Framing::Empty => None,
    }
}

/// What every parsed head must be: its fields within it and summarised as observed.
fn check_head(
    message: &[u8],
    len: usize,
    limits: Limits,
    fields: &[Field],
    summary: &FieldSummary,
) {
    assert!(len <= message.len() && len <= limits.max_head);
    assert!(message[..len].ends_with(b"\n"));
    assert!(fields.len() <= limits.max_fields);
    let mut observed = FieldSummary::default();
    for field in fields {
        within(field.name, len, "field name");
        within(field.value, len, "field value");
        let (name, value) = (field.name.of_buf(message), field.value.of_buf(message));
        assert!(!name.is_empty(), "an empty field name");
        assert!(!name.contains(&b':'), "a colon in {name:?}");
        assert!(field.name.start < field.value.start || value.is_empty());
        assert!(
            !value.starts_with(b" ")
                && !value.starts_with(b"\t")
                && !value.ends_with(b" ")
                && !value.ends_with(b"\t"),
            "whitespace around {value:?}"
        );
        observed.observe(name, value);
    }
    assert_eq!(&observed, summary);
}

fn within(span: Span, len: usize, what: &str) {
    assert!(
        span.start
            .checked_add(span.len)
            .is_some_and(|end| end <= len),
        "{what} {span:?} outside a {len}-byte head"
    );
}

/// Lengths of parts of a `len`-byte head to parse: all but its last byte, and the split points.
fn prefixes(len: usize, splits: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut parts = vec![len - 1];
    for &d in splits {
        at += usize::from(d);
        if at >= len {
            break;
        }
        parts.push(at);
    }
    parts
}

/// Framing fields counted by name from the raw head.
struct RawCounts {
    content_length: usize,
    transfer_encoding: usize,
}

impl RawCounts {
    fn of(message: &[u8], fields: &[Field]) -> Self {
        let count = |wanted: &[u8]| {
            fields
                .iter()
                .filter(|f| f.name.of_buf(message).eq_ignore_ascii_case(wanted))
                .count()
        };
        Self {
            content_length: count(b"content-length"),
            transfer_encoding: count(b"transfer-encoding"),
        }
    }
}

/// What decoding a chunked body gave.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    data: Vec<u8>,
    /// Where the body ended (framing and data up to the end of its trailer section).
    end: Option<usize>,
    error: Option<ChunkedError>,
}

/// Decodes `body` in pieces with [`ChunkedDecoder::decode`].
fn decode(body: &[u8], limits: ChunkedLimits, pieces: &[&[u8]]) -> Decoded {
    let mut decoder = ChunkedDecoder::new(limits);
    let mut out = Decoded {
        data: Vec::new(),
        end: None,
        error: None,
    };
    let mut framing_total = 0;
    let mut start = 0;
    'pieces: for piece in pieces {
        let mut at = 0;
        loop {
            match decoder.decode(&piece[at..]) {
                Ok(Step::Data { framing, data }) => {
                    assert!(data > 0, "Data without data");
                    assert!(at + framing + data <= piece.len(), "beyond the piece");
                    out.data
                        .extend_from_slice(&piece[at + framing..at + framing + data]);
                    framing_total += framing;
                    at += framing + data;
                    if at == piece.len() {
                        break;
                    }
                }
                Ok(Step::End { framing }) => {
                    assert!(at + framing <= piece.len(), "beyond the piece");
                    assert!(decoder.is_done());
                    framing_total += framing;
                    let end = start + at + framing;
                    assert_eq!(end, framing_total + out.data.len());
                    out.end = Some(end);
                    // Done stays done, and consumes nothing more.
                    assert_eq!(decoder.decode(&body[end..]), Ok(Step::End { framing: 0 }));
                    break 'pieces;
                }
                Ok(Step::NeedMore) => {
                    assert!(!decoder.is_done());
                    framing_total += piece.len() - at;
                    break;
                }
                Err(e) => {
                    out.error = Some(e);
                    break 'pieces;
                }
            }
        }
        start += piece.len();
    }
    assert!(out.data.len() <= body.len());
    out
}

/// Decodes `body` at once and in the pieces `splits` cut, and with `feed`; all must agree.
fn chunked(body: &[u8], limits: ChunkedLimits, splits: &[u8]) {
    let whole = decode(body, limits, &[body]);
    let split = pieces(body, splits);
    assert_eq!(decode(body, limits, &split), whole, "in pieces {split:?}");

    let mut fed = ChunkedDecoder::new(limits);
    let mut result = Ok(None);
    let mut start = 0;
    for piece in &split {
        result = fed.feed(piece).map(|end| end.map(|n| start + n));
        if !matches!(result, Ok(None)) {
            break;
        }
        start += piece.len();
    }
    let expected = match whole.error {
        Some(e) => Err(e),
        None => Ok(whole.end),
    };
    assert_eq!(result, expected, "fed in pieces {split:?}");
}
