//! Forwarding over HTTP/1.1 and h2c, filters, weights and local answers through the real proxy.

use http::{Request, StatusCode};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn http1_backend_receives_the_request_with_forwarding_headers() {
    let b = Backend::start("one").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/r",
            &["app.example.com"],
            json!([{ "backends": [backend("ns/one:80", &b.endpoint())] }]),
        )],
    ))
    .await;
    let resp = p
        .send(
            Request::get("/a/b?x=1")
                .header("host", "App.Example.com:8080")
                .header("x-forwarded-for", "203.0.113.9")
                .header("connection", "x-hop")
                .header("x-hop", "secret")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers().get("x-drop-me").is_none(),
        "response hop-by-hop header leaked"
    );
    let echo = body_json(resp).await;
    assert_eq!(echo["target"], "/a/b?x=1");
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo["headers"]["host"], "App.Example.com:8080");
    assert_eq!(echo["headers"]["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(echo["headers"]["x-forwarded-proto"], "http");
    assert!(
        echo["headers"].get("x-hop").is_none(),
        "request hop-by-hop header leaked"
    );
}

#[tokio::test]
async fn h2c_client_routes_by_authority_to_an_h2c_backend() {
    let b = Backend::start("h2").await;
    let mut be = backend("ns/h2:80", &b.endpoint());
    be["protocol"] = json!("http2");
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/r",
            &["h2.example.com"],
            json!([{ "backends": [be] }]),
        )],
    ))
    .await;
    let resp = h2c_request(
        p.data,
        Request::get("http://h2.example.com/x")
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let echo = body_json(resp).await;
    assert_eq!(echo["version"], "HTTP/2.0");
    assert_eq!(echo["backend"], "h2");
    let resp = h2c_request(
        p.data,
        Request::get("http://other.example.com/x")
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(b.hits(), 1);
}

#[tokio::test]
async fn no_matching_route_is_404_and_grpc_gets_unimplemented() {
    let p = Proxy::with_config(doc(1, vec![])).await;
    let resp = p.get("nothing.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = p
        .send(
            Request::post("/pkg.Svc/Method")
                .header("host", "nothing.example.com")
                .header("content-type", "application/grpc")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["grpc-status"], "12");
}

#[tokio::test]
async fn precedence_through_the_proxy() {
    let exact = Backend::start("exact").await;
    let wild = Backend::start("wild").await;
    let hdr = Backend::start("header").await;
    let p = Proxy::with_config(doc(
        1,
        vec![
            http_route(
                "ns/wild",
                &["*.example.com"],
                json!([{ "backends": [backend("ns/wild:80", &wild.endpoint())] }]),
            ),
            http_route(
                "ns/exact",
                &["shop.example.com"],
                json!([
                    { "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                      "backends": [backend("ns/exact:80", &exact.endpoint())] },
                    { "matches": [{ "path": { "type": "PathPrefix", "value": "/api" },
                                    "headers": [{ "name": "x-canary", "value": "yes" }] }],
                      "backends": [backend("ns/hdr:80", &hdr.endpoint())] }
                ]),
            ),
        ],
    ))
    .await;
    let who = |resp: http::Response<hyper::body::Incoming>| {
        resp.headers()["x-backend"].to_str().unwrap().to_owned()
    };
    assert_eq!(who(p.get("shop.example.com", "/api/x").await), "exact");
    assert_eq!(who(p.get("other.example.com", "/api/x").await), "wild");
    // shop.example.com has no rule for /web: the wildcard route serves it
    assert_eq!(who(p.get("shop.example.com", "/web").await), "wild");
    let resp = p
        .send(
            Request::get("/api")
                .header("host", "shop.example.com")
                .header("x-canary", "yes")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(who(resp), "header");
}

#[tokio::test]
async fn filters_modify_headers_rewrite_and_redirect() {
    let b = Backend::start("f").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/f",
            &["f.example.com"],
            json!([
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/old/" } }],
                  "filters": [
                    { "type": "RequestHeaderModifier",
                      "set": [{ "name": "X-Set", "value": "s" }], "add": [{ "name": "x-add", "value": "a2" }],
                      "remove": ["X-Remove"] },
                    { "type": "ResponseHeaderModifier", "set": [{ "name": "x-resp", "value": "r" }], "remove": ["x-backend"] },
                    { "type": "URLRewrite", "hostname": "internal.example.com",
                      "path": { "type": "ReplacePrefixMatch", "value": "/new" } }
                  ],
                  "backends": [backend("ns/f:80", &b.endpoint())] },
                { "matches": [{ "path": { "type": "Exact", "value": "/go" } }],
                  "filters": [{ "type": "RequestRedirect", "scheme": "https", "hostname": "dest.example.com",
                                "path": { "type": "ReplaceFullPath", "value": "/landing" }, "statusCode": 308 }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/moved" } }],
                  "filters": [{ "type": "RequestRedirect", "path": { "type": "ReplacePrefixMatch", "value": "/here" } }] }
            ]),
        )],
    ))
    .await;
    let resp = p
        .send(
            Request::get("/old/deep?q=1")
                .header("host", "f.example.com")
                .header("x-set", "original")
                .header("x-add", "a1")
                .header("x-remove", "bye")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-resp"], "r");
    assert!(resp.headers().get("x-backend").is_none());
    let echo = body_json(resp).await;
    assert_eq!(echo["target"], "/new/deep?q=1");
    assert_eq!(echo["headers"]["host"], "internal.example.com");
    assert_eq!(echo["headers"]["x-set"], "s");
    assert_eq!(echo["headers"]["x-add"], "a1, a2");
    assert!(echo["headers"].get("x-remove").is_none());

    let resp = p.get("f.example.com", "/go?x=1").await;
    assert_eq!(resp.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(
        resp.headers()["location"],
        "https://dest.example.com/landing?x=1"
    );

    let resp = p.get("f.example.com:8080", "/moved/a").await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(
        resp.headers()["location"],
        "http://f.example.com:8080/here/a"
    );
    let resp = p
        .send(
            Request::get("/moved")
                .header("host", "f.example.com")
                .header("x-forwarded-proto", "https")
                .body(full(""))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.headers()["location"], "https://f.example.com/here");
    assert_eq!(b.hits(), 1, "redirects never reach the backend");
}

#[tokio::test]
async fn weighted_backends_split_traffic_and_failure_shares_answer_their_status() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/w",
            &["w.example.com"],
            json!([{ "backends": [
                { "name": "ns/a:80", "weight": 60, "endpoints": [a.endpoint()] },
                { "name": "ns/b:80", "weight": 20, "endpoints": [b.endpoint()] },
                { "name": "ns/broken:80", "weight": 20, "failureStatus": 500 }
            ] }]),
        )],
    ))
    .await;
    let n = 500;
    let mut fails = 0;
    for _ in 0..n {
        let resp = p.get("w.example.com", "/").await;
        match resp.status() {
            StatusCode::OK => {}
            StatusCode::INTERNAL_SERVER_ERROR => fails += 1,
            s => panic!("unexpected {s}"),
        }
    }
    let share = |c: usize| c as f64 / n as f64;
    assert!((share(a.hits()) - 0.6).abs() < 0.08, "a got {}", a.hits());
    assert!((share(b.hits()) - 0.2).abs() < 0.08, "b got {}", b.hits());
    assert!((share(fails) - 0.2).abs() < 0.08, "500s: {fails}");
}

