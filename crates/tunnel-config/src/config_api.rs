//! The config API's mutual TLS, both ends: the proxy's server config (its serving certificate,
//! and only client certificates of the controller's CA carrying [`CONTROLLER_IDENTITY`]) and
//! the controller's client config (the plane's serving certificate checked against the plane's
//! config Service name whatever address was dialled, and the client certificate the proxy
//! hints it trusts). Pure: PEM in, rustls configs out; the files, Secrets and reloads are the
//! callers'.
//!
//! During a CA rotation both CAs are in the trust bundles and the controller holds a client
//! certificate of each; the TLS `certificate_authorities` hint of the proxy's
//! CertificateRequest picks the one the proxy's loaded bundle trusts, so no push fails while
//! the planes' files catch up.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::backend::uri_sans;

/// The URI subject alternative name of the controller's client certificate; the proxy accepts
/// pushes only from a certificate of its trusted CAs that carries it.
pub const CONTROLLER_IDENTITY: &str = "spiffe://tunnel-gateway/controller";

/// A PEM input of the config API's TLS is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigTlsError {
    #[error("CA bundle: {0}")]
    CaBundle(String),
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("private key: {0}")]
    Key(String),
    #[error("server name {0:?}: not a DNS name")]
    ServerName(String),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM bundle (at least one).
pub fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(certs)
}

/// The earliest not-after (Unix seconds) of the certificates in `pem`.
pub fn not_after(pem: &str) -> Option<i64> {
    certificates(pem)
        .ok()?
        .iter()
        .filter_map(|c| X509Certificate::from_der(c.as_ref()).ok())
        .map(|(_, c)| c.validity().not_after.timestamp())
        .min()
}

fn roots(bundle_pem: &str) -> Result<Arc<RootCertStore>, ConfigTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(bundle_pem).map_err(ConfigTlsError::CaBundle)? {
        roots
            .add(cert)
            .map_err(|e| ConfigTlsError::CaBundle(e.to_string()))?;
    }
    Ok(Arc::new(roots))
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, ConfigTlsError> {
    let chain = certificates(cert_pem).map_err(ConfigTlsError::Certificate)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| ConfigTlsError::Key(e.to_string()))?;
    let key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| ConfigTlsError::Key(e.to_string()))?;
    let certified = CertifiedKey::new(chain, key);
    certified
        .keys_match()
        .map_err(|e| ConfigTlsError::Key(e.to_string()))?;
    Ok(certified)
}

/// The proxy's server config: `cert_pem`/`key_pem` served, client certificates required,
/// chained to a CA of `client_ca_pem` and carrying [`CONTROLLER_IDENTITY`]. HTTP/1.1 only.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> Result<rustls::ServerConfig, ConfigTlsError> {
    let webpki = WebPkiClientVerifier::builder_with_provider(roots(client_ca_pem)?, provider())
        .build()
        .map_err(|e| ConfigTlsError::CaBundle(e.to_string()))?;
    let chain = certificates(cert_pem).map_err(ConfigTlsError::Certificate)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| ConfigTlsError::Key(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(ControllerOnly { inner: webpki }))
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client certificate of the CA bundle that names the controller, nothing else.
#[derive(Debug)]
struct ControllerOnly {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for ControllerOnly {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if uri_sans(end_entity)
            .iter()
            .any(|u| u == CONTROLLER_IDENTITY)
        {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A client certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The controller's client config for one plane: the serving certificate must chain to
/// `trust_pem` and be valid for `plane_name` (the dialled address is a Pod IP and is not what
/// is checked); the client certificate is the one of `identities` whose issuer the proxy hints,
/// else the first. HTTP/1.1 only.
pub fn client_config(
    trust_pem: &str,
    identities: &[ClientIdentity],
    plane_name: &str,
) -> Result<rustls::ClientConfig, ConfigTlsError> {
    let name = ServerName::try_from(plane_name.to_owned())
        .ok()
        .filter(|n| matches!(n, ServerName::DnsName(_)))
        .ok_or_else(|| ConfigTlsError::ServerName(plane_name.to_owned()))?;
    let webpki = WebPkiServerVerifier::builder_with_provider(roots(trust_pem)?, provider())
        .build()
        .map_err(|e| ConfigTlsError::CaBundle(e.to_string()))?;
    let mut keys = Vec::new();
    for id in identities {
        let certified = certified_key(&id.cert_pem, &id.key_pem)?;
        let issuer = X509Certificate::from_der(certified.end_entity_cert()?.as_ref())
            .map_err(|e| ConfigTlsError::Certificate(e.to_string()))?
            .1
            .issuer()
            .to_string();
        keys.push((issuer, Arc::new(certified)));
    }
    if keys.is_empty() {
        return Err(ConfigTlsError::Certificate(
            "no client certificate".to_owned(),
        ));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PlaneName {
            inner: webpki,
            name,
        }))
        .with_client_cert_resolver(Arc::new(ByIssuerHint { keys }));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// WebPKI verification against the plane's Service name instead of the dialled address.
#[derive(Debug)]
struct PlaneName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for PlaneName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The client certificate whose issuer is among the CAs the server hints (by subject).
#[derive(Debug)]
struct ByIssuerHint {
    /// (issuer name, RFC 4514, key), the preferred first. Names are compared parsed: an
    /// issuer re-encoded by a signing library need not match the CA's subject byte for byte.
    keys: Vec<(String, Arc<CertifiedKey>)>,
}

impl ResolvesClientCert for ByIssuerHint {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let hinted: Vec<String> = root_hint_subjects
            .iter()
            .filter_map(|h| X509Name::from_der(h).ok().map(|(_, n)| n.to_string()))
            .collect();
        self.keys
            .iter()
            .find(|(issuer, _)| hinted.contains(issuer))
            .or(self.keys.first())
            .map(|(_, k)| k.clone())
    }

    fn has_certs(&self) -> bool {
        !self.keys.is_empty()
    }
}
