//! The config API's mutual TLS as the sync loop drives it (leader only). Each round the CA
//! Secret is brought one step along ([`ca::sync`]), each plane's `kubernetes.io/tls`
//! Secret is written when it must change ([`ca::plane_secret`]), and the controller's
//! client certificates (one per trusted CA, the active one's first) are kept in memory only:
//! they are never written anywhere, and a new leader issues its own.
//!
//! Which CA a plane serves from is what its pods presented on their last answered push
//! ([`crate::publish::planes::push::Pusher::presented`]), not what its Secret says: the kubelet copies a changed
//! Secret into the pods' volumes a minute or more later. The previous CA is retired only once
//! every pod of every plane presented a certificate of the active one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use gateway_api::apis::standard::gateways::Gateway;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tunnel_config::config_api::ClientIdentity;

use crate::names;
use crate::observe::world::Snapshot;
use crate::publish::config_api::ca::{self, plane_secret};
use crate::publish::config_api::pki::{
    CaSecret, LEAF_LIFETIME, der_issued_by, issue_client, needs_renewal, plane_names, trust_bundle,
    validity,
};
use crate::publish::planes::push::{TlsTarget, Transport};

/// Where the config API's Secrets are.
#[derive(Debug, Clone)]
pub struct ConfigTlsSettings {
    /// The controller's namespace: the CA Secret and the shared plane's Secret.
    pub namespace: String,
    /// The CA Secret's name.
    pub ca_secret: String,
    /// The shared plane's `kubernetes.io/tls` Secret (the chart mounts it).
    pub shared_plane_secret: String,
}

/// The loop's TLS state.
pub struct ConfigTls {
    client: Client,
    settings: ConfigTlsSettings,
    /// The controller's client certificates by the PEM of the CA that issued them.
    identities: Mutex<BTreeMap<String, ClientIdentity>>,
}

/// The CA as this round uses it.
#[derive(Debug, Clone)]
pub struct RoundCa {
    pub ca: CaSecret,
    bundle: String,
    identities: Vec<ClientIdentity>,
}

impl RoundCa {
    /// Whether a rotation is under way (the previous CA is still trusted).
    pub fn rotating(&self) -> bool {
        self.ca.previous.is_some()
    }

    /// The earliest end (Unix seconds) among the trusted CAs.
    pub fn ca_not_after(&self) -> Option<i64> {
        [&self.ca.active, &self.ca.previous]
            .into_iter()
            .flatten()
            .filter_map(|c| validity(&c.cert_pem).map(|(_, to)| to))
            .min()
    }

    /// The earliest end (Unix seconds) among the controller's client certificates.
    pub fn client_not_after(&self) -> Option<i64> {
        self.identities
            .iter()
            .filter_map(|id| validity(&id.cert_pem).map(|(_, to)| to))
            .min()
    }

    /// Whether `presented` (a pod's serving certificate, DER) was issued by the active CA.
    pub fn on_active(&self, presented: Option<&[u8]>) -> bool {
        self.ca
            .active
            .as_ref()
            .is_some_and(|a| presented_by(presented, &a.cert_pem))
    }
}

/// How to push to a plane, and when the serving certificate of its Secret ends (Unix seconds;
/// `None`: the Secret holds none yet).
pub struct PlaneTls {
    pub transport: Transport,
    pub serving_not_after: Option<i64>,
}

/// Where a plane's TLS Secret lives and which Service names its certificate carries.
pub struct PlaneTarget<'a> {
    pub namespace: &'a str,
    pub secret: &'a str,
    /// The plane's headless config Service.
    pub service: &'a str,
    /// A dedicated plane's Gateway: its Secret carries the Gateway's controller ownerReference
    /// (garbage-collected with it) and an existing one is written only when it carries it.
    pub gateway: Option<&'a Gateway>,
}

impl ConfigTls {
    pub fn new(client: Client, settings: ConfigTlsSettings) -> Self {
        Self {
            client,
            settings,
            identities: Mutex::default(),
        }
    }

    /// The CA Secret as the snapshot holds it (before this round's step).
    pub fn snapshot_ca(&self, snap: &Snapshot) -> Option<CaSecret> {
        find(snap, &self.settings.namespace, &self.settings.ca_secret).map(ca::read)
    }

