//! The connection to a target cluster: TLS that verifies the configured CA and server name, the
//! credential that maps to the client's identity there, and the choice of a peer (round-robin
//! over the configured peers).
//!
//! Everything the proxy sends to a target goes through [`TargetClient::send`], so peer health
//! (RP-10) and other peer sources (RP-9) slot in behind this one interface.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    NoPeer { target: String },
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
    peers: Vec<PeerAddress>,
    next: AtomicUsize,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
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
            return Err(TargetError::NoPeer { target: name });
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
                next: AtomicUsize::new(0),
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
        let i = inner.next.fetch_add(1, Ordering::Relaxed) % inner.peers.len();
        let peer = inner.peers[i].to_string();
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
        inner
            .client
            .request(req)
            .await
            .map_err(|source| TargetError::Request {
                target: inner.name.clone(),
                peer,
                source,
            })
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
