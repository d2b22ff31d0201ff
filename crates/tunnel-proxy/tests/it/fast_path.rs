//! The HTTP/1.1 fast path against real clients and backends: keep-alive and pipelining,
//! every response framing, backends that close or break connections, and requests it hands
//! to hyper in the middle of a connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::*;

/// A backend written against the socket, answering by path:
/// - `/chunked`: a chunked body with a trailer;
/// - `/until-close`: a body delimited by closing the connection;
/// - `/broken`: announces 100 bytes, sends 5, closes;
/// - `/once`: a normal answer, then the connection is closed without saying so;
/// - `/large`: [`LARGE`] bytes of [`large_body`] with a Content-Length, keep-alive, written
///   in pieces;
/// - `/large-broken`: announces [`LARGE`] bytes, sends 300,000 of them, closes;
/// - anything else: `ok` with a Content-Length, keep-alive.
struct RawBackend {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl RawBackend {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let Some(end) = find(&buf, b"\r\n\r\n") else {
                            let mut chunk = [0u8; 4096];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                        let large = |sent: usize| {
                            let mut answer =
                                format!("HTTP/1.1 200 OK\r\nContent-Length: {LARGE}\r\n\r\n")
                                    .into_bytes();
                            answer.extend_from_slice(&large_body()[..sent]);
                            answer
                        };
                        let (answer, close): (Vec<u8>, bool) = match path.as_str() {
                            "/chunked" => (
                                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n".to_vec(),
                                false,
                            ),
                            "/until-close" => (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close".to_vec(), true),
                            "/broken" => (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec(), true),
                            "/once" => (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(), true),
                            "/large" => (large(LARGE), false),
                            "/large-broken" => (large(300_000), true),
                            _ => (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(), false),
                        };
                        for piece in answer.chunks(200_000) {
                            if s.write_all(piece).await.is_err() {
                                return;
                            }
                            tokio::task::yield_now().await;
                        }
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        Self { addr, connections }
    }
}

/// The length of `/large`'s body: several of the fast path's 256 KiB reads, and not a
/// multiple of any buffer size.
const LARGE: usize = 1024 * 1024 + 123;

/// `/large`'s body: letters whose position in the body shows in them, so a byte lost,
/// doubled or moved is seen.
fn large_body() -> Vec<u8> {
    (0..LARGE).map(|i| b'a' + (i % 23) as u8).collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn proxy_to(endpoint: &str, host: &str) -> Proxy {
    Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/r",
            &[host],
            json!([{ "backends": [backend("ns/b:80", endpoint)] }]),
        )],
    ))
    .await
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_are_answered_in_order() {
    let b = Backend::start("echo").await;
    let p = proxy_to(&b.endpoint(), "pipe.example.com").await;
    let resp = raw(
        p.data,
        b"GET /1 HTTP/1.1\r\nHost: pipe.example.com\r\n\r\n\
          POST /2 HTTP/1.1\r\nHost: pipe.example.com\r\nContent-Length: 5\r\n\r\nhello\
          GET /3 HTTP/1.1\r\nHost: pipe.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(resp.matches("HTTP/1.1 200 OK").count(), 3, "{resp}");
    let at = |s: &str| {
        resp.find(s)
            .unwrap_or_else(|| panic!("{s} missing: {resp}"))
    };
    assert!(at(r#""target":"/1""#) < at(r#""target":"/2""#));
    assert!(at(r#""target":"/2""#) < at(r#""target":"/3""#));
    assert!(resp.contains(r#""bodyLen":5"#), "{resp}");
    assert!(
        resp.contains("connection: close"),
        "the last answer must say it closes: {resp}"
    );
    assert_eq!(b.hits(), 3);
}

#[tokio::test]
async fn requests_hyper_serves_and_fast_ones_share_a_connection() {
    let b = Backend::start("echo").await;
    let p = proxy_to(&b.endpoint(), "mixed.example.com").await;
    let big = "x".repeat(70_000);
    let mut input = Vec::new();
    input.extend_from_slice(b"GET /fast HTTP/1.1\r\nHost: mixed.example.com\r\n\r\n");
    // chunked: declined by the fast path, served by hyper from here on
    input.extend_from_slice(
        b"POST /chunked HTTP/1.1\r\nHost: mixed.example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    input.extend_from_slice(
        format!(
            "POST /big HTTP/1.1\r\nHost: mixed.example.com\r\nContent-Length: {}\r\n\r\n{big}",
            big.len()
        )
        .as_bytes(),
    );
    input.extend_from_slice(
        b"GET /last HTTP/1.1\r\nHost: mixed.example.com\r\nConnection: close\r\n\r\n",
    );
    let resp = raw(p.data, &input).await;
    assert_eq!(resp.matches("HTTP/1.1 200 OK").count(), 4, "{resp}");
    for part in [
        r#""target":"/fast""#,
        r#""bodyLen":3"#,
        r#""bodyLen":70000"#,
        r#""target":"/last""#,
    ] {
        assert!(resp.contains(part), "{part} missing: {resp}");
    }

    // A body over the fast path's limit on a fresh connection goes through hyper too.
    let resp = p
        .send(
            Request::post("/big")
                .header("host", "mixed.example.com")
                .body(full(big.clone()))
                .unwrap(),
        )
        .await;
    assert_eq!(body_json(resp).await["bodyLen"], 70_000);
}

#[tokio::test]
async fn chunked_and_close_delimited_answers_reach_the_client_whole() {
    let b = RawBackend::start().await;
    let p = proxy_to(&b.addr.to_string(), "framing.example.com").await;
    let client = http1_client();
    let get = |path: &str, method: Method| {
        let req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", p.data))
            .header("host", "framing.example.com")
            .body(full(""))
            .unwrap();
        client.request(req)
    };
    let resp = get("/chunked", Method::GET).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let collected = resp.into_body().collect().await.unwrap();
    assert_eq!(
        collected
            .trailers()
            .and_then(|t| t.get("x-t"))
            .map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "trailers pass through"
    );
    assert_eq!(collected.to_bytes(), "hello world");
    let resp = get("/until-close", Method::GET).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_string(resp).await, "until close");
    let resp = get("/", Method::HEAD).await.unwrap();
    assert_eq!(resp.headers()["content-length"], "2");
    assert_eq!(body_string(resp).await, "");
    // The chunked answer's connection was reused by the HEAD; the close-delimited one not.
    assert_eq!(b.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_backend_closing_idle_connections_silently_costs_clients_nothing() {
    let b = RawBackend::start().await;
    let p = proxy_to(&b.addr.to_string(), "once.example.com").await;
    let client = http1_client();
    for (i, method) in [
        Method::GET,
        Method::POST,
        Method::GET,
        Method::POST,
        Method::PUT,
    ]
    .into_iter()
    .enumerate()
    {
        let req = Request::builder()
            .method(method.clone())
            .uri(format!("http://{}/once", p.data))
            .header("host", "once.example.com")
            .body(full("x"))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "request {i} ({method})");
        assert_eq!(body_string(resp).await, "ok");
        // Time for the backend's close to reach the proxy's idle connection.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.connections.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_body_broken_off_closes_the_client_connection_and_is_counted() {
    let b = RawBackend::start().await;
    let p = proxy_to(&b.addr.to_string(), "broken.example.com").await;
    let large = large_body();
    // A short body, and a large one broken off after the proxy has streamed 300,000 bytes.
    let cases: [(&str, &[u8]); 2] = [("/broken", b"short"), ("/large-broken", &large[..300_000])];
    for (count, (path, came)) in cases.into_iter().enumerate() {
        let resp = raw(
            p.data,
            format!("GET {path} HTTP/1.1\r\nHost: broken.example.com\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(
            resp.starts_with("HTTP/1.1 200 OK\r\n"),
            "{path}: {}",
            &resp[..resp.len().min(200)]
        );
        let body = &resp[resp.find("\r\n\r\n").unwrap() + 4..];
        assert!(
            body.as_bytes() == came,
            "{path}: the client gets what came ({} bytes, not {}), then the connection closes",
            body.len(),
            came.len()
        );
        let (_, metrics) = p.admin_get("/metrics").await;
        let line = format!(
            r#"cftunnel_proxy_backend_errors_total{{hostname="broken.example.com",reason="protocol"}} {}"#,
            count + 1
        );
        assert!(
            metrics.lines().any(|l| l == line),
            "{path}: missing {line}\n{metrics}"
        );
    }
}

#[tokio::test]
async fn large_bodies_reach_the_client_whole_on_a_connection_kept_alive() {
    let b = RawBackend::start().await;
    let p = proxy_to(&b.addr.to_string(), "large.example.com").await;
    let client = http1_client();
    let get = |path: &str| {
        let req = Request::get(format!("http://{}{path}", p.data))
            .header("host", "large.example.com")
            .body(full(""))
            .unwrap();
        client.request(req)
    };
    for round in 0..3 {
        let resp = get("/large").await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-length"], LARGE.to_string());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(
            body[..] == large_body()[..],
            "round {round}: {} bytes, not the backend's body",
            body.len()
        );
        // The backend connection is in step after the body: a small answer follows on it.
        let resp = get("/").await.unwrap();
        assert_eq!(body_string(resp).await, "ok", "round {round}");
    }
    assert_eq!(
        b.connections.load(Ordering::SeqCst),
        1,
        "every exchange reused the backend connection"
    );
}

/// Reads one response's worth from `s` (until the body of a JSON echo or 2 s of quiet).
async fn read_some(s: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.ends_with(b"}") {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn on_stop_idle_connections_close_and_a_request_in_flight_completes_first() {
    let b = Backend::start("echo").await;
    let p = proxy_to(&b.endpoint(), "stop.example.com").await;
    let mut idle = tokio::net::TcpStream::connect(p.data).await.unwrap();
    idle.write_all(b"GET /warm HTTP/1.1\r\nHost: stop.example.com\r\n\r\n")
        .await
        .unwrap();
    assert!(read_some(&mut idle).await.starts_with("HTTP/1.1 200 OK"));
    let mut busy = tokio::net::TcpStream::connect(p.data).await.unwrap();
    busy.write_all(b"GET /slow/500 HTTP/1.1\r\nHost: stop.example.com\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(p); // raises the stop signal

    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), idle.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the idle connection must close at once: {closed:?} {rest:?}"
    );
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), busy.read_to_end(&mut answer))
        .await
        .expect("the busy connection closes after its answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""target":"/slow/500""#), "{answer}");
}
