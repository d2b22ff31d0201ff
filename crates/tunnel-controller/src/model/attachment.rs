//! Route attachment and what follows from it: every route attached in priority order (each one
//! decided by [`super::route`]), the BackendTLSPolicies in use, each partition's route table and
//! listeners, the hostnames of each tunnel's ingress document in route priority order, and the
//! routes of different namespaces shadowing each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use tunnel_config::config;

use super::route::{RouteView, route_result};
use super::types::{
    GatewayOutcome, Model, ParentOutcome, PartitionPlan, PolicyOutcome, ROUTE_SHADOWED,
    RouteOutcome, Settings, TunnelPlan,
};
use crate::conditions::Verdict;
use crate::keys::{ObjKey, PartitionKey, RouteId, RouteKind};
use crate::model::rules::shadowing;
use crate::observe::world::Snapshot;
use crate::translate::{self, BackendIndex};

/// What attaching a route reads besides the model's Gateways and ListenerSets, built once per
/// snapshot and kept with its model so that a changed route can be decided again against
/// them alone (see [`super::lane`]).
pub struct RouteContext {
    pub(super) idx: BackendIndex,
    pub(super) namespaces: BTreeMap<String, Arc<Namespace>>,
    pub(super) families: Families,
    /// Each route's UID in the snapshot: a route with another UID now was deleted and made
    /// again (another creation time, so another place in the tables).
    pub(super) uids: BTreeMap<RouteId, Option<String>>,
    /// Partitions whose tables are the union of several dedicated Gateways' (one tunnel).
    pub(super) unions: BTreeSet<PartitionKey>,
}

impl RouteContext {
    /// Call once Gateways and ListenerSets are decided (the listener families come from them).
    pub(super) fn new(snap: &Snapshot, idx: BackendIndex, model: &Model) -> Self {
        let uids = snap
            .http_routes
            .iter()
            .map(|r| {
                (
                    route_id(RouteKind::Http, r.as_ref()),
                    r.metadata.uid.clone(),
                )
            })
            .chain(snap.grpc_routes.iter().map(|r| {
                (
                    route_id(RouteKind::Grpc, r.as_ref()),
                    r.metadata.uid.clone(),
                )
            }))
            .collect();
        Self {
            idx,
            namespaces: snap
                .namespaces
                .iter()
                .map(|n| (n.name_any(), n.clone()))
                .collect(),
            families: listener_families(model),
            uids,
            unions: tunnel_groups(model)
                .into_values()
                .filter(|m| m.len() > 1)
                .flatten()
                .collect(),
        }
    }
}

/// Attaches every route (oldest first, the Gateway API tie-break and the ingress rule
/// priority) to the Gateways of `model`, and decides the BackendTLSPolicies they use.
pub(super) fn routes(snap: &Snapshot, settings: &Settings, ctx: &RouteContext, model: &mut Model) {
    let idx = &ctx.idx;
    let mut routes: Vec<RouteView> = snap
        .http_routes
        .iter()
        .map(RouteView::http)
        .chain(snap.grpc_routes.iter().map(RouteView::grpc))
        .collect();
    routes.sort_by(|a, b| {
        (&a.created, &a.id.key.namespace, &a.id.key.name, a.id.kind).cmp(&(
            &b.created,
            &b.id.key.namespace,
            &b.id.key.name,
            b.id.kind,
        ))
    });
    // Which Gateways reach each Service, for BackendTLSPolicy ancestors.
    let mut uses: BTreeMap<(String, String), BTreeSet<ObjKey>> = BTreeMap::new();
    for route in &routes {
        route_outcome(route, model, &mut uses, ctx);
    }
    for policy in &snap.backend_tls_policies {
        let ns = policy.namespace().unwrap_or_default();
        let ancestors: BTreeSet<ObjKey> = policy
            .spec
            .target_refs
            .iter()
            .filter(|t| t.group.is_empty() && t.kind == "Service")
            .filter_map(|t| uses.get(&(ns.clone(), t.name.clone())))
            .flatten()
            .cloned()
            .collect();
        let has_ours = policy.status.as_ref().is_some_and(|s| {
            s.ancestors
                .iter()
                .any(|a| a.controller_name == settings.controller_name)
        });
        if !ancestors.is_empty() || has_ours {
            model.policies.push(PolicyOutcome {
                policy: policy.clone(),
                verdicts: translate::backend_tls_policy_verdicts(policy, idx),
                ancestors,
            });
        }
    }
}

