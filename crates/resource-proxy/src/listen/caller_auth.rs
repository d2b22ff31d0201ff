//! Who may call the proxy (RP-4): only the client cluster's aggregator, proven by a client
//! certificate that chains to the request-header CA and whose CN is an allowed name, both read
//! from `kube-system/extension-apiserver-authentication` (and followed as it changes). Only then
//! are the identity headers (`X-Remote-User`, ...) believed.
//!
//! The TLS layer requests a client certificate but defers the chain check to [`Authenticator`]
//! (it still proves possession of the key), so a caller with no or a wrong certificate gets a
//! Kubernetes `Status` 401, as from kube-apiserver itself, and CA rotation needs no new TLS config.
//!
//! A connection's chain is verified (a signature check) once per settings generation and kept
//! as verified until the earliest `notAfter` of the chain ([`PeerChain`]): later requests on the
//! connection skip the check. A settings change (CA rotation) re-verifies with the next request.

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

/// Namespace and name of the ConfigMap kube-apiserver publishes its request-header settings in.
pub const AUTH_CONFIGMAP_NAMESPACE: &str = "kube-system";
pub const AUTH_CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

/// Why a caller was refused (logged; the caller sees a plain 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("no client certificate")]
    NoCertificate,
    #[error("the request-header CA is not known yet")]
    NotConfigured,
    #[error("client certificate not signed by the request-header CA: {0}")]
    Untrusted(String),
    #[error("client certificate CN {0:?} is not an allowed request-header name")]
    NameNotAllowed(String),
    #[error("no user in the request headers")]
    NoUser,
}

/// The request-header settings in force.
pub struct RequestHeaderConfig {
    verifier: Arc<dyn ClientCertVerifier>,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    group_headers: Vec<String>,
}

/// The caller's identity as the aggregator asserted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
}

/// The client certificate chain of one connection, with the outcome of its last successful
/// verification.
pub struct PeerChain {
    chain: Vec<CertificateDer<'static>>,
    verified: Mutex<Option<Verified>>,
}

/// A successful verification: against which settings, until when, and the leaf's CN.
struct Verified {
    settings: Arc<Option<RequestHeaderConfig>>,
    until: u64,
    cn: String,
}

impl PeerChain {
    /// The chain the client presented in the TLS handshake (leaf first).
    pub fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        PeerChain {
            chain,
            verified: Mutex::new(None),
        }
    }
}

/// Why request-header settings cannot be used (the previous ones stay in force).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The ConfigMap names no request-header CA.
    #[error("no requestheader-client-ca-file")]
    NoCa,
    /// The CA bundle does not parse.
    #[error("{0}")]
    CaPem(rustls::pki_types::pem::Error),
    /// A CA certificate is unusable.
    #[error("{0}")]
    CaCertificate(rustls::Error),
    /// No client-certificate verifier can be built from the CAs.
    #[error("{0}")]
    Verifier(rustls::server::VerifierBuilderError),
}

/// Checks callers against the current request-header settings.
#[derive(Clone, Default)]
pub struct Authenticator {
    current: Arc<ArcSwap<Option<RequestHeaderConfig>>>,
}

