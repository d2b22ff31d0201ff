//! Shared harness: the proxy in-process, real backends, clients, PKI.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use tunnel_proxy::admin::{self, AdminOptions};
use tunnel_proxy::proxy;
use tunnel_proxy::state::State;

pub fn init() {
    // Ignored when another test already installed it.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

// === the proxy ===

pub struct Proxy {
    pub data: SocketAddr,
    pub admin: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Proxy {
    pub async fn start(options: AdminOptions) -> Self {
        init();
        let state = Arc::new(State::new());
        let data = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addrs = (
            data.local_addr().unwrap(),
            admin_listener.local_addr().unwrap(),
        );
        let router = admin::router(state.clone(), options).unwrap();
        tokio::spawn(async move { axum::serve(admin_listener, router).await.unwrap() });
        tokio::spawn(proxy::serve(data, state, async move {
            let _ = stopped.await;
        }));
        Self {
            data: addrs.0,
            admin: addrs.1,
            _stop: stop,
        }
    }

    /// A proxy with no auth and `config` loaded.
    pub async fn with_config(config: Value) -> Self {
        let p = Self::start(AdminOptions::default()).await;
        let (status, body) = p.push(&config, None).await;
        assert_eq!(status, StatusCode::OK, "push failed: {body}");
        p
    }

    pub async fn push(&self, config: &Value, token: Option<&str>) -> (StatusCode, String) {
        let mut req = Request::put(format!("http://{}/config", self.admin))
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = http1_client()
            .request(req.body(full(config.to_string())).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        (status, body_string(resp).await)
    }

    pub async fn admin_get(&self, path: &str) -> (StatusCode, String) {
        let resp = http1_client()
            .get(format!("http://{}{path}", self.admin).parse().unwrap())
            .await
            .unwrap();
        let status = resp.status();
        (status, body_string(resp).await)
    }

    /// GET `path` on the data plane with `Host: host`.
    pub async fn get(&self, host: &str, path: &str) -> Response<Incoming> {
        self.send(
            Request::get(path)
                .header("host", host)
                .body(full(""))
                .unwrap(),
        )
        .await
    }

    /// Sends `req` (origin-form URI) to the data plane over HTTP/1.1.
    pub async fn send(&self, mut req: Request<Full<Bytes>>) -> Response<Incoming> {
        let pq = req.uri().path_and_query().unwrap().clone();
        *req.uri_mut() = format!("http://{}{}", self.data, pq).parse().unwrap();
        http1_client().request(req).await.unwrap()
    }
}

// === clients ===

pub fn http1_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One HTTP/2 prior-knowledge request over a fresh connection to `addr`; the URI's authority
/// becomes `:authority`.
pub async fn h2c_request(addr: SocketAddr, req: Request<Full<Bytes>>) -> Response<Incoming> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await.unwrap()
}

pub fn full(b: impl Into<Bytes>) -> Full<Bytes> {
    Full::new(b.into())
}

pub async fn body_string(resp: Response<Incoming>) -> String {
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

pub async fn body_json(resp: Response<Incoming>) -> Value {
    let s = body_string(resp).await;
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Writes raw bytes and reads until the peer closes or goes quiet for 1 s.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// === backends ===

/// A real HTTP backend (HTTP/1.1 and h2c) answering with a JSON echo of the request.
/// Paths: `/slow/<ms>` sleeps first; `/status/<code>` answers that status.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Connections accepted.
    pub accepted: Arc<AtomicUsize>,
}

impl Backend {
    pub async fn start(name: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let a = accepted.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                a.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| echo(name, h.clone(), req));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            hits,
            accepted,
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
}

pub async fn echo(
    name: &'static str,
    hits: Arc<AtomicUsize>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    hits.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    let mut status = StatusCode::OK;
    if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
    }
    if let Some(code) = path.strip_prefix("/status/") {
        status = StatusCode::from_u16(code.parse().unwrap()).unwrap();
    }
    let mut headers = serde_json::Map::new();
    for (k, v) in req.headers() {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        match headers.get_mut(k.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                headers.insert(k.as_str().to_owned(), Value::String(v));
            }
        }
    }
    let method = req.method().to_string();
    let version = format!("{:?}", req.version());
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let out = json!({
        "backend": name,
        "method": method,
        "target": target,
        "version": version,
        "headers": headers,
        "bodyLen": body.len(),
    });
    Ok(Response::builder()
        .status(status)
        .header("x-backend", name)
        .header("content-type", "application/json")
        .header("connection", "x-drop-me")
        .header("x-drop-me", "hop")
        .body(full(out.to_string()))
        .unwrap())
}

// === config documents ===

pub fn http_route(name: &str, hostnames: &[&str], rules: Value) -> Value {
    json!({ "kind": "HTTPRoute", "name": name, "hostnames": hostnames, "rules": rules })
}

pub fn backend(name: &str, endpoint: &str) -> Value {
    json!({ "name": name, "endpoints": [endpoint] })
}

pub fn doc(version: u64, routes: Vec<Value>) -> Value {
    json!({ "version": version, "routes": routes })
}

// === PKI ===

pub struct Pki {
    pub ca_pem: String,
    pub ca_params: rcgen::CertificateParams,
    pub ca_key: rcgen::KeyPair,
}

pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        Self {
            ca_pem: ca.pem(),
            ca_params,
            ca_key,
        }
    }

    /// A leaf certificate for `names`: DNS names, and URI names for those with `://`.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let (uris, dns): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| n.contains("://"));
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        for uri in uris {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI(uri.try_into().unwrap()));
        }
        let issuer = rcgen::Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