/// The listeners of each Gateway that routes attach to, with those of its attached
/// ListenerSets (merged into it): `(port, hostname)`. Listener isolation compares a listener
/// with these.
type Families = BTreeMap<ObjKey, Vec<(i32, Option<String>)>>;

fn listener_families(model: &Model) -> Families {
    let live = |gw: &GatewayOutcome| -> Vec<(i32, Option<String>)> {
        gw.gateway
            .spec
            .listeners
            .iter()
            .zip(&gw.listeners)
            .filter(|(_, out)| out.attachable)
            .map(|(l, _)| (l.port, l.hostname.clone()))
            .collect()
    };
    let mut families: Families = model
        .gateways
        .iter()
        .map(|(key, gw)| (key.clone(), live(gw)))
        .collect();
    for ls in model.listener_sets.values().filter(|ls| ls.attached()) {
        families
            .entry(ls.gateway.clone())
            .or_default()
            .extend(live(&ls.view));
    }
    families
}

/// Each partition's listeners and the tunnels Gateways serve; dedicated Gateways sharing a
/// tunnel get one route table; then each tunnel's hostnames in route priority order.
pub(super) fn partitions(model: &mut Model) {
    // Listener hostnames per partition, for the data plane's own listener check.
    for gw in model.gateways.values() {
        let Some(partition) = &gw.partition else {
            continue;
        };
        let plan = model.partitions.entry(partition.clone()).or_default();
        for (l, out) in gw.gateway.spec.listeners.iter().zip(&gw.listeners) {
            if out.served {
                plan.doc.listeners.push(config::Listener {
                    name: format!("{}/{}", ObjKey::of(gw.gateway.as_ref()), l.name),
                    hostname: l.hostname.clone(),
                });
            }
        }
        if let (Some(tunnel), Some(credentials)) = (&gw.tunnel, &gw.credentials) {
            model
                .tunnels
                .entry(tunnel.clone())
                .or_insert_with(|| TunnelPlan {
                    credentials: credentials.clone(),
                    hostnames: Vec::new(),
                });
        }
    }
    // Dedicated Gateways sharing a tunnel: every plane of the tunnel gets every route of it
    // (cloudflared hands any of the tunnel's hostnames to any of its connectors).
    for members in tunnel_groups(model).values().filter(|m| m.len() > 1) {
        let mut union = PartitionPlan::default();
        for m in members {
            if let Some(plan) = model.partitions.get(m) {
                for r in &plan.doc.routes {
                    if !union.doc.routes.contains(r) {
                        union.doc.routes.push(r.clone());
                    }
                }
                union
                    .doc
                    .listeners
                    .extend(plan.doc.listeners.iter().cloned());
            }
        }
        for m in members {
            model.partitions.insert(m.clone(), union.clone());
        }
    }

    // Route hostnames per tunnel, in route priority order.
    for route in &model.routes {
        for parent in &route.parents {
            let (Some(hosts), Some(gw)) = (&parent.hostnames, model.gateways.get(&parent.gateway))
            else {
                continue;
            };
            let Some(tunnel) = gw.tunnel.as_ref().and_then(|t| model.tunnels.get_mut(t)) else {
                continue;
            };
            // A route serving any host is `*`: the document's catch-all then points at the proxy.
            if hosts.is_empty() {
                tunnel.hostnames.push(("*".into(), route.id.clone()));
            }
            for h in hosts {
                tunnel.hostnames.push((h.clone(), route.id.clone()));
            }
        }
    }
}

fn route_id(kind: RouteKind, route: &impl ResourceExt) -> RouteId {
    RouteId {
        kind,
        key: ObjKey::of(route),
    }
}

