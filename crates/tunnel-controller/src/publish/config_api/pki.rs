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
    tunnel_config::config_api::certificates(cert_pem)
        .ok()
        .and_then(|der| der.first().map(|d| der_issued_by(d.as_ref(), ca_pem)))
        .unwrap_or(false)
}

/// [`issued_by`] for a DER certificate (as a peer presented it in a TLS handshake).
pub fn der_issued_by(cert_der: &[u8], ca_pem: &str) -> bool {
    let issuer = X509Certificate::from_der(cert_der)
        .ok()
        .map(|(_, c)| c.issuer().to_string());
    let subject = tunnel_config::config_api::certificates(ca_pem)
        .ok()
        .and_then(|der| {
            let (_, c) = X509Certificate::from_der(der.first()?.as_ref()).ok()?;
            Some(c.subject().to_string())
        });
    matches!((issuer, subject), (Some(a), Some(b)) if a == b)
}

/// The keys of the CA Secret (`tunnel-gateway-config-ca` in the controller's namespace).
pub mod ca_keys {
    /// The CA that issues: its certificate and key.
    pub const CERT: &str = "ca.crt";
    pub const KEY: &str = "ca.key";
    /// The CA being retired, still trusted until every plane serves a certificate of the new one.
    pub const PREVIOUS_CERT: &str = "previous.crt";
    pub const PREVIOUS_KEY: &str = "previous.key";
}

/// Set to any new value by an operator to ask for a CA rotation.
pub const ROTATE_ANNOTATION: &str = "cf.k8s.lex.la/rotate-config-ca";
/// The value of [`ROTATE_ANNOTATION`] the last rotation answered (written by the controller).
pub const ROTATED_ANNOTATION: &str = "cf.k8s.lex.la/rotated-config-ca";

/// The CA Secret as read: its CAs and the rotation annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaSecret {
    pub active: Option<CertKey>,
    pub previous: Option<CertKey>,
    pub rotate: Option<String>,
    pub rotated: Option<String>,
}

/// What to do with the CA Secret this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaDecision {
    /// Nothing: use it as it is.
    Keep,
    /// No Secret yet: create it with this CA (on AlreadyExists, read the winner's next round;
    /// never overwrite).
    Create(CertKey),
    /// Rotate: the new CA issues from now on, the active one becomes `previous` (still
    /// trusted). `answered` goes into [`ROTATED_ANNOTATION`].
    Rotate {
        next: CertKey,
        answered: Option<String>,
    },
    /// Every plane serves a certificate of the active CA: stop trusting the previous one.
    Retire,
    /// The Secret exists but its active CA is unusable: a condition, and nothing overwritten.
    Broken(String),
}

/// Decides the CA Secret's next step. `planes_on_active`: every plane's serving certificate, as
/// the controller last saw it presented, was issued by the active CA. `generate` makes a new
/// CA (called only when one is needed).
pub fn plan_ca(
    secret: Option<&CaSecret>,
    planes_on_active: bool,
    now: SystemTime,
    generate: impl FnOnce() -> Result<CertKey, PkiError>,
) -> Result<CaDecision, PkiError> {
    let Some(secret) = secret else {
        return Ok(CaDecision::Create(generate()?));
    };
    let Some(active) = &secret.active else {
        return Ok(CaDecision::Broken(format!(
            "no {:?}/{:?} keys",
            ca_keys::CERT,
            ca_keys::KEY
        )));
    };
    if validity(&active.cert_pem).is_none() {
        return Ok(CaDecision::Broken(format!(
            "{:?} is not a PEM certificate",
            ca_keys::CERT
        )));
    }
    if secret.previous.is_some() {
        // One rotation at a time: a request made meanwhile is answered after this one.
        return Ok(if planes_on_active {
            CaDecision::Retire
        } else {
            CaDecision::Keep
        });
    }
    let requested = secret.rotate.is_some() && secret.rotate != secret.rotated;
    if requested || needs_renewal(&active.cert_pem, now) {
        return Ok(CaDecision::Rotate {
            next: generate()?,
            answered: secret.rotate.clone(),
        });
    }
    Ok(CaDecision::Keep)
}

/// The CA bundle planes and the controller trust: the active CA, and the previous one during a
/// rotation.
pub fn trust_bundle(secret: &CaSecret) -> String {
    [&secret.active, &secret.previous]
        .into_iter()
        .flatten()
        .map(|c| c.cert_pem.as_str())
        .collect()
}

/// Why a plane's serving certificate is (re)issued, or `None` when it stays.
pub fn serving_renewal(
    current: Option<&CertKey>,
    active_ca: &CertKey,
    names: &[String],
    now: SystemTime,
) -> Option<&'static str> {
    let Some(current) = current else {
        return Some("missing");
    };
    if !issued_by(&current.cert_pem, &active_ca.cert_pem) {
        return Some("issued by another CA");
    }
    if needs_renewal(&current.cert_pem, now) {
        return Some("two thirds of its lifetime passed");
    }
    if dns_names(&current.cert_pem) != names {
        return Some("the plane's names changed");
    }
    None
}

