//! Connections to backends: pooled hyper clients, TLS/mTLS, round-robin over endpoints.
//!
//! One hyper client exists per (protocol, TLS identity); its pool is keyed by endpoint, so
//! tenants with different CA bundles or client certificates never share a connection, and a
//! client survives config pushes (see [`ClientCache`]) so pushes do not drop warm connections.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use http1_wire::{End, Guard, GuardedBody};
use hyper::client::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tunnel_config::backend::{self, TlsConfigError, UpstreamError};
use tunnel_config::config::{BackendProtocol, BackendTls};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Body type of everything the proxy sends, upstream and downstream.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
/// hyper-util's pooled client, used for HTTP/2 backends (one multiplexed connection each).
type LegacyClient = Client<BackendConnector, ProxyBody>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often idle HTTP/1 connections are checked for expiry.
const POOL_REAP_INTERVAL: Duration = Duration::from_secs(30);

// === connector ===

/// TCP (nodelay) plus optional rustls, with a fixed SNI name: the endpoint address in the URI
/// is only where to dial.
#[derive(Clone)]
pub struct BackendConnector {
    http: HttpConnector,
    tls: Option<TlsSettings>,
}

#[derive(Clone)]
struct TlsSettings {
    connector: tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
}

/// Why a connection could not be made; found again in the client error's source chain to
/// label metrics and pick the status code.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("tcp connect: {0}")]
    Tcp(#[source] BoxError),
    #[error("tls handshake: {0}")]
    Tls(#[source] std::io::Error),
}

impl BackendConnector {
    fn new(tls: Option<TlsSettings>) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_keepalive(Some(Duration::from_secs(30)));
        Self { http, tls }
    }
}

impl tower_service::Service<Uri> for BackendConnector {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http
            .poll_ready(cx)
            .map_err(|e| ConnectError::Tcp(e.into()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await.map_err(|e| ConnectError::Tcp(e.into()))?;
            match tls {
                None => Ok(TokioIo::new(RawConn::Plain(tcp.into_inner()))),
                Some(tls) => {
                    let stream = tls
                        .connector
                        .connect(tls.server_name, tcp.into_inner())
                        .await
                        .map_err(ConnectError::Tls)?;
                    Ok(TokioIo::new(RawConn::Tls(Box::new(stream))))
                }
            }
        })
    }
}

/// A backend connection as hyper drives it.
pub type Conn = TokioIo<RawConn>;

// === TLS ===

/// The TLS side of a backend's connector, from [`backend::client_config`].
fn tls_settings(
    tls: &BackendTls,
    protocol: BackendProtocol,
) -> Result<TlsSettings, TlsConfigError> {
    let (config, server_name) = backend::client_config(tls, protocol)?;
    Ok(TlsSettings {
        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        server_name,
    })
}

// === clients ===

/// The client of one (protocol, TLS identity).
#[derive(Clone)]
pub enum HttpClient {
    /// HTTP/1.1: the proxy's own pool of hyper connections, one idle list per endpoint,
    /// resolved when a config is compiled so a request takes a connection with one
    /// uncontended lock and no hashing.
    Http1(Arc<H1Client>),
    /// HTTP/2 (h2c or TLS h2): hyper-util's client, one multiplexed connection per endpoint.
    Http2(Arc<LegacyClient>),
}

/// HTTP/1.1 connections of one (protocol, TLS identity), by endpoint.
pub struct H1Client {
    connector: BackendConnector,
    pools: Mutex<HashMap<Uri, Arc<EndpointPool>>>,
}

