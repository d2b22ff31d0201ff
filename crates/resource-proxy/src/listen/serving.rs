//! The listeners' serving certificate and the CA the APIServices publish as `caBundle` (RP-3).
//!
//! The aggregator dials `<service>.kube-system.svc` (resolved through the ExternalName Service to
//! `localhost`) and verifies the proxy's certificate against the APIService's `caBundle` with that
//! name as ServerName. Every replica must serve a certificate that chains to the one published CA,
//! so the material is shared:
//!
//! - With `listeners.servingCertFile` and `servingKeyFile` the files are used as they are; the CA
//!   is `listeners.servingCaFile`, or else the last certificate of the chain file. The files are
//!   re-read on every poll, so a rotated mount (e.g. a cert-manager Secret) is picked up.
//! - Otherwise the material lives in the client cluster, in the Secret
//!   `kube-system/resource-proxy-serving-<client>` ([`names::serving_secret_name`]): an ECDSA
//!   P-256 CA (10 years) and a leaf (1 year) with a DNS SAN `<service>.kube-system.svc` for every
//!   listener, plus `localhost` and IP `127.0.0.1`. Any replica may create it, with a create-only
//!   POST; a replica that loses that race (409 AlreadyExists) reads the winner's Secret, so all
//!   replicas converge on one CA. When the leaf lacks a SAN this replica needs (a listener was
//!   added), or has less than 90 days left, the replica re-issues the leaf from the same CA (so
//!   the `caBundle` does not change) and replaces it with a `resourceVersion` precondition; a
//!   conflict means another replica wrote first, and the Secret is read again. The new leaf keeps
//!   the SANs of the old one, so replicas running an older configuration during a rollout never
//!   take a SAN away from newer ones (and nobody flips the leaf back and forth). Re-issuing is
//!   idempotent, so it needs no leader.
//!
//! [`watch_serving`] polls the source and publishes every change, so every replica hot-reloads
//! a re-issued leaf, and the wiring republishes the `caBundle` if the CA ever changes (someone
//! deleted the Secret).

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tokio::sync::watch;
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

use crate::config::names;
use crate::config::{Config, ServingCertificate};

/// How often [`watch_serving`] re-reads the Secret or files by default.
pub const POLL_INTERVAL: Duration = Duration::from_secs(10);

/// Validity of a generated CA.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Validity of a generated leaf.
const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A leaf with less than this left is re-issued.
const RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);
/// Certificates start this long in the past, so clock skew never makes them "not yet valid".
const BACKDATE: Duration = Duration::from_secs(3600);
/// Create/replace attempts before [`ensure`] gives up on a Secret that keeps changing.
const MAX_ATTEMPTS: usize = 5;

/// Secret keys.
const CA_CERT_KEY: &str = "ca.crt";
const CA_KEY_KEY: &str = "ca.key";
const TLS_CERT_KEY: &str = "tls.crt";
const TLS_KEY_KEY: &str = "tls.key";

/// Serving material of the listeners, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingMaterial {
    /// The CA the APIServices publish as `caBundle`.
    pub ca_pem: String,
    /// The certificate chain the listeners present (leaf first).
    pub cert_chain_pem: String,
    /// The leaf's private key.
    pub key_pem: String,
}

impl fmt::Debug for ServingMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingMaterial")
            .field("ca_pem", &self.ca_pem)
            .field("cert_chain_pem", &self.cert_chain_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Why the serving material could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configured file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A configured certificate file holds no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A call to the client cluster failed.
    #[error("{action} Secret kube-system/{name} in the client cluster: {source}")]
    Kube {
        /// What was attempted.
        action: &'static str,
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Certificate generation failed.
    #[error("generating the serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Other replicas kept replacing the Secret between this replica's read and write.
    #[error(
        "Secret kube-system/{name} changed under every one of {MAX_ATTEMPTS} attempts to update it"
    )]
    Contended {
        /// Secret name.
        name: String,
    },
}

/// DNS names the leaf must carry for `config`: every listener's `<service>.kube-system.svc`, and
/// `localhost`.
pub fn required_dns_names(config: &Config) -> BTreeSet<String> {
    config
        .listeners
        .iter()
        .map(|l| names::serving_cert_san(&l.group, &l.version))
        .chain(["localhost".to_owned()])
        .collect()
}

