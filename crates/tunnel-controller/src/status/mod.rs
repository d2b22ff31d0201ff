//! Status writing (TG-11): the [`Model`] plus the round's I/O outcomes ([`Effects`]) become
//! GatewayClass, GatewayClassConfig, Gateway, ListenerSet and route statuses, written only when they differ
//! from what the API server holds.
//!
//! - Statuses the controller owns alone (GatewayClass, GatewayClassConfig, Gateway,
//!   ListenerSet) are
//!   server-side applied with the controller's field manager.
//! - Route `status.parents` is shared with other controllers: the entries of other
//!   `controllerName`s are kept as read, and the write carries the `resourceVersion` it was
//!   computed from, so a concurrent write by another controller makes ours fail (409) and the
//!   next round recomputes from the fresh object instead of erasing theirs.
//! - A condition turning False (or changing reason while False) publishes a Warning Event with
//!   the condition's reason and message: everything a user must notice is in `kubectl describe`.
//!   [`PUBLISHED`] is the exception: False while delivery is under way, it has no Event of its
//!   own (what keeps it False for long has one).
//!
//! Here: the plan (what to write) for classes, their configs, Gateways, ListenerSets and
//! policies; `routes`: route parents' conditions; `burst`: what a round in the middle of a burst
//! holds back ([`hold_in_burst`]); `writer`: the writes and Events carried out ([`Writer`]).

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::standard::gatewayclasses::{
    GatewayClassStatus, GatewayClassStatusSupportedFeatures,
};
use gateway_api::apis::standard::gateways::{
    GatewayAllowedListenersNamespacesFrom, GatewayStatus, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};
use gateway_api::apis::standard::listenersets::{
    ListenerSetStatus, ListenerSetStatusListeners, ListenerSetStatusListenersSupportedKinds,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::conditions::{Verdict, merge};
use crate::events::Notice;
use crate::keys::{GATEWAY_GROUP, ObjKey, ParentRef, PartitionKey, RouteId};
use crate::model::{CLASS_FINALIZER, ListenerSetOutcome, Model, PolicyOutcome, RouteParentStatus};
use crate::publish::cloudflare::dns::HostVerdict;
use crate::status::features::SUPPORTED_FEATURES;

pub mod access;
mod burst;
pub mod features;
mod routes;
mod writer;

pub use burst::{Held, hold_in_burst};
use routes::route_write;
pub use writer::Writer;

/// Condition type on routes with hostnames beyond the 1,000-rule cap of their tunnel.
pub const INGRESS_RULE_LIMIT: &str = "cf.k8s.lex.la/IngressRuleLimit";
/// Condition type on attached route parents: True once the Gateway's data plane has loaded the
/// route and the tunnel's ingress document lists every hostname of it (`kubectl wait` on it).
pub const PUBLISHED: &str = "cf.k8s.lex.la/Published";

/// The Event reason when a tunnel's ingress sync fails (its routes and Gateways say Pending).
pub const CLOUDFLARE_SYNC_FAILED: &str = "CloudflareSyncFailed";

/// What the round's I/O found.
#[derive(Debug, Clone, Default)]
pub struct Effects {
    /// Tunnels whose Cloudflare sync failed, with the reason.
    pub tunnel_errors: BTreeMap<String, String>,
    /// Hostnames of a route left out of its tunnel's document by the rule cap.
    pub overflow: BTreeMap<RouteId, Vec<String>>,
    /// Partitions whose pushes have kept failing, with the reason.
    pub push_failing: BTreeMap<PartitionKey, String>,
    /// Dedicated Gateways whose plane could not be written, with the reason.
    pub render_errors: BTreeMap<ObjKey, String>,
    /// Partitions whose every proxy holds this round's document.
    pub loaded: BTreeSet<PartitionKey>,
    /// The hostnames each tunnel's ingress document lists now (as
    /// [`crate::model::rules::hostnames::normalize`] spells them); a tunnel whose document this round did not
    /// read or write is absent.
    pub ingress: BTreeMap<String, BTreeSet<String>>,
    /// DNS verdicts by Gateway and hostname, for the Gateways whose class has DNS records on.
    pub dns: BTreeMap<ObjKey, BTreeMap<String, HostVerdict>>,
    /// The config API certificates' condition of each plane ([`crate::publish::config_api::expiry`]); empty
    /// with TLS off. The shared plane's goes on every GatewayClass, a dedicated plane's on its
    /// Gateway.
    pub config_tls: BTreeMap<PartitionKey, Verdict>,
}

/// A status the API server should hold, when it differs from what it holds.
#[derive(Debug, Clone)]
pub enum Write {
    GatewayClass {
        name: String,
        status: GatewayClassStatus,
    },
    ClassFinalizer {
        name: String,
        resource_version: Option<String>,
        finalizers: Vec<String>,
    },
    ClassConfig {
        name: String,
        conditions: Vec<Condition>,
        /// `status.gateways`.
        gateways: Vec<String>,
    },
    Gateway {
        key: ObjKey,
        status: GatewayStatus,
    },
    ListenerSet {
        key: ObjKey,
        status: ListenerSetStatus,
    },
    Route {
        id: RouteId,
        resource_version: Option<String>,
        parents: Vec<RouteParentStatus>,
    },
    Policy {
        key: ObjKey,
        resource_version: Option<String>,
        ancestors: Vec<PolicyAncestorStatus>,
    },
    AccessPolicy {
        key: ObjKey,
        resource_version: Option<String>,
        ancestors: Vec<PolicyAncestorStatus>,
    },
}

/// One `status.ancestors` entry of a BackendTLSPolicy or an AccessPolicy, as Gateway API's
/// `PolicyAncestorStatus`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAncestorStatus {
    pub ancestor_ref: ParentRef,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
}

