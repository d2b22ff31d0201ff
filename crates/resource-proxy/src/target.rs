//! The connection to a target cluster: TLS that verifies the configured CA and server name, the
//! credential that maps to the client's identity there, and the choice of a peer (round-robin
//! over the configured peers).
//!
//! Everything the proxy sends to a target goes through [`TargetClient::send`], so peer health
//! (RP-10) and other peer sources (RP-9) slot in behind this one interface.

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
    #[error("target {target}: peer source {0} is not supported by this build", target = .1)]
    PeerSource(&'static str, String),
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
    client: Client<HealthConnector, Full<Bytes>>,
    /// Headers every request carries: bearer token and impersonation.
    auth_headers: Vec<(http::HeaderName, HeaderValue)>,
}

impl TargetClient {
    /// Builds the client of `target` from its configuration (reads CA, certificate and token files).
    pub fn new(target_ref: &TargetRef, target: &Target) -> Result<Self, TargetError> {
        let name = format!("{}/{}", target_ref.project, target_ref.name);
        let err =
            |what: &'static str, path: &std::path::Path, message: String| TargetError::Credential {
                target: name.clone(),
                what,
                path: path.display().to_string(),
                message,
            };
        let peers = match &target.peers {
            PeerSource::Static(peers) => peers.clone(),
            PeerSource::EndpointSlice { .. } => {
                return Err(TargetError::PeerSource("endpointSlice", name));
            }
        };
        if peers.is_empty() {
            return Err(TargetError::NoPeers { target: name });
        }

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
        let peers = Arc::new(PeerSet::new(peers));
        let connector = HealthConnector {
            inner: connector,
            peers: peers.clone(),
            target: name.clone().into(),
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
            log_transitions(&inner.name, inner.peers.report(&pick.addr, outcome));
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

const DIAL_TIMEOUT_MESSAGE: &str = "dial timed out";

/// The connector every target connection is dialled through: TCP and TLS within
/// [`DIAL_TIMEOUT`], each outcome reported to the peer set.
#[derive(Clone)]
struct HealthConnector {
    inner: HttpsConnector<HttpConnector>,
    peers: Arc<PeerSet>,
    target: Arc<str>,
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
        let peers = self.peers.clone();
        let target = self.target.clone();
        Box::pin(async move {
            let addr = PeerAddress {
                host: uri
                    .host()
                    .unwrap_or_default()
                    .trim_matches(['[', ']'])
                    .to_owned(),
                port: uri.port_u16().unwrap_or(443),
            };
            let result = tokio::time::timeout(DIAL_TIMEOUT, inner.call(uri)).await;
            let (outcome, result) = match result {
                Ok(Ok(stream)) => (DialOutcome::Connected, Ok(stream)),
                Ok(Err(e)) => {
                    tracing::warn!(target = %target, host = %addr, error = %e, "dial failed");
                    (DialOutcome::Failed, Err(e))
                }
                Err(_) => {
                    tracing::warn!(target = %target, host = %addr, "dial timed out after {DIAL_TIMEOUT:?}");
                    (
                        DialOutcome::Failed,
                        Err(BoxError::from(format!(
                            "{DIAL_TIMEOUT_MESSAGE} after {DIAL_TIMEOUT:?}"
                        ))),
                    )
                }
            };
            log_transitions(&target, peers.report(&addr, outcome));
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
