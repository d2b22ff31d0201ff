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

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::{
    GatewayClass, GatewayClassStatus, GatewayClassStatusSupportedFeatures,
};
use gateway_api::apis::standard::gateways::{
    Gateway, GatewayAllowedListenersNamespacesFrom, GatewayStatus, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::listenersets::{
    ListenerSet, ListenerSetStatus, ListenerSetStatusListeners,
    ListenerSetStatusListenersSupportedKinds,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use crate::api::{AccessPolicy, GatewayClassConfig};
use crate::conditions::{Verdict, merge};
use crate::dedicated::claims;
use crate::dns::{self, HostVerdict};
use crate::features::SUPPORTED_FEATURES;
use crate::ingress;
use crate::keys::{GATEWAY_GROUP, ObjKey, ParentRef, PartitionKey, RouteId, RouteKind};
use crate::model::{
    CLASS_FINALIZER, ListenerSetOutcome, Model, PROXY_CONFIG_PUSHED, PolicyOutcome, ROUTE_SHADOWED,
    RouteOutcome, RouteParentStatus,
};

/// The field manager of every write.
pub const MANAGER: &str = "tunnel-gateway-controller";
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
    /// [`ingress::rule_hostname`] spells them); a tunnel whose document this round did not
    /// read or write is absent.
    pub ingress: BTreeMap<String, BTreeSet<String>>,
    /// DNS verdicts by Gateway and hostname, for the Gateways whose class has DNS records on.
    pub dns: BTreeMap<ObjKey, BTreeMap<String, HostVerdict>>,
    /// The config API certificates' condition of each plane ([`crate::config_expiry`]); empty
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

/// An Event to publish about an object.
#[derive(Debug, Clone)]
pub struct Notice {
    pub object: k8s_openapi::api::core::v1::ObjectReference,
    pub warning: bool,
    pub reason: String,
    pub message: String,
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

/// What a round writes in the middle of a burst of changes, and what it holds back.
#[derive(Debug)]
pub struct Held {
    pub writes: Vec<Write>,
    pub notices: Vec<Notice>,
    /// Writes held back for a later round.
    pub held: usize,
}

/// Mid-burst (the watched objects still changing, ingress documents waiting for the quiet),
/// more than this many route statuses and Gateway route counts to write is a burst: the same
/// bound as the route lane's ([`crate::model::lane::MAX_ROUTES`]).
pub const BURST_WRITES: usize = crate::model::lane::MAX_ROUTES;

/// Holds back, when there are more than [`BURST_WRITES`] of them, the writes a burst would
/// make again: route statuses (their `Published` condition turns True once the ingress document
/// that waits for the quiet lists their hostnames, a second write per route) and Gateway writes
/// that change only listeners' `attachedRoutes` (which grow with every round of the burst).
/// Their Events wait with them. Everything else (conditions of Gateways, classes, policies) is
/// written at once, and a few route statuses too, so a lone change's `Accepted` is never held.
/// `current` is the Gateway status the API server holds.
pub fn hold_in_burst<'a>(
    writes: Vec<Write>,
    notices: Vec<Notice>,
    current: impl Fn(&ObjKey) -> Option<&'a GatewayStatus>,
) -> Held {
    let holdable = |w: &Write| match w {
        Write::Route { .. } => true,
        Write::Gateway { key, status } => {
            only_route_counts_differ(current(key).unwrap_or(&GatewayStatus::default()), status)
        }
        _ => false,
    };
    let count = writes.iter().filter(|w| holdable(w)).count();
    if count <= BURST_WRITES {
        return Held {
            writes,
            notices,
            held: 0,
        };
    }
    let (held, writes): (Vec<Write>, Vec<Write>) = writes.into_iter().partition(|w| holdable(w));
    let held_routes: BTreeSet<(&str, &str, &str)> = held
        .iter()
        .filter_map(|w| match w {
            Write::Route { id, .. } => Some((
                id.kind.as_str(),
                id.key.namespace.as_str(),
                id.key.name.as_str(),
            )),
            _ => None,
        })
        .collect();
    let notices = notices
        .into_iter()
        .filter(|n| {
            let o = &n.object;
            !held_routes.contains(&(
                o.kind.as_deref().unwrap_or_default(),
                o.namespace.as_deref().unwrap_or_default(),
                o.name.as_deref().unwrap_or_default(),
            ))
        })
        .collect();
    Held {
        writes,
        notices,
        held: held.len(),
    }
}

/// Whether `desired` differs from `current` in listeners' `attachedRoutes` alone.
fn only_route_counts_differ(current: &GatewayStatus, desired: &GatewayStatus) -> bool {
    let mut counted = desired.clone();
    if let (Some(listeners), Some(held)) = (counted.listeners.as_mut(), current.listeners.as_ref())
    {
        for l in listeners {
            if let Some(h) = held.iter().find(|h| h.name == l.name) {
                l.attached_routes = h.attached_routes;
            }
        }
    }
    counted == *current
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

fn route_write(
    r: &RouteOutcome,
    model: &Model,
    effects: &Effects,
    controller_name: &str,
    now: &Time,
    notices: &mut Vec<Notice>,
) -> Option<Write> {
    let ours = |p: &RouteParentStatus| p.controller_name == controller_name;
    let mut parents: Vec<RouteParentStatus> = r
        .current_parents
        .iter()
        .filter(|p| !ours(p))
        .cloned()
        .collect();
    let reference = route_reference(r);
    let mut seen = BTreeSet::new();
    for p in &r.parents {
        if !seen.insert(&p.parent_ref) {
            continue; // the same parentRef twice: one status entry
        }
        let mut verdicts = p.verdicts.clone();
        let gw = model.gateways.get(&p.gateway);
        let served = p.hostnames.is_some();
        let mut sync_failed = false;
        if served
            && let Some(tunnel) = gw.and_then(|g| g.tunnel.as_ref())
            && let Some(err) = effects.tunnel_errors.get(tunnel)
        {
            sync_failed = true;
            verdicts[0] = Verdict::fail(
                "Accepted",
                "Pending",
                format!("the Cloudflare sync of tunnel {tunnel} failed: {err}; retrying"),
            );
        }
        if served && let Some(hosts) = effects.overflow.get(&r.id) {
            verdicts.push(Verdict::new(
                INGRESS_RULE_LIMIT,
                true,
                "IngressRuleLimitExceeded",
                format!(
                    "the tunnel's ingress document holds at most 1,000 rules; left out (newest routes first): {}",
                    hosts.join(", ")
                ),
            ));
        }
        if served
            && let Some(dns) = effects.dns.get(&p.gateway)
            && let Some(v) = dns_verdict(p, dns)
        {
            verdicts.push(v);
        }
        if served
            && let Some(partition) = gw.and_then(|g| g.partition.as_ref())
            && let Some(err) = effects.push_failing.get(partition)
        {
            verdicts.push(Verdict::fail(
                PROXY_CONFIG_PUSHED,
                "ProxyConfigPushFailed",
                format!(
                    "pushing the route table to the {partition} data plane keeps failing: {err}"
                ),
            ));
        }
        if p.attached {
            verdicts.push(published(r, p, gw, effects));
        }
        let before: Vec<Condition> = r
            .current_parents
            .iter()
            .find(|c| ours(c) && c.parent_ref == p.parent_ref)
            .map(|c| c.conditions.clone())
            .unwrap_or_default();
        let conditions = merge(&before, &verdicts, r.generation, now);
        for c in &conditions {
            let was = before.iter().find(|b| b.type_ == c.type_);
            // Published=False says what is still under way; the failures behind a lasting one
            // have Events of their own (ProxyConfigPushFailed, CloudflareSyncFailed,
            // IngressRuleLimitExceeded).
            let failing = (c.status == "False" && c.type_ != PUBLISHED)
                || c.type_ == INGRESS_RULE_LIMIT
                || c.type_ == ROUTE_SHADOWED
                || c.type_ == claims::CONDITION_TUNNEL_SHARED;
            if failing && was.is_none_or(|w| w.status != c.status || w.reason != c.reason) {
                let reason = if sync_failed && c.type_ == "Accepted" {
                    CLOUDFLARE_SYNC_FAILED.to_owned()
                } else if c.type_ == claims::CONDITION_TUNNEL_SHARED {
                    claims::EVENT_TUNNEL_SHARED.to_owned()
                } else {
                    c.reason.clone()
                };
                notices.push(Notice {
                    object: reference.clone(),
                    warning: true,
                    reason,
                    message: format!(
                        "parent {}: {}",
                        p.listener_set.as_ref().unwrap_or(&p.gateway),
                        c.message
                    ),
                });
            }
        }
        parents.push(RouteParentStatus {
            parent_ref: p.parent_ref.clone(),
            controller_name: controller_name.to_owned(),
            conditions,
        });
    }
    if parents == r.current_parents {
        return None;
    }
    Some(Write::Route {
        id: r.id.clone(),
        resource_version: r.resource_version.clone(),
        parents,
    })
}

/// The `cf.k8s.lex.la/DNSRecord` condition of a route parent whose tunnel has DNS records on:
/// False with the first problem's reason (a record owned elsewhere, no zone, a failing API)
/// naming every hostname concerned; True once each of its hostnames has our CNAME. `None`
/// when it serves no hostname with a DNS verdict yet.
fn dns_verdict(
    p: &crate::model::ParentOutcome,
    dns: &BTreeMap<String, HostVerdict>,
) -> Option<Verdict> {
    let hosts: BTreeSet<String> = p
        .hostnames
        .iter()
        .flatten()
        .map(|h| ingress::rule_hostname(h))
        .filter(|h| dns.contains_key(h))
        .collect();
    if hosts.is_empty() {
        return None;
    }
    let (mut elsewhere, mut no_zone, mut failed, mut ready) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for h in &hosts {
        match &dns[h] {
            HostVerdict::OwnedElsewhere(why) => elsewhere.push(format!("{h}: {why}")),
            HostVerdict::NoZone => no_zone.push(h.clone()),
            HostVerdict::Failed(why) => failed.push(format!("{h}: {why}")),
            HostVerdict::Ready { tunnel } => ready.push(format!("{h} → {}", dns::target(tunnel))),
        }
    }
    Some(if !elsewhere.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::OWNED_ELSEWHERE,
            format!(
                "not written, the name holds a record this controller did not create: {}",
                elsewhere.join("; ")
            ),
        )
    } else if !no_zone.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::NO_ZONE,
            format!(
                "no zone the Cloudflare API token can see holds {}",
                no_zone.join(", ")
            ),
        )
    } else if !failed.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::DNS_API_ERROR,
            format!("the DNS API failed, retrying: {}", failed.join("; ")),
        )
    } else {
        Verdict::ok(
            dns::DNS_RECORD,
            format!("proxied CNAME records: {}", ready.join(", ")),
        )
    })
}

