//! The connection to a target cluster: TLS that verifies the configured CA and server name, the
//! credential that maps to the client's identity there, and the choice of a peer (round-robin
//! over the configured peers).
//!
//! Everything the proxy sends to a target goes through [`TargetClient::send`]: peer choice and
//! health (RP-10) live behind it; an EndpointSlice peer source ([`crate::peer_source`])
//! publishes into its peer set.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::config::{BaseCredential, Credential, PeerAddress, PeerSource, Target, TargetRef};
use crate::metrics::{Metrics, PeerStateLabels, ReasonLabels, TargetLabels};
use crate::peers::{DIAL_TIMEOUT, DialOutcome, NoPeer, PeerSet, Transition};

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
    #[error("target {target}: request to {peer} failed: {source}")]
    Request {
        target: String,
        peer: String,
        #[source]
        source: hyper_util::client::legacy::Error,
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
    client: Client<HealthConnector, Full<Bytes>>,
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
    /// `no_peer`) until [`crate::peer_source::follow`] publishes the first list.
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
        let tls = match base {
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

        let server_name = rustls::pki_types::ServerName::try_from(target.server_name.clone())
            .map_err(|e| err("server name", std::path::Path::new(""), e.to_string()))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server_name))
            .enable_http1()
            .wrap_connector(http);
        let peers = Arc::new(peers);
        let observer = Arc::new(Observer {
            target: name.clone(),
            metrics,
            group_versions,
            peers: peers.clone(),
        });
        observer.refresh();
        let connector = HealthConnector {
            inner: connector,
            observer: observer.clone(),
        };
        // HTTP/1.1 to the target: one pooled connection per in-flight request, so long-running
        // watches never wait for a stream slot on a shared HTTP/2 connection.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(256)
            .build(connector);
        Ok(Self {
            inner: Arc::new(Inner {
                name,
                peers,
                observer,
                client,
                auth_headers,
            }),
        })
    }

    /// `<project>/<name>`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sends `req` (whose URI is a path and query) to the next peer, with the proxy's
    /// credential. The response body streams.
    pub async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, TargetError> {
        let inner = &self.inner;
        let pick = inner.peers.pick().map_err(|why| {
            tracing::warn!(target = %inner.name, reason = why.reason(), "no peer of the target can be used; failing at once");
            TargetError::NoPeer {
                target: inner.name.clone(),
                why,
            }
        })?;
        let peer = pick.addr.to_string();
        let path_and_query = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        *req.uri_mut() = format!("https://{peer}{path_and_query}")
            .parse::<Uri>()
            .map_err(|_| TargetError::Uri(path_and_query.clone()))?;
        let headers = req.headers_mut();
        for (k, v) in &inner.auth_headers {
            headers.append(k.clone(), v.clone());
        }
        let result = inner.client.request(req).await;
        // A half-open trial may ride on a pooled connection (no dial to observe): the request's
        // own outcome then decides.
        if pick.trial {
            let outcome = if result.is_ok() {
                DialOutcome::Connected
            } else {
                DialOutcome::Failed
            };
            inner
                .observer
                .transitions(inner.peers.report(&pick.addr, outcome));
        }
        result.map_err(|source| TargetError::Request {
            target: inner.name.clone(),
            peer,
            source,
        })
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
            TargetError::Request { source, .. }
                if source.is_connect() && format!("{source:?}").contains(DIAL_TIMEOUT_MESSAGE) =>
            {
                "timeout"
            }
            _ => "error",
        }
    }
}

impl TargetError {
    /// Whether the target may have received the request (it failed after the connection was
    /// made): a write may then have happened.
    pub fn may_have_been_sent(&self) -> bool {
        matches!(self, TargetError::Request { source, .. } if !source.is_connect())
    }
}

const DIAL_TIMEOUT_MESSAGE: &str = "dial timed out";

/// The connector every target connection is dialled through: TCP and TLS within
/// [`DIAL_TIMEOUT`], each outcome reported to the peer set.
#[derive(Clone)]
struct HealthConnector {
    inner: HttpsConnector<HttpConnector>,
    observer: Arc<Observer>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for HealthConnector {
    type Response = <HttpsConnector<HttpConnector> as tower::Service<Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut inner = self.inner.clone();
        let observer = self.observer.clone();
        Box::pin(async move {
            let target = &observer.target;
            let addr = PeerAddress {
                host: uri
                    .host()
                    .unwrap_or_default()
                    .trim_matches(['[', ']'])
                    .to_owned(),
                port: uri.port_u16().unwrap_or(443),
            };
            let started = tokio::time::Instant::now();
            let result = tokio::time::timeout(DIAL_TIMEOUT, inner.call(uri)).await;
            let (outcome, failure, result) = match result {
                Ok(Ok(stream)) => (DialOutcome::Connected, None, Ok(stream)),
                Ok(Err(e)) => {
                    tracing::warn!(target = %target, host = %addr, error = %e, "dial failed");
                    (DialOutcome::Failed, Some("error"), Err(e))
                }
                Err(_) => {
                    tracing::warn!(target = %target, host = %addr, "dial timed out after {DIAL_TIMEOUT:?}");
                    (
                        DialOutcome::Failed,
                        Some("timeout"),
                        Err(BoxError::from(format!(
                            "{DIAL_TIMEOUT_MESSAGE} after {DIAL_TIMEOUT:?}"
                        ))),
                    )
                }
            };
            observer.dial(started.elapsed(), failure);
            observer.transitions(observer.peers.report(&addr, outcome));
            result
        })
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
                crate::peers::QUARANTINE_DURATION
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