    /// Brings the CA Secret one step along and returns the CA to push with, with a client
    /// certificate of each trusted CA (issued now when missing or two thirds into its life).
    /// `planes_on_active`: every plane's pods last presented a certificate of the active CA.
    /// `fallback`: the CA Secret as the snapshot holds it, used when the step cannot be written.
    pub async fn round_ca(
        &self,
        planes_on_active: bool,
        fallback: Option<CaSecret>,
        now: SystemTime,
    ) -> Result<RoundCa, String> {
        let ca = match ca::sync(
            &self.client,
            &self.settings.namespace,
            &self.settings.ca_secret,
            planes_on_active,
            now,
        )
        .await
        {
            Ok(ca) => ca,
            // A step that could not be written (a conflict, a refusal) leaves the Secret as it
            // was: keep pushing with it, and say why.
            Err(e @ ca::CaError::Api(..)) => match fallback {
                Some(ca) if ca.active.is_some() => {
                    tracing::warn!(error = %e, "config API CA step not written; pushing with the CA as it is");
                    ca
                }
                _ => return Err(e.to_string()),
            },
            Err(e) => return Err(e.to_string()),
        };
        let trusted: Vec<_> = [&ca.active, &ca.previous]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        if trusted.is_empty() {
            return Err(format!(
                "the config API CA Secret {}/{} was just created; retrying",
                self.settings.namespace, self.settings.ca_secret
            ));
        }
        let mut held = self
            .identities
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.retain(|ca_pem, _| trusted.iter().any(|t| t.cert_pem == *ca_pem));
        let mut identities = Vec::new();
        for issuer in &trusted {
            let current = held
                .get(&issuer.cert_pem)
                .filter(|id| !needs_renewal(&id.cert_pem, now));
            let id = match current {
                Some(id) => id.clone(),
                None => {
                    let id = issue_client(issuer, now, LEAF_LIFETIME).map_err(|e| e.to_string())?;
                    tracing::info!("issued the controller's config API client certificate");
                    held.insert(issuer.cert_pem.clone(), id.clone());
                    id
                }
            };
            identities.push(id);
        }
        Ok(RoundCa {
            bundle: trust_bundle(&ca),
            ca,
            identities,
        })
    }

    /// The shared plane's Secret and Service.
    pub fn shared_target<'a>(&'a self, service: &'a str) -> PlaneTarget<'a> {
        PlaneTarget {
            namespace: &self.settings.namespace,
            secret: &self.settings.shared_plane_secret,
            service,
            gateway: None,
        }
    }

    /// Writes the plane's TLS Secret when it must change and returns how to push to it.
    pub async fn plane(
        &self,
        round: &RoundCa,
        target: &PlaneTarget<'_>,
        snap: &Snapshot,
        now: SystemTime,
    ) -> Result<PlaneTls, String> {
        let (ns, name) = (target.namespace, target.secret);
        let names = plane_names(target.service, ns);
        let existing = find(snap, ns, name);
        if let Some(s) = existing {
            let ours = match target.gateway {
                Some(gw) => names::owned_by_gateway(&s.metadata, gw),
                None => {
                    s.labels().get(names::MANAGED_BY_LABEL).map(String::as_str)
                        == Some(names::MANAGER)
                }
            };
            if !ours {
                return Err(format!(
                    "Secret {ns}/{name} exists and was not written by the controller; it is left untouched and the plane is not pushed to until it is removed"
                ));
            }
        }
        let desired =
            plane_secret(existing, &round.ca, ns, name, &names, now).map_err(|e| e.to_string())?;
        let serving_not_after = desired
            .as_ref()
            .or(existing)
            .and_then(|s| ca::value(s, ca::plane_keys::CERT))
            .and_then(|pem| validity(&pem))
            .map(|(_, to)| to);
        if let Some(mut desired) = desired {
            if let Some(gw) = target.gateway {
                let owner = names::gateway_owner(gw)
                    .ok_or_else(|| format!("Gateway {ns}/{} has no UID yet", gw.name_any()))?;
                desired.metadata.owner_references = Some(vec![owner]);
            }
            let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
            let written = match existing {
                None => api.create(&PostParams::default(), &desired).await,
                Some(e) => {
                    desired.metadata.resource_version = e.resource_version();
                    api.replace(name, &PostParams::default(), &desired).await
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %format!("{ns}/{name}"), "wrote a plane's config API TLS Secret")
                }
                // Changed meanwhile (or created by another replica): the next round decides again.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Err(format!("Secret {ns}/{name} changed meanwhile; retrying"));
                }
                Err(e) => return Err(format!("writing Secret {ns}/{name}: {e}")),
            }
        }
        Ok(PlaneTls {
            transport: Transport::Tls(Arc::new(TlsTarget {
                trust_pem: round.bundle.clone(),
                identities: round.identities.clone(),
                plane_name: names[0].clone(),
            })),
            serving_not_after,
        })
    }
}

/// Whether `presented` (a pod's serving certificate, DER; `None`: never answered over TLS) was
/// issued by the CA `ca_pem`.
pub fn presented_by(presented: Option<&[u8]>, ca_pem: &str) -> bool {
    presented.is_some_and(|der| der_issued_by(der, ca_pem))
}

fn find<'a>(snap: &'a Snapshot, ns: &str, name: &str) -> Option<&'a Secret> {
    snap.secrets
        .iter()
        .find(|s| s.namespace().as_deref() == Some(ns) && s.name_any() == name)
        .map(|s| s.as_ref())
}
