//! The wire format of requests and answers: framing by length, chunks and close, interim
//! answers, keep-alive, and answers that are cut off or not HTTP.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use tokio::io::ReadBuf;

use super::*;

/// Yields its bytes a few at a time, as a slow connection does.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    step: usize,
}

impl Trickle {
    fn new(data: &[u8], step: usize) -> Self {
        Self {
            data: data.to_vec(),
            at: 0,
            step,
        }
    }
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let end = (self.at + self.step)
            .min(self.data.len())
            .min(self.at + buf.remaining());
        buf.put_slice(&self.data[self.at..end]);
        self.at = end;
        Poll::Ready(Ok(()))
    }
}

async fn answer_of(
    wire: &[u8],
    method: Method,
    step: usize,
) -> Result<(u16, HeaderMap, Bytes, bool), &'static str> {
    let mut io = Trickle::new(wire, step);
    match read_answer(&mut io, &method).await {
        Ok((resp, keep)) => {
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.expect("whole body").to_bytes();
            Ok((parts.status.as_u16(), parts.headers, body, keep))
        }
        Err(Failure::NothingCame(_)) => Err("nothing came"),
        Err(Failure::Broke(_)) => Err("broke"),
        Err(Failure::BodyBroke(..)) => Err("body broke"),
    }
}

/// Every way of reading an answer gives the same result, whatever the reads' sizes.
async fn answer(
    wire: &[u8],
    method: Method,
) -> Result<(u16, HeaderMap, Bytes, bool), &'static str> {
    let whole = answer_of(wire, method.clone(), wire.len().max(1)).await;
    for step in [1, 3, 7] {
        let trickled = answer_of(wire, method.clone(), step).await;
        assert_eq!(
            whole.as_ref().map(|(c, _, b, k)| (*c, b.clone(), *k)),
            trickled.as_ref().map(|(c, _, b, k)| (*c, b.clone(), *k)),
            "read {step} bytes at a time"
        );
    }
    whole
}

#[tokio::test]
async fn a_content_length_answer_is_read_to_its_length_and_keeps_the_connection() {
    let (code, headers, body, keep) = answer(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        Method::GET,
    )
    .await
    .unwrap();
    assert_eq!((code, &body[..], keep), (200, &b"{}"[..], true));
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["content-length"], "2");
}

#[tokio::test]
async fn a_chunked_answer_is_decoded_and_its_trailers_dropped() {
    let (code, headers, body, keep) = answer(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n",
        Method::GET,
    )
    .await
    .unwrap();
    assert_eq!((code, &body[..], keep), (200, &b"hello, world"[..], true));
    assert!(headers.get("transfer-encoding").is_none());
    assert!(headers.get("x-trailer").is_none());
}

#[tokio::test]
async fn a_chunked_answer_with_a_content_length_is_framed_by_its_chunks() {
    let (_, headers, body, _) = answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        Method::GET,
    )
    .await
    .unwrap();
    assert_eq!(&body[..], b"ok");
    assert!(headers.get("content-length").is_none());
}

#[tokio::test]
async fn the_fields_connection_names_are_not_part_of_the_answer() {
    let (_, headers, _, keep) = answer(
        b"HTTP/1.1 200 OK\r\nConnection: X-Hop, close\r\nX-Hop: 1\r\nX-End: 1\r\nContent-Length: 0\r\n\r\n",
        Method::GET,
    )
    .await
    .unwrap();
    let names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
    assert_eq!((names, keep), (vec!["x-end", "content-length"], false));
}

#[tokio::test]
async fn an_answer_without_length_runs_to_the_close_and_ends_the_connection() {
    let (_, _, body, keep) = answer(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", Method::GET)
        .await
        .unwrap();
    assert_eq!((&body[..], keep), (&b"until the end"[..], false));
}

#[tokio::test]
async fn connection_close_and_http_1_0_end_the_connection() {
    let close = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n";
    assert!(!answer(close, Method::GET).await.unwrap().3);
    let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert!(!answer(old, Method::GET).await.unwrap().3);
}

#[tokio::test]
async fn bytes_read_with_the_answer_beyond_it_end_the_connection() {
    // (Stray bytes that arrive later make the idle connection readable: `still_open` drops it.)
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n";
    let (_, _, body, keep) = answer_of(wire, Method::GET, wire.len()).await.unwrap();
    assert_eq!((&body[..], keep), (&b"{}"[..], false));
}

#[tokio::test]
async fn an_interim_answer_is_followed_by_the_real_one() {
    let (code, _, body, _) = answer(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
        Method::POST,
    )
    .await
    .unwrap();
    assert_eq!((code, &body[..]), (201, &b"x"[..]));
}

#[tokio::test]
async fn head_204_and_304_answers_have_no_body_whatever_their_length_says() {
    for (wire, method) in [
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"[..],
            Method::HEAD,
        ),
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
            Method::GET,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            Method::GET,
        ),
    ] {
        let (_, _, body, keep) = answer(wire, method).await.unwrap();
        assert_eq!(
            (body.len(), keep),
            (0, true),
            "{}",
            String::from_utf8_lossy(wire)
        );
    }
}

