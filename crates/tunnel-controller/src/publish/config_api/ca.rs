//! The config API CA's Secret (`tunnel-gateway-config-ca` in the controller's namespace): read
//! it, decide with [`crate::publish::config_api::pki::plan_ca`], write the decision. Called by the leader only.
//! Creating races another replica safely: on AlreadyExists the winner's Secret is read, never
//! overwritten; rotating and retiring replace the Secret at the resourceVersion read, so a
//! concurrent change makes the write fail and the next round decide again.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::names;
use crate::publish::config_api::pki::{
    CA_LIFETIME, CaDecision, CaSecret, CertKey, PkiError, ROTATE_ANNOTATION, ROTATED_ANNOTATION,
    ca_keys, generate_ca, plan_ca,
};

/// The CA Secret's default name.
pub const DEFAULT_CA_SECRET: &str = "tunnel-gateway-config-ca";

/// The CA Secret could not be read, created or updated, or is unusable.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("Secret {0}: {1}")]
    Api(String, kube::Error),
    #[error("Secret {0} is unusable ({1}); fix or delete it")]
    Broken(String, String),
    #[error(transparent)]
    Pki(#[from] PkiError),
}

/// The key `key` of `secret` as text (`None`: absent, blank or not UTF-8).
pub fn value(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|s| !s.trim().is_empty())
}

fn pair(secret: &Secret, cert: &str, key: &str) -> Option<CertKey> {
    Some(CertKey {
        cert_pem: value(secret, cert)?,
        key_pem: value(secret, key)?,
    })
}

/// The CAs and annotations of a CA Secret.
pub fn read(secret: &Secret) -> CaSecret {
    let annotation = |k: &str| secret.annotations().get(k).cloned();
    CaSecret {
        active: pair(secret, ca_keys::CERT, ca_keys::KEY),
        previous: pair(secret, ca_keys::PREVIOUS_CERT, ca_keys::PREVIOUS_KEY),
        rotate: annotation(ROTATE_ANNOTATION),
        rotated: annotation(ROTATED_ANNOTATION),
    }
}

fn data(active: &CertKey, previous: Option<&CertKey>) -> BTreeMap<String, ByteString> {
    let mut d = BTreeMap::from([
        (
            ca_keys::CERT.to_owned(),
            ByteString(active.cert_pem.clone().into_bytes()),
        ),
        (
            ca_keys::KEY.to_owned(),
            ByteString(active.key_pem.clone().into_bytes()),
        ),
    ]);
    if let Some(p) = previous {
        d.insert(
            ca_keys::PREVIOUS_CERT.to_owned(),
            ByteString(p.cert_pem.clone().into_bytes()),
        );
        d.insert(
            ca_keys::PREVIOUS_KEY.to_owned(),
            ByteString(p.key_pem.clone().into_bytes()),
        );
    }
    d
}

/// Brings the CA Secret `namespace/name` one step along (create, rotate, retire, or nothing)
/// and returns it as it is now. `planes_on_active`: every plane presented a serving
/// certificate of the active CA on its last push.
pub async fn sync(
    client: &Client,
    namespace: &str,
    name: &str,
    planes_on_active: bool,
    now: SystemTime,
) -> Result<CaSecret, CaError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let id = format!("{namespace}/{name}");
    let current = api
        .get_opt(name)
        .await
        .map_err(|e| CaError::Api(id.clone(), e))?;
    let read_now = current.as_ref().map(read);
    let decision = plan_ca(read_now.as_ref(), planes_on_active, now, || {
        generate_ca(now, CA_LIFETIME)
    })?;
    match decision {
        CaDecision::Keep => Ok(read_now.unwrap_or_default()),
        CaDecision::Broken(why) => Err(CaError::Broken(id, why)),
        CaDecision::Create(ca) => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    labels: Some(names::own_secret_labels()),
                    ..Default::default()
                },
                data: Some(data(&ca, None)),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(s) => {
                    tracing::info!(secret = %id, "created the config API CA");
                    Ok(read(&s))
                }
                // Another replica (or the operator) was first: use theirs.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let theirs = api.get(name).await.map_err(|e| CaError::Api(id, e))?;
                    Ok(read(&theirs))
                }
                Err(e) => Err(CaError::Api(id, e)),
            }
        }
        CaDecision::Rotate { next, answered } => {
            let mut secret = current.unwrap_or_default();
            let old = read_now.and_then(|r| r.active);
            secret.data = Some(data(&next, old.as_ref()));
            if let Some(a) = answered {
                secret
                    .annotations_mut()
                    .insert(ROTATED_ANNOTATION.to_owned(), a);
            }
            let s = api
                .replace(name, &PostParams::default(), &secret)
                .await
                .map_err(|e| CaError::Api(id.clone(), e))?;
            tracing::info!(secret = %id, "rotated the config API CA; the previous one stays trusted until every plane moved");
            Ok(read(&s))
        }
        CaDecision::Retire => {
            let mut secret = current.unwrap_or_default();
            let active = read_now.and_then(|r| r.active);
            if let Some(a) = &active {
                secret.data = Some(data(a, None));
            }
            let s = api
                .replace(name, &PostParams::default(), &secret)
                .await
                .map_err(|e| CaError::Api(id.clone(), e))?;
            tracing::info!(secret = %id, "every plane serves a certificate of the new config API CA; the previous one is no longer trusted");
            Ok(read(&s))
        }
    }
}

