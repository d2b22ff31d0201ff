//! A client's own mistakes are answered as the client's and counted as client errors, before
//! (or without) blaming a backend: request heads over `--max-request-head` get 431 and never
//! reach a backend; an invalid chunked request body gets 400, never 502, and no backend error,
//! and when its first chunk is invalid no backend (nor mirror) receives a byte of it.
//! Raw TCP clients, a backend that records every byte it receives, and the metrics after each
//! attempt, on the fast path, on a connection hyper serves, and over HTTP/2.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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
/// request (a head and its `Content-Length` of body, or a chunked body up to its last chunk).
struct Recorder {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    /// Connections accepted.
    connections: Arc<AtomicUsize>,
}

impl Recorder {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let all = received.clone();
        let accepted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
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
        Self {
            addr,
            received,
            connections,
        }
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
    let (head, body) = (&text[..end], &text[end + 4..]);
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with("0\r\n\r\n");
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
        .unwrap_or(0);
    body.len() >= length
}

/// A proxy with one route to `rec`, its rule's fields extended by `rule` (filters, timeouts).
async fn proxy_to(rec: &Recorder, rule: serde_json::Value) -> Proxy {
    let mut fields = json!({ "backends": [backend("ns/rec:80", &rec.addr.to_string())] });
    fields
        .as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    Proxy::with_config(doc(1, vec![http_route("ns/rec", &[HOST], json!([fields]))])).await
}