impl H1Client {
    /// The idle list of `dial` (`scheme://endpoint`), created on first use; kept across
    /// config pushes as long as this client is.
    fn pool(self: &Arc<Self>, dial: Uri) -> Arc<EndpointPool> {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        pools
            .entry(dial.clone())
            .or_insert_with(|| {
                Arc::new(EndpointPool {
                    dial,
                    connector: self.connector.clone(),
                    idle: Mutex::new(Vec::new()),
                    raw_idle: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// Drops expired and closed idle connections, and the lists of endpoints no compiled
    /// table refers to any more.
    fn reap(&self) {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        pools.retain(|_, pool| {
            let mut idle = pool.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.retain(|c| !c.sender.is_closed() && c.since.elapsed() < POOL_IDLE_TIMEOUT);
            let mut raw = pool.raw_idle.lock().unwrap_or_else(PoisonError::into_inner);
            raw.retain(|c| c.since.elapsed() < POOL_IDLE_TIMEOUT);
            Arc::strong_count(pool) > 1 || !idle.is_empty() || !raw.is_empty()
        });
    }
}

async fn reap_every_interval(client: Weak<H1Client>) {
    let mut tick = tokio::time::interval(POOL_REAP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match client.upgrade() {
            Some(c) => c.reap(),
            None => return,
        }
    }
}

/// Idle HTTP/1.1 connections to one endpoint, most recently used last: hyper's (upgrades,
/// mirrors) and the fast path's own.
pub struct EndpointPool {
    dial: Uri,
    connector: BackendConnector,
    idle: Mutex<Vec<IdleConn>>,
    raw_idle: Mutex<Vec<IdleRaw>>,
}

struct IdleRaw {
    conn: RawConn,
    since: Instant,
}

struct IdleConn {
    sender: http1::SendRequest<ProxyBody>,
    since: Instant,
}

impl EndpointPool {
    /// The most recently used idle connection that is still open and not expired.
    fn take(&self) -> Option<http1::SendRequest<ProxyBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(c) = idle.pop() {
            if c.since.elapsed() >= POOL_IDLE_TIMEOUT {
                // The rest are older still.
                idle.clear();
                return None;
            }
            if !c.sender.is_closed() {
                return Some(c.sender);
            }
        }
        None
    }

    /// Returns a connection whose exchange is over. One that is not ready for the next
    /// request yet (the request body is still being sent) goes back once it is.
    fn put(self: Arc<Self>, mut sender: http1::SendRequest<ProxyBody>) {
        if sender.is_closed() {
            return;
        }
        if sender.is_ready() {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.push(IdleConn {
                sender,
                since: Instant::now(),
            });
            return;
        }
        // Outside a runtime (a body dropped while the process shuts down) the connection
        // is simply closed.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if sender.ready().await.is_ok() {
                    self.put(sender);
                }
            });
        }
    }

    async fn connect(&self) -> Result<http1::SendRequest<ProxyBody>, SendError> {
        let mut connector = self.connector.clone();
        let io = tower_service::Service::call(&mut connector, self.dial.clone())
            .await
            .map_err(SendError::Connect)?;
        let (sender, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(SendError::Http1)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "backend connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Sends `req` (origin-form URI) on an idle connection or a new one. A request that an
    /// idle connection could not take (the backend closed it meanwhile) is retried on the next
    /// one, as hyper-util's client does.
    async fn send(
        self: Arc<Self>,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, SendError> {
        loop {
            let (mut sender, reused) = match self.take() {
                Some(s) => (s, true),
                // Boxed: keeps the handshake's state out of every request's future.
                None => (Box::pin(self.connect()).await?, false),
            };
            if !reused {
                sender.ready().await.map_err(SendError::Http1)?;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    // After 101 the connection belongs to the upgrade.
                    let back = (parts.status != http::StatusCode::SWITCHING_PROTOCOLS).then(|| {
                        PoolReturn {
                            sender,
                            pool: self.clone(),
                        }
                    });
                    let body = GuardedBody::new(body, back).map_err(BoxError::from);
                    return Ok(Response::from_parts(parts, body.boxed_unsync()));
                }
                Err(mut e) => match e.take_message() {
                    Some(r) if reused => req = r,
                    _ => return Err(SendError::Http1(e.into_error())),
                },
            }
        }
    }
}

impl EndpointPool {
    /// The most recently used idle fast-path connection that is still open and not expired.
    /// Whether the backend closed it meanwhile is read from the socket's readiness, so the
    /// common case costs no system call.
    pub(crate) async fn take_raw(&self) -> Option<RawConn> {
        loop {
            let mut idle = {
                let mut list = self.raw_idle.lock().unwrap_or_else(PoisonError::into_inner);
                let c = list.pop()?;
                if c.since.elapsed() >= POOL_IDLE_TIMEOUT {
                    list.clear();
                    return None;
                }
                c
            };
            let closed = std::future::poll_fn(|cx| Poll::Ready(idle.conn.poll_closed(cx))).await;
            if !closed {
                return Some(idle.conn);
            }
        }
    }

    /// Returns a fast-path connection whose exchange is complete.
    pub(crate) fn put_raw(&self, conn: RawConn) {
        let mut list = self.raw_idle.lock().unwrap_or_else(PoisonError::into_inner);
        list.push(IdleRaw {
            conn,
            since: Instant::now(),
        });
    }

    /// A new fast-path connection.
    pub(crate) async fn connect_raw(&self) -> Result<RawConn, ConnectError> {
        let mut connector = self.connector.clone();
        let conn = tower_service::Service::call(&mut connector, self.dial.clone()).await?;
        Ok(conn.into_inner())
    }
}

/// A backend connection, plain or TLS: the HTTP/1 fast path reads and writes it itself, hyper
/// through [`Conn`].
pub enum RawConn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for RawConn {
    fn connected(&self) -> Connected {
        match self {
            Self::Plain(s) => s.connected(),
            Self::Tls(s) => {
                let (tcp, session) = s.get_ref();
                let connected = tcp.connected();
                if session.alpn_protocol() == Some(b"h2") {
                    connected.negotiated_h2()
                } else {
                    connected
                }
            }
        }
    }
}

impl RawConn {
    /// Whether an idle connection was closed by the backend, or sent bytes nobody asked for.
    /// Pending (nothing to read) means it is fine.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> bool {
        let mut byte = [0u8; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut byte);
        Pin::new(self).poll_read(cx, &mut buf).is_ready()
    }
}

impl AsyncRead for RawConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RawConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

/// A connection that goes back to its pool once its response was read to the end; otherwise
/// dropping the sender lets hyper close it.
struct PoolReturn {
    sender: http1::SendRequest<ProxyBody>,
    pool: Arc<EndpointPool>,
}

impl Guard for PoolReturn {
    fn finish(self, end: End) {
        if end == End::Complete {
            self.pool.put(self.sender);
        }
    }
}

/// Why a backend request failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be made (HTTP/1 backends).
    #[error(transparent)]
    Connect(ConnectError),
    /// The HTTP/1 exchange failed.
    #[error(transparent)]
    Http1(hyper::Error),
    /// hyper-util's client failed (HTTP/2 backends).
    #[error(transparent)]
    Http2(hyper_util::client::legacy::Error),
}

