//! A client's own mistakes are answered as the client's and counted as client errors, before
//! (or without) blaming a backend: request heads over `--max-request-head` get 431 and never
//! reach a backend; an invalid chunked request body gets 400, never 502, and no backend error.
//! Raw TCP clients, a backend that records every byte it receives, and the metrics after each
//! attempt, on the fast path, on a connection hyper serves, and over HTTP/2.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

const HOST: &str = "rec.example.com";
/// The proxy's default `--max-request-head`.
const LIMIT: usize = 64 * 1024;

/// A backend that records every byte it receives and answers `200 ok` to each complete
/// request (a head without a body, or a chunked body up to its last chunk).
struct Recorder {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let all = received.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let all = all.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        all.lock().unwrap().extend_from_slice(&buf[..n]);
                        request.extend_from_slice(&buf[..n]);
                        if complete(&request) {
                            request.clear();
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if s.write_all(ok).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, received }
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

fn complete(request: &[u8]) -> bool {
    let text = String::from_utf8_lossy(request).to_ascii_lowercase();
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    !text[..end].contains("transfer-encoding: chunked") || text.ends_with("0\r\n\r\n")
}

async fn setup() -> (Proxy, Recorder) {
    let rec = Recorder::start().await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/rec",
            &[HOST],
            json!([{ "backends": [backend("ns/rec:80", &rec.addr.to_string())] }]),
        )],
    ))
    .await;
    (p, rec)
}

