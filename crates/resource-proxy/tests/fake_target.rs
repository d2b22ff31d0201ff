//! The request path against a fake target (a small TLS HTTP server in the test) that answers
//! 500, holds requests, or streams a watch: a listener assembled in-process, called as the
//! aggregator would (front-proxy client certificate and identity headers).
//!
//! - A target 500 is a 503 with `Retry-After: 1` for a non-watch request; a watch gets the
//!   target's own answer.
//! - A request held by the target is cut at 60 s with 503; a watch open longer keeps streaming
//!   (the clock is paused once the request is held, moved past the deadline, and resumed: a
//!   paused clock jumps to the next timer whenever the runtime idles, which real socket I/O
//!   would otherwise race).
//! - A create whose fate is unknown (target 5xx, deadline) is looked up by its create id: 201
//!   with the object when it was written, 503 when it was not (so a retry cannot duplicate it).
//! - An owned named GET is one target request whatever the object: another tenant's object, a
//!   missing one and one the proxy may not read answer the same 404.
//! - `/openapi/v2` is the target's cut down to the group/version, revalidated with its ETag, and
//!   the last good copy while the target fails.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use resource_proxy::config::{
    AccessMode, BaseCredential, ClientIdentity, Credential, GroupVersionListener, PeerAddress,
    PeerSource, Resources, Target, TargetRef,
};
use resource_proxy::listen::caller_auth::Authenticator;
use resource_proxy::listen::server::{self, ServingCert};
use resource_proxy::metrics::{Metrics, ReasonLabels, RequestLabels};
use resource_proxy::request::context::ListenerContext;
use resource_proxy::request::create::{CREATE_ID_LABEL, CREATE_LOOKUP_BUDGET};
use resource_proxy::request::forward::REQUEST_DEADLINE;
use resource_proxy::target::TargetClient;
use resource_proxy::tenancy::labels::OwnerLabels;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

type Reply = Response<UnsyncBoxBody<Bytes, Infallible>>;
/// The fake target's behaviour: method, path and query, body → answer.
type Behaviour = Arc<dyn Fn(Method, String, Bytes) -> BoxFuture<'static, Reply> + Send + Sync>;

const LIST: &str = "/apis/example.test/v1/namespaces/ns/widgets";

fn reply(code: u16, body: Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .unwrap()
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": "InternalError", "code": code})
}

/// Answers the proxy's own namespace check in the target; everything else goes to `f`.
fn behaviour<F>(f: F) -> Behaviour
where
    F: Fn(Method, String, Bytes) -> BoxFuture<'static, Reply> + Send + Sync + 'static,
{
    Arc::new(move |method, path, body| {
        if path.starts_with("/api/v1/namespaces/") {
            return Box::pin(async {
                reply(
                    200,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
                )
            });
        }
        f(method, path, body)
    })
}

struct Env {
    _dir: tempfile::TempDir,
    proxy: SocketAddr,
    client_tls: Arc<rustls::ClientConfig>,
    metrics: Metrics,
    _shutdown: tokio::sync::watch::Sender<bool>,
}

impl Env {
    fn requests(&self, verb: &str, code: u16, reason: &str) -> u64 {
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                target: "p/t".into(),
                group_version: "example.test/v1".into(),
                verb: verb.into(),
                code,
                reason: reason.into(),
            })
            .get()
    }

    fn terminations(&self, reason: &str) -> u64 {
        self.metrics
            .request_terminations
            .get_or_create(&ReasonLabels {
                target: "p/t".into(),
                reason: reason.into(),
            })
            .get()
    }

    /// Sends a request as the aggregator; the answer's body streams.
    async fn send(&self, method: &str, path: &str, body: &str) -> Response<Incoming> {
        let mut sender = common::connect_http1(self.proxy, self.client_tls.clone()).await;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("x-remote-user", "alice")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        sender.send_request(req).await.unwrap()
    }
}