/// What a client is shared by: protocol and TLS identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey {
    protocol: BackendProtocol,
    /// SHA-256 of the TLS settings (CA, names, client certificate and key).
    tls: Option<[u8; 32]>,
}

impl ClientKey {
    fn new(protocol: BackendProtocol, tls: Option<&BackendTls>) -> Self {
        Self {
            protocol,
            tls: tls.map(tls_fingerprint),
        }
    }
}

/// Clients by protocol and TLS identity, reused across config pushes: a client stays while a
/// route of the loaded config uses it (counted per route, so a push that changes a few routes
/// updates a few counts).
#[derive(Default)]
pub struct ClientCache {
    clients: HashMap<ClientKey, Cached>,
}

struct Cached {
    client: HttpClient,
    /// Routes of the loaded config using it (see [`ClientCache::hold`]).
    routes: usize,
}

impl ClientCache {
    /// The client for these settings: an existing one, or a new one when the settings are new.
    /// TLS settings are validated either way, so a bad certificate is always an error.
    fn client(
        &mut self,
        key: &ClientKey,
        tls: Option<&BackendTls>,
    ) -> Result<HttpClient, TlsConfigError> {
        if let Some(cached) = self.clients.get(key) {
            return Ok(cached.client.clone());
        }
        let protocol = key.protocol;
        let settings = tls.map(|t| tls_settings(t, protocol)).transpose()?;
        let connector = BackendConnector::new(settings);
        let client = match protocol {
            BackendProtocol::Http1 => {
                let client = Arc::new(H1Client {
                    connector,
                    pools: Mutex::new(HashMap::new()),
                });
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(reap_every_interval(Arc::downgrade(&client)));
                }
                HttpClient::Http1(client)
            }
            BackendProtocol::Http2 => {
                let mut builder = Client::builder(TokioExecutor::new());
                builder
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                    .http2_only(true)
                    .http2_adaptive_window(true)
                    .http2_keep_alive_interval(Some(Duration::from_secs(30)));
                HttpClient::Http2(Arc::new(builder.build(connector)))
            }
        };
        self.clients.insert(
            key.clone(),
            Cached {
                client: client.clone(),
                routes: 0,
            },
        );
        Ok(client)
    }

    /// Counts a route that became live with the clients `keys` (what its upstreams recorded).
    pub fn hold(&mut self, keys: &[ClientKey]) {
        for key in keys {
            if let Some(cached) = self.clients.get_mut(key) {
                cached.routes += 1;
            }
        }
    }

    /// Uncounts a route that is no longer live.
    pub fn release(&mut self, keys: &[ClientKey]) {
        for key in keys {
            if let Some(cached) = self.clients.get_mut(key) {
                cached.routes = cached.routes.saturating_sub(1);
            }
        }
    }

    /// Forgets the clients no live route uses (also those a refused push made).
    pub fn forget_unused(&mut self) {
        self.clients.retain(|_, cached| cached.routes > 0);
    }

    /// The settings it has clients for.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> std::collections::HashSet<ClientKey> {
        self.clients.keys().cloned().collect()
    }
}