async fn setup() -> (Proxy, Recorder) {
    let rec = Recorder::start().await;
    (proxy_to(&rec, json!({})).await, rec)
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

/// `malformed_chunked()`, each sent in one write and sent paused.
fn malformed_sends() -> impl Iterator<Item = (String, bool)> {
    malformed_chunked()
        .into_iter()
        .flat_map(|r| [(r.clone(), false), (r, true)])
}

/// Sends `request` on `s` and reads one answer (see [`exchange`]); `paused`: its head, then its
/// body once the proxy had 200 ms to forward the head.
async fn send(s: &mut TcpStream, request: &str, paused: bool) -> String {
    if !paused {
        return exchange(s, request.as_bytes(), None).await;
    }
    let (head, body) = request.split_at(request.find("\r\n\r\n").unwrap() + 4);
    s.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    exchange(s, body.as_bytes(), None).await
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
    for (n, (request, paused)) in malformed_sends().enumerate() {
        rec.received.lock().unwrap().clear();
        let mut s = TcpStream::connect(p.data).await.unwrap();
        let resp = send(&mut s, &request, paused).await;
        assert_eq!(status_of(&resp), "400", "{request:?} -> {resp}");
        assert_eq!(rec.received(), "", "bytes reached the backend");
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
    for (n, (request, paused)) in malformed_sends().enumerate() {
        let mut s = TcpStream::connect(p.data).await.unwrap();
        let first = exchange(&mut s, chunked_post().as_bytes(), Some("ok")).await;
        assert_eq!(status_of(&first), "200", "{first}");
        let before = rec.received();
        let resp = send(&mut s, &request, paused).await;
        assert_eq!(status_of(&resp), "400", "{request:?} -> {resp}");
        assert_eq!(rec.received(), before, "bytes reached the backend");
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

/// Waits (bounded) until `rec` has received a text ending with `end`.
async fn wait_for_end(rec: &Recorder, end: &str) {
    for _ in 0..100 {
        if rec.received().ends_with(end) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of the one request `received` holds (what follows its head).
fn body_of(received: &str) -> &str {
    received
        .split_once("\r\n\r\n")
        .map_or("<no head>", |(_, body)| body)
}

#[tokio::test]
async fn a_mirror_receives_the_chunked_body_the_backend_receives_and_nothing_of_an_invalid_one() {
    let rec = Recorder::start().await;
    let mirror = Recorder::start().await;
    let p = proxy_to(
        &rec,
        json!({ "filters": [{ "type": "RequestMirror",
                              "backend": backend("ns/mirror:80", &mirror.addr.to_string()) }] }),
    )
    .await;
    let body = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let request =
        format!("POST /m HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
    let resp = raw(p.data, request.as_bytes()).await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    wait_for_end(&mirror, "0\r\n\r\n").await;
    let (primary, copy) = (rec.received(), mirror.received());
    assert!(primary.starts_with("POST /m HTTP/1.1\r\n"), "{primary:?}");
    assert!(copy.starts_with("POST /m HTTP/1.1\r\n"), "{copy:?}");
    // the same chunks, however hyper's client framed them
    let data = |body: &str| {
        let mut data = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size, 16).unwrap();
            data.push_str(&tail[..size]);
            rest = &tail[size + 2..];
        }
        data
    };
    assert_eq!(data(body_of(&primary)), "hello world", "{primary:?}");
    assert_eq!(data(body_of(&copy)), "hello world", "{copy:?}");
    for (request, paused) in malformed_sends() {
        rec.received.lock().unwrap().clear();
        mirror.received.lock().unwrap().clear();
        let mut s = TcpStream::connect(p.data).await.unwrap();
        let resp = send(&mut s, &request, paused).await;
        assert_eq!(status_of(&resp), "400", "{request:?} -> {resp}");
        assert_eq!(rec.received(), "", "bytes reached the backend");
        assert_eq!(mirror.received(), "", "bytes reached the mirror");
    }
    let want = Counts {
        host_4xx: 4,
        host_5xx: 0,
        host_backend_errors: 0,
        unmatched_4xx: 0,
    };
    assert_eq!(counts(&p).await, want);
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_reaches_the_backend() {
    let (p, rec) = setup().await;
    let head = |framing: &str| {
        format!("POST /e HTTP/1.1\r\nHost: {HOST}\r\nExpect: 100-continue\r\n{framing}\r\n")
    };
    let chunked = head("Transfer-Encoding: chunked\r\n");
    // chunked: 100 first; the head waits in the proxy for the first chunk
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let cont = exchange(&mut s, chunked.as_bytes(), Some("\r\n\r\n")).await;
    assert_eq!(cont, "HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(rec.received(), "", "the head went ahead of the body");
    let resp = exchange(&mut s, b"5\r\nhello\r\n0\r\n\r\n", Some("ok")).await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    let received = rec.received();
    assert!(received.starts_with("POST /e HTTP/1.1\r\n"), "{received:?}");
    assert!(
        received.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        "{received:?}"
    );
    // chunked, the first chunk invalid: 400, and nothing reaches the backend
    rec.received.lock().unwrap().clear();
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let cont = exchange(&mut s, chunked.as_bytes(), Some("\r\n\r\n")).await;
    assert_eq!(cont, "HTTP/1.1 100 Continue\r\n\r\n");
    let resp = exchange(&mut s, b"zz\r\nhello\r\n0\r\n\r\n", None).await;
    assert_eq!(status_of(&resp), "400", "{resp}");
    assert_eq!(rec.received(), "", "bytes reached the backend");
    // Content-Length bodies are not waited for: 100, then the body, as before
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let cont = exchange(
        &mut s,
        head("Content-Length: 5\r\n").as_bytes(),
        Some("\r\n\r\n"),
    )
    .await;
    assert_eq!(cont, "HTTP/1.1 100 Continue\r\n\r\n");
    let resp = exchange(&mut s, b"hello", Some("ok")).await;
    assert_eq!(status_of(&resp), "200", "{resp}");
    let received = rec.received();
    assert!(received.starts_with("POST /e HTTP/1.1\r\n"), "{received:?}");
    assert!(received.ends_with("\r\n\r\nhello"), "{received:?}");
    let want = Counts {
        host_4xx: 1,
        host_5xx: 0,
        host_backend_errors: 0,
        unmatched_4xx: 0,
    };
    assert_eq!(counts(&p).await, want);
}

#[tokio::test]
async fn a_first_chunk_that_never_comes_gets_the_timeout_answer_without_a_backend_connection() {
    let rec = Recorder::start().await;
    let p = proxy_to(
        &rec,
        json!({ "timeouts": { "request": "5s", "backendRequest": "300ms" } }),
    )
    .await;
    let head = format!("POST /t HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut s = TcpStream::connect(p.data).await.unwrap();
    let resp = exchange(&mut s, head.as_bytes(), Some("\n")).await;
    assert_eq!(status_of(&resp), "504", "{resp}");
    assert_eq!(rec.received(), "", "bytes reached the backend");
    assert_eq!(rec.connections.load(Ordering::Relaxed), 0);
}
