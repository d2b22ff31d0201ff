use super::*;

const LIMIT: usize = 64 * 1024;

fn buf(s: &[u8]) -> BytesMut {
    BytesMut::from(s)
}

fn complete(r: RequestHead) -> Request {
    match r {
        RequestHead::Complete(r) => r,
        other => panic!("expected a complete head, got {other:?}"),
    }
}

#[test]
fn a_request_head_is_parsed_and_split_off_leaving_pipelined_bytes() {
    let mut b =
        buf(b"GET /a/b?x=1 HTTP/1.1\r\nHost: Example.com\r\nX-Two: 1\r\nx-two: 2\r\n\r\nGET /next");
    let req = complete(parse_request(&mut b, LIMIT, &mut Scratch::default()));
    assert_eq!(req.parts.method, Method::GET);
    assert_eq!(req.parts.uri, "/a/b?x=1");
    assert_eq!(req.parts.version, Version::HTTP_11);
    assert_eq!(req.parts.headers["host"], "Example.com");
    let twos: Vec<_> = req.parts.headers.get_all("x-two").iter().collect();
    assert_eq!(twos, ["1", "2"]);
    assert_eq!(req.content_length, None);
    assert!(!req.close);
    assert!(req.head.starts_with(b"GET /a/b?x=1") && req.head.ends_with(b"\r\n\r\n"));
    assert_eq!(&b[..], b"GET /next");
    assert!(matches!(
        parse_request(&mut b, LIMIT, &mut Scratch::default()),
        RequestHead::Partial
    ));
}

#[test]
fn content_length_and_connection_close_are_read() {
    let mut b = buf(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: keep-alive, Close\r\n\r\nhello");
    let req = complete(parse_request(&mut b, LIMIT, &mut Scratch::default()));
    assert_eq!(req.content_length, Some(5));
    assert!(req.close);
    assert_eq!(&b[..], b"hello");
}

#[test]
fn what_the_fast_path_does_not_handle_is_declined_and_left_in_the_buffer() {
    let cases: &[&[u8]] = &[
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 65537\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ];
    for &case in cases {
        let mut b = buf(case);
        let got = parse_request(&mut b, LIMIT, &mut Scratch::default());
        assert!(
            matches!(got, RequestHead::Declined(_)),
            "{:?} -> {got:?}",
            String::from_utf8_lossy(case)
        );
        assert_eq!(&b[..], case, "the declined head must stay for hyper");
    }
}

#[test]
fn a_head_over_the_limit_is_too_large_whether_complete_or_not() {
    let line = format!("X-Big: {}\r\n", "a".repeat(LIMIT));
    let whole = format!("GET / HTTP/1.1\r\nHost: a\r\n{line}\r\n");
    let partial = format!("GET / HTTP/1.1\r\nHost: a\r\n{line}");
    for case in [whole, partial] {
        let got = parse_request(&mut buf(case.as_bytes()), LIMIT, &mut Scratch::default());
        assert!(matches!(got, RequestHead::TooLarge), "{got:?}");
    }
    // exactly the limit is accepted
    let head = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: \r\n\r\n";
    let exact = head.replace(
        "X-Pad: ",
        &format!("X-Pad: {}", "p".repeat(LIMIT - head.len())),
    );
    assert_eq!(exact.len(), LIMIT);
    complete(parse_request(
        &mut buf(exact.as_bytes()),
        LIMIT,
        &mut Scratch::default(),
    ));
}

#[test]
fn a_body_up_to_the_limit_stays_on_the_fast_path() {
    let head = format!("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: {MAX_FAST_BODY}\r\n\r\n");
    let req = complete(parse_request(
        &mut buf(head.as_bytes()),
        LIMIT,
        &mut Scratch::default(),
    ));
    assert_eq!(req.content_length, Some(MAX_FAST_BODY));
}

#[test]
fn a_request_head_is_written_with_the_stated_length_only() {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("a.example"));
    headers.insert("content-length", HeaderValue::from_static("999"));
    headers.append("x-multi", HeaderValue::from_static("1"));
    headers.append("x-multi", HeaderValue::from_static("2"));
    let mut out = Vec::new();
    headers.insert("x-set", HeaderValue::from_static("client"));
    let set_name = HeaderName::from_static("x-set");
    let set_value = HeaderValue::from_static("proxy");
    let set = [(&set_name, &set_value)];
    write_request_head(&mut out, &Method::POST, "/p?q", &headers, &set, Some(3));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /p?q HTTP/1.1\r\nhost: a.example\r\nx-multi: 1\r\nx-multi: 2\r\nx-set: proxy\r\ncontent-length: 3\r\n\r\n"
    );
    let mut out = Vec::new();
    write_request_head(&mut out, &Method::GET, "/", &HeaderMap::new(), &[], None);
    assert_eq!(out, b"GET / HTTP/1.1\r\n\r\n");
}

