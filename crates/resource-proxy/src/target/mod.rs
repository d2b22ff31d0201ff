//! The connection to a target cluster: TLS that verifies the configured CA and server name, the
//! credential that maps to the client's identity there, and the choice of a peer (round-robin
//! over the configured peers).
//!
//! Everything the proxy sends to a target goes through [`TargetClient::send`] (answers read
//! whole, over the HTTP/1.1 connections of [`crate::target::exchange`]) or [`TargetClient::watch`]
//! (streamed, over the HTTP/2 connections of [`crate::target::pool`]): peer choice and health (RP-10)
//! live behind them; an EndpointSlice peer source ([`crate::target::peer_source`]) publishes into its
//! peer set.
//!
//! - [`peers`]: a target's peers with their health, quarantine and staleness (RP-10, RP-11);
//! - [`peer_source`]: the EndpointSlice watch that publishes them (RP-9);
//! - [`conn`]: what both kinds of connection share: the dial and how a request fails;
//! - [`exchange`]: requests and whole answers over pooled HTTP/1.1 connections;
//! - [`pool`]: watches on multiplexed HTTP/2 connections.

pub mod conn;
pub mod exchange;
pub mod peer_source;
pub mod peers;
pub mod pool;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::header::{AUTHORIZATION, HeaderValue};
use http::uri::{self, Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body_util::Full;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

use crate::config::{BaseCredential, Credential, PeerAddress, PeerSource, Target, TargetRef};
use crate::metrics::{Metrics, PeerStateLabels, ReasonLabels, TargetLabels};
use crate::target::conn::{BoxError, Dial, DialError, SendError};
use crate::target::exchange::Exchanges;
use crate::target::peers::{DIAL_TIMEOUT, DialOutcome, NoPeer, PeerSet, Pick, Transition};
use crate::target::pool::Pool;
pub use crate::target::pool::TargetBody;

/// A request on its way to a peer.
#[derive(Clone, Copy)]
enum Outgoing<'a> {
    /// Answer read whole.
    Whole(&'a Request<Bytes>),
    /// Answer streamed (a watch).
    Stream(&'a Request<Full<Bytes>>),
}

/// Why a target could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("target {target}: reading {what} {path}: {message}")]
    Credential {
        target: String,
        what: &'static str,
        path: String,
        message: String,
    },
    #[error("target {target} has no peers")]
    NoPeers { target: String },
    #[error("target {target}: no peer can be used ({})", .why.reason())]
    NoPeer { target: String, why: NoPeer },
    #[error("target {target}: dialling {peer} failed: {message}")]
    Dial {
        target: String,
        peer: String,
        /// The dial took longer than [`DIAL_TIMEOUT`].
        timeout: bool,
        message: String,
    },
    #[error(
        "target {target}: the connection to {peer} closed before the request was sent: {source}"
    )]
    NotSent {
        target: String,
        peer: String,
        #[source]
        source: BoxError,
    },
    #[error("target {target}: request to {peer} failed: {source}")]
    Request {
        target: String,
        peer: String,
        #[source]
        source: BoxError,
    },
    #[error("invalid request URI {0}")]
    Uri(String),
}

/// A client of one target, shared by every listener proxying to it.
#[derive(Clone)]
pub struct TargetClient {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    peers: Arc<PeerSet>,
    observer: Arc<Observer>,
    pool: Pool,
    exchanges: Exchanges,
    /// ALPN `h2` and `http/1.1`, for the watches' connections.
    tls: tokio_rustls::TlsConnector,
    /// ALPN `http/1.1` only, for the other requests' connections.
    tls_http1: tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
    /// Headers every request carries: bearer token and impersonation.
    auth_headers: Vec<(http::HeaderName, HeaderValue)>,
}

impl TargetClient {
    /// Builds the client of `target` from its configuration (reads CA, certificate and token
    /// files), with metrics that are not registered anywhere.
    pub fn new(target_ref: &TargetRef, target: &Target) -> Result<Self, TargetError> {
        Self::with_metrics(target_ref, target, Metrics::new(), Vec::new())
    }

    /// Builds the client of `target`, reporting peer health to `metrics`; `group_versions` are
    /// the listeners proxying to it (labels of `vcluster_proxy_peers`).
    ///
    /// With an EndpointSlice peer source the peer set starts empty (requests fail with
    /// `no_peer`) until [`crate::target::peer_source::follow`] publishes the first list.
    pub fn with_metrics(
        target_ref: &TargetRef,
        target: &Target,
        metrics: Metrics,
        group_versions: Vec<String>,
    ) -> Result<Self, TargetError> {
        let name = format!("{}/{}", target_ref.project, target_ref.name);
        let err =
            |what: &'static str, path: &std::path::Path, message: String| TargetError::Credential {
                target: name.clone(),
                what,
                path: path.display().to_string(),
                message,
            };
        let peers = match &target.peers {
            PeerSource::Static(peers) if peers.is_empty() => {
                return Err(TargetError::NoPeers { target: name });
            }
            PeerSource::Static(peers) => PeerSet::new(peers.clone()),
            PeerSource::EndpointSlice { .. } => PeerSet::awaiting_publication(),
        };

