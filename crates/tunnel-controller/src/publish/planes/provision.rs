//! Dedicated planes in the cluster (TG-7): each served Gateway's rendered objects are
//! server-side applied (the PodDisruptionBudget only while the render has one: it is deleted
//! when the plane is scaled to one pod), re-applied when the render changes or someone else changes the live
//! object (drift), and removed when the Gateway is refused or drops its parametersRef.
//!
//! The ownership guard is here: an object at a rendered name that does not carry this Gateway's
//! controller ownerReference is never written or deleted (a foreign object is looked up directly
//! before the first write, since the stores only hold the controller's labelled objects). The
//! generated config-API token Secret is created once and never updated; it goes with the Gateway
//! (garbage collection), not with the parametersRef, so opting in again keeps the token.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use gateway_api::apis::standard::gateways::Gateway;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::render::{self, RenderInputs};
use crate::events::Notice;
use crate::keys::ObjKey;
use crate::model::dedicated::{AuthToken, Resolved};
use crate::model::{Model, Plane};
use crate::names::{self, MANAGER, PlaneNames};
use crate::observe::world::Snapshot;

/// Render inputs that do not depend on the Gateway.
#[derive(Debug, Clone)]
pub struct RenderBase {
    pub controller_namespace: String,
    pub controller_pod_labels: BTreeMap<String, String>,
    pub monitoring_namespace_selector:
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    pub default_proxy_image: Option<String>,
    pub connector_image: String,
    pub drain_grace_seconds: i64,
    /// The controller pushes over mutual TLS: the planes mount their TLS Secret.
    pub config_tls: bool,
}

/// What provisioning found.
#[derive(Debug, Default)]
pub struct Report {
    /// Gateways whose plane could not be written (the Gateway says `InvalidParameters`).
    pub errors: BTreeMap<ObjKey, String>,
    pub notices: Vec<Notice>,
}

/// Applies and removes dedicated planes.
pub struct Provisioner {
    client: Client,
    base: RenderBase,
    /// Per object (`kind/ns/name`): the hash of what was applied, and the resourceVersion the
    /// API server answered (a different live version means someone else changed it).
    applied: Mutex<BTreeMap<String, (String, String)>>,
}

impl Provisioner {
    pub fn new(client: Client, base: RenderBase) -> Self {
        Self {
            client,
            base,
            applied: Mutex::default(),
        }
    }

    /// The render inputs for `tunnel_token` and `auth_token`.
    pub fn inputs(&self, tunnel_token: &str, auth_token: &str) -> RenderInputs {
        RenderInputs {
            controller_namespace: self.base.controller_namespace.clone(),
            controller_pod_labels: self.base.controller_pod_labels.clone(),
            monitoring_namespace_selector: self.base.monitoring_namespace_selector.clone(),
            default_proxy_image: self.base.default_proxy_image.clone(),
            connector_image: self.base.connector_image.clone(),
            drain_grace_seconds: self.base.drain_grace_seconds,
            tunnel_token: tunnel_token.to_owned(),
            auth_token: auth_token.to_owned(),
            config_tls: self.base.config_tls,
        }
    }

    /// Brings every dedicated plane to what `model` wants.
    pub async fn sync(&self, model: &Model, snap: &Snapshot) -> Report {
        let mut report = Report::default();
        for (key, g) in &model.gateways {
            let result = match &g.plane {
                Plane::Serve(resolved) => {
                    self.serve(&g.gateway, resolved, snap, &mut report.notices)
                        .await
                }
                Plane::Shared | Plane::Remove => self.remove(&g.gateway, snap).await,
                Plane::Keep => Ok(()),
            };
            // Not retried on a timer: what blocks a plane (a foreign object at a rendered name, a
            // refused write) changes by someone's edit, which the periodic resync sees.
            if let Err(e) = result {
                tracing::warn!(gateway = %key, error = %e, "dedicated data plane not written");
                report.errors.insert(key.clone(), e);
            }
        }
        report
    }