/// The dedicated partitions of each tunnel that Gateways share.
fn tunnel_groups(model: &Model) -> BTreeMap<String, Vec<PartitionKey>> {
    let mut groups: BTreeMap<String, Vec<PartitionKey>> = BTreeMap::new();
    for gw in model.gateways.values() {
        if let (Some(tunnel), Some(p @ PartitionKey::Dedicated(_)), Some(_)) =
            (&gw.tunnel, &gw.partition, &gw.sharing)
        {
            groups.entry(tunnel.clone()).or_default().push(p.clone());
        }
    }
    groups
}

/// The winners a [`ROUTE_SHADOWED`] message names (a catch-all route loses to every route of
/// its table).
const MAX_SHADOW_LINES: usize = 5;

/// Routes of different namespaces losing requests to each other in a partition's table: the
/// loser's parents there get [`ROUTE_SHADOWED`] naming the winners (one condition per parent).
pub(super) fn shadows(model: &mut Model) {
    let mut lost: BTreeMap<(RouteId, PartitionKey), Vec<String>> = BTreeMap::new();
    for (partition, plan) in &model.partitions {
        let routes = &plan.doc.routes;
        for s in shadowing::shadows(routes) {
            let (Some(loser), Some(winner)) = (
                table_route(&routes[s.loser]),
                table_route(&routes[s.winner]),
            ) else {
                continue;
            };
            let line = format!("{} {}: {}", winner.kind.as_str(), winner.key, s.how);
            let entry = lost.entry((loser, partition.clone())).or_default();
            if !entry.contains(&line) {
                entry.push(line);
            }
        }
    }
    for route in &mut model.routes {
        for parent in route.parents.iter_mut().filter(|p| p.hostnames.is_some()) {
            let Some(partition) = model
                .gateways
                .get(&parent.gateway)
                .and_then(|g| g.partition.clone())
            else {
                continue;
            };
            if let Some(lines) = lost.get(&(route.id.clone(), partition)) {
                let more = lines.len().saturating_sub(MAX_SHADOW_LINES);
                parent.verdicts.push(Verdict::new(
                    ROUTE_SHADOWED,
                    true,
                    "ShadowedByOtherNamespace",
                    format!(
                        "routes of other namespaces take requests this route matches: {}{}",
                        lines[..lines.len().min(MAX_SHADOW_LINES)].join("; "),
                        if more > 0 {
                            format!("; and {more} more")
                        } else {
                            String::new()
                        }
                    ),
                ));
            }
        }
    }
}

/// The route a table entry came from (its name is `{namespace}/{name}`).
fn table_route(r: &config::Route) -> Option<RouteId> {
    let (kind, name) = match r {
        config::Route::Http(h) => (RouteKind::Http, &h.name),
        config::Route::Grpc(g) => (RouteKind::Grpc, &g.name),
    };
    let (namespace, name) = name.split_once('/')?;
    Some(RouteId {
        kind,
        key: ObjKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        },
    })
}

fn route_outcome(
    route: &RouteView,
    model: &mut Model,
    uses: &mut BTreeMap<(String, String), BTreeSet<ObjKey>>,
    ctx: &RouteContext,
) {
    let Some(r) = route_result(route, model, ctx) else {
        return;
    };
    for (partition, entries) in r.entries {
        model
            .partitions
            .entry(partition)
            .or_default()
            .doc
            .routes
            .extend(entries);
    }
    for p in r.parents.iter().filter(|p| p.attached) {
        let counted = match &p.listener_set {
            Some(ls) => model.listener_sets.get_mut(ls).map(|ls| &mut ls.view),
            None => model.gateways.get_mut(&p.gateway),
        };
        if let Some(gw) = counted {
            count_attachment(gw, p);
        }
    }
    for p in r.parents.iter().filter(|p| p.hostnames.is_some()) {
        for svc in &r.services {
            uses.entry(svc.clone())
                .or_default()
                .insert(p.gateway.clone());
        }
    }
    model.routes.push(RouteOutcome {
        id: route.id.clone(),
        generation: route.generation,
        resource_version: route.resource_version.clone(),
        current_parents: route.current_parents.clone(),
        parents: r.parents,
    });
}

/// Counts the route on each listener it attached through.
fn count_attachment(gw: &mut GatewayOutcome, parent: &ParentOutcome) {
    for &i in &parent.listeners {
        if let Some(out) = gw.listeners.get_mut(i) {
            out.attached_routes += 1;
        }
    }
}
