//! GatewayClasses of this controller: each is accepted when its GatewayClassConfig and the
//! Cloudflare credentials Secret resolve, and the shared plane serves one tunnel, the oldest
//! accepted class's; a GatewayClassConfig gets its own `SecretsResolved` and `Valid`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use kube::ResourceExt;

use super::types::{ClassConfigOutcome, ClassOutcome, DnsScope, Model, Settings};
use crate::api::{DEFAULT_API_TOKEN_KEY, GROUP};
use crate::conditions::Verdict;
use crate::credentials::{Credentials, secret_value};
use crate::model::rules::ownership::Delegations;
use crate::observe::world::Snapshot;

/// The class's resolved settings.
#[derive(Debug, Clone)]
pub(super) struct ClassSettings {
    pub tunnel_id: String,
    pub credentials: Credentials,
    pub allow_shared_tunnels: bool,
    pub max_per_namespace: Option<i32>,
    /// The hostname delegations when ownership is on.
    pub ownership: Option<Arc<Delegations>>,
    /// The DNS records' owner ID when DNS records are on.
    pub dns_owner: Option<String>,
    /// The installation's owner ID (`spec.dns.ownerId`, else the GatewayClassConfig's name):
    /// it marks the Access applications this controller makes.
    pub owner_id: String,
}

/// This controller's classes: all of them by name, and the accepted ones' settings.
pub(super) struct Classes {
    pub ours: BTreeSet<String>,
    pub accepted: BTreeMap<String, ClassSettings>,
}

/// Decides every class of this controller (and the GatewayClassConfigs they name) into `model`.
pub(super) fn decide(snap: &Snapshot, settings: &Settings, model: &mut Model) -> Classes {
    let ours: Vec<&Arc<GatewayClass>> = snap
        .gateway_classes
        .iter()
        .filter(|c| c.spec.controller_name == settings.controller_name)
        .collect();

    // Classes, oldest first: the shared plane serves one tunnel, the oldest accepted class's.
    let mut ours_sorted = ours.clone();
    ours_sorted.sort_by(|a, b| age_order(a.as_ref(), b.as_ref()));
    let mut class_settings: BTreeMap<String, ClassSettings> = BTreeMap::new();
    let mut shared_tunnel: Option<(String, String)> = None; // (tunnel, class)
    let mut config_verdicts: BTreeMap<String, Vec<Verdict>> = BTreeMap::new();
    for class in &ours_sorted {
        let accepted = match resolve_class(class, snap, settings, &mut config_verdicts) {
            Err(v) => v,
            Ok(cs) => match &shared_tunnel {
                Some((tunnel, other)) if *tunnel != cs.tunnel_id => Verdict::fail(
                    "Accepted",
                    "InvalidParameters",
                    format!(
                        "the shared data plane serves tunnel {tunnel} (GatewayClass {other}); this class names tunnel {}: point its GatewayClassConfig at the same tunnel",
                        cs.tunnel_id
                    ),
                ),
                _ => {
                    if shared_tunnel.is_none() {
                        shared_tunnel = Some((cs.tunnel_id.clone(), class.name_any()));
                    }
                    class_settings.insert(class.name_any(), cs);
                    Verdict::ok("Accepted", "the GatewayClass is accepted")
                }
            },
        };
        let in_use = snap
            .gateways
            .iter()
            .any(|g| g.spec.gateway_class_name == class.name_any());
        model.classes.push(ClassOutcome {
            class: (*class).clone(),
            accepted,
            in_use,
        });
    }
    for cfg in &snap.class_configs {
        if let Some(verdicts) = config_verdicts.remove(&cfg.name_any()) {
            let classes: BTreeSet<String> = ours
                .iter()
                .filter(|c| {
                    c.spec.parameters_ref.as_ref().is_some_and(|p| {
                        p.group == GROUP
                            && p.kind == "GatewayClassConfig"
                            && p.name == cfg.name_any()
                    })
                })
                .map(|c| c.name_any())
                .collect();
            let gateways: BTreeSet<String> = snap
                .gateways
                .iter()
                .filter(|g| classes.contains(&g.spec.gateway_class_name))
                .map(|g| format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any()))
                .collect();
            model.class_configs.push(ClassConfigOutcome {
                config: cfg.clone(),
                verdicts,
                gateways: gateways.into_iter().collect(),
            });
        }
    }
    for cs in class_settings.values() {
        if let Some(owner) = &cs.dns_owner {
            let scope = DnsScope {
                owner: owner.clone(),
                credentials: cs.credentials.clone(),
            };
            if !model.dns_scopes.contains(&scope) {
                model.dns_scopes.push(scope);
            }
        }
    }
    Classes {
        ours: ours.iter().map(|c| c.name_any()).collect(),
        accepted: class_settings,
    }
}

