//! The TLS listeners: one per group/version on 127.0.0.1, HTTP/1.1 and HTTP/2 (the aggregator
//! multiplexes many watches over one connection, so the stream limit is high), the serving
//! certificate swappable at run time, and the client certificate handed to the handler.
//!
//! The listeners pick the cipher suite as the Kubernetes API server (Go's crypto/tls) does:
//! AES-128-GCM, then AES-256-GCM, then ChaCha20-Poly1305, whatever order the client lists. A
//! Go client (the aggregator) asks for that order anyway; a client that lists AES-256 first
//! would otherwise get a cipher that costs the proxy a quarter more per byte than the API
//! server next to it pays.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use crate::listen::body::CallerBody;
use crate::listen::caller_auth::{DeferredClientAuth, PeerChain};

/// What a listener serves: the request path of its group/version
/// ([`crate::request::context::ListenerContext`]).
pub trait Handler: Send + Sync + 'static {
    /// The body of its answers.
    type Body: http_body::Body<Data = bytes::Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + 'static;

    /// Answers one request; `peer` is the client certificate chain of the connection.
    fn handle(
        self: Arc<Self>,
        peer: Option<Arc<PeerChain>>,
        req: http::Request<CallerBody>,
    ) -> impl Future<Output = http::Response<Self::Body>> + Send;
}

/// Boxes the future `make` returns, allocating first: `Box::pin(make())` builds the future on
/// the stack and copies all of it into the box (several KB for the request path, where only its
/// captured arguments are set), because the allocation between the two may fail while the
/// future exists. With the box already there, the optimiser writes the arguments in place.
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    let slot = Box::<F>::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}

/// Concurrent HTTP/2 streams per connection: the aggregator opens one per watch.
pub const MAX_CONCURRENT_STREAMS: u32 = 100_000;

/// The serving certificate, replaceable while serving.
#[derive(Clone, Debug)]
pub struct ServingCert(Arc<ArcSwap<CertifiedKey>>);

impl ServingCert {
    /// From a PEM certificate chain and private key.
    pub fn from_pem(chain_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        Ok(Self(Arc::new(ArcSwap::from_pointee(certified_key(
            chain_pem, key_pem,
        )?))))
    }

    /// Replaces the certificate; new handshakes use it at once.
    pub fn replace(&self, chain_pem: &str, key_pem: &str) -> Result<(), CertError> {
        self.0.store(Arc::new(certified_key(chain_pem, key_pem)?));
        Ok(())
    }
}

/// Why a serving certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The certificate PEM does not parse.
    #[error("serving certificate: {0}")]
    Chain(pem::Error),
    /// The certificate PEM holds no certificate.
    #[error("serving certificate: no certificate in the PEM")]
    NoCertificate,
    /// The key PEM does not parse.
    #[error("serving key: {0}")]
    Key(pem::Error),
    /// The certificate and key do not make a usable pair.
    #[error("serving certificate and key: {0}")]
    Unusable(rustls::Error),
}

fn certified_key(chain_pem: &str, key_pem: &str) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(CertError::Chain)?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(CertError::Key)?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    CertifiedKey::from_der(chain, key, &provider).map_err(CertError::Unusable)
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The TLS settings of every listener.
pub fn tls_config(cert: ServingCert) -> Arc<rustls::ServerConfig> {
    let mut provider = rustls::crypto::CryptoProvider::get_default()
        .map(|p| (**p).clone())
        .unwrap_or_else(rustls::crypto::ring::default_provider);
    provider.cipher_suites.sort_by_key(cipher_rank);
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the default versions")
        .with_client_cert_verifier(Arc::new(DeferredClientAuth::new()))
        .with_cert_resolver(Arc::new(cert));
    config.ignore_client_order = true;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The server's preference among cipher suites, Go's order (lower first).
fn cipher_rank(suite: &rustls::SupportedCipherSuite) -> u8 {
    use rustls::CipherSuite as C;
    match suite.suite() {
        C::TLS13_AES_128_GCM_SHA256
        | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        C::TLS13_AES_256_GCM_SHA384
        | C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    }
}

/// Binds the listener's address and serves until `shutdown` turns true. Returns the bound
/// address and the accept loop's task.
pub async fn serve<H: Handler>(
    ctx: Arc<H>,
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        loop {
            let (tcp, remote) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.changed() => break,
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::info!(%remote, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(%remote, "TLS handshake timed out");
                        return;
                    }
                };
                let peer: Option<Arc<PeerChain>> = tls.get_ref().1.peer_certificates().map(|c| {
                    Arc::new(PeerChain::new(
                        c.iter().map(|d| d.clone().into_owned()).collect(),
                    ))
                });
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let ctx = ctx.clone();
                    let peer = peer.clone();
                    // Boxed: an HTTP/2 stream's task is as large as its largest state, and a
                    // watch stays in the body state for hours; the request path's future is
                    // freed once it has answered.
                    boxed_in_place(move || async move {
                        Ok::<_, std::convert::Infallible>(
                            ctx.handle(peer, req.map(CallerBody::new)).await,
                        )
                    })
                });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http2()
                    .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
                if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                    tracing::debug!(%remote, error = %e, "connection ended with an error");
                }
            });
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite a client that lists `offered` (in that order) gets from a listener.
    async fn negotiated(offered: &[rustls::SupportedCipherSuite]) -> rustls::CipherSuite {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let serving = ServingCert::from_pem(&cert.pem(), &key.serialize_pem()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = offered.to_vec();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(tokio_rustls::TlsAcceptor::from(tls_config(serving)).accept(b));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(name, a)
            .await
            .unwrap();
        server.await.unwrap().unwrap();
        tls.get_ref().1.negotiated_cipher_suite().unwrap().suite()
    }

    #[tokio::test]
    async fn listeners_choose_aes_128_gcm_first_as_the_api_server_does() {
        use rustls::CipherSuite as C;
        use rustls::crypto::ring::cipher_suite as cs;
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A client listing AES-256 first (rustls' and OpenSSL's default order) still gets
        // AES-128, as from Go's crypto/tls.
        let order = [
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_128_GCM_SHA256,
        ];
        assert_eq!(negotiated(&order).await, C::TLS13_AES_128_GCM_SHA256);
        // Without AES-128 the server's next choice is AES-256, then ChaCha20.
        let order = [
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
        ];
        assert_eq!(negotiated(&order).await, C::TLS13_AES_256_GCM_SHA384);
        let order = [cs::TLS13_CHACHA20_POLY1305_SHA256];
        assert_eq!(negotiated(&order).await, C::TLS13_CHACHA20_POLY1305_SHA256);
    }
}
