//! ListenerSets (Gateway API v1 `ListenerSet`, GEP-1713): which attach to a Gateway of ours,
//! their listeners' status, and the view routes naming a ListenerSet attach through.
//!
//! - A ListenerSet attaches only when its Gateway's `spec.allowedListeners.namespaces` admits
//!   its namespace (`None`, the default, admits none; `Same`, `Selector`, `All`), and only while
//!   the Gateway is accepted.
//! - Listeners merge after the Gateway's own, ListenerSets oldest first, then by
//!   `namespace/name`; a listener whose port another merged listener uses with another protocol
//!   is `ProtocolConflict`, one repeating an earlier port and hostname `HostnameConflict`, and
//!   the earlier listener keeps serving.
//! - With hostname ownership on, a listener's hostname must be delegated to the ListenerSet's
//!   namespace (`HostnameNotPermitted`); a refused listener claims nothing, so it cannot
//!   conflict another tenant's listener away either.
//! - Certificate references are the ListenerSet's: a ReferenceGrant must allow `ListenerSet`.
//!
//! A ListenerSet's view is its Gateway's outcome with the ListenerSet's namespace, name and
//! listeners: routes attach through it with the rules of [`super::attachment`], and what they
//! serve goes to the Gateway's plane and tunnel.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::apis::standard::gateways::{
    Gateway, GatewayAllowedListenersNamespacesFrom, GatewayListeners,
    GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersTlsMode, GatewaySpec,
};
use gateway_api::apis::standard::listenersets::ListenerSet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use tunnel_config::config;

use super::gateways::listener_certificates;
use super::selector;
use super::types::{
    GatewayOutcome, HOSTNAME_NOT_PERMITTED, ListenerOutcome, ListenerSetOutcome, Model,
    PERMISSIVE_HOSTNAME, SUPPORTED_KINDS,
};
use crate::conditions::Verdict;
use crate::keys::{GATEWAY_GROUP, ObjKey};
use crate::model::rules::ownership::{Delegations, Refusal};
use crate::observe::world::Snapshot;
use crate::translate::BackendIndex;

/// Decides every ListenerSet whose parentRef names a Gateway of `model` (after the Gateways).
pub(super) fn decide(snap: &Snapshot, idx: &BackendIndex, model: &mut Model) {
    let mut sets: Vec<&Arc<ListenerSet>> = snap.listener_sets.iter().collect();
    sets.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, ObjKey::of(a.as_ref()))
            .cmp(&(&b.metadata.creation_timestamp, ObjKey::of(b.as_ref())))
    });
    let namespaces: BTreeMap<String, &Arc<Namespace>> =
        snap.namespaces.iter().map(|n| (n.name_any(), n)).collect();
    // Per Gateway: the ports and hostnames its merged listeners hold so far.
    let mut claims: BTreeMap<ObjKey, Claims> = BTreeMap::new();
    for ls in sets {
        let Some(parent_key) = parent_gateway(ls) else {
            continue;
        };
        let Some(parent) = model.gateways.get(&parent_key) else {
            continue; // not a Gateway of ours: another implementation's business
        };
        let claims = claims
            .entry(parent_key.clone())
            .or_insert_with(|| Claims::of(parent));
        let outcome = outcome(ls, parent, &parent_key, claims, &namespaces, idx);
        model.listener_sets.insert(ObjKey::of(ls.as_ref()), outcome);
    }
}

/// Each accepted ListenerSet's usable listeners in its Gateway's partition (the data plane's
/// listener gate), like the Gateway's own.
pub(super) fn partition_listeners(model: &mut Model) {
    for (key, ls) in &model.listener_sets {
        let Some(partition) = ls.view.partition.clone().filter(|_| ls.attached()) else {
            continue;
        };
        let plan = model.partitions.entry(partition).or_default();
        for (l, out) in ls
            .view
            .gateway
            .spec
            .listeners
            .iter()
            .zip(&ls.view.listeners)
        {
            if out.served {
                plan.doc.listeners.push(config::Listener {
                    name: format!("listenerset:{key}/{}", l.name),
                    hostname: l.hostname.clone(),
                });
            }
        }
    }
}

/// The Gateway a ListenerSet's parentRef names.
fn parent_gateway(ls: &ListenerSet) -> Option<ObjKey> {
    let r = &ls.spec.parent_ref;
    let group = r.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = r.kind.as_deref().unwrap_or("Gateway");
    (group == GATEWAY_GROUP && kind == "Gateway").then(|| ObjKey {
        namespace: r
            .namespace
            .clone()
            .unwrap_or_else(|| ls.namespace().unwrap_or_default()),
        name: r.name.clone(),
    })
}