pub fn now() -> Time {
    let secs = k8s_openapi::jiff::Timestamp::now().as_second();
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("now is a valid timestamp"))
}

/// The writes (and Events) that bring the API server to `model` + `effects`.
pub fn plan(model: &Model, effects: &Effects, controller_name: &str) -> (Vec<Write>, Vec<Notice>) {
    let now = now();
    let mut writes = Vec::new();
    let mut notices = Vec::new();

    for c in &model.classes {
        let class = &c.class;
        let current = class
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut verdicts = vec![c.accepted.clone()];
        verdicts.extend(effects.config_tls.get(&PartitionKey::Shared).cloned());
        let conditions = merge(&current, &verdicts, class.metadata.generation, &now);
        notice_failures(&mut notices, class.as_ref(), &current, &conditions);
        let features: Vec<GatewayClassStatusSupportedFeatures> = SUPPORTED_FEATURES
            .iter()
            .map(|f| GatewayClassStatusSupportedFeatures {
                name: (*f).to_owned(),
            })
            .collect();
        let current_features = class
            .status
            .as_ref()
            .and_then(|s| s.supported_features.as_ref());
        if conditions != current || current_features != Some(&features) {
            writes.push(Write::GatewayClass {
                name: class.name_any(),
                status: GatewayClassStatus {
                    conditions: Some(conditions),
                    supported_features: Some(features),
                },
            });
        }
        let has = class.finalizers().iter().any(|f| f == CLASS_FINALIZER);
        if c.in_use != has && class.metadata.deletion_timestamp.is_none() || (has && !c.in_use) {
            let mut finalizers: Vec<String> = class
                .finalizers()
                .iter()
                .filter(|f| *f != CLASS_FINALIZER)
                .cloned()
                .collect();
            if c.in_use {
                finalizers.push(CLASS_FINALIZER.to_owned());
            }
            writes.push(Write::ClassFinalizer {
                name: class.name_any(),
                resource_version: class.resource_version(),
                finalizers,
            });
        }
    }

    for c in &model.class_configs {
        let status = c.config.status.clone().unwrap_or_default();
        let current = status.conditions;
        let conditions = merge(&current, &c.verdicts, c.config.metadata.generation, &now);
        notice_failures(&mut notices, c.config.as_ref(), &current, &conditions);
        if conditions != current || c.gateways != status.gateways {
            writes.push(Write::ClassConfig {
                name: c.config.name_any(),
                conditions,
                gateways: c.gateways.clone(),
            });
        }
    }

    for (key, g) in &model.gateways {
        let gw = &g.gateway;
        let current = gw.status.clone().unwrap_or_default();
        let generation = gw.metadata.generation;
        let current_conditions = current.conditions.clone().unwrap_or_default();
        let mut accepted = g.accepted.clone();
        let mut programmed = g.programmed.clone();
        if let Some(err) = effects.render_errors.get(key) {
            accepted = Verdict::fail("Accepted", "InvalidParameters", err.clone());
            programmed = Verdict::fail("Programmed", "Invalid", err.clone());
        }
        let sync_error = g.tunnel.as_ref().and_then(|t| effects.tunnel_errors.get(t));
        if let Some(err) = sync_error {
            programmed = Verdict::fail(
                "Programmed",
                "Pending",
                format!(
                    "the Cloudflare sync of tunnel {} failed: {err}; retrying",
                    g.tunnel.as_deref().unwrap_or_default()
                ),
            );
        }
        let mut verdicts = vec![accepted, programmed, g.resolved_refs.clone()];
        if let Some(partition @ PartitionKey::Dedicated(_)) = &g.partition {
            verdicts.extend(effects.config_tls.get(partition).cloned());
        }
        let conditions = merge(&current_conditions, &verdicts, generation, &now);
        let first = notices.len();
        notice_failures(&mut notices, gw.as_ref(), &current_conditions, &conditions);
        for n in &mut notices[first..] {
            // Pending for another cause (a dedicated plane waiting for its first ready
            // replica) keeps its own reason.
            if n.reason == "Pending" && sync_error.is_some() {
                n.reason = CLOUDFLARE_SYNC_FAILED.to_owned();
            } else if effects.render_errors.contains_key(key) && n.reason == "InvalidParameters" {
                n.reason = "RenderFailed".to_owned();
            } else if let Some(event) = g.accepted_event
                && n.reason == g.accepted.reason
            {
                n.reason = event.to_owned();
            }
        }
        let current_listeners = current.listeners.clone().unwrap_or_default();
        let listeners: Vec<GatewayStatusListeners> = g
            .listeners
            .iter()
            .map(|l| {
                let before = current_listeners
                    .iter()
                    .find(|c| c.name == l.name)
                    .map(|c| c.conditions.clone())
                    .unwrap_or_default();
                GatewayStatusListeners {
                    name: l.name.clone(),
                    attached_routes: l.attached_routes,
                    supported_kinds: Some(
                        l.supported_kinds
                            .iter()
                            .map(|k| GatewayStatusListenersSupportedKinds {
                                group: Some(GATEWAY_GROUP.to_owned()),
                                kind: (*k).to_owned(),
                            })
                            .collect(),
                    ),
                    conditions: merge(&before, &l.verdicts, generation, &now),
                }
            })
            .collect();
        // Written for Gateways that admit ListenerSets (and while any is attached).
        let attached_sets = model
            .listener_sets
            .values()
            .filter(|l| l.gateway == *key && l.attached())
            .count();
        let admits_sets = gw
            .spec
            .allowed_listeners
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
            .and_then(|n| n.from.as_ref())
            .is_some_and(|f| *f != GatewayAllowedListenersNamespacesFrom::None);
        let desired = GatewayStatus {
            addresses: (!g.addresses.is_empty()).then(|| g.addresses.clone()),
            attached_listener_sets: (admits_sets || attached_sets > 0)
                .then(|| i32::try_from(attached_sets).unwrap_or(i32::MAX)),
            conditions: Some(conditions),
            listeners: Some(listeners),
        };
        if desired != current {
            writes.push(Write::Gateway {
                key: key.clone(),
                status: desired,
            });
        }
    }

    for (key, ls) in &model.listener_sets {
        if let Some(w) = listener_set_write(key, ls, model, effects, &now, &mut notices) {
            writes.push(w);
        }
    }

    for r in &model.routes {
        if let Some(w) = route_write(r, model, effects, controller_name, &now, &mut notices) {
            writes.push(w);
        }
    }
    for p in &model.policies {
        if let Some(w) = policy_write(p, controller_name, &now) {
            writes.push(w);
        }
    }
    (writes, notices)
}