impl Authenticator {
    /// Replaces the settings with those in the ConfigMap's data.
    pub fn update(
        &self,
        data: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), SettingsError> {
        let ca = data
            .get("requestheader-client-ca-file")
            .ok_or(SettingsError::NoCa)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots
                .add(cert.map_err(SettingsError::CaPem)?)
                .map_err(SettingsError::CaCertificate)?;
        }
        let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
            .build()
            .map_err(SettingsError::Verifier)?;
        let list = |key: &str, default: &[&str]| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect())
        };
        let config = RequestHeaderConfig {
            verifier,
            allowed_names: list("requestheader-allowed-names", &[]),
            username_headers: list("requestheader-username-headers", &["X-Remote-User"]),
            group_headers: list("requestheader-group-headers", &["X-Remote-Group"]),
        };
        self.current.store(Arc::new(Some(config)));
        Ok(())
    }

    /// Authenticates a request: `peer` from the TLS connection, `headers` of the request.
    pub fn authenticate(
        &self,
        peer: Option<&PeerChain>,
        headers: &http::HeaderMap,
    ) -> Result<Caller, AuthError> {
        let current = self.trusted(peer)?;
        let config = current.as_ref().as_ref().ok_or(AuthError::NotConfigured)?;
        let values = |names: &[String]| -> Vec<String> {
            header_values(names, headers).map(str::to_owned).collect()
        };
        Ok(Caller {
            user: user(config, headers)?.to_owned(),
            groups: values(&config.group_headers),
        })
    }

    /// What [`Authenticator::authenticate`] decides, without building the [`Caller`] (the
    /// request path needs only the decision).
    pub fn check(
        &self,
        peer: Option<&PeerChain>,
        headers: &http::HeaderMap,
    ) -> Result<(), AuthError> {
        let current = self.trusted(peer)?;
        let config = current.as_ref().as_ref().ok_or(AuthError::NotConfigured)?;
        user(config, headers).map(|_| ())
    }

    /// The settings in force, once `peer`'s chain is verified against them and its CN allowed.
    fn trusted(
        &self,
        peer: Option<&PeerChain>,
    ) -> Result<Arc<Option<RequestHeaderConfig>>, AuthError> {
        let current = self.current.load_full();
        let config = current.as_ref().as_ref().ok_or(AuthError::NotConfigured)?;
        let peer = peer
            .filter(|p| !p.chain.is_empty())
            .ok_or(AuthError::NoCertificate)?;
        let allowed = |cn: &str| {
            if !config.allowed_names.is_empty() && !config.allowed_names.iter().any(|n| n == cn) {
                return Err(AuthError::NameNotAllowed(cn.to_owned()));
            }
            Ok(())
        };
        let now = UnixTime::now();
        {
            let verified = peer.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(v) = verified
                .as_ref()
                .filter(|v| Arc::ptr_eq(&v.settings, &current) && now.as_secs() < v.until)
            {
                allowed(&v.cn)?;
                return Ok(current);
            }
        }
        let chain = &peer.chain;
        config
            .verifier
            .verify_client_cert(&chain[0], &chain[1..], now)
            .map_err(|e| AuthError::Untrusted(e.to_string()))?;
        let cn = common_name(&chain[0]).unwrap_or_default();
        *peer.verified.lock().unwrap_or_else(PoisonError::into_inner) = Some(Verified {
            settings: current.clone(),
            until: chain.iter().map(not_after).min().unwrap_or(0),
            cn: cn.clone(),
        });
        allowed(&cn)?;
        Ok(current)
    }

    /// Follows the ConfigMap in the client cluster and updates the settings on every change.
    /// Returns after the first successful load (so the proxy does not serve 401s at start-up).
    pub async fn follow(&self, client: kube::Client) {
        let api = kube::Api::<ConfigMap>::namespaced(client, AUTH_CONFIGMAP_NAMESPACE);
        let cfg =
            watcher::Config::default().fields(&format!("metadata.name={AUTH_CONFIGMAP_NAME}"));
        let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<()>();
        let this = self.clone();
        tokio::spawn(async move {
            let mut loaded_tx = Some(loaded_tx);
            let mut stream = watcher::watcher(api, cfg).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                        match this.update(&cm.data.unwrap_or_default()) {
                            Ok(()) => {
                                tracing::info!(
                                    "request-header authentication settings loaded from {AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME}"
                                );
                                if let Some(tx) = loaded_tx.take() {
                                    let _ = tx.send(());
                                }
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "{AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME} is unusable; keeping the previous settings")
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "watching {AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME} failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        let _ = loaded_rx.await;
    }
}

/// The values of the first headers of `names` that are valid text, in order.
fn header_values<'a>(
    names: &'a [String],
    headers: &'a http::HeaderMap,
) -> impl Iterator<Item = &'a str> + 'a {
    names
        .iter()
        .flat_map(|n| headers.get_all(n.as_str()))
        .filter_map(|v| v.to_str().ok())
}

/// The user the aggregator asserts: the first value of the username headers, not empty.
fn user<'a>(
    config: &'a RequestHeaderConfig,
    headers: &'a http::HeaderMap,
) -> Result<&'a str, AuthError> {
    header_values(&config.username_headers, headers)
        .next()
        .filter(|u| !u.is_empty())
        .ok_or(AuthError::NoUser)
}

/// A certificate's `notAfter` in seconds since the epoch (0 if it cannot be read).
fn not_after(cert: &CertificateDer<'_>) -> u64 {
    x509_parser::parse_x509_certificate(cert.as_ref())
        .map(|(_, c)| u64::try_from(c.validity().not_after.timestamp()).unwrap_or(0))
        .unwrap_or(0)
}

fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned)
}

