//! Hostile clients: routing only by Host / :authority, malformed requests refused before any
//! backend sees them. Raw TCP writes so nothing normalises the bytes.

use http::{Request, StatusCode};
use serde_json::json;

use crate::common::*;

async fn setup() -> (Proxy, Backend, Backend) {
    let good = Backend::start("good").await;
    let fallback = Backend::start("fallback").await;
    let p = Proxy::with_config(doc(
        1,
        vec![
            http_route(
                "ns/good",
                &["good.example.com"],
                json!([{ "backends": [backend("ns/good:80", &good.endpoint())] }]),
            ),
            http_route(
                "ns/other",
                &["evil.example.com"],
                json!([{ "backends": [backend("ns/fb:80", &fallback.endpoint())] }]),
            ),
        ],
    ))
    .await;
    (p, good, fallback)
}

fn status_of(resp: &str) -> &str {
    resp.split(' ').nth(1).unwrap_or("<no response>")
}

#[tokio::test]
async fn no_header_other_than_host_selects_the_route() {
    let (p, good, fallback) = setup().await;
    let headers = [
        "X-Forwarded-Host: good.example.com",
        "X-Original-Host: good.example.com",
        "Forwarded: host=good.example.com;proto=https",
        "X-Host: good.example.com",
        "X-Original-URL: http://good.example.com/",
        "X-Rewrite-URL: http://good.example.com/",
        ":authority: good.example.com",
    ];
    for h in headers {
        let req =
            format!("GET / HTTP/1.1\r\nHost: evil.example.com\r\n{h}\r\nConnection: close\r\n\r\n");
        let resp = raw(p.data, req.as_bytes()).await;
        // `:authority` is not a valid HTTP/1 header name: refused outright
        if h.starts_with(':') {
            assert_eq!(status_of(&resp), "400", "{h}: {resp}");
        } else {
            assert_eq!(status_of(&resp), "200", "{h}: {resp}");
            assert!(
                resp.contains("x-backend: fallback"),
                "{h} chose another route: {resp}"
            );
        }
    }
    // no Host at all, with only alternative headers: refused
    let resp = raw(
        p.data,
        b"GET / HTTP/1.1\r\nX-Forwarded-Host: good.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    let resp = raw(
        p.data,
        b"GET / HTTP/1.0\r\nX-Forwarded-Host: good.example.com\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    assert_eq!(good.hits(), 0);
    assert_eq!(fallback.hits(), headers.len() - 1);
}

#[tokio::test]
async fn absolute_form_authority_must_agree_with_host() {
    let (p, good, fallback) = setup().await;
    let resp = raw(p.data, b"GET http://good.example.com/ HTTP/1.1\r\nHost: evil.example.com\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    let resp = raw(p.data, b"GET http://good.example.com/ HTTP/1.1\r\nHost: good.example.com\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    assert_eq!((good.hits(), fallback.hits()), (1, 0));
}

#[tokio::test]
async fn h2_authority_must_agree_with_a_host_header() {
    let (p, good, fallback) = setup().await;
    let resp = h2c_request(
        p.data,
        Request::get("http://evil.example.com/")
            .header("host", "good.example.com")
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!((good.hits(), fallback.hits()), (0, 0));
}

#[tokio::test]
async fn malformed_requests_are_refused_and_never_reach_a_backend() {
    let (p, good, _) = setup().await;
    let cases: [&[u8]; 8] = [
        // both Content-Length and Transfer-Encoding (request smuggling)
        b"POST / HTTP/1.1\r\nHost: good.example.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: good.example.com\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n",
        // duplicate, conflicting Content-Length
        b"POST / HTTP/1.1\r\nHost: good.example.com\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nHost: good.example.com\r\nContent-Length: 5, 6\r\n\r\nhello!",
        // bad bytes in a header value and a header name
        b"GET / HTTP/1.1\r\nHost: good.example.com\r\nX-Bad: a\x01b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: good.example.com\r\nBad Name: x\r\n\r\n",
        // two Host headers, and a Host that is not a host
        b"GET / HTTP/1.1\r\nHost: good.example.com\r\nHost: evil.example.com\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: good.example.com/x\r\n\r\n",
    ];
    for case in cases {
        let resp = raw(p.data, case).await;
        assert_eq!(
            status_of(&resp),
            "400",
            "{:?} -> {resp}",
            String::from_utf8_lossy(case)
        );
    }
    assert_eq!(good.hits(), 0, "a malformed request reached the backend");
    // and a well-formed request on the same route still works
    let resp = raw(
        p.data,
        b"GET / HTTP/1.1\r\nHost: GOOD.example.com:8080\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    assert_eq!(good.hits(), 1);
}