fn response(raw: &[u8], method: &Method) -> (Response, BytesMut) {
    let mut b = buf(raw);
    match parse_response(&mut b, method, &mut Scratch::default()) {
        ResponseHead::Complete(r) => (r, b),
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(raw)),
    }
}

#[test]
fn response_framing_follows_rfc_9112() {
    let get = Method::GET;
    let (r, rest) = response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", &get);
    assert_eq!(
        (r.status, r.framing, r.keep_alive),
        (StatusCode::OK, Framing::Length(2), true)
    );
    assert_eq!(&rest[..], b"hi");
    let (r, _) = response(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n", &get);
    assert_eq!(r.framing, Framing::Length(2));
    let (r, _) = response(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        &get,
    );
    assert_eq!((r.framing, r.keep_alive), (Framing::Chunked, true));
    let (r, _) = response(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
        &get,
    );
    assert_eq!(
        (r.framing, r.keep_alive),
        (Framing::Chunked, false),
        "TE wins over CL, and the connection is not reused"
    );
    let (r, _) = response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", &get);
    assert_eq!((r.framing, r.keep_alive), (Framing::CloseDelimited, false));
    let (r, _) = response(b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n", &get);
    assert_eq!((r.framing, r.keep_alive), (Framing::CloseDelimited, false));
    let (r, _) = response(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        &Method::HEAD,
    );
    assert_eq!(r.framing, Framing::Empty);
    for status in ["204 No Content", "304 Not Modified"] {
        let raw = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(response(raw.as_bytes(), &get).0.framing, Framing::Empty);
    }
    let (r, _) = response(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        &get,
    );
    assert!(!r.keep_alive);
    let (r, _) = response(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", &get);
    assert!(!r.keep_alive);
}

#[test]
fn interim_and_invalid_responses() {
    let mut b = buf(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n");
    assert!(matches!(
        parse_response(&mut b, &Method::GET, &mut Scratch::default()),
        ResponseHead::Interim(25)
    ));
    for raw in [
        &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 999x OK\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        let got = parse_response(&mut buf(raw), &Method::GET, &mut Scratch::default());
        assert!(
            matches!(got, ResponseHead::Invalid(_)),
            "{:?} -> {got:?}",
            String::from_utf8_lossy(raw)
        );
    }
    assert!(matches!(
        parse_response(
            &mut buf(b"HTTP/1.1 200 OK\r\nConte"),
            &Method::GET,
            &mut Scratch::default()
        ),
        ResponseHead::Partial
    ));
}

#[test]
fn a_response_head_states_its_framing_once() {
    let mut headers = HeaderMap::new();
    headers.insert("content-length", HeaderValue::from_static("7"));
    headers.insert("x-a", HeaderValue::from_static("b"));
    let head = |framing, close| {
        let mut out = Vec::new();
        write_response_head(&mut out, StatusCode::OK, &headers, framing, close);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        head(Framing::Length(2), false),
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: b\r\n\r\n"
    );
    assert_eq!(
        head(Framing::Chunked, true),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-a: b\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(
        head(Framing::CloseDelimited, false),
        "HTTP/1.1 200 OK\r\nx-a: b\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(
        head(Framing::Empty, false),
        "HTTP/1.1 200 OK\r\ncontent-length: 7\r\nx-a: b\r\n\r\n"
    );
}

#[test]
fn a_forwarded_head_drops_hop_by_hop_fields_and_states_its_own_framing() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: x-drop, Keep-Alive\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\nTrailer: x\r\nX-Keep: a b\r\nProxy-Authenticate: Basic\r\n\r\n";
    let mut scratch = Scratch::default();
    let mut b = buf(raw);
    let ResponseHead::Complete(r) = parse_response(&mut b, &Method::GET, &mut scratch) else {
        panic!("incomplete");
    };
    let mut out = Vec::new();
    r.write_forwarded_head(&scratch, &mut out, false);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nX-Keep: a b\r\n\r\n"
    );
    let map = r.header_map(&scratch).unwrap();
    assert_eq!(map["x-keep"], "a b");
    assert_eq!(map.len(), 7);

    let mut b = buf(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nETag: \"e\"\r\n\r\n");
    let ResponseHead::Complete(r) = parse_response(&mut b, &Method::GET, &mut scratch) else {
        panic!("incomplete");
    };
    let mut out = Vec::new();
    r.write_forwarded_head(&scratch, &mut out, true);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nETag: \"e\"\r\nconnection: close\r\n\r\n",
        "a 304 keeps the length of what it stands for"
    );
}
