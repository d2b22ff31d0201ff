use super::*;

fn request(raw: &[u8], limits: Limits) -> Result<Option<(RequestHead, Vec<Field>)>, HeadError> {
    let mut fields = Vec::new();
    Ok(parse_request_head(raw, limits, &mut fields)?.map(|h| (h, fields)))
}

fn response(raw: &[u8]) -> Result<Option<ResponseHead>, HeadError> {
    parse_response_head(raw, Limits::default(), &mut Vec::new())
}

/// Header fields as (name, value) pairs.
type Fields<'a> = &'a [(&'a str, &'a str)];

fn summary(fields: Fields<'_>) -> FieldSummary {
    let mut s = FieldSummary::default();
    for (n, v) in fields {
        s.observe(n.as_bytes(), v.as_bytes());
    }
    s
}

#[test]
fn a_request_head_is_parsed_into_spans_of_the_buffer_leaving_what_follows() {
    let raw = b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-Two:  1 \r\n\r\nNEXT";
    let (head, fields) = request(raw, Limits::default()).unwrap().unwrap();
    assert_eq!(head.len, raw.len() - 4);
    assert_eq!(head.method.of_buf(raw), b"GET");
    assert_eq!(head.target.of_buf(raw), b"/a?b");
    assert_eq!(head.minor_version, 1);
    let pairs: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|f| (f.name.of_buf(raw), f.value.of_buf(raw)))
        .collect();
    assert_eq!(pairs, [(&b"Host"[..], &b"x"[..]), (b"X-Two", b"1")]);
    assert_eq!(head.fields, FieldSummary::default());
}

#[test]
fn an_incomplete_head_is_none_until_it_is_longer_than_the_limit() {
    let limits = Limits {
        max_head: 32,
        max_fields: 100,
    };
    assert_eq!(request(b"GET / HTTP/1.1\r\nHost: a", limits), Ok(None));
    assert_eq!(request(b"", limits), Ok(None));
    let long = b"GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaa";
    assert_eq!(
        request(long, limits),
        Err(HeadError::TooLarge { limit: 32 })
    );
    let whole = b"GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaa\r\n\r\n";
    assert_eq!(
        request(whole, limits),
        Err(HeadError::TooLarge { limit: 32 }),
        "a complete head over the limit is refused too"
    );
}

