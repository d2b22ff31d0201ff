//! Where a partition's route table goes: its proxies' config endpoints, and the bearer token
//! they take pushes with (the shared plane's created at random when its Secret is missing).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use super::ConfigEndpoints;
use super::render::generate_auth_token;
use crate::api::DEFAULT_AUTH_TOKEN_KEY;
use crate::credentials::secret_value;
use crate::keys::PartitionKey;
use crate::model::dedicated::AuthToken;
use crate::model::{Model, Plane, Settings};
use crate::names::{self, PlaneNames};
use crate::observe::world::Snapshot;

/// A partition's proxies and its token.
pub async fn partition_target(
    client: &Client,
    settings: &Settings,
    key: &PartitionKey,
    model: &Model,
    snap: &Snapshot,
) -> (ConfigEndpoints, Result<String, String>) {
    match key {
        PartitionKey::Shared => {
            let ns = &settings.namespace;
            let endpoints =
                super::config_endpoints(&snap.endpoint_slices, ns, &settings.shared_plane_service);
            let token = shared_token(client, settings, snap).await;
            (endpoints, token)
        }
        PartitionKey::Dedicated(gw) => {
            let names = PlaneNames::for_gateway(&gw.name);
            let endpoints = super::config_endpoints(
                &snap.endpoint_slices,
                &gw.namespace,
                &names.config_service,
            );
            let token = match model.gateways.get(gw).map(|g| &g.plane) {
                Some(Plane::Serve(r)) => match &r.auth {
                    AuthToken::Existing(t) => Ok(t.clone()),
                    AuthToken::Generate => Err(format!(
                        "the data plane's token Secret {}/{} is being created",
                        gw.namespace, names.auth_secret
                    )),
                },
                _ => Err(format!("Gateway {gw} is not served")),
            };
            (endpoints, token)
        }
    }
}

/// The shared plane's token, from its Secret; created (random) when missing.
async fn shared_token(
    client: &Client,
    settings: &Settings,
    snap: &Snapshot,
) -> Result<String, String> {
    let ns = &settings.namespace;
    let name = &settings.shared_plane_auth_secret;
    if let Some(s) = snap
        .secrets
        .iter()
        .find(|s| s.namespace().as_deref() == Some(ns.as_str()) && s.name_any() == *name)
    {
        return secret_value(s, DEFAULT_AUTH_TOKEN_KEY).ok_or_else(|| {
            format!("Secret {ns}/{name} has no key {DEFAULT_AUTH_TOKEN_KEY:?} (the shared plane's config-API token)")
        });
    }
    let token = generate_auth_token();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(names::own_secret_labels()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            DEFAULT_AUTH_TOKEN_KEY.to_owned(),
            ByteString(token.clone().into_bytes()),
        )])),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{ns}/{name}"), "created the shared plane's config-API token");
            Ok(token)
        }
        // Created meanwhile (another replica, or the operator): the next round reads it.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(format!("Secret {ns}/{name} was just created; retrying"))
        }
        Err(e) => Err(format!("creating Secret {ns}/{name}: {e}")),
    }
}
