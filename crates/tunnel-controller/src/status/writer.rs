//! Carrying out the planned writes against the API server, and publishing Events.

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::listenersets::ListenerSet;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use serde_json::json;

use crate::api::{AccessPolicy, GatewayClassConfig};
use crate::keys::{GATEWAY_GROUP, RouteKind};

use super::Write;
use crate::events::Notice;
use crate::names::MANAGER;

/// Carries out writes and publishes Events.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    recorder: Recorder,
}

impl Writer {
    pub fn new(client: Client, recorder: Recorder) -> Writer {
        Writer { client, recorder }
    }

    /// Performs one write; a conflict (the object changed meanwhile) is an error the next round
    /// resolves.
    pub async fn write(&self, w: &Write) -> Result<(), kube::Error> {
        let apply = PatchParams::apply(MANAGER).force();
        match w {
            Write::GatewayClass { name, status } => {
                let api: Api<GatewayClass> = Api::all(self.client.clone());
                let body = json!({"apiVersion": format!("{GATEWAY_GROUP}/v1"), "kind": "GatewayClass", "status": status});
                api.patch_status(name, &apply, &Patch::Apply(body)).await?;
            }
            Write::ClassFinalizer {
                name,
                resource_version,
                finalizers,
            } => {
                let api: Api<GatewayClass> = Api::all(self.client.clone());
                let body = json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
                api.patch(name, &PatchParams::default(), &Patch::Merge(body))
                    .await?;
            }
            Write::ClassConfig {
                name,
                conditions,
                gateways,
            } => {
                let api: Api<GatewayClassConfig> = Api::all(self.client.clone());
                let body = json!({"apiVersion": "cf.k8s.lex.la/v1alpha1", "kind": "GatewayClassConfig", "status": {"conditions": conditions, "gateways": gateways}});
                api.patch_status(name, &apply, &Patch::Apply(body)).await?;
            }
            Write::Gateway { key, status } => {
                let api: Api<Gateway> = Api::namespaced(self.client.clone(), &key.namespace);
                let body = json!({"apiVersion": format!("{GATEWAY_GROUP}/v1"), "kind": "Gateway", "status": status});
                api.patch_status(&key.name, &apply, &Patch::Apply(body))
                    .await?;
            }
            Write::ListenerSet { key, status } => {
                let api: Api<ListenerSet> = Api::namespaced(self.client.clone(), &key.namespace);
                let body = json!({"apiVersion": format!("{GATEWAY_GROUP}/v1"), "kind": "ListenerSet", "status": status});
                api.patch_status(&key.name, &apply, &Patch::Apply(body))
                    .await?;
            }
            Write::Route {
                id,
                resource_version,
                parents,
            } => {
                let body = json!({
                    "metadata": {"resourceVersion": resource_version},
                    "status": {"parents": parents},
                });
                let pp = PatchParams::default();
                match id.kind {
                    RouteKind::Http => {
                        let api: Api<HttpRoute> =
                            Api::namespaced(self.client.clone(), &id.key.namespace);
                        api.patch_status(&id.key.name, &pp, &Patch::Merge(body))
                            .await?;
                    }
                    RouteKind::Grpc => {
                        let api: Api<GrpcRoute> =
                            Api::namespaced(self.client.clone(), &id.key.namespace);
                        api.patch_status(&id.key.name, &pp, &Patch::Merge(body))
                            .await?;
                    }
                }
            }
            Write::Policy {
                key,
                resource_version,
                ancestors,
            } => {
                let body = json!({
                    "metadata": {"resourceVersion": resource_version},
                    "status": {"ancestors": ancestors},
                });
                let api: Api<BackendTlsPolicy> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(body))
                    .await?;
            }
            Write::AccessPolicy {
                key,
                resource_version,
                ancestors,
            } => {
                let body = json!({
                    "metadata": {"resourceVersion": resource_version},
                    "status": {"ancestors": ancestors},
                });
                let api: Api<AccessPolicy> = Api::namespaced(self.client.clone(), &key.namespace);
                api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(body))
                    .await?;
            }
        }
        Ok(())
    }

    /// Publishes an Event; failures are logged (an Event is advice, not state).
    pub async fn notify(&self, n: &Notice) {
        let ev = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.clone(),
            note: Some(n.message.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &n.object).await {
            tracing::warn!(reason = %n.reason, error = %e, "could not publish an Event");
        }
    }
}