/// The value of the series `name{labels}` (0 when absent).
async fn metric(p: &Proxy, series: &str) -> u64 {
    let (_, text) = p.admin_get("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// What the metrics say about one hostname (and requests no route matched).
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    host_4xx: u64,
    host_5xx: u64,
    host_backend_errors: u64,
    unmatched_4xx: u64,
}

async fn counts(p: &Proxy) -> Counts {
    let requests = |host: &str, class: &str| {
        format!(r#"cftunnel_proxy_requests_total{{hostname="{host}",status_class="{class}"}}"#)
    };
    let mut host_backend_errors = 0;
    for reason in ["connect", "tls", "timeout", "protocol", "upgrade"] {
        let series = format!(
            r#"cftunnel_proxy_backend_errors_total{{hostname="{HOST}",reason="{reason}"}}"#
        );
        host_backend_errors += metric(p, &series).await;
    }
    Counts {
        host_4xx: metric(p, &requests(HOST, "4xx")).await,
        host_5xx: metric(p, &requests(HOST, "5xx")).await,
        host_backend_errors,
        unmatched_4xx: metric(p, &requests("<none>", "4xx")).await,
    }
}

fn status_of(resp: &str) -> &str {
    resp.split(' ').nth(1).unwrap_or("<no response>")
}

/// Writes `request` on `s` and reads one answer: until the peer closes, goes quiet for
/// 1 s, or (`until`) the text read so far ends with `until`.
async fn exchange(s: &mut TcpStream, request: &[u8], until: Option<&str>) -> String {
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
        if until.is_some_and(|u| out.ends_with(u.as_bytes())) {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn get_with_header(len: usize) -> String {
    format!(
        "GET /big HTTP/1.1\r\nHost: {HOST}\r\nX-Big: {}\r\n\r\n",
        "b".repeat(len)
    )
}

/// A valid chunked request: the fast path leaves the connection to hyper from here on.
fn chunked_post() -> String {
    format!(
        "POST /first HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    )
}

#[tokio::test]
async fn a_head_over_the_limit_gets_431_on_the_fast_path_and_reaches_no_backend() {
    let (p, rec) = setup().await;
    // a 100 KiB header line, and a head one byte over the limit
    let over = get_with_header(LIMIT - get_with_header(0).len() + 1);
    assert_eq!(over.len(), LIMIT + 1);
    for (n, request) in [get_with_header(100 * 1024), over].iter().enumerate() {
        let resp = raw(p.data, request.as_bytes()).await;
        assert_eq!(status_of(&resp), "431", "{resp}");
        assert!(resp.contains("connection: close"), "{resp}");
        assert_eq!(rec.received(), "", "bytes reached the backend");
        let want = Counts {
            host_4xx: 0,
            host_5xx: 0,
            host_backend_errors: 0,
            unmatched_4xx: n as u64 + 1,
        };
        assert_eq!(counts(&p).await, want);
    }
    // a head of exactly the limit is forwarded
    let exact = get_with_header(LIMIT - get_with_header(0).len());
    assert_eq!(exact.len(), LIMIT);
    let resp = raw(p.data, exact.as_bytes()).await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    assert!(rec.received().starts_with("GET /big HTTP/1.1\r\n"));
}

#[tokio::test]
async fn a_head_over_the_limit_gets_431_when_hyper_serves_the_connection() {
    let (p, rec) = setup().await;
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let first = exchange(&mut s, chunked_post().as_bytes(), Some("ok")).await;
    assert_eq!(status_of(&first), "200", "{first}");
    let before = rec.received();
    assert!(before.starts_with("POST /first HTTP/1.1\r\n"), "{before}");
    assert!(before.ends_with("0\r\n\r\n"), "{before}");
    let resp = exchange(&mut s, get_with_header(100 * 1024).as_bytes(), None).await;
    assert_eq!(status_of(&resp), "431", "{resp}");
    assert_eq!(
        rec.received(),
        before,
        "bytes of the large head reached the backend"
    );
    let want = Counts {
        host_4xx: 0,
        host_5xx: 0,
        host_backend_errors: 0,
        unmatched_4xx: 1,
    };
    assert_eq!(counts(&p).await, want);
    // a head far over the limit: hyper's read buffer fills first, and hyper answers itself
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let first = exchange(&mut s, chunked_post().as_bytes(), Some("ok")).await;
    assert_eq!(status_of(&first), "200", "{first}");
    let before = rec.received();
    let resp = exchange(&mut s, get_with_header(1024 * 1024).as_bytes(), None).await;
    assert_eq!(status_of(&resp), "431", "{resp}");
    assert_eq!(
        rec.received(),
        before,
        "bytes of the large head reached the backend"
    );
    let want = Counts {
        unmatched_4xx: 2,
        ..want
    };
    assert_eq!(counts(&p).await, want);
}

#[tokio::test]
async fn a_header_list_over_the_limit_gets_431_over_http2() {
    let (p, rec) = setup().await;
    let resp = h2c_request(
        p.data,
        Request::get(format!("http://{HOST}/big"))
            .header("x-big", "b".repeat(100 * 1024))
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(rec.received(), "", "bytes reached the backend");
    // h2 answers before the request reaches the proxy's handler: nothing is counted
    let want = Counts {
        host_4xx: 0,
        host_5xx: 0,
        host_backend_errors: 0,
        unmatched_4xx: 0,
    };
    assert_eq!(counts(&p).await, want);
}

/// Chunked heads with an invalid first chunk size: not hexadecimal, and overflowing 64 bits.
fn malformed_chunked() -> [String; 2] {
    [
        "zz\r\nhello\r\n0\r\n\r\n",
        "1ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
    ]
    .map(|body| {
        format!("POST /bad HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n{body}")
    })
}

/// What a backend may have received of a request whose body the proxy found malformed:
/// nothing, or a prefix of the forwarded head followed by `valid` (the chunks before the
/// malformed one, as hyper's client writes them), never the end of the body. hyper's client
/// may send the head before it reads the body; usually the error comes first.
fn assert_at_most(received: &str, path: &str, valid: &str) {
    if received.is_empty() {
        return;
    }
    assert!(
        received.starts_with(&format!("POST {path} HTTP/1.1\r\n")),
        "{received:?}"
    );
    let Some(end) = received.find("\r\n\r\n") else {
        return;
    };
    let body = &received[end + 4..];
    assert!(
        valid.starts_with(body),
        "more than the head and {valid:?} reached the backend: {received:?}"
    );
}

#[tokio::test]
async fn an_invalid_chunk_size_is_the_clients_400_on_a_connection_from_the_fast_path() {
    let (p, rec) = setup().await;
    for (n, request) in malformed_chunked().iter().enumerate() {
        rec.received.lock().unwrap().clear();
        let resp = raw(p.data, request.as_bytes()).await;
        assert_eq!(status_of(&resp), "400", "{request:?} -> {resp}");
        assert_at_most(&rec.received(), "/bad", "");
        let want = Counts {
            host_4xx: n as u64 + 1,
            host_5xx: 0,
            host_backend_errors: 0,
            unmatched_4xx: 0,
        };
        assert_eq!(counts(&p).await, want, "{request:?}");
    }
}

#[tokio::test]
async fn an_invalid_chunk_size_is_the_clients_400_when_hyper_serves_the_connection() {
    let (p, rec) = setup().await;
    for (n, request) in malformed_chunked().iter().enumerate() {
        let mut s = TcpStream::connect(p.data).await.unwrap();
        let first = exchange(&mut s, chunked_post().as_bytes(), Some("ok")).await;
        assert_eq!(status_of(&first), "200", "{first}");
        let before = rec.received();
        let resp = exchange(&mut s, request.as_bytes(), None).await;
        assert_eq!(status_of(&resp), "400", "{request:?} -> {resp}");
        let after = rec.received();
        assert_at_most(&after[before.len()..], "/bad", "");
        let want = Counts {
            host_4xx: n as u64 + 1,
            host_5xx: 0,
            host_backend_errors: 0,
            unmatched_4xx: 0,
        };
        assert_eq!(counts(&p).await, want, "{request:?}");
    }
}

#[tokio::test]
async fn an_invalid_chunk_size_after_valid_chunks_is_the_clients_400() {
    let (p, rec) = setup().await;
    let head = format!("POST /late HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n");
    // all at once
    let resp = raw(
        p.data,
        format!("{head}5\r\nhello\r\nxyz\r\n0\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    assert_at_most(&rec.received(), "/late", "5\r\nhello\r\n");
    let mut want = Counts {
        host_4xx: 1,
        host_5xx: 0,
        host_backend_errors: 0,
        unmatched_4xx: 0,
    };
    assert_eq!(counts(&p).await, want);
    // the malformed size only once the valid chunk reached the backend: the backend has the
    // head and that chunk, and its connection closes without the end of the body
    rec.received.lock().unwrap().clear();
    let mut s = TcpStream::connect(p.data).await.unwrap();
    s.write_all(format!("{head}5\r\nhello\r\n").as_bytes())
        .await
        .unwrap();
    for _ in 0..100 {
        if rec.received().ends_with("hello\r\n") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resp = exchange(&mut s, b"xyz\r\n0\r\n\r\n", None).await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    let received = rec.received();
    assert!(received.ends_with("\r\n\r\n5\r\nhello\r\n"), "{received:?}");
    assert_at_most(&received, "/late", "5\r\nhello\r\n");
    want.host_4xx = 2;
    assert_eq!(counts(&p).await, want);
}
