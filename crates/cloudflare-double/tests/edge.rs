//! The edge and the connector stand-in on loopback: a visitor's request travels
//! edge → registered `cloudflared-standin` process → backend, and back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cloudflare_double::edge::CONNECTION_HEADER;
use cloudflare_double::{CloudflareDouble, Options, TunnelInfo};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::{Notify, mpsc};

const HOST: &str = "app.example.test";
const WAIT: Duration = Duration::from_secs(20);

/// A request body fed from a channel, one frame per message.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

/// The origin behind the connector. `/echo` streams the request body back as it arrives and
/// reports what it saw in `x-seen-*` headers; `/slow` answers once released; `/ws` switches to
/// an echo of raw bytes when asked for a WebSocket (and answers 403 with `x-refuse`).
struct Backend {
    addr: SocketAddr,
    slow_arrived: tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    release: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    async fn start() -> Backend {
        Backend::named("backend").await
    }

    /// A backend answering with `x-origin: <name>`.
    async fn named(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (arrived_tx, arrived_rx) = mpsc::unbounded_channel();
        let release = Arc::new(Notify::new());
        let rel = release.clone();
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (arrived, rel) = (arrived_tx.clone(), rel.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (arrived, rel) = (arrived.clone(), rel.clone());
                        async move { Ok::<_, Infallible>(origin(name, req, arrived, rel).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Backend {
            addr,
            slow_arrived: tokio::sync::Mutex::new(arrived_rx),
            release,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn origin(
    name: &'static str,
    req: Request<Incoming>,
    arrived: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
) -> Response<UnsyncBoxBody<Bytes, hyper::Error>> {
    let seen = |name: &str| {
        req.headers()
            .get(name)
            .map_or("<absent>".to_string(), |v| v.to_str().unwrap().to_string())
    };
    let mut builder = Response::builder()
        .header("x-seen-method", req.method().as_str())
        .header("x-seen-path", req.uri().path_and_query().unwrap().as_str())
        .header("x-seen-host", seen("host"))
        .header("x-seen-custom", seen("x-custom"))
        .header("x-seen-service", seen("cf-double-service"))
        .header("x-seen-connecting-ip", seen("cf-connecting-ip"))
        .header("x-seen-marker", seen("cf-double-upgrade"))
        .header("x-origin", name);
    if req.uri().path() == "/ws" {
        return websocket_origin(req, builder);
    }
    if req.uri().path() == "/slow" {
        let _ = arrived.send(());
        release.notified().await;
        builder = builder.header("x-slow", "done");
        return builder
            .body(
                Full::new(Bytes::from("slow done"))
                    .map_err(|n| match n {})
                    .boxed_unsync(),
            )
            .unwrap();
    }
    builder.body(req.into_body().boxed_unsync()).unwrap()
}

/// `/ws`: 101 and an echo of whatever bytes come, when the request asks for a WebSocket.
fn websocket_origin(
    mut req: Request<Incoming>,
    builder: hyper::http::response::Builder,
) -> Response<UnsyncBoxBody<Bytes, hyper::Error>> {
    let empty = || Empty::new().map_err(|n| match n {}).boxed_unsync();
    let asked = req.headers().get("upgrade").map(|v| v.as_bytes()) == Some(b"websocket")
        && req.headers().get("connection").map(|v| v.as_bytes()) == Some(b"upgrade");
    if !asked || req.headers().contains_key("x-refuse") {
        return builder.status(403).body(empty()).unwrap();
    }
    let key = req.headers()["sec-websocket-key"].clone();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let io = TokioIo::new(on_upgrade.await.unwrap());
        let (mut r, mut w) = tokio::io::split(io);
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    builder
        .status(101)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", key)
        .body(empty())
        .unwrap()
}

async fn double() -> CloudflareDouble {
    CloudflareDouble::start_with(Options {
        edge: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        connectors: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Options::default()
    })
    .await
    .unwrap()
}

fn tunnel(double: &CloudflareDouble, ingress: Value) -> TunnelInfo {
    let account = double.add_account("edge").unwrap();
    let t = double.add_tunnel(&account, "edge").unwrap();
    double
        .set_configuration(&account, &t.tunnel_id, json!({ "ingress": ingress }))
        .unwrap();
    t
}

/// `HOST` to the backend, named `localhost` as the controller's documents name a Pod's proxy.
fn simple_ingress(backend: &Backend) -> Value {
    let service = format!("http://localhost:{}", backend.addr.port());
    json!([{"hostname": HOST, "service": service}, {"service": "http_status:404"}])
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `cloudflared-standin` process started with the arguments the controller renders, its
/// stderr collected.
struct Standin {
    child: Child,
    log: Arc<Mutex<String>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    metrics: SocketAddr,
}

impl Standin {
    fn spawn(edge: SocketAddr, token: &str, grace: &str) -> Standin {
        Standin::spawn_to(&edge.to_string(), token, grace)
    }

    fn spawn_to(edge: &str, token: &str, grace: &str) -> Standin {
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_cloudflared-standin"))
            .args(["tunnel", "--no-autoupdate", "--metrics"])
            .arg(metrics.to_string())
            .args(["--grace-period", grace, "--retries", "1", "run"])
            .env("TUNNEL_TOKEN", token)
            .env("TUNNEL_EDGE", edge)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Standin {
            child,
            log,
            reader: Some(reader),
            metrics,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit and for its last log line.
    async fn exit(&mut self, within: Duration) -> ExitStatus {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!(
                "stand-in still running after {within:?}; log:\n{}",
                self.log()
            ),
        };
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(within, reader).await;
        }
        status
    }

    async fn ready(&self) -> Option<(StatusCode, Value)> {
        let resp = client::<Empty<Bytes>>()
            .get(format!("http://{}/ready", self.metrics).parse().unwrap())
            .await
            .ok()?;
        let status = resp.status();
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        Some((status, serde_json::from_slice(&body).unwrap()))
    }

    async fn wait_ready(&self, want: StatusCode) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some((status, body)) = self.ready().await
                && status == want
            {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/ready never answered {want}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn client<B>() -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Client::builder(TokioExecutor::new()).build_http()
}

async fn wait_live(double: &CloudflareDouble, tunnel: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while double.live_connections(tunnel) != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "tunnel has {} live connections, want {n}",
            double.live_connections(tunnel)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: String,
}

async fn get(edge: SocketAddr, host: &str, path: &str) -> Answer {
    let req = Request::get(format!("http://{edge}{path}"))
        .header("host", host)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = tokio::time::timeout(WAIT, client().request(req))
        .await
        .expect("edge answers in time")
        .expect("edge answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn header<'a>(a: &'a Answer, name: &str) -> &'a str {
    a.headers
        .get(name)
        .map_or("<absent>", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn request_reaches_the_backend_streaming_both_ways() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    let ready = standin.wait_ready(StatusCode::OK).await;
    assert_eq!(ready["readyConnections"], 1, "{ready}");
    assert_eq!(ready["status"], 200, "{ready}");
    assert_eq!(
        ready["connectorId"].as_str().map(str::len),
        Some(36),
        "{ready}"
    );
    wait_live(&double, &t.tunnel_id, 1).await;

    // A request body sent in two parts: the second goes only after the first came back, so the
    // answer can only complete if both directions stream.
    let (tx, rx) = mpsc::channel(1);
    let body = ChannelBody(rx);
    let req = Request::post(format!(
        "http://{}/echo?x=1&y=two",
        double.edge_addr().unwrap()
    ))
    .header("host", "App.Example.Test")
    .header("x-custom", "kept")
    // A visitor cannot pick the service the connector relays to.
    .header("cf-double-service", "http://127.0.0.1:1")
    // Nor claim another client address: the edge overwrites it.
    .header("cf-connecting-ip", "203.0.113.9")
    .body(body)
    .unwrap();
    let pending = tokio::spawn(client().request(req));
    tx.send(Bytes::from("first part|")).await.unwrap();
    let resp = tokio::time::timeout(WAIT, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let h = resp.headers();
    let seen = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_string());
    assert_eq!(seen("x-seen-method").as_deref(), Some("POST"));
    assert_eq!(seen("x-seen-path").as_deref(), Some("/echo?x=1&y=two"));
    assert_eq!(seen("x-seen-host").as_deref(), Some("App.Example.Test"));
    assert_eq!(seen("x-seen-custom").as_deref(), Some("kept"));
    assert_eq!(seen("x-seen-service").as_deref(), Some("<absent>"));
    assert_eq!(seen("x-seen-connecting-ip").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen("x-origin").as_deref(), Some("backend"));
    assert_eq!(seen("server").as_deref(), Some("cloudflare"));
    assert!(seen("cf-ray").is_some());

    let mut body = resp.into_body();
    let first = tokio::time::timeout(WAIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), Bytes::from("first part|"));
    tx.send(Bytes::from("second part")).await.unwrap();
    drop(tx);
    let rest = tokio::time::timeout(WAIT, body.collect())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest.to_bytes(), Bytes::from("second part"));
}

#[tokio::test]
async fn rules_pick_the_service_and_the_edge_answers_the_rest() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(
        &double,
        json!([
            {"hostname": "*.wild.test", "path": "^/api/", "service": backend.url()},
            {"hostname": "gone.wild.test", "service": "http_status:404"},
            {"hostname": "gone.test", "service": "http_status:404"},
            {"service": "http_status:503"}
        ]),
    );
    let _standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    wait_live(&double, &t.tunnel_id, 1).await;
    let edge = double.edge_addr().unwrap();

    let a = get(edge, "a.b.wild.test", "/api/x").await;
    assert_eq!(
        (a.status, header(&a, "x-origin")),
        (StatusCode::OK, "backend")
    );
    // The wildcard rule comes first, so it wins for its paths even on gone.wild.test.
    let a = get(edge, "gone.wild.test", "/api/x").await;
    assert_eq!(
        (a.status, header(&a, "x-origin")),
        (StatusCode::OK, "backend")
    );
    // Outside the path, the next rules: http_status answered by the edge, nothing relayed.
    let a = get(edge, "gone.wild.test", "/other").await;
    assert_eq!((a.status, a.body.as_str()), (StatusCode::NOT_FOUND, ""));
    assert_eq!(header(&a, "x-origin"), "<absent>");
    let a = get(edge, "gone.test", "/api/x").await;
    assert_eq!((a.status, a.body.as_str()), (StatusCode::NOT_FOUND, ""));
    let a = get(edge, "x.wild.test", "/other").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);

    // No tunnel names these hosts (the apex is not under its wildcard): the edge's own 404.
    for host in ["wild.test", "elsewhere.test"] {
        let a = get(edge, host, "/api/x").await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{host}");
        assert!(a.body.contains("would not resolve"), "{host}: {}", a.body);
        assert_eq!(header(&a, "server"), "cloudflare");
    }

    // A Host that is not a host (it would become another authority at the origin) is refused.
    for host in ["x/a.wild.test", "user@a.wild.test", "a.wild.test:1:2"] {
        let a = get(edge, host, "/api/x").await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{host}");
        assert_eq!(header(&a, "x-origin"), "<absent>");
    }

    // A new document version is routed at once.
    double
        .set_configuration(
            &t.account_id,
            &t.tunnel_id,
            json!({"ingress": [{"hostname": "elsewhere.test", "service": backend.url()}, {"service": "http_status:404"}]}),
        )
        .unwrap();
    let a = get(edge, "elsewhere.test", "/").await;
    assert_eq!(
        (a.status, header(&a, "x-origin")),
        (StatusCode::OK, "backend")
    );
    let a = get(edge, "a.b.wild.test", "/api/x").await;
    assert!(a.body.contains("would not resolve"), "{}", a.body);
}

#[tokio::test]
async fn stopped_connector_gives_530_and_traffic_resumes_when_it_is_back() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(
        &double,
        json!([
            {"hostname": HOST, "service": backend.url()},
            {"hostname": "status.example.test", "service": "http_status:404"},
            {"service": "http_status:404"}
        ]),
    );
    let edge = double.edge_addr().unwrap();
    let mut standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    wait_live(&double, &t.tunnel_id, 1).await;
    assert_eq!(get(edge, HOST, "/").await.status, StatusCode::OK);

    standin.child.kill().await.unwrap();
    wait_live(&double, &t.tunnel_id, 0).await;
    let a = get(edge, HOST, "/").await;
    assert_eq!(a.status.as_u16(), 530);
    assert!(a.body.contains("Error</span> <span>1033"), "{}", a.body);
    assert!(a.body.contains(HOST), "{}", a.body);
    assert!(header(&a, "content-type").starts_with("text/html"));
    // The 1033 page comes first even for a host whose rule the edge could answer alone: the
    // ingress is cloudflared's to evaluate.
    let a = get(edge, "status.example.test", "/").await;
    assert_eq!(a.status.as_u16(), 530, "{}", a.body);
    // A host no document names is still the edge's 404, connector or not.
    let a = get(edge, "unnamed.example.test", "/").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("would not resolve"), "{}", a.body);

    let _back = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    wait_live(&double, &t.tunnel_id, 1).await;
    let a = get(edge, HOST, "/").await;
    assert_eq!(
        (a.status, header(&a, "x-origin")),
        (StatusCode::OK, "backend")
    );
}

#[tokio::test]
async fn round_robin_over_two_connectors() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let edge = double.edge_addr().unwrap();
    let mut one = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    let _two = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    wait_live(&double, &t.tunnel_id, 2).await;

    let mut seen = Vec::new();
    for _ in 0..6 {
        let a = get(edge, HOST, "/").await;
        assert_eq!(a.status, StatusCode::OK);
        seen.push(header(&a, CONNECTION_HEADER).to_string());
    }
    assert_ne!(seen[0], seen[1], "{seen:?}");
    for (i, id) in seen.iter().enumerate() {
        assert_eq!(id, &seen[i % 2], "alternates: {seen:?}");
    }

    // One gone: every request goes to the other, none fails.
    one.child.kill().await.unwrap();
    wait_live(&double, &t.tunnel_id, 1).await;
    for _ in 0..4 {
        assert_eq!(get(edge, HOST, "/").await.status, StatusCode::OK);
    }
}

/// A connector that registers and refuses every request unprocessed (`REFUSED_STREAM`, what a
/// connection going away does to a request that crossed its GOAWAY); counts them.
async fn refusing_connector(
    connectors: SocketAddr,
    token: String,
    refused: Arc<std::sync::atomic::AtomicUsize>,
) {
    use cloudflare_double::wire::{self, Register, Registered};
    let mut stream = tokio::net::TcpStream::connect(connectors).await.unwrap();
    let register = Register {
        token,
        connector_id: "00000000-0000-4000-8000-000000000001".into(),
    };
    wire::write_line(&mut stream, &register).await.unwrap();
    let answer: Registered =
        serde_json::from_slice(&wire::read_line(&mut stream).await.unwrap()).unwrap();
    assert!(answer.ok, "{:?}", answer.error);
    let mut conn = h2::server::handshake(stream).await.unwrap();
    while let Some(Ok((_request, mut respond))) = conn.accept().await {
        refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        respond.send_reset(h2::Reason::REFUSED_STREAM);
    }
}

#[tokio::test]
async fn a_request_a_connection_refuses_unprocessed_goes_over_another() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let edge = double.edge_addr().unwrap();
    let _good = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let refuser = tokio::spawn(refusing_connector(
        double.connector_addr().unwrap(),
        t.token.clone(),
        refused.clone(),
    ));
    wait_live(&double, &t.tunnel_id, 2).await;

    // Round robin gives the refusing connection one of the first two requests; the edge sends
    // it again over the other, and leaves the refusing connection out afterwards.
    for _ in 0..4 {
        let a = get(edge, HOST, "/").await;
        assert_eq!(
            (a.status, header(&a, "x-origin")),
            (StatusCode::OK, "backend"),
            "{}",
            a.body
        );
    }
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    refuser.abort();
}

#[tokio::test]
async fn registration_needs_a_known_tunnel_and_its_current_secret() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let connectors = double.connector_addr().unwrap();
    let edge = double.edge_addr().unwrap();

    let registered = Standin::spawn(connectors, &t.token, "5s");
    registered.wait_ready(StatusCode::OK).await;
    let rotated = double
        .rotate_tunnel_secret(&t.account_id, &t.tunnel_id)
        .unwrap();

    // The registered connection stays, as on Cloudflare.
    assert_eq!(get(edge, HOST, "/").await.status, StatusCode::OK);
    assert_eq!(double.live_connections(&t.tunnel_id), 1);

    // The old secret no longer registers: after its retries (one here) the process exits
    // non-zero and says why.
    let mut stale = Standin::spawn(connectors, &t.token, "5s");
    let status = stale.exit(WAIT).await;
    assert!(!status.success(), "{status:?}");
    assert!(
        stale.log().contains("Unauthorized: Invalid tunnel secret"),
        "{}",
        stale.log()
    );
    let log = stale.log();
    assert_eq!(log.matches("Retrying connection").count(), 1, "{log}");
    assert!(
        log.contains(
            "Error: Register tunnel error from server side: Unauthorized: Invalid tunnel secret"
        ),
        "{log}"
    );

    // A tunnel the double does not know (another double's).
    let other = double_with_tunnel().await;
    let mut unknown = Standin::spawn(connectors, &other.token, "5s");
    let status = unknown.exit(WAIT).await;
    assert!(!status.success(), "{status:?}");
    assert!(
        unknown.log().contains("Unauthorized: Failed to get tunnel"),
        "{}",
        unknown.log()
    );

    // A token that is not one at all stops before dialing.
    let mut garbage = Standin::spawn(connectors, "not-a-token", "5s");
    assert!(!garbage.exit(WAIT).await.success());
    assert!(
        garbage.log().contains("invalid tunnel token"),
        "{}",
        garbage.log()
    );

    assert_eq!(double.live_connections(&t.tunnel_id), 1);
    let _fresh = Standin::spawn(connectors, &rotated, "5s");
    wait_live(&double, &t.tunnel_id, 2).await;
}

async fn double_with_tunnel() -> TunnelInfo {
    let other = CloudflareDouble::start().await.unwrap();
    let account = other.add_account("other").unwrap();
    other.add_tunnel(&account, "other").unwrap()
}

#[tokio::test]
async fn sigterm_drains_the_request_in_flight() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let edge = double.edge_addr().unwrap();
    let mut standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "10s");
    standin.wait_ready(StatusCode::OK).await;

    let slow = tokio::spawn(get(edge, HOST, "/slow"));
    tokio::time::timeout(WAIT, backend.slow_arrived.lock().await.recv())
        .await
        .expect("slow request reaches the backend");

    standin.sigterm();
    // Unregistered: not ready, and new requests are not given to it (it was the only one).
    let ready = standin.wait_ready(StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(ready["readyConnections"], 0, "{ready}");
    let a = get(edge, HOST, "/").await;
    assert_eq!(a.status.as_u16(), 530, "{}", a.body);

    // The request in flight still completes, then the process exits cleanly.
    backend.release.notify_one();
    let a = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
    assert_eq!((a.status, a.body.as_str()), (StatusCode::OK, "slow done"));
    let status = standin.exit(WAIT).await;
    assert!(status.success(), "{status:?}\n{}", standin.log());
    assert!(
        standin.log().contains("All requests in flight finished"),
        "{}",
        standin.log()
    );
}