async fn read(resp: Response<Incoming>) -> (u16, Option<String>, Value) {
    let code = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (
        code,
        retry_after,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// A TLS server for `localhost` answering with `f`.
async fn fake_target(ca: &test_cluster::pki::Authority, f: Behaviour) -> u16 {
    let cert = ca
        .serving_cert(&["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let f = f.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let f = f.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let path = parts
                            .uri
                            .path_and_query()
                            .map(|p| p.as_str().to_owned())
                            .unwrap_or_default();
                        Ok::<_, Infallible>(f(parts.method, path, body).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

/// A proxy listener for `example.test/v1` (owned mode, client `c` of project `p`) in front of a
/// fake target behaving as `f`.
async fn env(f: Behaviour) -> Env {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let ca = test_cluster::pki::Authority::generate("fake-target-ca").unwrap();
    let port = fake_target(&ca, f).await;
    let proxy_cred = ca.client_cert("loft:vcluster:p-p:c", &[]).unwrap();
    std::fs::write(p("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(p("c.crt"), &proxy_cred.cert_pem).unwrap();
    std::fs::write(p("c.key"), &proxy_cred.key_pem).unwrap();
    let target_ref = TargetRef {
        project: "p".into(),
        name: "t".into(),
    };
    let target = Target {
        peers: PeerSource::Static(vec![PeerAddress {
            host: "127.0.0.1".into(),
            port,
        }]),
        ca_file: p("ca.crt"),
        server_name: "localhost".into(),
        credential: Credential::Direct(BaseCredential::ClientCertificate {
            cert_file: p("c.crt"),
            key_file: p("c.key"),
        }),
    };
    let metrics = Metrics::new();
    let target = TargetClient::with_metrics(
        &target_ref,
        &target,
        metrics.clone(),
        vec!["example.test/v1".into()],
    )
    .unwrap();
    let listener = GroupVersionListener {
        group: "example.test".into(),
        version: "v1".into(),
        port: 0,
        resources: Resources::Named(vec!["widgets".into()]),
        cluster_scoped: vec![],
        target: target_ref,
        access: AccessMode::Owned,
        entries: vec!["widgets.example.test/v1".into()],
    };

    // The aggregator: a front-proxy CA and its client certificate.
    let front = test_cluster::pki::Authority::generate("front-proxy-ca").unwrap();
    let aggregator = front.client_cert("front-proxy-client", &[]).unwrap();
    let auth = Authenticator::default();
    auth.update(&BTreeMap::from([
        ("requestheader-client-ca-file".to_owned(), front.cert_pem()),
        (
            "requestheader-allowed-names".to_owned(),
            r#"["front-proxy-client"]"#.to_owned(),
        ),
    ]))
    .unwrap();
    // The client cluster: every namespace exists.
    let client_cluster = kube::Client::new(
        tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let name = req
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            Ok::<_, Infallible>(reply(
                200,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ))
        }),
        "default",
    );
    let ctx = Arc::new(ListenerContext::new(
        listener,
        target,
        auth,
        OwnerLabels::for_client(&ClientIdentity {
            name: "c".into(),
            project: "p".into(),
            project_namespace: "p-p".into(),
        }),
        client_cluster,
        metrics.clone(),
    ));
    let serving = ca
        .serving_cert(&["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    let cert = ServingCert::from_pem(&serving.cert_pem, &serving.key_pem).unwrap();
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let (proxy, _task) = server::serve(
        ctx,
        "127.0.0.1:0".parse().unwrap(),
        server::tls_config(cert),
        rx,
    )
    .await
    .unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let client_tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(aggregator.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(aggregator.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    Env {
        _dir: dir,
        proxy,
        client_tls: Arc::new(client_tls),
        metrics,
        _shutdown: shutdown,
    }
}

#[tokio::test]
async fn a_target_500_is_a_503_with_retry_after_but_a_watch_gets_the_targets_own_answer() {
    let env = env(behaviour(|_, path, _| {
        Box::pin(async move {
            if path.contains("watch=true") {
                reply(500, status(500, "etcd is unhappy (watch)"))
            } else {
                reply(500, status(500, "etcd is unhappy"))
            }
        })
    }))
    .await;

    let (code, retry_after, body) = read(env.send("GET", LIST, "").await).await;
    assert_eq!((code, retry_after.as_deref()), (503, Some("1")), "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert!(
        body["message"].as_str().unwrap().contains("is unavailable"),
        "{body}"
    );
    assert_eq!(env.requests("list", 503, "upstream_error"), 1);

    let (code, retry_after, body) =
        read(env.send("GET", &format!("{LIST}?watch=true"), "").await).await;
    assert_eq!((code, retry_after), (500, None), "the target's own answer");
    assert_eq!(body["message"], "etcd is unhappy (watch)");
    assert_eq!(env.requests("watch", 500, "upstream"), 1);
    assert_eq!(env.requests("watch", 503, "upstream_error"), 0);
}

#[tokio::test]
async fn a_request_held_by_the_target_is_cut_at_sixty_seconds_with_503() {
    let held = Arc::new(Notify::new());
    let env = env(behaviour({
        let held = held.clone();
        move |_, _, _| {
            let held = held.clone();
            Box::pin(async move {
                held.notify_one();
                futures::future::pending::<Reply>().await
            })
        }
    }))
    .await;
    let sent = Instant::now();
    let answer = tokio::spawn({
        let proxy = env.proxy;
        let client_tls = env.client_tls.clone();
        async move {
            let env = EnvRef { proxy, client_tls };
            read(env.send("GET", LIST, "").await).await
        }
    });
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the request reached the target");
    // Jump to just past the deadline (paused, the clock moves to the next timer whenever the
    // runtime idles: only the proxy's deadline lies before ours), then run in real time again
    // so the answer's I/O cannot be overtaken by jumps.
    tokio::time::pause();
    tokio::time::sleep_until(sent + REQUEST_DEADLINE + Duration::from_millis(1)).await;
    tokio::time::resume();
    let (code, retry_after, body) = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("answered at the deadline")
        .unwrap();
    let elapsed = sent.elapsed();
    assert_eq!((code, retry_after.as_deref()), (503, Some("1")), "{body}");
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(61),
        "cut at 60 s: {elapsed:?}"
    );
    assert_eq!(env.requests("list", 503, "deadline"), 1);
    assert_eq!(env.terminations("deadline"), 1);
}

/// What [`Env::send`] needs, for spawned tasks.
struct EnvRef {
    proxy: SocketAddr,
    client_tls: Arc<rustls::ClientConfig>,
}

impl EnvRef {
    async fn send(&self, method: &str, path: &str, body: &str) -> Response<Incoming> {
        let mut sender = common::connect_http1(self.proxy, self.client_tls.clone()).await;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("x-remote-user", "alice")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        sender.send_request(req).await.unwrap()
    }
}

#[tokio::test]
async fn a_watch_open_longer_than_the_deadline_keeps_streaming() {
    let release = Arc::new(Notify::new());
    let env = env(behaviour({
        let release = release.clone();
        move |_, path, _| {
            assert!(path.contains("watch=true"), "{path}");
            let release = release.clone();
            Box::pin(async move {
                let event = |name: &str| {
                    Bytes::from(format!(
                        "{}\n",
                        json!({"type": "ADDED", "object": {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": name}}})
                    ))
                };
                let first = event("first");
                let second = event("second");
                let stream = futures::stream::unfold(0, move |n| {
                    let release = release.clone();
                    let (first, second) = (first.clone(), second.clone());
                    async move {
                        match n {
                            0 => Some((Ok::<_, Infallible>(Frame::data(first)), 1)),
                            1 => {
                                release.notified().await;
                                Some((Ok(Frame::data(second)), 2))
                            }
                            _ => futures::future::pending().await,
                        }
                    }
                });
                Response::builder()
                    .header("content-type", "application/json")
                    .body(StreamBody::new(stream).boxed_unsync())
                    .unwrap()
            })
        }
    }))
    .await;
    let resp = env.send("GET", &format!("{LIST}?watch=true"), "").await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut next_event = async || -> String {
        let frame = tokio::time::timeout(Duration::from_secs(600), body.frame())
            .await
            .expect("an event")
            .unwrap()
            .unwrap();
        String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
    };
    assert!(next_event().await.contains("first"));
    // Two minutes pass with the stream idle: no deadline applies to a watch.
    tokio::time::pause();
    tokio::time::sleep(Duration::from_secs(120)).await;
    tokio::time::resume();
    release.notify_one();
    assert!(next_event().await.contains("second"));
    assert_eq!(env.terminations("deadline"), 0);
    assert_eq!(env.requests("watch", 200, "upstream"), 1);
}

/// A fake target's store of widgets, with the LIST-by-label the proxy uses after an ambiguous
/// create.
#[derive(Default)]
struct Store {
    objects: Mutex<Vec<Value>>,
    posts: Mutex<Vec<Value>>,
}

impl Store {
    /// Creates answer per the object's name: `lands` is stored and answered 500; `lost` is not
    /// stored and answered 500; `slow` is stored and never answered.
    fn behaviour(self: &Arc<Self>) -> Behaviour {
        let store = self.clone();
        behaviour(move |method, path, body| {
            let store = store.clone();
            Box::pin(async move {
                if method == Method::POST {
                    let mut obj: Value = serde_json::from_slice(&body).unwrap();
                    store.posts.lock().unwrap().push(obj.clone());
                    let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
                    obj["metadata"]["uid"] = format!("uid-{name}").into();
                    match name.as_str() {
                        "lands" => {
                            store.objects.lock().unwrap().push(obj);
                            reply(500, status(500, "etcd timed out after writing"))
                        }
                        "slow" => {
                            store.objects.lock().unwrap().push(obj);
                            futures::future::pending().await
                        }
                        _ => reply(500, status(500, "etcd refused the write")),
                    }
                } else if let Some(selector) = path.split("labelSelector=").nth(1) {
                    let selector: String =
                        form_urlencoded::parse(format!("s={selector}").as_bytes())
                            .next()
                            .unwrap()
                            .1
                            .into_owned();
                    let (key, value) = selector.split_once('=').unwrap();
                    let items: Vec<Value> = store
                        .objects
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|o| o["metadata"]["labels"][key] == value)
                        .cloned()
                        .collect();
                    reply(
                        200,
                        json!({"apiVersion": "example.test/v1", "kind": "WidgetList", "metadata": {}, "items": items}),
                    )
                } else {
                    reply(404, status(404, "not found"))
                }
            })
        })
    }
}

fn widget(name: &str) -> String {
    json!({"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": name}})
        .to_string()
}

#[tokio::test]
async fn a_create_that_reached_the_target_before_a_500_answers_201_and_one_that_did_not_503() {
    let store = Arc::new(Store::default());
    let env = env(store.behaviour()).await;

    let (code, _, body) = read(env.send("POST", LIST, &widget("lands")).await).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["metadata"]["name"], "lands");
    assert_eq!(body["metadata"]["uid"], "uid-lands");
    assert_eq!(body["kind"], "Widget");
    assert_eq!(
        body["metadata"]["labels"]["vcluster.com/owner-vcluster"],
        "c"
    );
    assert!(body["metadata"]["labels"][CREATE_ID_LABEL].is_string());
    assert_eq!(env.requests("create", 201, "create_confirmed"), 1);

    let (code, retry_after, body) = read(env.send("POST", LIST, &widget("lost")).await).await;
    assert_eq!((code, retry_after.as_deref()), (503, Some("1")), "{body}");
    assert_eq!(env.requests("create", 503, "upstream_error"), 1);

    // Each create carried its own id; the target saw each once.
    let posts = store.posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 2);
    let ids: Vec<&Value> = posts
        .iter()
        .map(|p| &p["metadata"]["labels"][CREATE_ID_LABEL])
        .collect();
    assert!(ids[0].is_string() && ids[0] != ids[1], "{ids:?}");
    assert_eq!(store.objects.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_create_held_past_its_deadline_is_looked_up_and_answered_201_within_sixty_seconds() {
    let store = Arc::new(Store::default());
    let env = env(store.behaviour()).await;
    let sent = Instant::now();
    let answer = tokio::spawn({
        let env = EnvRef {
            proxy: env.proxy,
            client_tls: env.client_tls.clone(),
        };
        async move { read(env.send("POST", LIST, &widget("slow")).await).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.objects.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the create reached the target"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // As above: past the create's own deadline (55 s), then the lookup in real time.
    tokio::time::pause();
    tokio::time::sleep_until(
        sent + REQUEST_DEADLINE - CREATE_LOOKUP_BUDGET + Duration::from_millis(1),
    )
    .await;
    tokio::time::resume();
    let (code, _, body) = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("answered after the lookup")
        .unwrap();
    let elapsed = sent.elapsed();
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["metadata"]["name"], "slow");
    assert!(
        elapsed >= Duration::from_secs(55) && elapsed < Duration::from_secs(60),
        "looked up after 55 s, answered within 60 s: {elapsed:?}"
    );
    assert_eq!(env.terminations("deadline"), 1);
    assert_eq!(env.requests("create", 201, "create_confirmed"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_on_one_caller_connection_are_all_live_at_once() {
    // The target answers no watch until all of them are open at the same time: if the proxy
    // queued watches (e.g. behind a stream limit of a shared connection), none would get an event.
    const WATCHES: usize = 500;
    let open = Arc::new(tokio::sync::Semaphore::new(0));
    let env = env(behaviour({
        let open = open.clone();
        move |_, path, _| {
            assert!(path.contains("watch=true"), "{path}");
            let open = open.clone();
            Box::pin(async move {
                open.add_permits(1);
                let stream = futures::stream::unfold(false, move |sent| {
                    let open = open.clone();
                    async move {
                        if sent {
                            return futures::future::pending().await;
                        }
                        // Every watch waits for all of them.
                        let _all = open.acquire_many(WATCHES as u32).await.unwrap();
                        let event = json!({"type": "ADDED", "object": {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w"}}});
                        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{event}\n")))), true))
                    }
                });
                Response::builder()
                    .header("content-type", "application/json")
                    .body(StreamBody::new(stream).boxed_unsync())
                    .unwrap()
            })
        }
    }))
    .await;

    // One HTTP/2 connection, as the aggregator multiplexes watches.
    let mut config = (*env.client_tls).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(env.proxy).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let watches: Vec<_> = (0..WATCHES)
        .map(|_| {
            let mut sender = sender.clone();
            tokio::spawn(async move {
                let req = http::Request::get(format!("{LIST}?watch=true"))
                    .header("x-remote-user", "alice")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let resp = sender.send_request(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                let frame = resp.into_body().frame().await.unwrap().unwrap();
                String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
            })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(watches))
        .await
        .expect("every watch got its event: all were open at once");
    for event in all {
        assert!(event.unwrap().contains("ADDED"));
    }
    assert_eq!(env.requests("watch", 200, "upstream"), WATCHES as u64);
}

#[tokio::test]
async fn a_caller_that_goes_away_is_counted_as_canceled_and_leaves_no_inflight_request() {
    let held = Arc::new(Notify::new());
    let env = env(behaviour({
        let held = held.clone();
        move |_, _, _| {
            let held = held.clone();
            Box::pin(async move {
                held.notify_one();
                futures::future::pending::<Reply>().await
            })
        }
    }))
    .await;
    let caller = tokio::spawn({
        let env = EnvRef {
            proxy: env.proxy,
            client_tls: env.client_tls.clone(),
        };
        async move { env.send("GET", LIST, "").await }
    });
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the request reached the target");
    let inflight = || {
        env.metrics
            .inflight
            .get_or_create(&resource_proxy::metrics::TargetLabels {
                target: "p/t".into(),
            })
            .get()
    };
    assert_eq!(inflight(), 1);
    // The caller disconnects.
    caller.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env.terminations("canceled") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy noticed the caller left"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(env.requests("list", 499, "canceled"), 1);
    assert_eq!(inflight(), 0);
}

#[tokio::test]
async fn a_named_get_costs_the_target_one_request_whatever_the_answer_and_hidden_reads_as_missing()
{
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let env = env(behaviour({
        let seen = seen.clone();
        move |_, path, _| {
            seen.lock().unwrap().push(path.clone());
            let name = path.rsplit('/').next().unwrap_or_default().to_owned();
            let object = |owner: &str| {
                json!({"apiVersion": "example.test/v1", "kind": "Widget",
                       "metadata": {"name": name, "namespace": "ns", "labels": {
                           "vcluster.com/owner-vcluster": owner,
                           "vcluster.com/owner-project": "p"}}})
            };
            let answer = match name.as_str() {
                "mine" => reply(200, object("c")),
                "hidden" => reply(200, object("someone-else")),
                "denied" => reply(403, status(403, "forbidden")),
                "broken" => reply(500, status(500, "etcd is unhappy")),
                _ => reply(404, status(404, "not found")),
            };
            Box::pin(async move { answer })
        }
    }))
    .await;
    let get = |name: &'static str| {
        let env = &env;
        async move { read(env.send("GET", &format!("{LIST}/{name}"), "").await).await }
    };

    let (code, _, body) = get("mine").await;
    assert_eq!((code, &body["metadata"]["name"]), (200, &json!("mine")));
    let missing = get("missing").await;
    assert_eq!(missing.0, 404, "{missing:?}");
    for name in ["hidden", "denied"] {
        let (code, retry_after, body) = get(name).await;
        let body: Value = serde_json::from_str(&body.to_string().replace(name, "missing")).unwrap();
        assert_eq!(
            (code, retry_after, body),
            missing,
            "{name} answers exactly like a missing object"
        );
    }
    let (code, retry_after, _) = get("broken").await;
    assert_eq!((code, retry_after.as_deref()), (503, Some("1")));
    let seen = seen.lock().unwrap().clone();
    for name in ["mine", "missing", "hidden", "denied", "broken"] {
        assert_eq!(
            seen.iter()
                .filter(|p| p.ends_with(&format!("/{name}")))
                .count(),
            1,
            "one target request for {name}: {seen:?}"
        );
    }
    assert_eq!(env.requests("get", 404, "ownership_masked"), 1);
    assert_eq!(env.requests("get", 404, "not_found"), 2);
}

#[tokio::test]
async fn openapi_v2_is_filtered_revalidated_and_served_from_the_last_good_copy() {
    let calls = Arc::new(Mutex::new(0u32));
    let env = env(behaviour({
        let calls = calls.clone();
        move |_, path, _| {
            assert_eq!(path, "/openapi/v2");
            let call = {
                let mut calls = calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            Box::pin(async move {
                match call {
                    1 => {
                        let doc = json!({
                            "swagger": "2.0",
                            "info": {"title": "Kubernetes", "version": "v1.36.2"},
                            "paths": {
                                "/apis/example.test/v1/namespaces/{namespace}/widgets": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/test.example.v1.Widget"}}}}},
                                "/api/v1/secrets": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.api.core.v1.SecretList"}}}}},
                            },
                            "definitions": {
                                "test.example.v1.Widget": {"type": "object"},
                                "io.k8s.api.core.v1.SecretList": {"type": "object"},
                            },
                        });
                        let mut r = reply(200, doc);
                        r.headers_mut()
                            .insert("etag", http::HeaderValue::from_static("\"v1\""));
                        r
                    }
                    2 => Response::builder()
                        .status(304)
                        .body(Full::new(Bytes::new()).boxed_unsync())
                        .unwrap(),
                    _ => reply(500, status(500, "etcd is unhappy")),
                }
            })
        }
    }))
    .await;

    let (code, _, first) = read(env.send("GET", "/openapi/v2", "").await).await;
    assert_eq!(code, 200, "{first}");
    let paths: Vec<&String> = first["paths"].as_object().unwrap().keys().collect();
    assert_eq!(
        paths,
        ["/apis/example.test/v1/namespaces/{namespace}/widgets"]
    );
    let definitions: Vec<&String> = first["definitions"].as_object().unwrap().keys().collect();
    assert_eq!(definitions, ["test.example.v1.Widget"]);
    // The target's 304 (to the ETag) and then its 500: the same document, never a failure.
    let (code, _, second) = read(env.send("GET", "/openapi/v2", "").await).await;
    assert_eq!((code, &second), (200, &first));
    let (code, _, third) = read(env.send("GET", "/openapi/v2", "").await).await;
    assert_eq!((code, &third), (200, &first));
    assert_eq!(*calls.lock().unwrap(), 3);
    assert_eq!(env.requests("get", 200, "discovery"), 3);
}