/// A ListenerSet's status: its conditions (`Programmed` follows the parent Gateway's plane and
/// tunnel) and its listeners'.
fn listener_set_write(
    key: &ObjKey,
    ls: &ListenerSetOutcome,
    model: &Model,
    effects: &Effects,
    now: &Time,
    notices: &mut Vec<Notice>,
) -> Option<Write> {
    let obj = &ls.listener_set;
    let current = obj.status.clone().unwrap_or_default();
    let generation = obj.metadata.generation;
    let current_conditions = current.conditions.clone().unwrap_or_default();
    let mut programmed = ls.programmed.clone();
    let parent = model.gateways.get(&ls.gateway);
    let parent_failure = effects.render_errors.get(&ls.gateway).or_else(|| {
        parent
            .and_then(|g| g.tunnel.as_ref())
            .and_then(|t| effects.tunnel_errors.get(t))
    });
    if ls.attached()
        && let Some(err) = parent_failure
    {
        programmed = Verdict::fail(
            "Programmed",
            "ParentNotProgrammed",
            format!("Gateway {} is not programmed: {err}", ls.gateway),
        );
    }
    let conditions = merge(
        &current_conditions,
        &[ls.accepted.clone(), programmed],
        generation,
        now,
    );
    notice_failures(notices, obj.as_ref(), &current_conditions, &conditions);
    let current_listeners = current.listeners.clone().unwrap_or_default();
    let listeners: Vec<ListenerSetStatusListeners> = ls
        .listeners()
        .iter()
        .map(|l| {
            let before = current_listeners
                .iter()
                .find(|c| c.name == l.name)
                .map(|c| c.conditions.clone())
                .unwrap_or_default();
            ListenerSetStatusListeners {
                name: l.name.clone(),
                attached_routes: l.attached_routes,
                supported_kinds: Some(
                    l.supported_kinds
                        .iter()
                        .map(|k| ListenerSetStatusListenersSupportedKinds {
                            group: Some(GATEWAY_GROUP.to_owned()),
                            kind: (*k).to_owned(),
                        })
                        .collect(),
                ),
                conditions: merge(&before, &l.verdicts, generation, now),
            }
        })
        .collect();
    let desired = ListenerSetStatus {
        conditions: Some(conditions),
        listeners: (!listeners.is_empty()).then_some(listeners),
    };
    (desired != current).then(|| Write::ListenerSet {
        key: key.clone(),
        status: desired,
    })
}