/// Whether an attached route parent is live: the Gateway's partition has loaded this round's
/// document (which holds the route) and its tunnel's ingress document lists every hostname the
/// route serves through it. Both come from this round's I/O, so it is never True before both
/// are done; every round that leaves one undone is retried, so it turns True once they are. A
/// parent attached only through listeners that are not served is never live.
fn published(
    r: &RouteOutcome,
    p: &crate::model::ParentOutcome,
    gw: Option<&crate::model::GatewayOutcome>,
    effects: &Effects,
) -> Verdict {
    if p.isolated {
        return Verdict::fail(
            PUBLISHED,
            "HostnamesIsolated",
            "nothing is served: each hostname the route has through its listeners belongs to a more specific listener of the Gateway (listener isolation)",
        );
    }
    if p.hostnames.is_none() {
        return Verdict::fail(
            PUBLISHED,
            "ListenerNotProgrammed",
            "nothing is served: the listeners the route attached through are not programmed (see the Gateway's listener conditions)",
        );
    }
    let partition = gw.and_then(|g| g.partition.as_ref());
    let tunnel = gw.and_then(|g| g.tunnel.as_ref());
    let overflow = effects.overflow.get(&r.id);
    let listed = tunnel.and_then(|t| effects.ingress.get(t));
    // A route serving any host needs the catch-all pointed at the proxy (listed as `*`).
    let any_host = p.hostnames.as_ref().is_some_and(Vec::is_empty);
    let hostnames = p
        .hostnames
        .iter()
        .flatten()
        .map(|h| ingress::rule_hostname(h))
        .filter(|h| !h.is_empty() && h != "*")
        .chain(any_host.then(|| "*".to_owned()));
    let (mut left_out, mut missing) = (Vec::new(), Vec::new());
    for h in hostnames {
        if overflow.is_some_and(|o| o.iter().any(|x| ingress::rule_hostname(x) == h)) {
            left_out.push(h);
        } else if !listed.is_some_and(|l| l.contains(&h)) {
            missing.push(h);
        }
    }
    let mut waiting = Vec::new();
    if !partition.is_some_and(|k| effects.loaded.contains(k)) {
        waiting.push(match partition {
            Some(k) => format!("the {k} data plane has not loaded the route yet"),
            None => "no data plane serves the Gateway yet".to_owned(),
        });
    }
    if !missing.is_empty() {
        waiting.push(format!(
            "the ingress document of tunnel {} does not list {} yet",
            tunnel.map_or("?", String::as_str),
            missing.join(", ")
        ));
    }
    if !left_out.is_empty() {
        waiting.push(format!(
            "{} did not fit the tunnel's ingress document (see {INGRESS_RULE_LIMIT})",
            left_out.join(", ")
        ));
        return Verdict::fail(PUBLISHED, "IngressRuleLimitExceeded", waiting.join("; "));
    }
    if waiting.is_empty() {
        Verdict::ok(
            PUBLISHED,
            "the data plane serves the route and the tunnel's ingress document lists its hostnames",
        )
    } else {
        Verdict::fail(PUBLISHED, "Pending", waiting.join("; "))
    }
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

fn route_reference(r: &RouteOutcome) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!("{GATEWAY_GROUP}/v1")),
        kind: Some(r.id.kind.as_str().to_owned()),
        namespace: Some(r.id.key.namespace.clone()),
        name: Some(r.id.key.name.clone()),
        ..Default::default()
    }
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn route(name: &str) -> Write {
        Write::Route {
            id: RouteId {
                kind: RouteKind::Http,
                key: key(name),
            },
            resource_version: Some("1".into()),
            parents: Vec::new(),
        }
    }

    fn listener(name: &str, attached: i32) -> GatewayStatusListeners {
        GatewayStatusListeners {
            name: name.into(),
            attached_routes: attached,
            supported_kinds: None,
            conditions: Vec::new(),
        }
    }

    fn gateway_status(listeners: Vec<GatewayStatusListeners>, programmed: &str) -> GatewayStatus {
        GatewayStatus {
            conditions: Some(vec![Condition {
                type_: "Programmed".into(),
                status: programmed.into(),
                reason: "Programmed".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }]),
            listeners: Some(listeners),
            ..GatewayStatus::default()
        }
    }

    fn notice(kind: &str, name: &str) -> Notice {
        Notice {
            object: ObjectReference {
                kind: Some(kind.into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
            warning: true,
            reason: "Why".into(),
            message: String::new(),
        }
    }

    fn names(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .map(|w| match w {
                Write::Route { id, .. } => format!("route {}", id.key.name),
                Write::Gateway { key, .. } => format!("gateway {}", key.name),
                Write::GatewayClass { name, .. } => format!("class {name}"),
                _ => "other".into(),
            })
            .collect()
    }

    /// The Gateways as the API server holds them: `counted` (its route count is all that
    /// changes), `renamed` (a listener replaced) and `failing` (Programmed turns False).
    fn held_gateways() -> BTreeMap<ObjKey, GatewayStatus> {
        BTreeMap::from([
            (
                key("counted"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
            (
                key("renamed"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
            (
                key("failing"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
        ])
    }

    fn gateway_writes() -> Vec<Write> {
        vec![
            Write::Gateway {
                key: key("counted"),
                status: gateway_status(vec![listener("http", 40)], "True"),
            },
            Write::Gateway {
                key: key("renamed"),
                status: gateway_status(vec![listener("https", 3)], "True"),
            },
            Write::Gateway {
                key: key("failing"),
                status: gateway_status(vec![listener("http", 40)], "False"),
            },
        ]
    }

    fn class() -> Write {
        Write::GatewayClass {
            name: "c".into(),
            status: GatewayClassStatus::default(),
        }
    }

    #[test]
    fn a_few_route_statuses_are_written_at_once_even_mid_burst() {
        let gateways = held_gateways();
        let mut writes = vec![class()];
        writes.extend(gateway_writes());
        writes.extend((0..BURST_WRITES - 1).map(|i| route(&format!("r{i}"))));
        let notices = vec![notice("HTTPRoute", "r0")];
        let held = hold_in_burst(writes.clone(), notices, |k| gateways.get(k));
        assert_eq!(held.held, 0);
        assert_eq!(names(&held.writes), names(&writes));
        assert_eq!(held.notices.len(), 1);
    }

    #[test]
    fn a_burst_holds_route_statuses_and_route_counts_with_their_events() {
        let gateways = held_gateways();
        let mut writes = vec![class()];
        writes.extend(gateway_writes());
        writes.extend((0..BURST_WRITES).map(|i| route(&format!("r{i}"))));
        let notices = vec![
            notice("HTTPRoute", "r0"),
            notice("GRPCRoute", "r0"),
            notice("HTTPRoute", "elsewhere"),
            notice("Gateway", "failing"),
        ];
        let held = hold_in_burst(writes, notices, |k| gateways.get(k));
        // 64 routes and the Gateway whose route count alone changed.
        assert_eq!(held.held, BURST_WRITES + 1);
        assert_eq!(
            names(&held.writes),
            ["class c", "gateway renamed", "gateway failing"]
        );
        let kept: Vec<_> = held
            .notices
            .iter()
            .map(|n| {
                (
                    n.object.kind.clone().unwrap(),
                    n.object.name.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("GRPCRoute".into(), "r0".into()),
                ("HTTPRoute".into(), "elsewhere".into()),
                ("Gateway".into(), "failing".into())
            ]
        );
    }

    #[test]
    fn a_gateway_with_no_status_yet_is_not_a_route_count() {
        let mut writes: Vec<Write> = (0..=BURST_WRITES)
            .map(|i| route(&format!("r{i}")))
            .collect();
        writes.push(Write::Gateway {
            key: key("new"),
            status: gateway_status(vec![listener("http", 1)], "True"),
        });
        let held = hold_in_burst(writes, Vec::new(), |_| None);
        assert_eq!(names(&held.writes), ["gateway new"]);
    }
}