fn outcome(
    ls: &Arc<ListenerSet>,
    parent: &GatewayOutcome,
    parent_key: &ObjKey,
    claims: &mut Claims,
    namespaces: &BTreeMap<String, &Arc<Namespace>>,
    idx: &BackendIndex,
) -> ListenerSetOutcome {
    let key = ObjKey::of(ls.as_ref());
    let listeners: Result<Vec<GatewayListeners>, _> = ls
        .spec
        .listeners
        .iter()
        .map(|l| serde_json::to_value(l).and_then(serde_json::from_value))
        .collect();
    let mut view = parent.clone();
    view.kind = "ListenerSet";
    view.listeners = Vec::new();
    view.gateway = Arc::new(Gateway {
        metadata: ObjectMeta {
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            creation_timestamp: ls.metadata.creation_timestamp.clone(),
            generation: ls.metadata.generation,
            ..ObjectMeta::default()
        },
        spec: GatewaySpec {
            gateway_class_name: parent.gateway.spec.gateway_class_name.clone(),
            listeners: listeners.as_ref().cloned().unwrap_or_default(),
            ..GatewaySpec::default()
        },
        status: None,
    });
    let refuse = |mut view: GatewayOutcome, reason: &str, message: String| {
        view.partition = None;
        view.tunnel = None;
        view.accepted = Verdict::fail("Accepted", reason, message.clone());
        view.programmed = Verdict::fail("Programmed", reason, message);
        ListenerSetOutcome {
            listener_set: ls.clone(),
            gateway: parent_key.clone(),
            accepted: view.accepted.clone(),
            programmed: view.programmed.clone(),
            view,
        }
    };
    if let Err(why) = admits(&parent.gateway, &key.namespace, namespaces) {
        return refuse(
            view,
            "NotAllowed",
            format!(
                "Gateway {parent_key} does not admit ListenerSets from namespace {}: {why}",
                key.namespace
            ),
        );
    }
    if parent.partition.is_none() || parent.route_refusal.is_some() {
        return refuse(
            view,
            "ParentNotAccepted",
            format!(
                "Gateway {parent_key} is not accepted: {}",
                parent.accepted.message
            ),
        );
    }
    let listeners = match listeners {
        Ok(l) => l,
        Err(e) => {
            return refuse(view, "Invalid", format!("spec.listeners: {e}"));
        }
    };
    view.listeners = listeners
        .iter()
        .map(|l| listener(&key, l, parent, claims, idx))
        .collect();
    let attachable = view.listeners.iter().filter(|l| l.attachable).count();
    if attachable == 0 {
        return refuse(
            view,
            "ListenersNotValid",
            "no listener is valid; see the listener conditions".to_owned(),
        );
    }
    view.accepted = if attachable < view.listeners.len() {
        Verdict::new(
            "Accepted",
            true,
            "ListenersNotValid",
            "some listeners are not valid; see the listener conditions",
        )
    } else {
        Verdict::ok("Accepted", "the ListenerSet is accepted")
    };
    view.programmed = if parent.programmed.status {
        Verdict::ok(
            "Programmed",
            format!("its listeners are served with Gateway {parent_key}'s"),
        )
    } else {
        Verdict::fail(
            "Programmed",
            "ParentNotProgrammed",
            format!(
                "Gateway {parent_key} is not programmed: {}",
                parent.programmed.message
            ),
        )
    };
    ListenerSetOutcome {
        listener_set: ls.clone(),
        gateway: parent_key.clone(),
        accepted: view.accepted.clone(),
        programmed: view.programmed.clone(),
        view,
    }
}

/// Whether the Gateway's `spec.allowedListeners` admits ListenerSets of `namespace`; the error
/// says why not.
fn admits(
    gw: &Gateway,
    namespace: &str,
    namespaces: &BTreeMap<String, &Arc<Namespace>>,
) -> Result<(), String> {
    let allowed = gw
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match allowed.and_then(|n| n.from.clone()) {
        Some(GatewayAllowedListenersNamespacesFrom::All) => Ok(()),
        Some(GatewayAllowedListenersNamespacesFrom::Same) => {
            if gw.namespace().as_deref() == Some(namespace) {
                Ok(())
            } else {
                Err("spec.allowedListeners.namespaces.from is Same".to_owned())
            }
        }
        Some(GatewayAllowedListenersNamespacesFrom::Selector) => {
            let selector = allowed
                .and_then(|n| n.selector.as_ref())
                .and_then(selector::label_selector);
            let labels = namespaces
                .get(namespace)
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            match selector {
                Some(s) if selector::selects(&s, &labels) => Ok(()),
                Some(_) => Err(
                    "the namespace's labels do not match spec.allowedListeners.namespaces.selector"
                        .to_owned(),
                ),
                None => Err(
                    "spec.allowedListeners.namespaces.from is Selector without a selector"
                        .to_owned(),
                ),
            }
        }
        Some(GatewayAllowedListenersNamespacesFrom::None) | None => {
            Err("spec.allowedListeners.namespaces.from is None (the default)".to_owned())
        }
    }
}