/// Oldest first, then by name (and UID) so the order is total.
fn age_order<K: ResourceExt>(a: &K, b: &K) -> std::cmp::Ordering {
    (a.creation_timestamp(), a.name_any(), a.uid()).cmp(&(
        b.creation_timestamp(),
        b.name_any(),
        b.uid(),
    ))
}

fn resolve_class(
    class: &GatewayClass,
    snap: &Snapshot,
    settings: &Settings,
    config_verdicts: &mut BTreeMap<String, Vec<Verdict>>,
) -> Result<ClassSettings, Verdict> {
    let invalid = |m: String| Verdict::fail("Accepted", "InvalidParameters", m);
    let Some(pref) = &class.spec.parameters_ref else {
        return Err(invalid(format!(
            "spec.parametersRef must name a GatewayClassConfig ({GROUP}): it holds the tunnel and the Cloudflare credentials"
        )));
    };
    if pref.group != GROUP || pref.kind != "GatewayClassConfig" {
        return Err(invalid(format!(
            "spec.parametersRef names {}/{}; only {GROUP}/GatewayClassConfig is supported",
            pref.group, pref.kind
        )));
    }
    let Some(cfg) = snap
        .class_configs
        .iter()
        .find(|c| c.name_any() == pref.name)
    else {
        return Err(invalid(format!(
            "GatewayClassConfig {} does not exist",
            pref.name
        )));
    };
    let secret_ref = &cfg.spec.cloudflare_credentials_secret_ref;
    let ns = secret_ref
        .namespace
        .clone()
        .unwrap_or_else(|| settings.namespace.clone());
    let key = secret_ref.key.as_deref().unwrap_or(DEFAULT_API_TOKEN_KEY);
    let secret = snap
        .secrets
        .iter()
        .find(|s| s.namespace().as_deref() == Some(&ns) && s.name_any() == secret_ref.name);
    let token = secret.and_then(|s| secret_value(s, key));
    let account_hint = secret.and_then(|s| secret_value(s, "account-id"));
    let Some(api_token) = token else {
        let m = format!(
            "the Cloudflare credentials Secret {ns}/{} has no key {key:?}",
            secret_ref.name
        );
        config_verdicts.insert(
            cfg.name_any(),
            vec![
                Verdict::fail("SecretsResolved", "SecretsMissing", m.clone()),
                Verdict::fail("Valid", "Invalid", m.clone()),
            ],
        );
        return Err(invalid(format!(
            "GatewayClassConfig {}: {m}",
            cfg.name_any()
        )));
    };
    config_verdicts.insert(
        cfg.name_any(),
        vec![
            Verdict::new(
                "SecretsResolved",
                true,
                "SecretsFound",
                "the Cloudflare credentials Secret resolves",
            ),
            Verdict::ok("Valid", "the configuration is valid"),
        ],
    );
    Ok(ClassSettings {
        owner_id: cfg
            .spec
            .dns
            .as_ref()
            .and_then(|d| d.owner_id.clone())
            .unwrap_or_else(|| cfg.name_any()),
        dns_owner: cfg
            .spec
            .dns
            .as_ref()
            .filter(|d| d.enabled)
            .map(|d| d.owner_id.clone().unwrap_or_else(|| cfg.name_any())),
        allow_shared_tunnels: cfg.spec.allow_shared_tunnels,
        max_per_namespace: cfg.spec.max_data_planes_per_namespace,
        tunnel_id: cfg.spec.tunnel_id.clone(),
        ownership: cfg.spec.hostname_ownership.as_ref().map(|o| {
            Arc::new(Delegations::new(
                o.delegations
                    .iter()
                    .map(|d| (d.namespaces.as_slice(), d.hostnames.as_slice())),
            ))
        }),
        credentials: Credentials {
            api_token,
            account_id: cfg.spec.account_id.clone().or(account_hint),
        },
    })
}
