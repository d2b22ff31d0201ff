//! What a backend's endpoints and TLS settings must be, checked the same way whoever builds
//! the backend: the compiler runs these checks for every backend through its
//! [`Build`](crate::compile::Build), so [`validate`](crate::compile::validate) refuses exactly
//! what a push refuses, and the proxy dials with the TLS client config built here.

use std::sync::Arc;

use http::uri::Authority;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor, verify_server_name,
};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::config::{BackendProtocol, BackendTls};

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("tls.{0}")]
    Tls(#[from] TlsConfigError),
}

/// Checks a backend's endpoints and TLS settings without building anything.
pub fn check(
    endpoints: &[String],
    protocol: BackendProtocol,
    tls: Option<&BackendTls>,
) -> Result<(), UpstreamError> {
    parse_endpoints(endpoints)?;
    if let Some(tls) = tls {
        client_config(tls, protocol)?;
    }
    Ok(())
}

// === endpoints ===

/// An endpoint that is not `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("endpoints[{index}]: `{value}` is not `ip:port` or `dns-name:port`")]
pub struct EndpointError {
    pub index: usize,
    pub value: String,
}

/// The endpoints of a backend as authorities to dial.
pub fn parse_endpoints(endpoints: &[String]) -> Result<Vec<Authority>, EndpointError> {
    endpoints
        .iter()
        .enumerate()
        .map(|(index, e)| {
            parse_endpoint(e).ok_or_else(|| EndpointError {
                index,
                value: e.clone(),
            })
        })
        .collect()
}

fn parse_endpoint(s: &str) -> Option<Authority> {
    if s.parse::<std::net::SocketAddr>().is_ok() {
        return s.parse().ok();
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if valid { s.parse().ok() } else { None }
}

// === TLS ===

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("caBundlePem: {0}")]
    CaBundle(String),
    #[error("serverName: {0}")]
    ServerName(String),
    #[error("subjectAltNames[{0}]: not a valid DNS name")]
    SubjectAltName(usize),
    #[error("subjectAltUris[{0}]: not a URI (scheme:rest)")]
    SubjectAltUri(usize),
    #[error("clientCertPem: {0}")]
    ClientCert(String),
    #[error("clientKeyPem: {0}")]
    ClientKey(String),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// The rustls client config of a backend, and the name it sends as SNI: its CA bundle only
/// (no system roots), SNI `serverName`, SAN verification, optional client certificate, ALPN
/// of the protocol.
pub fn client_config(
    tls: &BackendTls,
    protocol: BackendProtocol,
) -> Result<(rustls::ClientConfig, ServerName<'static>), TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    let mut found = 0usize;
    for cert in CertificateDer::pem_slice_iter(tls.ca_bundle_pem.as_bytes()) {
        let cert = cert.map_err(|e| TlsConfigError::CaBundle(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| TlsConfigError::CaBundle(e.to_string()))?;
        found += 1;
    }
    if found == 0 {
        return Err(TlsConfigError::CaBundle("no PEM certificate found".into()));
    }
    let server_name = ServerName::try_from(tls.server_name.clone())
        .map_err(|e| TlsConfigError::ServerName(e.to_string()))?;
    let sans = tls
        .subject_alt_names
        .iter()
        .enumerate()
        .map(|(i, s)| {
            ServerName::try_from(s.clone()).map_err(|_| TlsConfigError::SubjectAltName(i))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, uri) in tls.subject_alt_uris.iter().enumerate() {
        if !is_uri(uri) {
            return Err(TlsConfigError::SubjectAltUri(i));
        }
    }
    let roots = Arc::new(roots);
    let algorithms = provider.signature_verification_algorithms;
    let webpki = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| TlsConfigError::CaBundle(e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?;
    let builder = if sans.is_empty() && tls.subject_alt_uris.is_empty() {
        builder.with_webpki_verifier(webpki)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SanVerifier {
                inner: webpki,
                roots,
                algorithms,
                names: sans,
                uris: tls.subject_alt_uris.clone(),
            }))
    };
    let mut config = match (&tls.client_cert_pem, &tls.client_key_pem) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsConfigError::ClientCert(e.to_string()))?;
            if chain.is_empty() {
                return Err(TlsConfigError::ClientCert(
                    "no PEM certificate found".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                .map_err(|e| TlsConfigError::ClientKey(e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsConfigError::ClientKey(e.to_string()))?
        }
        (Some(_), None) => {
            return Err(TlsConfigError::ClientKey(
                "required with clientCertPem".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(TlsConfigError::ClientCert(
                "required with clientKeyPem".into(),
            ));
        }
    };
    config.alpn_protocols = vec![match protocol {
        BackendProtocol::Http1 => b"http/1.1".to_vec(),
        BackendProtocol::Http2 => b"h2".to_vec(),
    }];
    Ok((config, server_name))
}

/// `scheme:rest` with an RFC 3986 scheme.
fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// BackendTLSPolicy `subjectAltNames`: the chain must verify against the CA bundle, and the
/// certificate must be valid for at least one of the DNS names or carry one of the URIs as a
/// URI subject alternative name (SNI stays `serverName`).
#[derive(Debug)]
struct SanVerifier {
    /// For the handshake signatures.
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
    names: Vec<ServerName<'static>>,
    uris: Vec<String>,
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        let named = self
            .names
            .iter()
            .any(|n| verify_server_name(&cert, n).is_ok());
        if named
            || (!self.uris.is_empty() && uri_sans(end_entity).iter().any(|u| self.uris.contains(u)))
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
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

/// The URI subject alternative names of a certificate (none when it does not parse).
pub(crate) fn uri_sans(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_alt_uris_must_be_uris() {
        for ok in [
            "spiffe://cluster.local/ns/shop/sa/web",
            "urn:example:web",
            "a+b.c-d:x",
        ] {
            assert!(is_uri(ok), "{ok}");
        }
        for bad in [
            "",
            "web",
            "spiffe:",
            "1x://a",
            "://a",
            "spiffe://a b",
            "x:\n",
        ] {
            assert!(!is_uri(bad), "{bad:?}");
        }
    }

    #[test]
    fn endpoints_must_be_host_and_port() {
        for ok in [
            "10.0.0.1:80",
            "[::1]:8080",
            "svc.ns.svc.cluster.local:443",
            "localhost:1",
        ] {
            assert!(parse_endpoint(ok).is_some(), "{ok}");
        }
        for bad in [
            "10.0.0.1",
            "svc:http",
            "svc:70000",
            ":80",
            "a..b:80",
            "http://a:80",
            "a/b:80",
        ] {
            assert!(parse_endpoint(bad).is_none(), "{bad}");
        }
    }
}
