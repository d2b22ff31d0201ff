//! One route against the model's Gateways and ListenerSets: which of its parents attach
//! (allowedRoutes, sectionName, port, hostname intersection), the verdicts about its rules, and
//! its table entries in each partition. Reads nothing of other routes, so the route lane can
//! decide a changed route alone against an earlier model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::apis::standard::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom,
};
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use tunnel_config::config;

use super::attachment::RouteContext;
use super::selector;
use super::types::{
    GatewayOutcome, HOSTNAME_NOT_PERMITTED, ListenerOutcome, Model, ParentOutcome,
    RouteParentStatus,
};
use crate::conditions::Verdict;
use crate::keys::{ObjKey, ParentRef, PartitionKey, RouteId, RouteKind};
use crate::model::rules::hostnames::{self, Served};
use crate::translate::{self, BackendIndex};

/// The parts of a route that attachment reads, the same for both kinds.
pub(super) struct RouteView {
    pub(super) id: RouteId,
    pub(super) created: Option<Time>,
    pub(super) generation: Option<i64>,
    pub(super) resource_version: Option<String>,
    hostnames: Vec<String>,
    parent_refs: Vec<ParentRef>,
    pub(super) current_parents: Vec<RouteParentStatus>,
    http: Option<Arc<HttpRoute>>,
    grpc: Option<Arc<GrpcRoute>>,
}

/// A [`RouteView`] of either route kind: their generated types differ, their fields do not.
macro_rules! route_view {
    ($route:expr, $kind:expr, http: $http:expr, grpc: $grpc:expr) => {{
        let r = $route;
        RouteView {
            id: RouteId {
                kind: $kind,
                key: ObjKey::of(r.as_ref()),
            },
            created: r.metadata.creation_timestamp.clone(),
            generation: r.metadata.generation,
            resource_version: r.metadata.resource_version.clone(),
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            parent_refs: r
                .spec
                .parent_refs
                .iter()
                .flatten()
                .map(ParentRef::from)
                .collect(),
            current_parents: r
                .status
                .iter()
                .flat_map(|s| &s.parents)
                .map(|p| RouteParentStatus {
                    parent_ref: ParentRef::from(&p.parent_ref),
                    controller_name: p.controller_name.clone(),
                    conditions: p.conditions.clone(),
                })
                .collect(),
            http: $http,
            grpc: $grpc,
        }
    }};
}

impl RouteView {
    pub(super) fn http(r: &Arc<HttpRoute>) -> RouteView {
        route_view!(r, RouteKind::Http, http: Some(r.clone()), grpc: None)
    }

    pub(super) fn grpc(r: &Arc<GrpcRoute>) -> RouteView {
        route_view!(r, RouteKind::Grpc, http: None, grpc: Some(r.clone()))
    }
}

/// What one route decides against the Gateways and ListenerSets of `model`: its parents, its
/// table entries by partition (empty where its rules are refused), the Services it reaches.
/// Reads nothing of other routes: a route's entries depend only on its own object, the
/// Gateways, ListenerSets and namespaces, and the backend index.
pub(super) struct RouteResult {
    pub(super) parents: Vec<ParentOutcome>,
    pub(super) entries: Vec<(PartitionKey, Vec<config::Route>)>,
    pub(super) services: BTreeSet<(String, String)>,
}

