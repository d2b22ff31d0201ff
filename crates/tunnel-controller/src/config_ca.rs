//! The config API CA's Secret (`tunnel-gateway-config-ca` in the controller's namespace): read
//! it, decide with [`config_pki::plan_ca`], write the decision. Called by the leader only.
//! Creating races another replica safely: on AlreadyExists the winner's Secret is read, never
//! overwritten; rotating and retiring replace the Secret at the resourceVersion read, so a
//! concurrent change makes the write fail and the next round decide again.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::config_pki::{
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

fn value(secret: &Secret, key: &str) -> Option<String> {
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
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "tunnel-gateway-controller".to_owned(),
                    )])),
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
