//! The HTTPRoute CORS filter through the real proxy: preflights answered without reaching the
//! backend, actual responses (from the backend or answered locally) with the CORS headers, over
//! the HTTP/1.1 fast path and hyper's HTTP/2 path.

use http::{Request, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

/// A route on `c.example.com`: `/` with CORS to `b`, `/down` with CORS and a backend without
/// endpoints (answered 503 by the proxy).
fn cors_doc(b: &Backend) -> Value {
    let cors = json!({ "type": "CORS",
        "allowOrigins": ["https://app.example", "https://*.tenant.example"],
        "allowMethods": ["GET", "PUT"], "allowHeaders": ["X-Token"],
        "exposeHeaders": ["X-Backend"], "allowCredentials": true, "maxAge": 300 });
    doc(
        1,
        vec![http_route(
            "ns/c",
            &["c.example.com"],
            json!([
                { "filters": [cors.clone()], "backends": [backend("ns/c:80", &b.endpoint())] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/down" } }],
                  "filters": [cors],
                  "backends": [{ "name": "ns/none:80", "endpoints": [] }] },
            ]),
        )],
    )
}

type Req = Request<http_body_util::Full<bytes::Bytes>>;

fn preflight(origin: &str) -> Req {
    Request::options("/api")
        .header("host", "c.example.com")
        .header("origin", origin)
        .header("access-control-request-method", "PUT")
        .header("access-control-request-headers", "x-token")
        .body(full(""))
        .unwrap()
}

fn cors_headers(resp: &http::Response<hyper::body::Incoming>) -> Vec<String> {
    resp.headers()
        .keys()
        .filter(|k| k.as_str().starts_with("access-control-"))
        .map(|k| k.to_string())
        .collect()
}

/// `req` with its `Host` moved into the URI, for `:authority`.
fn h2(req: Req) -> Req {
    let (mut parts, body) = req.into_parts();
    let host = parts.headers.remove("host").unwrap();
    parts.uri = format!("http://{}{}", host.to_str().unwrap(), parts.uri.path())
        .parse()
        .unwrap();
    Request::from_parts(parts, body)
}

#[tokio::test]
async fn a_preflight_is_answered_by_the_proxy_over_http1_and_http2() {
    let b = Backend::start("c").await;
    let p = Proxy::with_config(cors_doc(&b)).await;
    for http2 in [false, true] {
        let req = preflight("https://x.tenant.example");
        let resp = if http2 {
            h2c_request(p.data, h2(req)).await
        } else {
            p.send(req).await
        };
        assert_eq!(resp.status(), StatusCode::NO_CONTENT, "http2={http2}");
        let h = resp.headers();
        assert_eq!(h["access-control-allow-origin"], "https://x.tenant.example");
        assert_eq!(h["access-control-allow-methods"], "GET, PUT");
        assert_eq!(h["access-control-allow-headers"], "x-token");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-max-age"], "300");
        assert!(h["vary"].to_str().unwrap().contains("Origin"));
    }
    assert_eq!(b.hits(), 0, "a preflight reached the backend");
}

#[tokio::test]
async fn a_preflight_from_an_origin_not_allowed_gets_no_cors_headers_and_no_backend() {
    let b = Backend::start("c").await;
    let p = Proxy::with_config(cors_doc(&b)).await;
    for origin in [
        "https://evil.example",
        "https://tenant.example",
        "http://app.example",
        "https://app.example:8443",
        "null",
    ] {
        let resp = p.send(preflight(origin)).await;
        assert_eq!(resp.status(), StatusCode::NO_CONTENT, "{origin}");
        assert!(
            cors_headers(&resp).is_empty(),
            "{origin}: {:?}",
            resp.headers()
        );
    }
    assert_eq!(b.hits(), 0);
}

#[tokio::test]
async fn an_actual_request_gets_the_cors_headers_on_the_backends_answer() {
    let b = Backend::start("c").await;
    let p = Proxy::with_config(cors_doc(&b)).await;
    for http2 in [false, true] {
        let req = Request::get("/api")
            .header("host", "c.example.com")
            .header("origin", "https://app.example")
            .body(full(""))
            .unwrap();
        let resp = if http2 {
            h2c_request(p.data, h2(req)).await
        } else {
            p.send(req).await
        };
        assert_eq!(resp.status(), StatusCode::OK, "http2={http2}");
        let h = resp.headers().clone();
        assert_eq!(h["access-control-allow-origin"], "https://app.example");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-expose-headers"], "x-backend");
        assert_eq!(h["vary"], "Origin");
        assert!(h.get("access-control-allow-methods").is_none());
        let echo = body_json(resp).await;
        assert_eq!(echo["backend"], "c");
        // The request reaches the backend unchanged.
        assert_eq!(echo["headers"]["origin"], "https://app.example");
    }
    assert_eq!(b.hits(), 2);
}

#[tokio::test]
async fn an_actual_request_from_another_origin_gets_only_vary() {
    let b = Backend::start("c").await;
    let p = Proxy::with_config(cors_doc(&b)).await;
    let resp = p
        .send(
            Request::put("/api")
                .header("host", "c.example.com")
                .header("origin", "https://evil.example")
                .body(full("x"))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(cors_headers(&resp).is_empty(), "{:?}", resp.headers());
    assert_eq!(resp.headers()["vary"], "Origin");
    // An OPTIONS without Access-Control-Request-Method is not a preflight: it is forwarded.
    let resp = p
        .send(
            Request::options("/api")
                .header("host", "c.example.com")
                .header("origin", "https://app.example")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["method"], "OPTIONS");
    assert_eq!(b.hits(), 2);
}

#[tokio::test]
async fn an_answer_of_the_proxy_itself_carries_the_cors_headers() {
    let b = Backend::start("c").await;
    let p = Proxy::with_config(cors_doc(&b)).await;
    let resp = p
        .send(
            Request::get("/down")
                .header("host", "c.example.com")
                .header("origin", "https://app.example")
                .body(full(""))
                .unwrap(),
        )
        .await;
    // A browser can read the failure instead of reporting a CORS error.
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
}