/// `None`: no parent of the route is ours.
pub(super) fn route_result(
    route: &RouteView,
    model: &Model,
    ctx: &RouteContext,
) -> Option<RouteResult> {
    let mut parents = Vec::new();
    // Per partition: what the route serves there, and the lowest port of the listeners it
    // attached to there (the redirect port, see `set_listener_port`).
    let mut served: BTreeMap<PartitionKey, (Served, ObjKey, i32)> = BTreeMap::new();
    for pref in &route.parent_refs {
        let ns = &route.id.key.namespace;
        // In status, group, kind and namespace are always spelled out.
        let (gw_key, listener_set, status_ref, gw) = if let Some(ls_key) = pref.listener_set(ns) {
            let Some(ls) = model.listener_sets.get(&ls_key) else {
                continue; // not a ListenerSet of a Gateway of ours
            };
            let status_ref =
                ParentRef::to_listener_set(&ls_key, pref.section_name.clone(), pref.port);
            (ls.gateway.clone(), Some(ls_key), status_ref, &ls.view)
        } else if let Some(gw_key) = pref.gateway(ns) {
            let Some(gw) = model.gateways.get(&gw_key) else {
                continue; // not a Gateway of ours (or not there): another controller's business
            };
            let status_ref = ParentRef::to_gateway(&gw_key, pref.section_name.clone(), pref.port);
            (gw_key, None, status_ref, gw)
        } else {
            continue;
        };
        let family = ctx
            .families
            .get(&gw_key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let (accepted, attachment) = attach(route, gw, &status_ref, &ctx.namespaces, family);
        let (listeners, served_through, isolated) = match attachment {
            Some(a) => (Some(a.listeners), a.served, a.isolated),
            None => (None, None, false),
        };
        let (hosts, port) = match served_through {
            Some((hosts, port)) => (Some(hosts), port),
            None => (None, i32::MAX),
        };
        let hostnames = hosts.as_ref().map(served_list);
        parents.push(ParentOutcome {
            parent_ref: status_ref,
            gateway: gw_key.clone(),
            listener_set,
            verdicts: vec![accepted],
            attached: listeners.is_some(),
            listeners: listeners.unwrap_or_default(),
            hostnames,
            isolated,
        });
        if let (Some(hosts), Some(partition)) = (hosts, gw.partition.clone()) {
            let entry = served
                .entry(partition)
                .or_insert_with(|| (Served::new(), gw_key.clone(), port));
            entry.2 = entry.2.min(port);
            hostnames::merge(&mut entry.0, hosts);
        }
    }
    if parents.is_empty() {
        return None;
    }

    // Rule contents: translated once per partition (the backend client certificate is the first
    // attached Gateway's there).
    let mut content: Option<RuleVerdicts> = None;
    let mut services: BTreeSet<(String, String)> = BTreeSet::new();
    let mut entries = Vec::new();
    for (partition, (hosts, gw_key, port)) in &served {
        let cert = model
            .gateways
            .get(gw_key)
            .and_then(|g| g.client_cert.clone());
        let Some(t) = translate_route(route, hosts, *port, cert.as_ref(), &ctx.idx) else {
            continue;
        };
        services.extend(t.services);
        let served = if t.verdicts.refused.is_none() {
            t.entries
        } else {
            Vec::new()
        };
        entries.push((partition.clone(), served));
        content.get_or_insert(t.verdicts);
    }
    if content.is_none() {
        content = unserved_rule_verdicts(route, &parents, model, &ctx.idx);
    }

    // Verdicts about the rules apply to every attached parent.
    for p in &mut parents {
        match &content {
            Some(v) if p.attached => {
                if let Some(refused) = &v.refused {
                    p.verdicts[0] = refused.clone();
                    p.attached = false;
                    p.hostnames = None;
                    p.isolated = false;
                }
                p.verdicts.push(v.resolved.clone());
                p.verdicts.extend(v.partial.clone());
            }
            _ => p
                .verdicts
                .push(Verdict::ok("ResolvedRefs", "all references resolve")),
        }
        if p.attached
            && let Some(sharing) = model
                .gateways
                .get(&p.gateway)
                .and_then(|g| g.sharing.as_ref())
        {
            p.verdicts.push(sharing.route_verdict());
        }
    }
    Some(RouteResult {
        parents,
        entries,
        services,
    })
}

/// What a route's rules say about it on every parent it attached to.
struct RuleVerdicts {
    /// `ResolvedRefs`.
    resolved: Verdict,
    /// `Accepted=False` when no rule can be served.
    refused: Option<Verdict>,
    /// `PartiallyInvalid`, when some rules are dropped.
    partial: Option<Verdict>,
}

/// A route translated for one partition: its table entries, the verdicts about its rules and
/// the Services it reaches.
struct Translated {
    entries: Vec<config::Route>,
    verdicts: RuleVerdicts,
    services: Vec<(String, String)>,
}

/// A table entry's `excludedHostnames`.
type Excluded = BTreeMap<String, Vec<String>>;

/// The table entries' hostnames and excluded hostnames for what a route serves: one entry, or
/// two when it serves any host but some (`*` with exclusions) besides other patterns, as an
/// entry's `hostnames` is either a list of patterns or any host.
fn table_hosts(served: &Served) -> Vec<(Vec<String>, Excluded)> {
    let excluded = |s: &Served| -> Excluded {
        s.iter()
            .filter(|(_, ex)| !ex.is_empty())
            .map(|(h, ex)| (h.clone(), ex.iter().cloned().collect()))
            .collect()
    };
    match served.get(hostnames::ANY) {
        Some(ex) if ex.is_empty() => vec![(Vec::new(), BTreeMap::new())],
        Some(_) => {
            let (any, rest): (Served, Served) = served
                .clone()
                .into_iter()
                .partition(|(h, _)| h == hostnames::ANY);
            let mut out = vec![(Vec::new(), excluded(&any))];
            if !rest.is_empty() {
                out.push((rest.keys().cloned().collect(), excluded(&rest)));
            }
            out
        }
        None => vec![(served.keys().cloned().collect(), excluded(served))],
    }
}

/// The hostnames of what a route serves, as [`ParentOutcome::hostnames`] (empty: any host).
fn served_list(served: &Served) -> Vec<String> {
    if served.contains_key(hostnames::ANY) {
        Vec::new()
    } else {
        served.keys().cloned().collect()
    }
}

fn translate_route(
    route: &RouteView,
    served: &Served,
    port: i32,
    cert: Option<&translate::ClientCert>,
    idx: &BackendIndex,
) -> Option<Translated> {
    let name = route.id.key.to_string();
    let hosts = table_hosts(served);
    if let Some(r) = &route.http {
        let mut t = translate::http_route(r, idx, cert);
        set_listener_port(&mut t.rules, port);
        Some(Translated {
            entries: hosts
                .into_iter()
                .map(|(hostnames, excluded_hostnames)| {
                    config::Route::Http(config::HttpRoute {
                        name: name.clone(),
                        hostnames,
                        excluded_hostnames,
                        rules: t.rules.clone(),
                    })
                })
                .collect(),
            verdicts: RuleVerdicts {
                resolved: t.resolved_refs,
                refused: t.accepted,
                partial: t.partially_invalid,
            },
            services: t.services.into_iter().collect(),
        })
    } else if let Some(r) = &route.grpc {
        let t = translate::grpc_route(r, idx, cert);
        Some(Translated {
            entries: hosts
                .into_iter()
                .map(|(hostnames, excluded_hostnames)| {
                    config::Route::Grpc(config::GrpcRoute {
                        name: name.clone(),
                        hostnames,
                        excluded_hostnames,
                        rules: t.rules.clone(),
                    })
                })
                .collect(),
            verdicts: RuleVerdicts {
                resolved: t.resolved_refs,
                refused: t.accepted,
                partial: t.partially_invalid,
            },
            services: t.services.into_iter().collect(),
        })
    } else {
        None
    }
}

/// The verdicts about the rules of a route attached only where nothing is served (listeners
/// whose certificates do not resolve): its status still reports its own references. Nothing of
/// the translation reaches a route table.
fn unserved_rule_verdicts(
    route: &RouteView,
    parents: &[ParentOutcome],
    model: &Model,
    idx: &BackendIndex,
) -> Option<RuleVerdicts> {
    let first = parents.iter().find(|p| p.attached)?;
    let cert = model
        .gateways
        .get(&first.gateway)
        .and_then(|g| g.client_cert.clone());
    translate_route(route, &Served::new(), i32::MAX, cert.as_ref(), idx).map(|t| t.verdicts)
}

/// Every RequestRedirect of `rules` gets the listener port: with neither scheme nor port, the
/// specification makes it the redirect port. The data plane cannot tell which listener a request
/// came through (cloudflared sends every hostname to the same proxy port), so a route attached
/// to listeners with different ports uses the lowest of them.
fn set_listener_port(rules: &mut [config::HttpRule], port: i32) {
    let Ok(port) = u16::try_from(port) else {
        return;
    };
    for rule in rules {
        for f in &mut rule.filters {
            if let config::Filter::RequestRedirect(r) = f {
                r.listener_port = Some(port);
            }
        }
    }
}

/// How a route attaches to a Gateway through one parentRef.
struct Attachment {
    /// The indices of the listeners it attached through (each counts it in attachedRoutes).
    listeners: Vec<usize>,
    /// What it serves through the served ones among them and their lowest port; `None` when
    /// none of them serves anything.
    served: Option<(Served, i32)>,
    /// Some of them are served, but narrower listeners take all its hostnames there.
    isolated: bool,
}

/// Whether a route attaches to a Gateway through a parentRef, through which listeners, and
/// what it serves there.
fn attach(
    route: &RouteView,
    gw: &GatewayOutcome,
    pref: &ParentRef,
    namespaces: &BTreeMap<String, Arc<Namespace>>,
    family: &[(i32, Option<String>)],
) -> (Verdict, Option<Attachment>) {
    let (section, port) = (pref.section_name.as_deref(), pref.port);
    if let Some(v) = &gw.route_refusal {
        return (v.clone(), None);
    }
    if gw.partition.is_none() {
        return (
            Verdict::fail(
                "Accepted",
                "Pending",
                format!(
                    "{} is not accepted: {}",
                    parent_name(gw),
                    gw.accepted.message
                ),
            ),
            None,
        );
    }
    let candidates: Vec<(usize, &GatewayListeners, &ListenerOutcome)> = gw
        .gateway
        .spec
        .listeners
        .iter()
        .zip(&gw.listeners)
        .enumerate()
        .map(|(i, (l, out))| (i, l, out))
        .filter(|(_, l, _)| section.is_none_or(|s| s == l.name))
        .filter(|(_, l, _)| port.is_none_or(|p| p == l.port))
        .collect();
    if candidates.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NoMatchingParent",
                format!(
                    "{} has no listener{}{}",
                    parent_name(gw),
                    section.map(|s| format!(" named {s}")).unwrap_or_default(),
                    port.map(|p| format!(" on port {p}")).unwrap_or_default()
                ),
            ),
            None,
        );
    }
    let allowed: Vec<(usize, &GatewayListeners, &ListenerOutcome)> = candidates
        .into_iter()
        .filter(|(_, l, out)| {
            out.attachable
                && out.supported_kinds.contains(&route.id.kind.as_str())
                && namespace_allowed(l, &gw.gateway, &route.id.key.namespace, namespaces)
        })
        .collect();
    if allowed.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NotAllowedByListeners",
                format!(
                    "no listener of {} allows {} from namespace {} (see the listeners' allowedRoutes)",
                    parent_name(gw),
                    route.id.kind.as_str(),
                    route.id.key.namespace
                ),
            ),
            None,
        );
    }
    let mut attached = Hosts::default();
    let mut served = Served::new();
    let mut served_port: Option<i32> = None;
    let mut through_served = false;
    let mut listeners = Vec::new();
    for (i, l, out) in &allowed {
        if let Some(h) = hostnames::intersect(l.hostname.as_deref(), &route.hostnames) {
            listeners.push(*i);
            attached.add(&h);
            if !out.served {
                continue;
            }
            through_served = true;
            // Listener isolation: hosts of a more specific listener on this port are its own.
            let same_port = family
                .iter()
                .filter(|(port, _)| *port == l.port)
                .map(|(_, h)| h.as_deref());
            let isolated =
                hostnames::isolate(&h, &hostnames::narrower(l.hostname.as_deref(), same_port));
            if !isolated.is_empty() {
                hostnames::merge(&mut served, isolated);
                served_port = Some(served_port.map_or(l.port, |p| p.min(l.port)));
            }
        }
    }
    if listeners.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NoMatchingListenerHostname",
                format!(
                    "none of the route's hostnames ({}) matches a listener hostname of {}",
                    route.hostnames.join(", "),
                    parent_name(gw)
                ),
            ),
            None,
        );
    }
    // Ownership judges every hostname the route claims here, served yet or not: fixing a
    // listener's certificate must not change whether the route is accepted.
    if let Some(delegations) = &gw.ownership
        && let Err(refusal) = delegations.check_all(&route.id.key.namespace, &attached.list())
    {
        return (
            Verdict::fail(
                "Accepted",
                HOSTNAME_NOT_PERMITTED,
                format!(
                    "{refusal} (hostname ownership of {}'s class, GatewayClassConfig spec.hostnameOwnership); nothing of this route is served through it",
                    parent_name(gw)
                ),
            ),
            None,
        );
    }
    (
        Verdict::ok("Accepted", "the route is accepted"),
        Some(Attachment {
            listeners,
            isolated: through_served && served_port.is_none(),
            served: served_port.map(|p| (served, p)),
        }),
    )
}

