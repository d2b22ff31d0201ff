//! gRPC through the proxy over h2c: unary and server streaming, trailers preserved,
//! GRPCRoute service/method matching.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::TcpListener;

use crate::common::*;

fn frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

fn parse_frames(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while data.len() >= 5 {
        let len = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
        out.push(data[5..5 + len].to_vec());
        data = &data[5 + len..];
    }
    out
}

/// A minimal gRPC server: `Unary` echoes its message, `Stream` answers N messages where N is
/// the first byte of the request message. Both end with `grpc-status: 0` trailers.
async fn grpc_service(
    req: Request<Incoming>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let msgs = parse_frames(&body);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = Vec::new();
    match path.as_str() {
        "/echo.Echo/Unary" => {
            frames.push(Ok(Frame::data(frame(&msgs[0]))));
            trailers.insert("x-echo", "unary".parse().unwrap());
        }
        "/echo.Echo/Stream" => {
            let n = msgs[0][0];
            for i in 0..n {
                frames.push(Ok(Frame::data(frame(&[i]))));
            }
            trailers.insert("x-count", n.to_string().parse().unwrap());
        }
        _ => {
            trailers.insert("grpc-status", "12".parse().unwrap());
        }
    }
    frames.push(Ok(Frame::trailers(trailers)));
    Ok(Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(futures::stream::iter(frames)).boxed())
        .unwrap())
}

async fn grpc_backend() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service_fn(grpc_service))
                    .await;
            });
        }
    });
    addr.to_string()
}

async fn call(p: &Proxy, method: &str, msg: &[u8]) -> (StatusCode, Vec<Vec<u8>>, HeaderMap) {
    let req = Request::post(format!("http://grpc.example.com{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(full(frame(msg)))
        .unwrap();
    let resp = h2c_request(p.data, req).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let collected = resp.into_body().collect().await.unwrap();
    let mut trailers = collected.trailers().cloned().unwrap_or_default();
    // trailers-only responses carry grpc-status in the headers
    if let Some(s) = headers.get("grpc-status") {
        trailers.insert("grpc-status", s.clone());
    }
    (status, parse_frames(&collected.to_bytes()), trailers)
}

#[tokio::test]
async fn grpc_unary_and_server_streaming_keep_trailers() {
    let endpoint = grpc_backend().await;
    let be = json!({ "name": "ns/echo:9090", "endpoints": [endpoint], "protocol": "http2" });
    let p = Proxy::with_config(doc(
        1,
        vec![json!({ "kind": "GRPCRoute", "name": "ns/echo", "hostnames": ["grpc.example.com"], "rules": [
            { "matches": [{ "method": { "service": "echo.Echo", "method": "Unary" } }], "backends": [be.clone()] },
            { "matches": [{ "method": { "type": "RegularExpression", "service": "echo\\..*", "method": "Str.*" } }], "backends": [be] }
        ] })],
    ))
    .await;
    let (status, msgs, trailers) = call(&p, "/echo.Echo/Unary", b"ping").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(msgs, vec![b"ping".to_vec()]);
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-echo"], "unary");

    let (status, msgs, trailers) = call(&p, "/echo.Echo/Stream", &[5]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(msgs, (0..5u8).map(|i| vec![i]).collect::<Vec<_>>());
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-count"], "5");

    // no GRPCRoute rule matches: Unimplemented from the proxy itself
    let (status, msgs, trailers) = call(&p, "/other.Svc/Unary", b"x").await;
    assert_eq!(status, StatusCode::OK);
    assert!(msgs.is_empty());
    assert_eq!(trailers["grpc-status"], "12");
}

#[tokio::test]
async fn grpc_route_without_matches_serves_every_method_and_counts_metrics() {
    let endpoint = grpc_backend().await;
    let p = Proxy::with_config(doc(
        1,
        vec![json!({ "kind": "GRPCRoute", "name": "ns/echo", "hostnames": ["grpc.example.com"], "rules": [
            { "backends": [{ "name": "ns/echo:9090", "endpoints": [endpoint], "protocol": "http2" }] }
        ] })],
    ))
    .await;
    for i in 0..3u8 {
        let (status, msgs, trailers) = call(&p, "/echo.Echo/Stream", &[i]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(msgs.len(), usize::from(i));
        assert_eq!(trailers["grpc-status"], "0");
    }
    let (_, metrics) = p.admin_get("/metrics").await;
    let line = r#"cftunnel_proxy_requests_total{hostname="grpc.example.com",status_class="2xx"} 3"#;
    assert!(
        metrics.lines().any(|l| l == line),
        "missing {line}\n{metrics}"
    );
}