/// The ports and hostnames the merged listeners of one Gateway hold, in precedence order.
struct Claims {
    /// Port → (protocol, holder).
    protocols: BTreeMap<i32, (String, Holder)>,
    /// (port, hostname; empty = any) → holder.
    hostnames: BTreeMap<(i32, String), Holder>,
}

/// A listener holding a port or hostname: named in a conflict message only to listeners of its
/// own namespace (the specification warns against leaking siblings' details).
#[derive(Clone)]
struct Holder {
    namespace: String,
    what: String,
}

impl Holder {
    fn describe(&self, to_namespace: &str) -> String {
        if self.namespace == to_namespace {
            self.what.clone()
        } else {
            "a listener of higher precedence (the Gateway's or an older ListenerSet's)".to_owned()
        }
    }
}

impl Claims {
    /// The Gateway's own listeners (all but conflicted ones) come first.
    fn of(gw: &GatewayOutcome) -> Claims {
        let mut claims = Claims {
            protocols: BTreeMap::new(),
            hostnames: BTreeMap::new(),
        };
        let key = ObjKey::of(gw.gateway.as_ref());
        for (l, out) in gw.gateway.spec.listeners.iter().zip(&gw.listeners) {
            let conflicted = out
                .verdicts
                .iter()
                .any(|v| v.type_ == "Conflicted" && v.status);
            if !conflicted {
                claims.record(
                    l,
                    Holder {
                        namespace: key.namespace.clone(),
                        what: format!("listener {} of Gateway {key}", l.name),
                    },
                );
            }
        }
        claims
    }

    fn record(&mut self, l: &GatewayListeners, holder: Holder) {
        self.protocols
            .entry(l.port)
            .or_insert_with(|| (l.protocol.clone(), holder.clone()));
        self.hostnames.entry((l.port, host_of(l))).or_insert(holder);
    }

    /// The conflict reason and message for `l`, if an earlier listener holds its port with
    /// another protocol or its port and hostname.
    fn conflict(&self, l: &GatewayListeners, namespace: &str) -> Option<(&'static str, String)> {
        if let Some((protocol, holder)) = self.protocols.get(&l.port)
            && *protocol != l.protocol
        {
            return Some((
                "ProtocolConflict",
                format!(
                    "{} uses port {} with protocol {protocol}",
                    holder.describe(namespace),
                    l.port
                ),
            ));
        }
        let host = host_of(l);
        self.hostnames.get(&(l.port, host.clone())).map(|holder| {
            (
                "HostnameConflict",
                format!(
                    "{} already serves port {} and {}",
                    holder.describe(namespace),
                    l.port,
                    if host.is_empty() {
                        "any hostname".to_owned()
                    } else {
                        format!("hostname {host}")
                    }
                ),
            )
        })
    }
}

fn host_of(l: &GatewayListeners) -> String {
    l.hostname.clone().unwrap_or_default().to_ascii_lowercase()
}