        let mut roots = rustls::RootCertStore::empty();
        let ca_certs = CertificateDer::pem_file_iter(&target.ca_file)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| err("CA bundle", &target.ca_file, e.to_string()))?;
        for cert in ca_certs {
            roots
                .add(cert)
                .map_err(|e| err("CA bundle", &target.ca_file, e.to_string()))?;
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);

        let mut auth_headers = Vec::new();
        let base = match &target.credential {
            Credential::Direct(base) => base,
            Credential::Impersonate {
                using,
                user,
                groups,
            } => {
                auth_headers.push((
                    http::HeaderName::from_static("impersonate-user"),
                    header_value(user, &name)?,
                ));
                for g in groups {
                    auth_headers.push((
                        http::HeaderName::from_static("impersonate-group"),
                        header_value(g, &name)?,
                    ));
                }
                using
            }
        };
        let mut tls = match base {
            BaseCredential::ClientCertificate {
                cert_file,
                key_file,
            } => {
                let chain = CertificateDer::pem_file_iter(cert_file)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| err("client certificate", cert_file, e.to_string()))?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| err("client key", key_file, e.to_string()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| err("client certificate", cert_file, e.to_string()))?
            }
            BaseCredential::TokenFile(path) => {
                let token =
                    std::fs::read_to_string(path).map_err(|e| err("token", path, e.to_string()))?;
                auth_headers.push((
                    AUTHORIZATION,
                    header_value(&format!("Bearer {}", token.trim()), &name)?,
                ));
                builder.with_no_client_auth()
            }
        };

        let mut tls_http1 = tls.clone();
        tls_http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        // HTTP/2 where the peer offers it (kube-apiserver does): watches share connections.
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let server_name = ServerName::try_from(target.server_name.clone())
            .map_err(|e| err("server name", std::path::Path::new(""), e.to_string()))?;
        let peers = Arc::new(peers);
        let observer = Arc::new(Observer {
            target: name.clone(),
            metrics,
            group_versions,
            peers: peers.clone(),
        });
        observer.refresh();
        Ok(Self {
            inner: Arc::new(Inner {
                name,
                peers,
                observer,
                pool: Pool::default(),
                exchanges: Exchanges::default(),
                tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
                tls_http1: tokio_rustls::TlsConnector::from(Arc::new(tls_http1)),
                server_name,
                auth_headers,
            }),
        })
    }

    /// `<project>/<name>`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sends `req` (whose URI is a path and query) to the next peer with the proxy's
    /// credential, and reads the whole answer (a non-watch request: over HTTP/1.1, in this task,
    /// see [`crate::target::exchange`]). When no connection to the peer can be had (the dial failed:
    /// nothing of the request was sent), it is tried once more on another healthy peer,
    /// whatever its verb.
    pub async fn send(&self, req: Request<Bytes>) -> Result<Response<TargetBody>, TargetError> {
        self.on_a_peer(Outgoing::Whole(&req)).await
    }

    /// Like [`TargetClient::send`], for a watch: the answer streams, on a shared HTTP/2
    /// connection ([`crate::target::pool`]).
    pub async fn watch(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<TargetBody>, TargetError> {
        let headers = req.headers_mut();
        for (k, v) in &self.inner.auth_headers {
            headers.append(k.clone(), v.clone());
        }
        self.on_a_peer(Outgoing::Stream(&req)).await
    }

    async fn on_a_peer(&self, req: Outgoing<'_>) -> Result<Response<TargetBody>, TargetError> {
        let inner = &self.inner;
        let pick = inner.peers.pick().map_err(|why| {
            tracing::warn!(target = %inner.name, reason = why.reason(), "no peer of the target can be used; failing at once");
            TargetError::NoPeer {
                target: inner.name.clone(),
                why,
            }
        })?;
        match self.send_to(&pick, req).await {
            Err(e) if e.is_dial_failure() => {
                let Some(other) = inner.peers.pick_other(&pick.addr) else {
                    return Err(e);
                };
                tracing::info!(target = %inner.name, failed = %pick.addr, retry = %other.addr, error = %e, "dial failed; trying the request once on another peer");
                self.send_to(&other, req).await
            }
            result => result,
        }
    }

    async fn send_to(
        &self,
        pick: &Pick,
        req: Outgoing<'_>,
    ) -> Result<Response<TargetBody>, TargetError> {
        let inner = &self.inner;
        let peer = pick.addr.to_string();
        // A trial cancelled before its outcome (the caller went away, the deadline passed) must
        // not keep the host half-open with no trial allowed. A dial it started reports on its
        // own (dials run to the end in their own task).
        let dialled = AtomicBool::new(false);
        let dial = |tls| {
            dialled.store(true, Ordering::Relaxed);
            self.dial(pick.addr.clone(), tls)
        };
        let trial = pick.trial.then(|| TrialGuard {
            peers: &inner.peers,
            addr: &pick.addr,
            dialled: &dialled,
            settled: false,
        });
        let result = match req {
            Outgoing::Whole(req) => {
                inner
                    .exchanges
                    .send(&pick.addr, &peer, req, &inner.auth_headers, || {
                        dial(&inner.tls_http1)
                    })
                    .await
            }
            Outgoing::Stream(req) => {
                let path_and_query = req
                    .uri()
                    .path_and_query()
                    .cloned()
                    .unwrap_or_else(|| PathAndQuery::from_static("/"));
                // From parts: the path and query were parsed when the request was built.
                let mut uri = uri::Parts::default();
                uri.scheme = Some(Scheme::HTTPS);
                let invalid = || TargetError::Uri(path_and_query.to_string());
                uri.authority = Some(Authority::try_from(peer.as_str()).map_err(|_| invalid())?);
                uri.path_and_query = Some(path_and_query.clone());
                let mut req = req.clone();
                *req.uri_mut() = Uri::from_parts(uri).map_err(|_| invalid())?;
                // Boxed: the HTTP/2 send is much larger than the HTTP/1.1 exchange, and would
                // size every request's future (watches start rarely).
                Box::pin(inner.pool.send(&pick.addr, req, || dial(&inner.tls))).await
            }
        };
        // A half-open trial may ride on a pooled connection (no dial to observe): the request's
        // own outcome then decides.
        if let Some(trial) = trial {
            let outcome = if result.is_ok() {
                DialOutcome::Connected
            } else {
                DialOutcome::Failed
            };
            inner.observer.transitions(trial.settle(outcome));
        }
        let target = inner.name.clone();
        result.map_err(|e| match e {
            SendError::Dial(DialError { timeout, message }) => TargetError::Dial {
                target,
                peer,
                timeout,
                message,
            },
            SendError::NotSent(source) => TargetError::NotSent {
                target,
                peer,
                source,
            },
            SendError::Sent(source) => TargetError::Request {
                target,
                peer,
                source,
            },
        })
    }

    /// Starts a dial of `addr`: TCP and TLS within [`DIAL_TIMEOUT`], the outcome reported to
    /// the peer set and the dial metrics.
    fn dial(&self, addr: PeerAddress, tls: &tokio_rustls::TlsConnector) -> Dial {
        let tls = tls.clone();
        let server_name = self.inner.server_name.clone();
        let observer = self.inner.observer.clone();
        async move {
            let target = &observer.target;
            let started = tokio::time::Instant::now();
            let connect = async {
                let tcp = tokio::net::TcpStream::connect((addr.host.as_str(), addr.port)).await?;
                let _ = tcp.set_nodelay(true);
                tls.connect(server_name, tcp).await
            };
            let (outcome, failure, result) =
                match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
                    Ok(Ok(stream)) => (DialOutcome::Connected, None, Ok(stream)),
                    Ok(Err(e)) => {
                        tracing::warn!(target = %target, host = %addr, error = %e, "dial failed");
                        (
                            DialOutcome::Failed,
                            Some("error"),
                            Err(DialError {
                                timeout: false,
                                message: e.to_string(),
                            }),
                        )
                    }
                    Err(_) => {
                        tracing::warn!(target = %target, host = %addr, "dial timed out after {DIAL_TIMEOUT:?}");
                        (
                            DialOutcome::Failed,
                            Some("timeout"),
                            Err(DialError {
                                timeout: true,
                                message: format!("dial timed out after {DIAL_TIMEOUT:?}"),
                            }),
                        )
                    }
                };
            observer.dial(started.elapsed(), failure);
            observer.transitions(observer.peers.report(&addr, outcome));
            result
        }
        .boxed()
    }

    /// Open connections (or dials) to `addr`: the streamed ones and the idle HTTP/1.1 ones.
    pub fn connections(&self, addr: &PeerAddress) -> usize {
        self.inner.pool.connections(addr) + self.inner.exchanges.idle_connections(addr)
    }

    /// The peer set (health and staleness).
    pub fn peers(&self) -> &Arc<PeerSet> {
        &self.inner.peers
    }

    /// Sets the peer gauges (`vcluster_proxy_peers`, `…_peer_cache_synced`,
    /// `…_peer_list_age_seconds`) from the peer set. Called on every health change and
    /// publication; [`TargetClient::refresh_peer_gauges_every`] covers changes made by time
    /// alone (a quarantine ending, the list ageing).
    pub fn refresh_peer_gauges(&self) {
        self.inner.observer.refresh();
    }

    /// Refreshes the peer gauges every `period` for as long as the client lives.
    pub fn refresh_peer_gauges_every(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.observer.refresh();
            }
        })
    }

    /// The metrics this client reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.observer.metrics
    }
}