/// The keys of a plane's config API TLS Secret (type `kubernetes.io/tls`), as the proxy reads
/// them from its `--config-tls-dir`.
pub mod plane_keys {
    pub const CERT: &str = "tls.crt";
    pub const KEY: &str = "tls.key";
    pub const CA: &str = "ca.crt";
}

/// The plane TLS Secret `namespace/name` to write, or `None` when `existing` already holds a
/// current serving certificate of the active CA for `names` and the current trust bundle. A
/// new serving certificate is issued only when [`config_pki::serving_renewal`] says so; a
/// changed bundle alone keeps the certificate.
///
/// [`config_pki::serving_renewal`]: crate::publish::config_api::pki::serving_renewal
pub fn plane_secret(
    existing: Option<&Secret>,
    ca: &CaSecret,
    namespace: &str,
    name: &str,
    names: &[String],
    now: SystemTime,
) -> Result<Option<Secret>, PkiError> {
    use crate::names;
    use crate::publish::config_api::pki::{
        LEAF_LIFETIME, issue_serving, serving_renewal, trust_bundle,
    };
    let Some(active) = &ca.active else {
        return Ok(None);
    };
    let bundle = trust_bundle(ca);
    let current = existing.and_then(|s| pair(s, plane_keys::CERT, plane_keys::KEY));
    let renewal = serving_renewal(current.as_ref(), active, names, now);
    let same_bundle = existing.and_then(|s| value(s, plane_keys::CA)).as_deref() == Some(&bundle);
    if renewal.is_none() && same_bundle {
        return Ok(None);
    }
    let serving = match (renewal, current) {
        (None, Some(c)) => c,
        (why, _) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), reason = why.unwrap_or_default(), "issuing a config API serving certificate");
            issue_serving(active, names, now, LEAF_LIFETIME)?
        }
    };
    Ok(Some(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(names::own_secret_labels()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(BTreeMap::from([
            (
                plane_keys::CERT.to_owned(),
                ByteString(serving.cert_pem.into_bytes()),
            ),
            (
                plane_keys::KEY.to_owned(),
                ByteString(serving.key_pem.into_bytes()),
            ),
            (plane_keys::CA.to_owned(), ByteString(bundle.into_bytes())),
        ])),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::publish::config_api::pki::{issued_by, plane_names, trust_bundle};

    #[test]
    fn a_plane_secret_is_written_when_missing_renewed_or_its_bundle_changed_and_not_otherwise() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (old, new) = (
            generate_ca(now, CA_LIFETIME).unwrap(),
            generate_ca(now, CA_LIFETIME).unwrap(),
        );
        let names =
            crate::publish::config_api::pki::plane_names("tunnel-proxy-config", "cf-system");
        let steady = CaSecret {
            active: Some(old.clone()),
            ..Default::default()
        };
        let write = |existing: Option<&Secret>, ca: &CaSecret, at: SystemTime| {
            plane_secret(
                existing,
                ca,
                "cf-system",
                "tunnel-proxy-config-tls",
                &names,
                at,
            )
            .unwrap()
        };
        let first = write(None, &steady, now).expect("missing: written");
        assert_eq!(first.type_.as_deref(), Some("kubernetes.io/tls"));
        let cert = value(&first, plane_keys::CERT).unwrap();
        assert!(issued_by(&cert, &old.cert_pem));
        assert_eq!(value(&first, plane_keys::CA).unwrap(), old.cert_pem);
        assert_eq!(write(Some(&first), &steady, now), None, "current: nothing");

        // A rotation: the bundle gains the new CA and the certificate is reissued by it.
        let rotating = CaSecret {
            active: Some(new.clone()),
            previous: Some(old.clone()),
            ..Default::default()
        };
        let moved = write(Some(&first), &rotating, now).expect("rotation: written");
        assert!(issued_by(
            &value(&moved, plane_keys::CERT).unwrap(),
            &new.cert_pem
        ));
        assert_eq!(
            value(&moved, plane_keys::CA).unwrap(),
            trust_bundle(&rotating)
        );
        // Retired: only the bundle changes; the certificate stays.
        let retired = CaSecret {
            active: Some(new.clone()),
            ..Default::default()
        };
        let trimmed = write(Some(&moved), &retired, now).expect("bundle changed: written");
        assert_eq!(
            value(&trimmed, plane_keys::CERT),
            value(&moved, plane_keys::CERT)
        );
        assert_eq!(value(&trimmed, plane_keys::CA).unwrap(), new.cert_pem);
        // Two thirds into its 90 days: renewed.
        let later = now + Duration::from_secs(61 * 24 * 3600);
        let renewed = write(Some(&trimmed), &retired, later).expect("old: written");
        assert_ne!(
            value(&renewed, plane_keys::CERT),
            value(&trimmed, plane_keys::CERT)
        );
        // Another plane's names: reissued for them.
        let other = plane_names("cf-proxy-web-config", "shop");
        let renamed = plane_secret(Some(&trimmed), &retired, "shop", "x", &other, now)
            .unwrap()
            .expect("names changed: written");
        assert_eq!(
            crate::publish::config_api::pki::dns_names(&value(&renamed, plane_keys::CERT).unwrap()),
            other
        );
    }
}