/// One listener of the ListenerSet `key`, evaluated after every listener of higher precedence.
fn listener(
    key: &ObjKey,
    l: &GatewayListeners,
    parent: &GatewayOutcome,
    claims: &mut Claims,
    idx: &BackendIndex,
) -> ListenerOutcome {
    let passthrough =
        l.tls.as_ref().and_then(|t| t.mode.as_ref()) == Some(&GatewayListenersTlsMode::Passthrough);
    // HTTPS is terminated at Cloudflare's edge; the listener is served like HTTP.
    let protocol_ok = l.protocol == "HTTP" || (l.protocol == "HTTPS" && !passthrough);
    let (kinds, invalid_kinds) = route_kinds(l, protocol_ok);
    let resolved = if protocol_ok && l.protocol == "HTTPS" {
        listener_certificates("ListenerSet", &key.namespace, l, idx).err()
    } else {
        None
    }
    .unwrap_or_else(|| {
        if invalid_kinds.is_empty() {
            Verdict::ok("ResolvedRefs", "all references resolve")
        } else {
            Verdict::fail(
                "ResolvedRefs",
                "InvalidRouteKinds",
                format!(
                    "unsupported route kinds {} for protocol {}: supported are HTTPRoute and GRPCRoute on HTTP and HTTPS listeners",
                    invalid_kinds.join(", "),
                    l.protocol
                ),
            )
        }
    });
    let not_owned = parent
        .ownership
        .as_deref()
        .and_then(|d| not_delegated(d, &key.namespace, l));
    let conflict = claims.conflict(l, &key.namespace);
    // Ownership first: a squatter is told the hostname is not its own, whether or not the
    // owner's listener happens to rank before it (ListenerSets created in the same second rank
    // by namespace).
    let accepted = if let Some(why) = &not_owned {
        Verdict::fail("Accepted", HOSTNAME_NOT_PERMITTED, why.clone())
    } else if let Some((reason, why)) = &conflict {
        Verdict::fail("Accepted", *reason, why.clone())
    } else if !protocol_ok {
        Verdict::fail(
            "Accepted",
            "UnsupportedProtocol",
            if passthrough {
                "tls.mode Passthrough is not supported: Cloudflare terminates TLS at the edge"
                    .to_owned()
            } else {
                format!(
                    "protocol {} is not supported: Cloudflare terminates TLS at the edge and the tunnel carries HTTP; use protocol HTTP or HTTPS",
                    l.protocol
                )
            },
        )
    } else {
        Verdict::ok("Accepted", "the listener is accepted")
    };
    let conflicted = match &conflict {
        Some((reason, why)) => Verdict::new("Conflicted", true, *reason, why.clone()),
        None => Verdict::new("Conflicted", false, "NoConflicts", "no conflicts"),
    };
    // A listener refused by hostname ownership claims nothing: it cannot take a hostname or a
    // port away from a later listener that may serve it.
    if conflict.is_none() && not_owned.is_none() {
        claims.record(
            l,
            Holder {
                namespace: key.namespace.clone(),
                what: format!("listener {} of ListenerSet {key}", l.name),
            },
        );
    }
    // Unlike a Gateway's listener, one whose certificates do not resolve takes no routes: the
    // conformance suite (ListenerSetReferenceGrant) wants such a set not accepted at all, while a
    // Gateway with such a listener stays accepted (GatewayWithAttachedRoutes).
    let attachable = accepted.status && resolved.status && !kinds.is_empty();
    let served = attachable;
    let programmed = if served {
        Verdict::ok("Programmed", "the listener is programmed")
    } else if let Some((reason, _)) = &conflict {
        Verdict::fail(
            "Programmed",
            *reason,
            "the listener conflicts with an earlier one",
        )
    } else {
        Verdict::fail("Programmed", "Invalid", "the listener is not valid")
    };
    let mut verdicts = vec![accepted, resolved, conflicted, programmed];
    let all_namespaces = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
        .and_then(|n| n.from.clone())
        == Some(GatewayListenersAllowedRoutesNamespacesFrom::All);
    if attachable && all_namespaces && host_of(l).is_empty() {
        let guard = if parent.ownership.is_some() {
            "hostname ownership limits each namespace to its delegated hostnames"
        } else {
            "set a hostname, restrict allowedRoutes.namespaces, or turn on hostname ownership in the GatewayClassConfig"
        };
        verdicts.push(Verdict::new(
            PERMISSIVE_HOSTNAME,
            true,
            "PermissiveHostname",
            format!("routes of every namespace may attach and name any hostname: {guard}"),
        ));
    }
    ListenerOutcome {
        name: l.name.clone(),
        supported_kinds: kinds,
        verdicts,
        attached_routes: 0,
        attachable,
        served,
    }
}

/// The route kinds a listener supports, and those it asks for that it cannot have (every kind
/// on a protocol this implementation does not serve).
fn route_kinds(l: &GatewayListeners, protocol_ok: bool) -> (Vec<&'static str>, Vec<String>) {
    let mut kinds = Vec::new();
    let mut invalid = Vec::new();
    match l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
        Some(asked) if !asked.is_empty() => {
            for k in asked {
                let group = k.group.as_deref().unwrap_or(GATEWAY_GROUP);
                match SUPPORTED_KINDS.iter().find(|s| **s == k.kind) {
                    Some(s) if group == GATEWAY_GROUP && protocol_ok => kinds.push(*s),
                    _ => invalid.push(format!("{group}/{}", k.kind)),
                }
            }
        }
        _ if protocol_ok => kinds.extend(SUPPORTED_KINDS),
        _ => {}
    }
    (kinds, invalid)
}

/// With hostname ownership on, why the listener's hostname may not be served by the
/// ListenerSet's namespace (a listener without hostname leaves the check to each route).
fn not_delegated(d: &Delegations, namespace: &str, l: &GatewayListeners) -> Option<String> {
    let host = l.hostname.as_deref().filter(|h| !h.is_empty())?;
    let why = match d.check(namespace, host).err()? {
        Refusal::AnyHostname => return None,
        Refusal::NotDelegated { hostname } => {
            format!(
                "hostname {hostname} is not delegated to the ListenerSet's namespace {namespace}"
            )
        }
        r @ Refusal::DelegatedElsewhere { .. } => r.to_string(),
    };
    Some(format!(
        "{why} (hostname ownership of the Gateway's class, GatewayClassConfig spec.hostnameOwnership); the listener serves nothing"
    ))
}