/// A half-open trial request: settled with its outcome, or, dropped before that without having
/// started a dial (which would report itself), released (see [`PeerSet::release_trial`]).
struct TrialGuard<'a> {
    peers: &'a PeerSet,
    addr: &'a PeerAddress,
    dialled: &'a AtomicBool,
    settled: bool,
}

impl TrialGuard<'_> {
    fn settle(mut self, outcome: DialOutcome) -> Vec<Transition> {
        self.settled = true;
        self.peers.report(self.addr, outcome)
    }
}

impl Drop for TrialGuard<'_> {
    fn drop(&mut self) {
        if !self.settled && !self.dialled.load(Ordering::Relaxed) {
            self.peers.release_trial(self.addr);
        }
    }
}

/// Turns peer health events into log lines and metrics.
struct Observer {
    target: String,
    metrics: Metrics,
    group_versions: Vec<String>,
    peers: Arc<PeerSet>,
}

impl Observer {
    fn label(&self) -> TargetLabels {
        TargetLabels {
            target: self.target.clone(),
        }
    }

    fn transitions(&self, transitions: Vec<Transition>) {
        if transitions.is_empty() {
            return;
        }
        let label = self.label();
        for t in &transitions {
            match t {
                Transition::Quarantined { .. } => {
                    self.metrics.peer_quarantines.get_or_create(&label).inc();
                }
                Transition::Recovered { .. } => {
                    self.metrics.peer_recoveries.get_or_create(&label).inc();
                }
                Transition::AllQuarantined => {
                    self.metrics
                        .all_peers_quarantined
                        .get_or_create(&label)
                        .inc();
                }
            }
        }
        log_transitions(&self.target, transitions);
        self.refresh();
    }