    async fn serve(
        &self,
        gw: &Gateway,
        resolved: &Resolved,
        snap: &Snapshot,
        notices: &mut Vec<Notice>,
    ) -> Result<(), String> {
        let ns = gw.namespace().unwrap_or_default();
        let names = PlaneNames::for_gateway(&gw.name_any());
        let auth = match &resolved.auth {
            AuthToken::Existing(t) => t.clone(),
            AuthToken::Generate => render::generate_auth_token(),
        };
        let rendered = render::render(
            gw,
            &resolved.config,
            &self.inputs(&resolved.tunnel_token, &auth),
        )
        .map_err(|e| e.to_string())?;
        if let (AuthToken::Generate, Some(secret)) =
            (&resolved.auth, &rendered.generated_auth_secret)
        {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
            match api.create(&PostParams::default(), secret).await {
                Ok(_) => {
                    tracing::info!(secret = %format!("{ns}/{}", names.auth_secret), "generated the data plane's config-API token")
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Err(format!(
                        "Secret {ns}/{} appeared meanwhile; retrying with it",
                        names.auth_secret
                    ));
                }
                Err(e) => return Err(format!("creating Secret {ns}/{}: {e}", names.auth_secret)),
            }
        }
        let created = self
            .ensure(gw, &rendered.deployment, &snap.deployments)
            .await?;
        self.ensure(gw, &rendered.config_service, &snap.services)
            .await?;
        self.ensure(gw, &rendered.network_policy, &snap.network_policies)
            .await?;
        match &rendered.hpa {
            Some(hpa) => {
                self.ensure(gw, hpa, &snap.hpas).await?;
            }
            None => {
                self.delete_owned::<HorizontalPodAutoscaler>(gw, &names.deployment, &snap.hpas)
                    .await?
            }
        }
        match &rendered.pdb {
            Some(pdb) => {
                self.ensure(gw, pdb, &snap.pdbs).await?;
            }
            None => {
                self.delete_owned::<PodDisruptionBudget>(gw, &names.deployment, &snap.pdbs)
                    .await?
            }
        }
        if created {
            notices.push(Notice {
                object: gw.object_ref(&()),
                warning: false,
                reason: "ProxyProvisioned".to_owned(),
                message: format!(
                    "created the dedicated data plane {ns}/{} (Service {}, NetworkPolicy {})",
                    names.deployment, names.config_service, names.network_policy
                ),
            });
        }
        Ok(())
    }

    /// Applies `desired` unless it is already what was applied and nobody changed it since;
    /// true when the object was created.
    async fn ensure<K>(
        &self,
        gw: &Gateway,
        desired: &K,
        live: &[std::sync::Arc<K>],
    ) -> Result<bool, String>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let ns = desired.namespace().unwrap_or_default();
        let name = desired.name_any();
        let id = format!("{}/{ns}/{name}", K::kind(&()));
        let hash = names::sha256_hex(&serde_json::to_string(desired).unwrap_or_default());
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let current = match live
            .iter()
            .find(|o| o.namespace().as_deref() == Some(ns.as_str()) && o.name_any() == name)
        {
            Some(o) => Some(o.meta().clone()),
            None => api
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading {id}: {e}"))?
                .map(|o| o.meta().clone()),
        };
        if let Some(meta) = &current
            && !names::owned_by_gateway(meta, gw)
        {
            return Err(format!(
                "{} {ns}/{name} exists and is not owned by this Gateway; it is left untouched and the data plane is not rendered until it is removed or renamed",
                K::kind(&())
            ));
        }
        let live_rv = current.as_ref().and_then(|m| m.resource_version.clone());
        {
            let applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
            if let (Some((h, rv)), Some(live_rv)) = (applied.get(&id), &live_rv)
                && *h == hash
                && rv == live_rv
            {
                return Ok(false);
            }
        }
        let out = api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map_err(|e| format!("applying {id}: {e}"))?;
        let rv = out.meta().resource_version.clone().unwrap_or_default();
        if live_rv.is_some() && live_rv.as_deref() != Some(rv.as_str()) {
            tracing::info!(object = %id, "data plane object re-applied (changed or drifted)");
        }
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (hash, rv));
        Ok(current.is_none())
    }

    /// Deletes the Gateway's plane objects (only those it owns).
    async fn remove(&self, gw: &Gateway, snap: &Snapshot) -> Result<(), String> {
        let names = PlaneNames::for_gateway(&gw.name_any());
        self.delete_owned::<Deployment>(gw, &names.deployment, &snap.deployments)
            .await?;
        self.delete_owned::<HorizontalPodAutoscaler>(gw, &names.deployment, &snap.hpas)
            .await?;
        self.delete_owned::<PodDisruptionBudget>(gw, &names.deployment, &snap.pdbs)
            .await?;
        self.delete_owned::<NetworkPolicy>(gw, &names.network_policy, &snap.network_policies)
            .await?;
        self.delete_owned::<Service>(gw, &names.config_service, &snap.services)
            .await?;
        Ok(())
    }

    async fn delete_owned<K>(
        &self,
        gw: &Gateway,
        name: &str,
        live: &[std::sync::Arc<K>],
    ) -> Result<(), String>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let ns = gw.namespace().unwrap_or_default();
        let Some(obj) = live
            .iter()
            .find(|o| o.namespace().as_deref() == Some(ns.as_str()) && o.name_any() == name)
        else {
            return Ok(());
        };
        if !names::owned_by_gateway(obj.meta(), gw) || obj.meta().deletion_timestamp.is_some() {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                tracing::info!(object = %format!("{}/{ns}/{name}", K::kind(&())), "removed a dedicated data plane object");
                self.applied
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&format!("{}/{ns}/{name}", K::kind(&())));
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting {} {ns}/{name}: {e}", K::kind(&()))),
        }
    }
}
