//! The config API: authentication, limits, validation, versions, readiness.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Request, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use tunnel_proxy::admin::{self, AdminOptions};
use tunnel_proxy::state::State;

use crate::common::*;

const TOKEN: &str = "s3cret-Token";

async fn put_raw(
    p: &Proxy,
    auth: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, String) {
    let mut req = Request::put(format!("http://{}/config", p.admin));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if let Some(c) = content_type {
        req = req.header("content-type", c);
    }
    let resp = http1_client()
        .request(req.body(full(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    (status, body_string(resp).await)
}

fn simple(version: u64, b: &Backend) -> Value {
    doc(
        version,
        vec![http_route(
            "ns/r",
            &["app.example.com"],
            json!([{ "backends": [backend("ns/b:80", &b.endpoint())] }]),
        )],
    )
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive_and_the_token_exact() {
    let b = Backend::start("b").await;
    let p = Proxy::start(AdminOptions {
        auth_token: Some(TOKEN.into()),
        ..Default::default()
    })
    .await;
    let body = simple(1, &b).to_string().into_bytes();
    let json = Some("application/json");
    let rows: Vec<(Option<String>, StatusCode)> = vec![
        (None, StatusCode::UNAUTHORIZED),
        (Some("Bearer wrong".into()), StatusCode::UNAUTHORIZED),
        (
            Some(format!("Bearer {}", TOKEN.to_uppercase())),
            StatusCode::UNAUTHORIZED,
        ),
        (Some(format!("Basic {TOKEN}")), StatusCode::UNAUTHORIZED),
        (Some(format!("Bearer {TOKEN}x")), StatusCode::UNAUTHORIZED),
        (Some(format!("Bearer{TOKEN}")), StatusCode::UNAUTHORIZED),
        (Some("Bearer ".into()), StatusCode::UNAUTHORIZED),
        (Some(format!("Bearer {TOKEN}")), StatusCode::OK),
        (Some(format!("bearer {TOKEN}")), StatusCode::OK),
        (Some(format!("BEARER {TOKEN}")), StatusCode::OK),
    ];
    for (auth, want) in rows {
        let (status, text) = put_raw(&p, auth.as_deref(), json, body.clone()).await;
        assert_eq!(status, want, "authorization {auth:?}: {text}");
    }
    // GET /config is protected too; health, readiness and metrics are not
    let get = |auth: Option<&'static str>| {
        let mut req = Request::get(format!("http://{}/config", p.admin));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        http1_client().request(req.body(full("")).unwrap())
    };
    assert_eq!(get(None).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let ok = get(Some("Bearer s3cret-Token")).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(body_json(ok).await["version"], 1);
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(p.admin_get(path).await.0, StatusCode::OK, "{path}");
    }
}

#[test]
fn an_empty_configured_token_refuses_to_start() {
    let err = admin::router(
        Arc::new(State::new()),
        AdminOptions {
            auth_token: Some(String::new()),
            ..Default::default()
        },
    );
    assert!(err.is_err());
}

#[tokio::test]
async fn size_and_content_type_limits() {
    let p = Proxy::start(AdminOptions::default()).await;
    let big = vec![b' '; admin::MAX_CONFIG_BYTES + 1];
    assert_eq!(
        put_raw(&p, None, Some("application/json"), big.clone())
            .await
            .0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // without Content-Length (chunked) the limit still holds
    let chunks = futures::stream::iter(
        big.chunks(64 * 1024)
            .map(|c| {
                Ok::<_, std::io::Error>(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(c)))
            })
            .collect::<Vec<_>>(),
    );
    let req = Request::put(format!("http://{}/config", p.admin))
        .header("content-type", "application/json")
        .body(http_body_util::StreamBody::new(chunks))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    assert_eq!(
        client.request(req).await.unwrap().status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let doc = br#"{"version":1}"#.to_vec();
    assert_eq!(
        put_raw(&p, None, Some("text/plain"), doc.clone()).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        put_raw(&p, None, None, doc.clone()).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        put_raw(&p, None, Some("application/json; charset=utf-8"), doc)
            .await
            .0,
        StatusCode::OK
    );
    let (status, text) = put_raw(&p, None, Some("application/json"), b"{not json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
}

#[tokio::test]
async fn invalid_documents_are_refused_and_the_previous_config_keeps_serving() {
    let b = Backend::start("b").await;
    let p = Proxy::with_config(simple(1, &b)).await;
    let bad_regex = doc(
        2,
        vec![http_route(
            "ns/r",
            &["app.example.com"],
            json!([{
        "matches": [{ "path": { "type": "RegularExpression", "value": "/(" } }] }]),
        )],
    );
    let bad_weight = doc(
        2,
        vec![http_route(
            "ns/r",
            &["app.example.com"],
            json!([{
        "backends": [{ "name": "x", "weight": 2_000_000, "endpoints": [b.endpoint()] }] }]),
        )],
    );
    let bad_cert = doc(
        2,
        vec![http_route(
            "ns/r",
            &["app.example.com"],
            json!([{
        "backends": [{ "name": "x", "endpoints": [b.endpoint()],
                       "tls": { "caBundlePem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "serverName": "x" } }] }]),
        )],
    );
    for (bad, path) in [
        (bad_regex, "routes[0].rules[0].matches[0].path.value"),
        (bad_weight, "routes[0].rules[0].backends[0].weight"),
        (bad_cert, "routes[0].rules[0].backends[0].tls"),
    ] {
        let (status, body) = p.push(&bad, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains(path), "error should name {path}: {body}");
        let resp = p.get("app.example.com", "/").await;
        assert_eq!(
            resp.status(),
            StatusCode::OK,
            "previous config must keep serving"
        );
    }
    let (_, current) = p.admin_get("/config").await;
    assert_eq!(
        serde_json::from_str::<Value>(&current).unwrap()["version"],
        1
    );
}

#[tokio::test]
async fn versions_older_than_loaded_get_409_equal_is_accepted() {
    let b = Backend::start("b").await;
    let p = Proxy::with_config(simple(5, &b)).await;
    let (status, body) = p.push(&simple(4, &b), None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["loadedVersion"],
        5
    );
    assert_eq!(p.push(&simple(5, &b), None).await.0, StatusCode::OK);
    assert_eq!(p.push(&simple(6, &b), None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn concurrent_pushes_end_with_the_newest() {
    let b = Backend::start("b").await;
    let p = Arc::new(Proxy::start(AdminOptions::default()).await);
    // interleave versions so old ones often arrive after new ones
    let versions: Vec<u64> = (1..=24).map(|i| (i * 7) % 25).collect();
    let tasks: Vec<_> = versions
        .iter()
        .map(|&v| {
            let p = p.clone();
            let d = simple(v, &b);
            tokio::spawn(async move { p.push(&d, None).await.0 })
        })
        .collect();
    for t in tasks {
        let status = t.await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::CONFLICT,
            "{status}"
        );
    }
    let (_, current) = p.admin_get("/config").await;
    assert_eq!(
        serde_json::from_str::<Value>(&current).unwrap()["version"],
        24
    );
}

#[tokio::test]
async fn readyz_waits_for_a_config_and_the_connector() {
    // a fake connector metrics endpoint whose readiness we flip
    let ready = Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ready", listener.local_addr().unwrap());
    let r = ready.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let r = r.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| {
                    let status = if r.load(Ordering::SeqCst) { 200 } else { 503 };
                    async move { http::Response::builder().status(status).body(full("")) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    let b = Backend::start("b").await;
    let p = Proxy::start(AdminOptions {
        auth_token: None,
        connector_ready_url: Some(url.parse().unwrap()),
    })
    .await;
    assert_eq!(
        p.admin_get("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "no config yet"
    );
    assert_eq!(p.push(&simple(1, &b), None).await.0, StatusCode::OK);
    assert_eq!(
        p.admin_get("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "connector not ready"
    );
    ready.store(true, Ordering::SeqCst);
    assert_eq!(p.admin_get("/readyz").await.0, StatusCode::OK);
    // standalone: config alone is enough
    let s = Proxy::start(AdminOptions::default()).await;
    assert_eq!(
        s.admin_get("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(s.push(&simple(1, &b), None).await.0, StatusCode::OK);
    assert_eq!(s.admin_get("/readyz").await.0, StatusCode::OK);
}

async fn patch_raw(p: &Proxy, auth: Option<&str>, body: Vec<u8>) -> (StatusCode, String) {
    let mut req = Request::patch(format!("http://{}/config", p.admin))
        .header("content-type", "application/json");
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = http1_client()
        .request(req.body(full(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    (status, body_string(resp).await)
}

/// What `GET /config` shows once `doc` is loaded.
fn loaded(doc: Value) -> Value {
    let parsed = tunnel_config::compile::parse(doc.to_string().as_bytes()).unwrap();
    serde_json::to_value(parsed).unwrap()
}

/// The loaded document (`GET /config` with the token) and the backend `app.example.com/`
/// reaches.
async fn serving(p: &Proxy) -> (Value, String) {
    let req = Request::get(format!("http://{}/config", p.admin))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(full(""))
        .unwrap();
    let current = body_json(http1_client().request(req).await.unwrap()).await;
    let resp = p.get("app.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let backend = resp.headers()["x-backend"].to_str().unwrap().to_owned();
    (current, backend)
}

#[tokio::test]
async fn a_delta_applies_on_its_exact_base_only_and_a_bad_one_changes_nothing() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let p = Proxy::start(AdminOptions {
        auth_token: Some(TOKEN.into()),
        ..Default::default()
    })
    .await;
    let auth = Some("Bearer s3cret-Token");
    // Before any document there is no base.
    let to_b = |base: u64, version: u64| {
        json!({ "baseVersion": base, "version": version, "start": 0, "remove": 1,
                "routes": [simple(0, &b)["routes"][0]] })
    };
    let (status, text) = patch_raw(&p, auth, to_b(0, 2).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert_eq!(p.push(&simple(5, &a), Some(TOKEN)).await.0, StatusCode::OK);
    let before = serving(&p).await;
    assert_eq!(before, (loaded(simple(5, &a)), "a".to_owned()));

    let big = vec![b' '; admin::MAX_CONFIG_BYTES + 1];
    let bad_rule = json!({ "baseVersion": 5, "version": 6, "start": 0, "remove": 1,
        "routes": [http_route("ns/r", &["app.example.com"],
            json!([{ "matches": [{ "path": { "type": "RegularExpression", "value": "/(" } }] }]))] });
    // (what, authorization, body, answer, what the answer says)
    type Attack<'a> = (&'a str, Option<&'a str>, Vec<u8>, StatusCode, &'a str);
    let attacks: Vec<Attack<'_>> = vec![
        (
            "no token",
            None,
            to_b(5, 6).to_string().into(),
            StatusCode::UNAUTHORIZED,
            "",
        ),
        (
            "wrong base",
            auth,
            to_b(4, 6).to_string().into(),
            StatusCode::CONFLICT,
            "\"loadedVersion\":5",
        ),
        (
            "newer base",
            auth,
            to_b(6, 7).to_string().into(),
            StatusCode::CONFLICT,
            "\"loadedVersion\":5",
        ),
        (
            "not newer",
            auth,
            to_b(5, 5).to_string().into(),
            StatusCode::BAD_REQUEST,
            "not newer",
        ),
        (
            "range past the end",
            auth,
            json!({ "baseVersion": 5, "version": 6, "start": 1, "remove": 1, "routes": [] })
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "replaces routes",
        ),
        (
            "malformed",
            auth,
            b"{\"baseVersion\":5,".to_vec(),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            "trailing bytes",
            auth,
            format!("{} x", to_b(5, 6)).into(),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            "unknown field",
            auth,
            json!({ "baseVersion": 5, "version": 6, "start": 0, "remove": 0, "extra": 1 })
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "extra",
        ),
        (
            "invalid rule",
            auth,
            bad_rule.to_string().into(),
            StatusCode::BAD_REQUEST,
            "routes[0].rules[0].matches[0].path.value",
        ),
        ("oversized", auth, big, StatusCode::PAYLOAD_TOO_LARGE, ""),
    ];
    for (what, auth, body, want, says) in attacks {
        let (status, text) = patch_raw(&p, auth, body).await;
        assert_eq!(status, want, "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
        assert_eq!(
            serving(&p).await,
            before,
            "{what} changed the loaded config"
        );
    }

    let (status, text) = patch_raw(&p, auth, to_b(5, 6).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // The loaded document is the one a whole push of version 6 would have loaded.
    assert_eq!(serving(&p).await, (loaded(simple(6, &b)), "b".to_owned()));
    // The same delta again: its base is gone.
    let (status, _) = patch_raw(&p, auth, to_b(5, 6).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// A delta compiles only the routes it brings: the others keep their upstreams, so their
/// backend connections stay pooled, and a client stays while any route uses it, so a route
/// added later to the same backend takes the same idle connection. Host metrics series go on
/// counting across the deltas.
#[tokio::test]
async fn a_delta_keeps_the_other_routes_backend_connections_and_metrics() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let route = |name: &str, host: &str, to: &Backend| {
        http_route(
            name,
            &[host],
            json!([{ "backends": [backend("ns/svc:80", &to.endpoint())] }]),
        )
    };
    let p = Proxy::with_config(doc(
        1,
        vec![
            route("ns/app", "app.example.com", &a),
            route("ns/other", "other.example.com", &b),
        ],
    ))
    .await;
    let answered_by = |host: &'static str| {
        let p = &p;
        async move {
            let resp = p.get(host, "/").await;
            assert_eq!(resp.status(), StatusCode::OK, "{host}");
            let backend = resp.headers()["x-backend"].to_str().unwrap().to_owned();
            body_string(resp).await;
            backend
        }
    };
    for _ in 0..3 {
        assert_eq!(answered_by("app.example.com").await, "a");
    }
    assert_eq!(a.accepted(), 1);

    let deltas = [
        // The other route removed: no route but `ns/app` uses the plain HTTP/1 client now.
        json!({ "baseVersion": 1, "version": 2, "start": 1, "remove": 1 }),
        // A new route to the same backend, after it.
        json!({ "baseVersion": 2, "version": 3, "start": 1, "remove": 0,
                "routes": [route("ns/new", "new.example.com", &a)] }),
    ];
    for delta in deltas {
        let (status, text) = patch_raw(&p, None, delta.to_string().into_bytes()).await;
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    let resp = p.get("other.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    for _ in 0..3 {
        assert_eq!(answered_by("app.example.com").await, "a");
        assert_eq!(answered_by("new.example.com").await, "a");
    }
    assert_eq!(
        a.accepted(),
        1,
        "a delta made the proxy dial the backend again"
    );

    let (_, metrics) = p.admin_get("/metrics").await;
    for series in [
        r#"cftunnel_proxy_requests_total{hostname="app.example.com",status_class="2xx"} 6"#,
        r#"cftunnel_proxy_requests_total{hostname="new.example.com",status_class="2xx"} 3"#,
    ] {
        assert!(metrics.contains(series), "{series} missing in:\n{metrics}");
    }
}