#[test]
fn more_fields_than_the_limit_are_refused() {
    let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..5 {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    let limits = |max_fields| Limits {
        max_head: 1024,
        max_fields,
    };
    assert!(request(&raw, limits(5)).unwrap().is_some());
    assert_eq!(
        request(&raw, limits(4)),
        Err(HeadError::TooManyFields { limit: 4 })
    );
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_FIELDS {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert!(matches!(
        request(&many, limits(usize::MAX)),
        Err(HeadError::TooManyFields { .. })
    ));
}

#[test]
fn rfc9112_5_2_a_server_that_receives_obs_fold_must_reject_the_message() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nX: a\r\n\tfolded\r\n\r\n",
    ] {
        assert!(matches!(
            request(raw, Limits::default()),
            Err(HeadError::Malformed(_))
        ));
    }
    assert!(matches!(
        response(b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n"),
        Err(HeadError::Malformed(_))
    ));
}

#[test]
fn rfc9112_5_1_no_whitespace_is_allowed_between_the_field_name_and_colon() {
    assert!(matches!(
        request(
            b"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
            Limits::default()
        ),
        Err(HeadError::Malformed(_))
    ));
}

#[test]
fn heads_that_are_not_http_1_are_malformed() {
    for raw in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        assert!(
            matches!(
                request(raw, Limits::default()),
                Err(HeadError::Malformed(_))
            ),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
    assert!(matches!(
        response(b"SSH-2.0-OpenSSH\r\n\r\n"),
        Err(HeadError::Malformed(_))
    ));
    assert!(matches!(
        response(b"HTTP/1.1 999x OK\r\n\r\n"),
        Err(HeadError::Malformed(_))
    ));
}

#[test]
fn http_1_0_is_parsed_and_left_to_the_caller() {
    let (head, _) = request(b"GET / HTTP/1.0\r\n\r\n", Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(head.minor_version, 0);
    assert_eq!(
        response(b"HTTP/1.0 200 OK\r\n\r\n")
            .unwrap()
            .unwrap()
            .minor_version,
        0
    );
}

#[test]
fn a_response_head_carries_its_status() {
    let head = response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(head.status, StatusCode::NOT_FOUND);
    assert_eq!(head.fields.content_length, ContentLength::One(0));
    assert_eq!(
        response(b"HTTP/1.1 099 Low\r\n\r\n"),
        Err(HeadError::InvalidStatus)
    );
}

#[test]
fn rfc9110_8_6_content_length_is_a_non_negative_decimal_and_repeats_must_agree() {
    use ContentLength::*;
    let rows: &[(Fields<'_>, ContentLength)] = &[
        (&[], Absent),
        (&[("Content-Length", "5")], One(5)),
        (&[("content-length", "0")], One(0)),
        (&[("Content-Length", "18446744073709551615")], One(u64::MAX)),
        (&[("Content-Length", "18446744073709551616")], Invalid),
        (&[("Content-Length", "5, 5")], Repeated(5)),
        (
            &[("Content-Length", "5"), ("content-length", "5")],
            Repeated(5),
        ),
        (&[("Content-Length", "5, 6")], Conflicting),
        (
            &[("Content-Length", "5"), ("Content-Length", "6")],
            Conflicting,
        ),
        (&[("Content-Length", "+5")], Invalid),
        (&[("Content-Length", "-1")], Invalid),
        (&[("Content-Length", "")], Invalid),
        (&[("Content-Length", "5,")], Invalid),
        (&[("Content-Length", "0x5")], Invalid),
        (&[("Content-Length", "5"), ("Content-Length", "x")], Invalid),
        (&[("Content-Length", "x"), ("Content-Length", "5")], Invalid),
    ];
    for (fields, want) in rows {
        assert_eq!(summary(fields).content_length, *want, "{fields:?}");
    }
}

#[test]
fn rfc9112_6_1_the_final_transfer_coding_of_the_last_field_decides() {
    use TransferCoding::*;
    let rows: &[(Fields<'_>, Option<TransferCoding>)] = &[
        (&[], None),
        (&[("Transfer-Encoding", "chunked")], Some(Chunked)),
        (&[("transfer-encoding", "gzip, CHUNKED")], Some(Chunked)),
        (&[("Transfer-Encoding", "chunked, gzip")], Some(Other)),
        (&[("Transfer-Encoding", "identity")], Some(Other)),
        (&[("Transfer-Encoding", "")], Some(Other)),
        (
            &[
                ("Transfer-Encoding", "chunked"),
                ("Transfer-Encoding", "gzip"),
            ],
            Some(Other),
        ),
        (
            &[
                ("Transfer-Encoding", "gzip"),
                ("Transfer-Encoding", "chunked"),
            ],
            Some(Chunked),
        ),
    ];
    for (fields, want) in rows {
        assert_eq!(summary(fields).transfer_encoding, *want, "{fields:?}");
    }
}

#[test]
fn rfc9112_9_6_connection_options_close_and_upgrade_are_read_in_any_case() {
    let s = summary(&[("Connection", "keep-alive, Close")]);
    assert!(s.close && !s.connection_upgrade);
    let s = summary(&[("connection", "x"), ("Connection", " UPGRADE ")]);
    assert!(!s.close && s.connection_upgrade);
    let s = summary(&[("Upgrade", "websocket"), ("Expect", "100-continue")]);
    assert!(s.upgrade && s.expect && !s.connection_upgrade);
    assert_eq!(
        summary(&[("X-Connection", "close")]),
        FieldSummary::default()
    );
}