#[tokio::test]
async fn grace_period_bounds_the_drain() {
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let edge = double.edge_addr().unwrap();
    let mut standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "1s");
    standin.wait_ready(StatusCode::OK).await;

    let slow = tokio::spawn(async move {
        let req = Request::get(format!("http://{edge}/slow"))
            .header("host", HOST)
            .body(Empty::<Bytes>::new())
            .unwrap();
        client().request(req).await
    });
    tokio::time::timeout(WAIT, backend.slow_arrived.lock().await.recv())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    standin.sigterm();
    let status = standin.exit(WAIT).await;
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        standin.log().contains("Grace period expired"),
        "{}",
        standin.log()
    );
    // The visitor gets the edge's 502 for the abandoned request, not a success.
    let outcome = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
    assert_eq!(outcome.unwrap().status(), StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn connector_reconnects_when_the_double_comes_back() {
    let backend = Backend::start().await;
    let port = free_port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC0xMjM0NQ==";
    let start = || async {
        let d = CloudflareDouble::start_with(Options {
            edge: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            connectors: Some(listen),
            ..Options::default()
        })
        .await
        .unwrap();
        let account = d
            .add_account_with_id("0123456789abcdef0123456789abcdef", "a")
            .unwrap();
        let t = d
            .add_tunnel_with(
                &account,
                "f70ff985-a4ef-4643-bbbc-4a0ed4fc8415",
                "t",
                Some(secret),
            )
            .unwrap();
        d.set_configuration(
            &account,
            &t.tunnel_id,
            json!({"ingress": simple_ingress(&backend)}),
        )
        .unwrap();
        (d, t)
    };
    let (first, t) = start().await;
    let standin = Standin::spawn(listen, &t.token, "5s");
    standin.wait_ready(StatusCode::OK).await;

    drop(first);
    standin.wait_ready(StatusCode::SERVICE_UNAVAILABLE).await;
    let (second, t) = start().await;
    standin.wait_ready(StatusCode::OK).await;
    wait_live(&second, &t.tunnel_id, 1).await;
    let a = get(second.edge_addr().unwrap(), HOST, "/").await;
    assert_eq!(
        (a.status, header(&a, "x-origin")),
        (StatusCode::OK, "backend")
    );
    assert!(standin.log().contains("reconnecting"), "{}", standin.log());
}

#[tokio::test]
async fn connector_port_refuses_malformed_registrations() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let double = double().await;
    let port = double.connector_addr().unwrap();

    let mut conn = tokio::net::TcpStream::connect(port).await.unwrap();
    conn.write_all(b"{\"hello\": 1}\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(WAIT, conn.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(answer.trim()).unwrap();
    assert_eq!(
        answer,
        json!({"ok": false, "connection_id": null, "error": "malformed registration"})
    );

    // A line that never ends is cut off, not buffered without bound.
    let mut conn = tokio::net::TcpStream::connect(port).await.unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let _ = conn.write_all(&chunk).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, conn.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");
}

#[tokio::test]
async fn each_tunnel_carries_only_its_own_hosts() {
    let (backend_a, backend_b) = (Backend::named("a").await, Backend::named("b").await);
    let double = double().await;
    let a = tunnel(
        &double,
        json!([{"hostname": "a.example.test", "service": backend_a.url()}, {"service": "http_status:404"}]),
    );
    let b = tunnel(
        &double,
        json!([{"hostname": "b.example.test", "service": backend_b.url()}, {"service": "http_status:404"}]),
    );
    let edge = double.edge_addr().unwrap();
    let mut standin_a = Standin::spawn(double.connector_addr().unwrap(), &a.token, "5s");
    let _standin_b = Standin::spawn(double.connector_addr().unwrap(), &b.token, "5s");
    wait_live(&double, &a.tunnel_id, 1).await;
    wait_live(&double, &b.tunnel_id, 1).await;

    for (host, want) in [("a.example.test", "a"), ("b.example.test", "b")] {
        for _ in 0..3 {
            let r = get(edge, host, "/").await;
            assert_eq!(
                (r.status, header(&r, "x-origin")),
                (StatusCode::OK, want),
                "{host}"
            );
        }
    }
    // Tunnel a's connector gone: its host is 530, never carried by tunnel b's live connector.
    standin_a.child.kill().await.unwrap();
    wait_live(&double, &a.tunnel_id, 0).await;
    let r = get(edge, "a.example.test", "/").await;
    assert_eq!(r.status.as_u16(), 530);
    assert_eq!(header(&r, "x-origin"), "<absent>");
    let r = get(edge, "b.example.test", "/").await;
    assert_eq!(header(&r, "x-origin"), "b");
}

#[tokio::test]
async fn unclaimed_hosts_go_to_the_dns_fallback_tunnel_whose_catch_all_decides() {
    let (backend_a, backend_b) = (Backend::named("a").await, Backend::named("b").await);
    let double = double().await;
    let a = tunnel(
        &double,
        json!([{"hostname": "a.example.test", "service": backend_a.url()}, {"service": "http_status:404"}]),
    );
    let b = tunnel(
        &double,
        json!([{"hostname": "b.example.test", "service": "http_status:418"}, {"service": backend_b.url()}]),
    );
    let edge = double.edge_addr().unwrap();
    let _standin_a = Standin::spawn(double.connector_addr().unwrap(), &a.token, "5s");
    let _standin_b = Standin::spawn(double.connector_addr().unwrap(), &b.token, "5s");
    wait_live(&double, &a.tunnel_id, 1).await;
    wait_live(&double, &b.tunnel_id, 1).await;

    // Without a fallback, a name no document claims does not resolve.
    let r = get(edge, "other.test", "/").await;
    assert!(r.body.contains("would not resolve"), "{}", r.body);

    double.route_unclaimed_hosts_to(Some(&b.tunnel_id));
    // Unclaimed names (an IP literal with a port too) reach tunnel b's catch-all service.
    for host in [
        "other.test",
        "10.0.0.1:80",
        &format!("{}.cfargotunnel.com", b.tunnel_id),
    ] {
        let r = get(edge, host, "/x").await;
        assert_eq!(
            (r.status, header(&r, "x-origin")),
            (StatusCode::OK, "b"),
            "{host}"
        );
    }
    // A claimed name still goes to the tunnel that claims it, and b's own rules still apply.
    let r = get(edge, "a.example.test", "/").await;
    assert_eq!(header(&r, "x-origin"), "a");
    let r = get(edge, "b.example.test", "/").await;
    assert_eq!(r.status.as_u16(), 418);

    double.route_unclaimed_hosts_to(None);
    let r = get(edge, "other.test", "/").await;
    assert!(r.body.contains("would not resolve"), "{}", r.body);
}

/// Sends a raw HTTP/1.1 request head to the edge and reads the answer's head.
async fn raw_head(stream: &mut tokio::net::TcpStream, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("the edge answers in time")
            .unwrap();
        assert_eq!(
            n,
            1,
            "connection closed after {:?}",
            String::from_utf8_lossy(&got)
        );
        got.push(byte[0]);
    }
    String::from_utf8(got).unwrap().to_ascii_lowercase()
}