#[tokio::test]
async fn endpoints_are_balanced_round_robin() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/rr",
            &["rr.example.com"],
            json!([{ "backends": [{ "name": "ns/rr:80", "endpoints": [a.endpoint(), b.endpoint()] }] }]),
        )],
    ))
    .await;
    for _ in 0..10 {
        assert_eq!(p.get("rr.example.com", "/").await.status(), StatusCode::OK);
    }
    assert_eq!((a.hits(), b.hits()), (5, 5));
}

#[tokio::test]
async fn timeouts_give_504_and_dead_endpoints_503() {
    let slow = Backend::start("slow").await;
    // A port that refuses connections: bound, never listening, and held for the whole test so
    // that no parallel test's server can take it (a closed listener's port can be reused).
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = refusing.local_addr().unwrap().to_string();
    let p = Proxy::with_config(doc(
        1,
        vec![
            http_route(
                "ns/t",
                &["t.example.com"],
                json!([{ "backends": [backend("ns/slow:80", &slow.endpoint())],
                         "timeouts": { "request": "5s", "backendRequest": "200ms" } }]),
            ),
            http_route(
                "ns/d",
                &["d.example.com"],
                json!([{ "backends": [backend("ns/dead:80", &dead)] }]),
            ),
        ],
    ))
    .await;
    let started = std::time::Instant::now();
    assert_eq!(
        p.get("t.example.com", "/slow/2000").await.status(),
        StatusCode::GATEWAY_TIMEOUT
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(1500));
    assert_eq!(
        p.get("t.example.com", "/slow/10").await.status(),
        StatusCode::OK
    );
    assert_eq!(
        p.get("d.example.com", "/").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (_, metrics) = p.admin_get("/metrics").await;
    for line in [
        r#"cftunnel_proxy_backend_errors_total{hostname="t.example.com",reason="timeout"} 1"#,
        r#"cftunnel_proxy_backend_errors_total{hostname="d.example.com",reason="connect"} 1"#,
        r#"cftunnel_proxy_requests_total{hostname="t.example.com",status_class="5xx"} 1"#,
        r#"cftunnel_proxy_requests_total{hostname="t.example.com",status_class="2xx"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}\n{metrics}"
        );
    }
}