/// Each of `wires` (the answer to a GET) fails as `failure`.
async fn each_fails_as(wires: &[&[u8]], failure: &str) {
    for wire in wires {
        assert_eq!(
            answer(wire, Method::GET).await.unwrap_err(),
            failure,
            "{}",
            String::from_utf8_lossy(wire)
        );
    }
}

#[tokio::test]
async fn answers_that_are_not_http_or_frame_ambiguously_are_refused() {
    each_fails_as(
        &[
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        ],
        "broke",
    )
    .await;
}

#[tokio::test]
async fn a_bad_chunk_is_a_broken_body() {
    each_fails_as(
        &[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
        ],
        "body broke",
    )
    .await;
}

#[tokio::test]
async fn a_close_before_any_byte_differs_from_a_close_inside_the_answer() {
    each_fails_as(&[b""], "nothing came").await;
    each_fails_as(&[b"HTTP/1.1 200 OK\r\nContent-"], "broke").await;
    each_fails_as(
        &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
        ],
        "body broke",
    )
    .await;
}

#[test]
fn a_request_carries_host_the_extra_fields_and_its_body_length() {
    let req = Request::post("/apis/example.test/v1/namespaces/a/widgets?fieldManager=x")
        .header("host", "caller.example")
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .header("content-length", "999")
        .body(Bytes::from_static(b"{\"a\":1}"))
        .unwrap();
    let extra = [(
        HeaderName::from_static("impersonate-user"),
        HeaderValue::from_static("tenant"),
    )];
    let wire = encode(&req, "10.0.0.1:6443", &extra);
    assert_eq!(
        String::from_utf8(wire).unwrap(),
        "POST /apis/example.test/v1/namespaces/a/widgets?fieldManager=x HTTP/1.1\r\n\
         host: 10.0.0.1:6443\r\n\
         content-type: application/json\r\n\
         impersonate-user: tenant\r\n\
         content-length: 7\r\n\
         \r\n\
         {\"a\":1}"
    );
}

#[test]
fn a_get_without_body_has_no_length_but_an_empty_post_has_zero() {
    let get = Request::get("/x").body(Bytes::new()).unwrap();
    assert_eq!(
        String::from_utf8(encode(&get, "h:1", &[])).unwrap(),
        "GET /x HTTP/1.1\r\nhost: h:1\r\n\r\n"
    );
    let post = Request::post("/x").body(Bytes::new()).unwrap();
    assert!(
        String::from_utf8(encode(&post, "h:1", &[]))
            .unwrap()
            .ends_with("content-length: 0\r\n\r\n")
    );
}

fn peer(port: u16) -> PeerAddress {
    PeerAddress {
        host: "10.0.0.1".into(),
        port,
    }
}

#[tokio::test(start_paused = true)]
async fn idle_connections_too_old_to_use_are_closed_for_every_peer_at_the_next_put() {
    let mut lists = IdleLists::default();
    let (a, b) = (peer(1), peer(2));
    lists.put(&a, "a1", Instant::now());
    lists.put(&b, "b1", Instant::now());
    tokio::time::advance(IDLE_FOR_AT_MOST / 2).await;
    lists.put(&a, "a2", Instant::now());
    tokio::time::advance(IDLE_FOR_AT_MOST / 2 + Duration::from_secs(1)).await;
    // b has not been asked for since: its connection is closed all the same.
    lists.put(&a, "a3", Instant::now());
    let left = |p: &PeerAddress| -> Vec<&str> {
        lists
            .by_peer
            .get(p)
            .map(|l| l.iter().map(|c| c.io).collect())
            .unwrap_or_default()
    };
    assert_eq!(left(&a), ["a2", "a3"]);
    assert!(left(&b).is_empty() && !lists.by_peer.contains_key(&b));
}

#[test]
fn a_peer_keeps_a_bounded_number_of_idle_connections() {
    let mut lists = IdleLists::default();
    let a = peer(1);
    for n in 0..IDLE_PER_PEER + 5 {
        lists.put(&a, n, Instant::now());
    }
    assert_eq!(lists.by_peer[&a].len(), IDLE_PER_PEER);
}