/// The TLS-level verifier: asks for a client certificate, lets the handshake finish without
/// one, and checks only that the client holds the key of the certificate it sent. The chain
/// is judged per request by [`Authenticator`].
#[derive(Debug)]
pub struct DeferredClientAuth {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl DeferredClientAuth {
    pub fn new() -> Self {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        Self {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl Default for DeferredClientAuth {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientCertVerifier for DeferredClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    use super::*;

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = p.self_signed(&key).unwrap().pem();
        Ca {
            issuer: Issuer::new(p, key),
            pem,
        }
    }

    fn client_cert(ca: &Ca, cn: &str) -> PeerChain {
        client_cert_with(ca, cn, CertificateParams::default())
    }

    fn client_cert_with(ca: &Ca, cn: &str, mut p: CertificateParams) -> PeerChain {
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        PeerChain::new(vec![p.signed_by(&key, &ca.issuer).unwrap().der().clone()])
    }

    fn settings(ca: &Ca, allowed: &str) -> BTreeMap<String, String> {
        [
            ("requestheader-client-ca-file".to_owned(), ca.pem.clone()),
            ("requestheader-allowed-names".to_owned(), allowed.to_owned()),
            (
                "requestheader-username-headers".to_owned(),
                r#"["X-Remote-User"]"#.to_owned(),
            ),
            (
                "requestheader-group-headers".to_owned(),
                r#"["X-Remote-Group"]"#.to_owned(),
            ),
        ]
        .into()
    }

    fn headers(user: Option<&str>, groups: &[&str]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(u) = user {
            h.insert("x-remote-user", u.parse().unwrap());
        }
        for g in groups {
            h.append("x-remote-group", g.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_an_allowed_certificate_of_the_request_header_ca_makes_identity_headers_count() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let auth = Authenticator::default();
        let good = ca("front-proxy-ca");
        let h = headers(Some("alice"), &["devs", "system:authenticated"]);
        assert_eq!(
            auth.authenticate(Some(&client_cert(&good, "front-proxy-client")), &h),
            Err(AuthError::NotConfigured)
        );

        auth.update(&settings(&good, r#"["front-proxy-client"]"#))
            .unwrap();
        let caller = auth
            .authenticate(Some(&client_cert(&good, "front-proxy-client")), &h)
            .unwrap();
        assert_eq!(caller.user, "alice");
        assert_eq!(caller.groups, ["devs", "system:authenticated"]);

        assert_eq!(auth.authenticate(None, &h), Err(AuthError::NoCertificate));
        assert!(matches!(
            auth.authenticate(
                Some(&client_cert(&ca("other-ca"), "front-proxy-client")),
                &h
            ),
            Err(AuthError::Untrusted(_))
        ));
        assert_eq!(
            auth.authenticate(Some(&client_cert(&good, "intruder")), &h),
            Err(AuthError::NameNotAllowed("intruder".into()))
        );
        assert_eq!(
            auth.authenticate(
                Some(&client_cert(&good, "front-proxy-client")),
                &headers(None, &["x"])
            ),
            Err(AuthError::NoUser)
        );
    }

    #[test]
    fn a_rotated_request_header_ca_takes_effect_at_once() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let auth = Authenticator::default();
        let (old, new) = (ca("old"), ca("new"));
        let h = headers(Some("bob"), &[]);
        auth.update(&settings(&old, "[]")).unwrap();
        // One connection: verified once, then remembered, until the settings change.
        let connection = client_cert(&old, "any");
        for _ in 0..2 {
            assert!(
                auth.authenticate(Some(&connection), &h).is_ok(),
                "empty allowed names allow any CN"
            );
        }
        auth.update(&settings(&new, "[]")).unwrap();
        assert!(matches!(
            auth.authenticate(Some(&connection), &h),
            Err(AuthError::Untrusted(_))
        ));
        assert!(
            auth.authenticate(Some(&client_cert(&old, "any")), &h)
                .is_err()
        );
        assert!(
            auth.authenticate(Some(&client_cert(&new, "any")), &h)
                .is_ok()
        );
        // An unusable update keeps the previous settings.
        let mut broken = settings(&new, "[]");
        broken.insert("requestheader-client-ca-file".into(), "not a pem".into());
        assert!(auth.update(&broken).is_err());
        assert!(
            auth.authenticate(Some(&client_cert(&new, "any")), &h)
                .is_ok()
        );
    }

    #[test]
    fn a_remembered_verification_ends_when_the_certificate_expires() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let auth = Authenticator::default();
        let ca = ca("ca");
        auth.update(&settings(&ca, "[]")).unwrap();
        let mut p = CertificateParams::default();
        p.not_after = (std::time::SystemTime::now() + std::time::Duration::from_secs(2)).into();
        let connection = client_cert_with(&ca, "any", p);
        let h = headers(Some("bob"), &[]);
        assert!(auth.authenticate(Some(&connection), &h).is_ok());
        std::thread::sleep(std::time::Duration::from_millis(3100));
        assert!(matches!(
            auth.authenticate(Some(&connection), &h),
            Err(AuthError::Untrusted(_))
        ));
    }
}