#[tokio::test]
async fn mirror_receives_a_copy_and_the_client_gets_the_primary_answer() {
    let primary = Backend::start("primary").await;
    let mirror = Backend::start("mirror").await;
    let never = Backend::start("never").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/m",
            &["m.example.com"],
            json!([{ "filters": [
                        { "type": "RequestMirror", "backend": backend("ns/mirror:80", &mirror.endpoint()) },
                        { "type": "RequestMirror", "percent": 0, "backend": backend("ns/never:80", &never.endpoint()) }
                     ],
                     "backends": [backend("ns/primary:80", &primary.endpoint())] }]),
        )],
    ))
    .await;
    let resp = p
        .send(
            Request::post("/upload")
                .header("host", "m.example.com")
                .body(full(vec![7u8; 100_000]))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let echo = body_json(resp).await;
    assert_eq!(echo["backend"], "primary");
    assert_eq!(echo["bodyLen"], 100_000);
    // fire-and-forget: wait (bounded) for the mirror to see it
    for _ in 0..50 {
        if mirror.hits() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(mirror.hits(), 1);
    assert_eq!(never.hits(), 0);
}

#[tokio::test]
async fn metrics_count_matched_patterns_and_unmatched_requests() {
    let b = Backend::start("m").await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/m",
            &["*.metrics.example.com"],
            json!([{ "backends": [backend("ns/m:80", &b.endpoint())] }]),
        )],
    ))
    .await;
    for host in [
        "a.metrics.example.com",
        "b.metrics.example.com",
        "c.metrics.example.com",
    ] {
        assert_eq!(p.get(host, "/").await.status(), StatusCode::OK);
    }
    assert_eq!(
        p.get("random.example.org", "/").await.status(),
        StatusCode::NOT_FOUND
    );
    let (status, metrics) = p.admin_get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"cftunnel_proxy_requests_total{hostname="*.metrics.example.com",status_class="2xx"} 3"#,
        r#"cftunnel_proxy_requests_total{hostname="<none>",status_class="4xx"} 1"#,
        r#"cftunnel_proxy_request_duration_seconds_count{hostname="*.metrics.example.com"} 3"#,
        "cftunnel_proxy_requests_in_flight 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}\n{metrics}"
        );
    }
    assert!(
        !metrics.contains("a.metrics.example.com"),
        "raw Host must never be a label"
    );
}

/// The proxy's own HTTP/1 pool: sequential requests share one backend connection (also after
/// a streamed request body), and a connection the backend closed is replaced without the client
/// noticing.
#[tokio::test]
async fn http1_backend_connections_are_reused_and_closed_ones_replaced() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let close = req.uri().path() == "/close";
                    let len = req.into_body().collect().await.unwrap().to_bytes().len();
                    let mut resp = http::Response::new(Full::new(Bytes::from(len.to_string())));
                    if close {
                        resp.headers_mut()
                            .insert("connection", http::HeaderValue::from_static("close"));
                    }
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/r",
            &["pool.example.com"],
            json!([{ "backends": [backend("ns/b:80", &addr.to_string())] }]),
        )],
    ))
    .await;
    let get = |path: &str, body: &'static str| {
        Request::post(path)
            .header("host", "pool.example.com")
            .body(full(body))
            .unwrap()
    };
    for i in 0..5 {
        let resp = p
            .send(get("/", if i % 2 == 0 { "" } else { "hello" }))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let len = if i % 2 == 0 { "0" } else { "5" };
        assert_eq!(body_string(resp).await, len);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the connection was not reused"
    );
    let resp = p.send(get("/close", "")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    body_string(resp).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for _ in 0..3 {
        let resp = p.send(get("/", "")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        body_string(resp).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
