use http::Method;

use super::*;
use crate::head::{FieldSummary, Limits, parse_response_head};

fn request(fields: &[(&str, &str)]) -> Result<Framing, FramingError> {
    let mut s = FieldSummary::default();
    for (n, v) in fields {
        s.observe(n.as_bytes(), v.as_bytes());
    }
    request_framing(&s)
}

fn response(raw: &str, method: &Method) -> Result<ResponseFraming, FramingError> {
    parse_response_head(raw.as_bytes(), Limits::default(), &mut Vec::new())
        .unwrap()
        .unwrap()
        .framing(method)
}

#[test]
fn rfc9112_6_3_a_message_with_both_transfer_encoding_and_content_length_is_refused() {
    for fields in [
        &[("Content-Length", "5"), ("Transfer-Encoding", "chunked")][..],
        &[("Transfer-Encoding", "chunked"), ("Content-Length", "0")],
        &[("Transfer-Encoding", "gzip"), ("Content-Length", "x")],
    ] {
        assert_eq!(
            request(fields),
            Err(FramingError::LengthAndEncoding),
            "{fields:?}"
        );
    }
}

#[test]
fn rfc9112_6_3_a_request_whose_final_transfer_coding_is_not_chunked_is_refused() {
    assert_eq!(
        request(&[("Transfer-Encoding", "chunked, gzip")]),
        Err(FramingError::NotChunked)
    );
    assert_eq!(
        request(&[("Transfer-Encoding", "gzip, chunked")]),
        Ok(Framing::Chunked)
    );
}

#[test]
fn rfc9112_6_3_an_invalid_content_length_is_an_unrecoverable_error() {
    assert_eq!(
        request(&[("Content-Length", "+5")]),
        Err(FramingError::InvalidLength)
    );
    assert_eq!(
        request(&[("Content-Length", "5, 6")]),
        Err(FramingError::ConflictingLength)
    );
}

#[test]
fn rfc9110_8_6_a_recipient_may_reject_repeated_content_length_and_requests_do() {
    assert_eq!(
        request(&[("Content-Length", "5"), ("Content-Length", "5")]),
        Err(FramingError::RepeatedLength)
    );
    assert_eq!(
        request(&[("Content-Length", "5, 5")]),
        Err(FramingError::RepeatedLength)
    );
}

#[test]
fn rfc9112_6_3_a_request_without_framing_fields_has_no_body() {
    assert_eq!(request(&[]), Ok(Framing::Length(0)));
    assert_eq!(request(&[("Content-Length", "7")]), Ok(Framing::Length(7)));
}

#[test]
fn rfc9112_6_3_head_1xx_204_and_304_responses_end_at_the_empty_line() {
    let get = Method::GET;
    let empty = |raw: &str, method: &Method| response(raw, method).unwrap().framing;
    assert_eq!(
        empty(
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
            &Method::HEAD
        ),
        Framing::Empty
    );
    for status in ["100 Continue", "204 No Content", "304 Not Modified"] {
        let raw = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(empty(&raw, &get), Framing::Empty, "{status}");
    }
    assert_eq!(
        response("HTTP/1.1 304 Not Modified\r\n\r\n", &get),
        Ok(ResponseFraming {
            framing: Framing::Empty,
            keep_alive: true
        })
    );
}

#[test]
fn rfc9112_6_3_transfer_encoding_overrides_content_length_and_the_connection_is_not_reused() {
    let get = Method::GET;
    assert_eq!(
        response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
            &get
        ),
        Ok(ResponseFraming {
            framing: Framing::Chunked,
            keep_alive: false
        })
    );
    assert_eq!(
        response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            &get
        ),
        Ok(ResponseFraming {
            framing: Framing::Chunked,
            keep_alive: true
        })
    );
}

/// Found by the `http1_wire` fuzz target: a response without a body (to HEAD, 1xx, 204, 304)
/// kept the connection although it had both fields.
#[test]
fn rfc9112_6_3_a_bodiless_response_with_both_length_and_encoding_does_not_reuse_the_connection() {
    let both = "Content-Length: 3\r\nTransfer-Encoding: chnuugd\r\n\r\n";
    for (status, method) in [
        ("200 OK", Method::HEAD),
        ("204 No Content", Method::GET),
        ("304 Not Modified", Method::GET),
    ] {
        assert_eq!(
            response(&format!("HTTP/1.1 {status}\r\n{both}"), &method),
            Ok(ResponseFraming {
                framing: Framing::Empty,
                keep_alive: false
            }),
            "{status} to {method}"
        );
    }
}

#[test]
fn rfc9112_6_3_a_response_whose_final_coding_is_not_chunked_runs_until_the_close() {
    assert_eq!(
        response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            &Method::GET
        ),
        Ok(ResponseFraming {
            framing: Framing::CloseDelimited,
            keep_alive: false
        })
    );
}

#[test]
fn rfc9112_6_3_a_response_without_length_runs_until_the_close() {
    assert_eq!(
        response("HTTP/1.1 200 OK\r\nX: y\r\n\r\n", &Method::GET),
        Ok(ResponseFraming {
            framing: Framing::CloseDelimited,
            keep_alive: false
        })
    );
}

#[test]
fn rfc9110_8_6_a_response_may_repeat_its_length_but_not_change_it() {
    let get = Method::GET;
    let length = |raw: &str| response(raw, &get).map(|f| f.framing);
    assert_eq!(
        length("HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n"),
        Ok(Framing::Length(2))
    );
    assert_eq!(
        length("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n"),
        Ok(Framing::Length(2))
    );
    assert_eq!(
        length("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        Err(FramingError::ConflictingLength)
    );
    assert_eq!(
        length("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
        Err(FramingError::InvalidLength)
    );
    assert_eq!(
        length("HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n"),
        Err(FramingError::InvalidLength),
        "an invalid length is refused whatever the status"
    );
}

#[test]
fn rfc9112_9_3_http_1_0_and_connection_close_end_the_connection() {
    let get = Method::GET;
    let keep = |raw: &str| response(raw, &get).unwrap().keep_alive;
    assert!(keep("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(!keep(
        "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!keep("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
}