/// A BackendTLSPolicy's `status.ancestors`: ours per Gateway that uses it, others' kept.
fn policy_write(p: &PolicyOutcome, controller_name: &str, now: &Time) -> Option<Write> {
    let current: Vec<PolicyAncestorStatus> = p
        .policy
        .status
        .iter()
        .flat_map(|s| &s.ancestors)
        .map(|a| PolicyAncestorStatus {
            ancestor_ref: ParentRef::from(&a.ancestor_ref),
            controller_name: a.controller_name.clone(),
            conditions: a.conditions.clone(),
        })
        .collect();
    let ours = |a: &PolicyAncestorStatus| a.controller_name == controller_name;
    let mut ancestors: Vec<PolicyAncestorStatus> =
        current.iter().filter(|a| !ours(a)).cloned().collect();
    for gw in &p.ancestors {
        let ancestor_ref = ParentRef::to_gateway(gw, None, None);
        let before: Vec<Condition> = current
            .iter()
            .find(|a| ours(a) && a.ancestor_ref == ancestor_ref)
            .map(|a| a.conditions.clone())
            .unwrap_or_default();
        ancestors.push(PolicyAncestorStatus {
            ancestor_ref,
            controller_name: controller_name.to_owned(),
            conditions: merge(&before, &p.verdicts, p.policy.metadata.generation, now),
        });
    }
    if ancestors == current {
        return None;
    }
    Some(Write::Policy {
        key: ObjKey::of(p.policy.as_ref()),
        resource_version: p.policy.resource_version(),
        ancestors,
    })
}

fn notice_failures<K>(notices: &mut Vec<Notice>, obj: &K, before: &[Condition], after: &[Condition])
where
    K: Resource<DynamicType = ()>,
{
    for c in after {
        let was = before.iter().find(|b| b.type_ == c.type_);
        if c.status == "False"
            && c.type_ != "Conflicted"
            && was.is_none_or(|w| w.status != c.status || w.reason != c.reason)
        {
            notices.push(Notice {
                object: obj.object_ref(&()),
                warning: true,
                reason: c.reason.clone(),
                message: c.message.clone(),
            });
        }
    }
}