/// `Gateway ns/name` or `ListenerSet ns/name`.
fn parent_name(gw: &GatewayOutcome) -> String {
    format!("{} {}", gw.kind, ObjKey::of(gw.gateway.as_ref()))
}

/// The hostnames a route claims through some listeners.
#[derive(Default)]
struct Hosts {
    any: bool,
    names: BTreeSet<String>,
}

impl Hosts {
    /// Adds one listener's intersection with the route's hostnames (empty: any host).
    fn add(&mut self, hosts: &[String]) {
        self.any |= hosts.is_empty();
        self.names.extend(hosts.iter().cloned());
    }

    /// The hostnames served; empty when any host is.
    fn list(&self) -> Vec<String> {
        if self.any {
            Vec::new()
        } else {
            self.names.iter().cloned().collect()
        }
    }
}

fn namespace_allowed(
    l: &GatewayListeners,
    gw: &Gateway,
    route_ns: &str,
    namespaces: &BTreeMap<String, Arc<Namespace>>,
) -> bool {
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.clone()) {
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => {
            let Some(sel) = ns
                .and_then(|n| n.selector.as_ref())
                .and_then(selector::label_selector)
            else {
                return false;
            };
            let labels = namespaces
                .get(route_ns)
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            selector::selects(&sel, &labels)
        }
        _ => gw.namespace().as_deref() == Some(route_ns),
    }
}