#[tokio::test]
async fn websockets_cross_the_tunnel_both_ways_and_a_refused_upgrade_reaches_the_visitor() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = Backend::start().await;
    let double = double().await;
    let t = tunnel(&double, simple_ingress(&backend));
    let standin = Standin::spawn(double.connector_addr().unwrap(), &t.token, "5s");
    standin.wait_ready(StatusCode::OK).await;
    wait_live(&double, &t.tunnel_id, 1).await;
    let edge = double.edge_addr().unwrap();
    let upgrade = |extra: &str| {
        format!(
            "GET /ws HTTP/1.1\r\nhost: {HOST}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    };

    let mut ws = tokio::net::TcpStream::connect(edge).await.unwrap();
    let head = raw_head(&mut ws, &upgrade("")).await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(
        head.contains("\r\nsec-websocket-accept: dghlihnhbxbszsbub25jzq==\r\n"),
        "the origin's handshake answer reaches the visitor: {head}"
    );
    assert!(head.contains("\r\nx-seen-marker: <absent>\r\n"), "{head}");
    assert!(!head.contains("cf-double-upgrade"), "{head}");
    // Bytes go both ways, more than once, after the handshake.
    for message in ["first frame", "second, longer frame"] {
        ws.write_all(message.as_bytes()).await.unwrap();
        let mut back = vec![0u8; message.len()];
        tokio::time::timeout(WAIT, ws.read_exact(&mut back))
            .await
            .expect("the echo comes back in time")
            .unwrap();
        assert_eq!(back, message.as_bytes());
    }
    ws.shutdown().await.unwrap();

    let mut refused = tokio::net::TcpStream::connect(edge).await.unwrap();
    let head = raw_head(&mut refused, &upgrade("x-refuse: 1\r\n")).await;
    assert!(head.starts_with("http/1.1 403"), "{head}");

    // A visitor cannot mark a plain request as a WebSocket.
    let mut plain = tokio::net::TcpStream::connect(edge).await.unwrap();
    let head = raw_head(
        &mut plain,
        &format!("GET /ws HTTP/1.1\r\nhost: {HOST}\r\ncf-double-upgrade: websocket\r\n\r\n"),
    )
    .await;
    assert!(head.starts_with("http/1.1 403"), "{head}");
    assert!(head.contains("\r\nx-seen-marker: <absent>\r\n"), "{head}");
}