/// The serving material for `config`: from the configured files, or from (creating or updating
/// when needed) the client cluster's Secret.
pub async fn ensure(client: &kube::Client, config: &Config) -> Result<ServingMaterial, Error> {
    match &config.serving {
        Some(files) => {
            let material = from_files(files)?;
            warn_missing_sans(&material, &required_dns_names(config), &files.cert_file);
            Ok(material)
        }
        None => ensure_secret(client, &config.client.name, &required_dns_names(config)).await,
    }
}

/// Publishes the serving material, starting with `initial`, re-reading it (with [`ensure`])
/// every `interval` and sending each change. The polling task ends when every receiver is
/// dropped; a failed poll is logged and the last material stays.
pub fn watch_serving(
    client: kube::Client,
    config: Arc<Config>,
    initial: ServingMaterial,
    interval: Duration,
) -> watch::Receiver<ServingMaterial> {
    let (tx, rx) = watch::channel(initial);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(interval) => {}
            }
            match ensure(&client, &config).await {
                Ok(material) => {
                    tx.send_if_modified(|current| {
                        if *current == material {
                            return false;
                        }
                        tracing::info!(
                            ca_changed = current.ca_pem != material.ca_pem,
                            "serving certificate changed; listeners and caBundle follow"
                        );
                        *current = material;
                        true
                    });
                }
                Err(error) => tracing::warn!(
                    %error,
                    "re-reading the serving certificate failed; keeping the current one"
                ),
            }
        }
    });
    rx
}

// ---------------------------------------------------------------------------------------------
// Files.

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

fn from_files(files: &ServingCertificate) -> Result<ServingMaterial, Error> {
    let cert_chain_pem = read(&files.cert_file)?;
    let key_pem = read(&files.key_file)?;
    let ca_pem = match &files.ca_file {
        Some(ca_file) => {
            let ca = read(ca_file)?;
            if last_certificate(&ca).is_none() {
                return Err(Error::NoCertificate {
                    path: ca_file.clone(),
                });
            }
            ca
        }
        None => last_certificate(&cert_chain_pem)
            .ok_or_else(|| Error::NoCertificate {
                path: files.cert_file.clone(),
            })?
            .to_owned(),
    };
    Ok(ServingMaterial {
        ca_pem,
        cert_chain_pem,
        key_pem,
    })
}

/// The last `CERTIFICATE` PEM block of `pem`, with its BEGIN and END lines.
fn last_certificate(pem: &str) -> Option<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem.rfind(BEGIN)?;
    let end = start + pem[start..].find(END)? + END.len();
    Some(&pem[start..end])
}