/// The DNS subject alternative names of the first certificate in `pem`.
pub fn dns_names(pem: &str) -> Vec<String> {
    let Some(der) = tunnel_config::config_api::certificates(pem).ok() else {
        return Vec::new();
    };
    let Ok((_, cert)) = X509Certificate::from_der(der[0].as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
            _ => None,
        })
        .collect()
}

/// A plane's config Service names: `<service>.<namespace>.svc` first, then the short forms.
pub fn plane_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn at(days: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000) + DAY * days as u32
    }

    fn ca_at(days: u64) -> CertKey {
        generate_ca(at(days), CA_LIFETIME).unwrap()
    }

    fn fresh() -> Result<CertKey, PkiError> {
        Ok(CertKey {
            cert_pem: "NEW".into(),
            key_pem: "NEWKEY".into(),
        })
    }

    #[test]
    fn the_ca_is_created_once_rotated_on_request_or_age_and_retired_when_planes_moved() {
        let active = ca_at(0);
        let other = ca_at(0);
        let secret =
            |previous: Option<&CertKey>, rotate: Option<&str>, rotated: Option<&str>| CaSecret {
                active: Some(active.clone()),
                previous: previous.cloned(),
                rotate: rotate.map(str::to_owned),
                rotated: rotated.map(str::to_owned),
            };
        let new = fresh().unwrap();
        let rotate = |answered: Option<&str>| CaDecision::Rotate {
            next: new.clone(),
            answered: answered.map(str::to_owned),
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, Option<CaSecret>, bool, u64, CaDecision)> = vec![
            ("no Secret: create", None, false, 1, CaDecision::Create(new.clone())),
            ("young CA, nothing asked", Some(secret(None, None, None)), true, 1, CaDecision::Keep),
            ("operator asks", Some(secret(None, Some("1"), None)), true, 1, rotate(Some("1"))),
            ("request answered", Some(secret(None, Some("1"), Some("1"))), true, 1, CaDecision::Keep),
            ("asked again", Some(secret(None, Some("2"), Some("1"))), true, 1, rotate(Some("2"))),
            ("two thirds of 5 years", Some(secret(None, None, None)), true, 1220, rotate(None)),
            ("rotating, planes not moved", Some(secret(Some(&other), None, None)), false, 1, CaDecision::Keep),
            ("rotating, asked again: one at a time", Some(secret(Some(&other), Some("9"), None)), false, 1, CaDecision::Keep),
            ("rotating, planes moved", Some(secret(Some(&other), None, None)), true, 1, CaDecision::Retire),
        ];
        for (what, s, moved, day, want) in cases {
            assert_eq!(
                plan_ca(s.as_ref(), moved, at(day), fresh).unwrap(),
                want,
                "{what}"
            );
        }
        let broken = CaSecret {
            active: Some(CertKey {
                cert_pem: "junk".into(),
                key_pem: "junk".into(),
            }),
            ..Default::default()
        };
        assert!(matches!(
            plan_ca(Some(&broken), true, at(1), fresh).unwrap(),
            CaDecision::Broken(_)
        ));
        assert!(matches!(
            plan_ca(Some(&CaSecret::default()), true, at(1), fresh).unwrap(),
            CaDecision::Broken(_)
        ));
    }

    #[test]
    fn a_serving_certificate_is_reissued_when_missing_foreign_old_or_misnamed() {
        let ca = ca_at(0);
        let other = ca_at(0);
        let names = plane_names("cf-proxy-web-config", "shop");
        let cert = issue_serving(&ca, &names, at(0), LEAF_LIFETIME).unwrap();
        let foreign = issue_serving(&other, &names, at(0), LEAF_LIFETIME).unwrap();
        let renamed = plane_names("cf-proxy-api-config", "shop");
        #[rustfmt::skip]
        type Case<'a> = (Option<&'a CertKey>, &'a Vec<String>, u64, Option<&'a str>);
        let cases: [Case<'_>; 6] = [
            (None, &names, 1, Some("missing")),
            (Some(&cert), &names, 1, None),
            (Some(&cert), &names, 59, None),
            (
                Some(&cert),
                &names,
                60,
                Some("two thirds of its lifetime passed"),
            ),
            (Some(&foreign), &names, 1, Some("issued by another CA")),
            (Some(&cert), &renamed, 1, Some("the plane's names changed")),
        ];
        for (current, want_names, day, want) in cases {
            assert_eq!(
                serving_renewal(current, &ca, want_names, at(day)),
                want,
                "day {day}"
            );
        }
        assert_eq!(dns_names(&cert.cert_pem), names);
    }

    #[test]
    fn the_trust_bundle_holds_the_previous_ca_only_during_a_rotation() {
        let (a, b) = (ca_at(0), ca_at(0));
        let mut s = CaSecret {
            active: Some(a.clone()),
            ..Default::default()
        };
        assert_eq!(trust_bundle(&s), a.cert_pem);
        s.previous = Some(b.clone());
        assert_eq!(trust_bundle(&s), format!("{}{}", a.cert_pem, b.cert_pem));
        assert!(issued_by(
            &issue_client(&a, at(0), LEAF_LIFETIME).unwrap().cert_pem,
            &a.cert_pem
        ));
        assert!(!issued_by(
            &issue_client(&a, at(0), LEAF_LIFETIME).unwrap().cert_pem,
            &b.cert_pem
        ));
    }
}