    fn dial(&self, elapsed: Duration, failure: Option<&'static str>) {
        self.metrics
            .peer_dial_duration
            .get_or_create(&self.label())
            .observe(elapsed.as_secs_f64());
        if let Some(reason) = failure {
            self.metrics
                .peer_dial_failures
                .get_or_create(&ReasonLabels {
                    target: self.target.clone(),
                    reason: reason.to_owned(),
                })
                .inc();
        }
    }

    fn refresh(&self) {
        let census = self.peers.census();
        for gv in &self.group_versions {
            for (health, count) in census {
                self.metrics
                    .peers
                    .get_or_create(&PeerStateLabels {
                        target: self.target.clone(),
                        group_version: gv.clone(),
                        state: health.as_str().to_owned(),
                    })
                    .set(count as i64);
            }
        }
        let label = self.label();
        self.metrics
            .peer_cache_synced
            .get_or_create(&label)
            .set(i64::from(self.peers.is_synced()));
        self.metrics.peer_list_age.get_or_create(&label).set(
            self.peers
                .watch_down_for()
                .unwrap_or_default()
                .as_secs_f64(),
        );
    }
}

impl TargetError {
    /// The one metric reason of a request that failed here.
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::NoPeer { why, .. } => why.reason(),
            TargetError::NoPeers { .. } => "no_peer",
            TargetError::Dial { timeout: true, .. } => "timeout",
            _ => "error",
        }
    }

    /// Whether the target may have received the request (it failed after the connection was
    /// made): a write may then have happened.
    pub fn may_have_been_sent(&self) -> bool {
        matches!(self, TargetError::Request { .. })
    }

    /// Whether no connection could carry the request (nothing was sent): another peer may.
    fn is_dial_failure(&self) -> bool {
        matches!(self, TargetError::Dial { .. } | TargetError::NotSent { .. })
    }
}

fn log_transitions(target: &str, transitions: Vec<Transition>) {
    for t in transitions {
        match t {
            Transition::Quarantined { host, failures } => tracing::warn!(
                target,
                host,
                failures,
                "peer quarantined for {:?} after consecutive dial failures",
                crate::target::peers::QUARANTINE_DURATION
            ),
            Transition::Recovered { host } => {
                tracing::info!(target, host, "peer recovered: back in rotation")
            }
            Transition::AllQuarantined => tracing::error!(
                target,
                "all peers of the target are quarantined; requests fail at once with 503"
            ),
        }
    }
}

fn header_value(v: &str, target: &str) -> Result<HeaderValue, TargetError> {
    HeaderValue::from_str(v).map_err(|_| TargetError::Credential {
        target: target.to_owned(),
        what: "header value",
        path: String::new(),
        message: format!("{v:?} is not a valid HTTP header value"),
    })
}