fn tls_fingerprint(tls: &BackendTls) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        Some(tls.ca_bundle_pem.as_str()),
        Some(tls.server_name.as_str()),
        tls.client_cert_pem.as_deref(),
        tls.client_key_pem.as_deref(),
    ] {
        // length-prefixed so field boundaries cannot be shifted
        let part = part.unwrap_or("");
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    // each list count-prefixed, so a name cannot pass for a URI
    for list in [&tls.subject_alt_names, &tls.subject_alt_uris] {
        h.update((list.len() as u64).to_be_bytes());
        for san in list {
            h.update((san.len() as u64).to_be_bytes());
            h.update(san.as_bytes());
        }
    }
    h.finalize().into()
}

/// One endpoint of a backend.
pub struct Endpoint {
    authority: Authority,
    /// The idle list of HTTP/1 backends.
    pool: Option<Arc<EndpointPool>>,
}

impl Endpoint {
    /// The idle lists of an HTTP/1 backend's endpoint.
    pub(crate) fn pool(&self) -> Option<&Arc<EndpointPool>> {
        self.pool.as_ref()
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.authority.fmt(f)
    }
}

/// A backend's endpoints behind one client.
pub struct Upstream {
    client: HttpClient,
    scheme: Scheme,
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
    pub protocol: BackendProtocol,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field(
                "endpoints",
                &self
                    .endpoints
                    .iter()
                    .map(|e| &e.authority)
                    .collect::<Vec<_>>(),
            )
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// `cache` supplies the client; its key is added to `used` (the clients of the route being
    /// compiled) unless already there.
    pub fn new(
        cache: &mut ClientCache,
        used: &mut Vec<ClientKey>,
        endpoints: &[String],
        protocol: BackendProtocol,
        tls: Option<&BackendTls>,
    ) -> Result<Self, UpstreamError> {
        let authorities = backend::parse_endpoints(endpoints)?;
        let key = ClientKey::new(protocol, tls);
        let client = cache.client(&key, tls)?;
        if !used.contains(&key) {
            used.push(key);
        }
        let scheme = if tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        let endpoints = authorities
            .into_iter()
            .map(|authority| {
                let pool = match &client {
                    HttpClient::Http1(c) => {
                        let dial = Uri::builder()
                            .scheme(scheme.clone())
                            .authority(authority.clone())
                            .path_and_query("/")
                            .build()
                            .expect("scheme and a parsed authority form a URI");
                        Some(c.pool(dial))
                    }
                    HttpClient::Http2(_) => None,
                };
                Endpoint { authority, pool }
            })
            .collect();
        Ok(Self {
            client,
            scheme,
            endpoints,
            next: AtomicUsize::new(0),
            protocol,
        })
    }

    /// The next endpoint in round-robin order.
    pub fn next_endpoint(&self) -> &Endpoint {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len();
        &self.endpoints[i]
    }

    /// The request target for `endpoint`: origin-form for HTTP/1 (the connection is chosen
    /// here), absolute for HTTP/2 (hyper-util's client dials by it).
    pub fn uri(
        &self,
        endpoint: &Endpoint,
        path_and_query: PathAndQuery,
    ) -> Result<Uri, http::Error> {
        match self.client {
            HttpClient::Http1(_) => Ok(Uri::from(path_and_query)),
            HttpClient::Http2(_) => Uri::builder()
                .scheme(self.scheme.clone())
                .authority(endpoint.authority.clone())
                .path_and_query(path_and_query)
                .build(),
        }
    }

    /// Sends `req` (its URI from [`Upstream::uri`]) to `endpoint`. The future owns what it
    /// needs, so it can be spawned.
    pub fn send(
        &self,
        endpoint: &Endpoint,
        req: Request<ProxyBody>,
    ) -> impl Future<Output = Result<Response<ProxyBody>, SendError>> + Send + 'static {
        let route = match (&self.client, &endpoint.pool) {
            (HttpClient::Http1(_), Some(pool)) => Route::Pool(pool.clone()),
            (HttpClient::Http2(c), _) => Route::Legacy(c.clone()),
            (HttpClient::Http1(_), None) => unreachable!("HTTP/1 endpoints have a pool"),
        };
        async move {
            match route {
                Route::Pool(pool) => pool.send(req).await,
                Route::Legacy(client) => match client.request(req).await {
                    Ok(resp) => Ok(resp.map(|b| b.map_err(BoxError::from).boxed_unsync())),
                    Err(e) => Err(SendError::Http2(e)),
                },
            }
        }
    }
}

enum Route {
    Pool(Arc<EndpointPool>),
    Legacy(Arc<LegacyClient>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_over_endpoints() {
        let mut cache = ClientCache::default();
        let mut used = Vec::new();
        let up = Upstream::new(
            &mut cache,
            &mut used,
            &["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            BackendProtocol::Http1,
            None,
        )
        .unwrap();
        let picks: Vec<String> = (0..4).map(|_| up.next_endpoint().to_string()).collect();
        assert_eq!(
            picks,
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:2"]
        );
    }
}
