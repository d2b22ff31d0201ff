//! The config API's certificates, issued by the controller's own CA (ECDSA P-256, rcgen): a
//! plane's serving certificate for its config Service names, and the controller's client
//! certificate carrying [`CONTROLLER_IDENTITY`]. Pure: PEM in, PEM out, time passed in.
//!
//! Lifetimes: the CA lives [`CA_LIFETIME`], leaves [`LEAF_LIFETIME`]; a certificate is renewed
//! once two thirds of its lifetime have passed ([`needs_renewal`]), so a renewal has a third of
//! the lifetime to reach the plane's files. Each CA's subject carries a random suffix, so two
//! generations never share a name (the proxy's CertificateRequest hints at the CAs it trusts by
//! name, and the controller picks its client certificate by that hint during a rotation).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tunnel_config::config_api::{CONTROLLER_IDENTITY, ClientIdentity};
use x509_parser::prelude::{FromDer, X509Certificate};

/// How long a generated CA is valid.
pub const CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// How long a serving or client certificate is valid.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Certificates are not valid before issuance minus this (clock skew between nodes).
const BACKDATE: Duration = Duration::from_secs(300);

/// A certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Issuing failed (a CA's PEM that does not parse, or rcgen refusing the parameters).
#[derive(Debug, thiserror::Error)]
#[error("config API PKI: {0}")]
pub struct PkiError(String);

impl From<rcgen::Error> for PkiError {
    fn from(e: rcgen::Error) -> Self {
        Self(e.to_string())
    }
}

fn datetime(t: SystemTime) -> time::OffsetDateTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new CA valid from `now` for `lifetime`.
pub fn generate_ca(now: SystemTime, lifetime: Duration) -> Result<CertKey, PkiError> {
    use rand::Rng;
    let mut b = [0u8; 4];
    rand::rng().fill_bytes(&mut b);
    let suffix = u32::from_be_bytes(b);
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tunnel-gateway");
    dn.push(
        DnType::CommonName,
        format!("tunnel-gateway config API CA {suffix:08x}"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = datetime(now - BACKDATE);
    params.not_after = datetime(now + lifetime);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let cert = params.self_signed(&key)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn leaf(
    ca: &CertKey,
    common_name: &str,
    sans: Vec<SanType>,
    usage: ExtendedKeyUsagePurpose,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, PkiError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.not_before = datetime(now - BACKDATE);
    params.not_after = datetime(now + lifetime);
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A plane's serving certificate for `dns_names` (the first is its common name).
pub fn issue_serving(
    ca: &CertKey,
    dns_names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, PkiError> {
    let sans = dns_names
        .iter()
        .map(|n| {
            rcgen::string::Ia5String::try_from(n.as_str())
                .map(SanType::DnsName)
                .map_err(|e| PkiError(format!("{n:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cn = dns_names.first().map_or("tunnel-proxy", String::as_str);
    leaf(
        ca,
        cn,
        sans,
        ExtendedKeyUsagePurpose::ServerAuth,
        now,
        lifetime,
    )
}

/// The controller's client certificate (URI SAN [`CONTROLLER_IDENTITY`]).
pub fn issue_client(
    ca: &CertKey,
    now: SystemTime,
    lifetime: Duration,
) -> Result<ClientIdentity, PkiError> {
    let uri = rcgen::string::Ia5String::try_from(CONTROLLER_IDENTITY)
        .map_err(|e| PkiError(e.to_string()))?;
    let c = leaf(
        ca,
        "tunnel-gateway-controller",
        vec![SanType::URI(uri)],
        ExtendedKeyUsagePurpose::ClientAuth,
        now,
        lifetime,
    )?;
    Ok(ClientIdentity {
        cert_pem: c.cert_pem,
        key_pem: c.key_pem,
    })
}

/// The validity window (not before, not after) of the first certificate in `pem`, in Unix
/// seconds.
pub fn validity(pem: &str) -> Option<(i64, i64)> {
    let der = tunnel_config::config_api::certificates(pem).ok()?;
    let (_, cert) = X509Certificate::from_der(der.first()?.as_ref()).ok()?;
    let v = cert.validity();
    Some((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// Whether two thirds of the certificate's lifetime have passed at `now` (or it does not
/// parse).
pub fn needs_renewal(pem: &str, now: SystemTime) -> bool {
    let Some((from, to)) = validity(pem) else {
        return true;
    };
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    now >= from + (to - from) * 2 / 3
}

/// Whether `cert_pem` names the CA `ca_pem` as its issuer. Bookkeeping only (which generation
/// issued a plane's certificate); the proxy and the controller verify signatures. CA subjects
/// carry a random suffix, so generations do not share names.
pub fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    let name = |pem: &str, issuer: bool| {
        let der = tunnel_config::config_api::certificates(pem).ok()?;
        let (_, c) = X509Certificate::from_der(der[0].as_ref()).ok()?;
        Some(if issuer { c.issuer() } else { c.subject() }.to_string())
    };
    matches!((name(cert_pem, true), name(ca_pem, false)), (Some(a), Some(b)) if a == b)
}