fn warn_missing_sans(material: &ServingMaterial, required: &BTreeSet<String>, path: &Path) {
    let Some(leaf) = parse_leaf(&material.cert_chain_pem) else {
        tracing::warn!(file = %path.display(), "the serving certificate file could not be parsed as X.509");
        return;
    };
    let missing: Vec<&String> = required.difference(&leaf.dns_names).collect();
    if !missing.is_empty() {
        tracing::warn!(
            file = %path.display(),
            ?missing,
            "the configured serving certificate lacks DNS SANs the aggregator verifies; requests \
             for those group/versions will fail TLS verification"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The Secret.

/// What the leaf says about itself.
struct LeafInfo {
    dns_names: BTreeSet<String>,
    not_after: i64,
}

fn parse_leaf(pem: &str) -> Option<LeafInfo> {
    let der = pem_der(pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let dns_names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(name) => Some((*name).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(LeafInfo {
        dns_names,
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// DER of the first PEM block of `pem`.
fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    Some(block.contents)
}

/// Whether `leaf_pem` is a valid serving certificate for IP 127.0.0.1 (every generated leaf has
/// it) signed by `ca_pem`: what the aggregator checks, with the service name instead of the IP.
fn chains_to(leaf_pem: &str, ca_pem: &str) -> bool {
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
    let (Some(leaf), Some(ca)) = (pem_der(leaf_pem), pem_der(ca_pem)) else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(CertificateDer::from(ca)).is_err() {
        return false;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(verifier) =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
    else {
        return false;
    };
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf),
            &[],
            &ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()),
            &[],
            UnixTime::now(),
        )
        .is_ok()
}

/// The four PEM entries of the Secret.
struct Stored {
    ca_cert: String,
    ca_key: String,
    tls_cert: String,
    tls_key: String,
}

impl Stored {
    fn from_secret(secret: &Secret) -> Option<Stored> {
        let data = secret.data.as_ref()?;
        let get = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some(Stored {
            ca_cert: get(CA_CERT_KEY)?,
            ca_key: get(CA_KEY_KEY)?,
            tls_cert: get(TLS_CERT_KEY)?,
            tls_key: get(TLS_KEY_KEY)?,
        })
    }

    fn material(&self) -> ServingMaterial {
        ServingMaterial {
            ca_pem: self.ca_cert.clone(),
            cert_chain_pem: self.tls_cert.clone(),
            key_pem: self.tls_key.clone(),
        }
    }

    fn into_secret(self, name: &str, resource_version: Option<String>) -> Secret {
        let data = [
            (CA_CERT_KEY, self.ca_cert),
            (CA_KEY_KEY, self.ca_key),
            (TLS_CERT_KEY, self.tls_cert),
            (TLS_KEY_KEY, self.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
        .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(names::SERVICE_NAMESPACE.to_owned()),
                resource_version,
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        names::FIELD_MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Default::default()
        }
    }
}

/// Why a stored leaf must be re-issued, if it must.
fn reissue_reason(stored: &Stored, required: &BTreeSet<String>) -> Option<String> {
    let Some(leaf) = parse_leaf(&stored.tls_cert) else {
        return Some("the stored certificate cannot be parsed".to_owned());
    };
    if !chains_to(&stored.tls_cert, &stored.ca_cert) {
        return Some(
            "the stored certificate is not a valid certificate of the stored CA".to_owned(),
        );
    }
    let missing: Vec<&String> = required.difference(&leaf.dns_names).collect();
    if !missing.is_empty() {
        return Some(format!("it lacks the DNS SANs {missing:?}"));
    }
    if leaf.not_after < unix_now() + RENEW_BEFORE.as_secs() as i64 {
        return Some("it expires within 90 days".to_owned());
    }
    None
}

async fn ensure_secret(
    client: &kube::Client,
    client_name: &str,
    required: &BTreeSet<String>,
) -> Result<ServingMaterial, Error> {
    let name = names::serving_secret_name(client_name);
    let api: Api<Secret> = Api::namespaced(client.clone(), names::SERVICE_NAMESPACE);
    let kube_err = |action: &'static str| {
        let name = name.clone();
        move |source| Error::Kube {
            action,
            name,
            source: Box::new(source),
        }
    };
    for _ in 0..MAX_ATTEMPTS {
        let existing = api.get_opt(&name).await.map_err(kube_err("reading"))?;
        let Some(secret) = existing else {
            let stored = generate(client_name, required)?;
            let material = stored.material();
            match api
                .create(&PostParams::default(), &stored.into_secret(&name, None))
                .await
            {
                Ok(_) => {
                    tracing::info!(secret = %name, sans = ?required, "created the serving CA and certificate");
                    return Ok(material);
                }
                // Another replica created it first: use theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(source) => return Err(kube_err("creating")(source)),
            }
        };
        let Some(stored) = Stored::from_secret(&secret) else {
            // Unusable: start over with a new CA (the caBundle follows).
            tracing::warn!(secret = %name, "the serving Secret lacks ca.crt, ca.key, tls.crt or tls.key; generating a new CA");
            let fresh = generate(client_name, required)?;
            let material = fresh.material();
            let replacement = fresh.into_secret(&name, secret.metadata.resource_version.clone());
            match api
                .replace(&name, &PostParams::default(), &replacement)
                .await
            {
                Ok(_) => return Ok(material),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(source) => return Err(kube_err("replacing")(source)),
            }
        };
        let Some(reason) = reissue_reason(&stored, required) else {
            return Ok(stored.material());
        };
        let mut sans = required.clone();
        if let Some(old) = parse_leaf(&stored.tls_cert) {
            sans.extend(old.dns_names);
        }
        let (tls_cert, tls_key) = issue_leaf(&stored.ca_cert, &stored.ca_key, &sans)?;
        let reissued = Stored {
            tls_cert,
            tls_key,
            ..stored
        };
        let material = reissued.material();
        match api
            .replace(
                &name,
                &PostParams::default(),
                &reissued.into_secret(&name, secret.metadata.resource_version.clone()),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(secret = %name, %reason, ?sans, "re-issued the serving certificate from the same CA");
                return Ok(material);
            }
            // Another replica wrote in between: read again and re-check.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(source) => return Err(kube_err("replacing")(source)),
        }
    }
    Err(Error::Contended { name })
}

// ---------------------------------------------------------------------------------------------
// Generation.

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Sets `params` valid from [`BACKDATE`] ago for `validity`.
fn set_validity(params: &mut CertificateParams, validity: Duration) -> Result<(), rcgen::Error> {
    let now = unix_now();
    let at = |secs: i64| {
        ASN1Time::from_timestamp(secs)
            .map(|t| t.to_datetime())
            .map_err(|_| rcgen::Error::Time)
    };
    params.not_before = at(now - BACKDATE.as_secs() as i64)?;
    params.not_after = at(now + validity.as_secs() as i64)?;
    Ok(())
}

fn key_pair() -> Result<KeyPair, rcgen::Error> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
}

/// A new CA and a leaf for `sans`.
fn generate(client_name: &str, sans: &BTreeSet<String>) -> Result<Stored, Error> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("resource-proxy serving CA ({client_name})"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_VALIDITY)?;
    let key = key_pair()?;
    let ca_cert = params.self_signed(&key)?.pem();
    let ca_key = key.serialize_pem();
    let (tls_cert, tls_key) = issue_leaf(&ca_cert, &ca_key, sans)?;
    Ok(Stored {
        ca_cert,
        ca_key,
        tls_cert,
        tls_key,
    })
}

/// A leaf signed by the CA, for `sans` plus IP 127.0.0.1. Returns (certificate, key) PEM.
fn issue_leaf(
    ca_cert: &str,
    ca_key: &str,
    sans: &BTreeSet<String>,
) -> Result<(String, String), Error> {
    let issuer = Issuer::from_ca_cert_pem(ca_cert, KeyPair::from_pem(ca_key)?)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        sans.iter()
            .find(|s| *s != "localhost")
            .map_or("localhost", String::as_str),
    );
    params.distinguished_name = dn;
    params.subject_alt_names = sans
        .iter()
        .map(|n| Ok(SanType::DnsName(n.as_str().try_into()?)))
        .chain([Ok(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)))])
        .collect::<Result<_, rcgen::Error>>()?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_VALIDITY)?;
    let key = key_pair()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sans(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn generated_leaf_has_the_sans_and_chains_to_the_ca() {
        let stored = generate("client-a", &sans(&["a.kube-system.svc", "localhost"])).unwrap();
        let leaf = parse_leaf(&stored.tls_cert).unwrap();
        assert_eq!(leaf.dns_names, sans(&["a.kube-system.svc", "localhost"]));
        assert!(chains_to(&stored.tls_cert, &stored.ca_cert));
        assert!(leaf.not_after > unix_now() + 300 * 24 * 3600);
        assert_eq!(reissue_reason(&stored, &sans(&["a.kube-system.svc"])), None);
    }

    #[test]
    fn a_missing_san_or_a_foreign_leaf_needs_reissuing() {
        let stored = generate("client-a", &sans(&["a.kube-system.svc"])).unwrap();
        let reason =
            reissue_reason(&stored, &sans(&["a.kube-system.svc", "b.kube-system.svc"])).unwrap();
        assert!(reason.contains("b.kube-system.svc"), "{reason}");
        let other = generate("client-a", &sans(&["a.kube-system.svc"])).unwrap();
        let mixed = Stored {
            tls_cert: other.tls_cert,
            ..stored
        };
        assert_eq!(
            reissue_reason(&mixed, &sans(&["a.kube-system.svc"])).as_deref(),
            Some("the stored certificate is not a valid certificate of the stored CA")
        );
    }

    #[test]
    fn files_give_the_chain_key_and_the_last_certificate_as_ca() {
        let dir = tempfile::tempdir().unwrap();
        let stored = generate("client-a", &sans(&["a.kube-system.svc"])).unwrap();
        let chain = format!("{}{}", stored.tls_cert, stored.ca_cert);
        let cert_file = dir.path().join("tls.crt");
        let key_file = dir.path().join("tls.key");
        std::fs::write(&cert_file, &chain).unwrap();
        std::fs::write(&key_file, &stored.tls_key).unwrap();
        let mut files = ServingCertificate {
            cert_file,
            key_file,
            ca_file: None,
        };
        let material = from_files(&files).unwrap();
        assert_eq!(material.cert_chain_pem, chain);
        assert_eq!(material.key_pem, stored.tls_key);
        assert_eq!(material.ca_pem, stored.ca_cert.trim_end());

        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, "not a certificate").unwrap();
        files.ca_file = Some(ca_file.clone());
        assert!(matches!(
            from_files(&files),
            Err(Error::NoCertificate { path }) if path == ca_file
        ));
        std::fs::write(&ca_file, &stored.ca_cert).unwrap();
        assert_eq!(from_files(&files).unwrap().ca_pem, stored.ca_cert);
    }
}
