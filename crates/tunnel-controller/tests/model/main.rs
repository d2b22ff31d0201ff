//! Golden tests for the model, as Envoy Gateway's translator tests: each case in `testdata/` is
//! a snapshot of objects (`<case>.in.yaml`) and what the controller decides for it
//! (`<case>.out.yaml`): the conditions it writes on every object, attached routes, addresses,
//! each partition's route table, each tunnel's hostnames and the Warning Events. No I/O: the
//! case runs through [`model::compute`] and [`status::plan`], with the Cloudflare API's claim
//! verdicts and the round's I/O outcomes ([`Effects`]) given by the case.
//!
//! AccessPolicies run through [`access::decide`] and [`status::access::status_writes`] the same way: the
//! out file shows the Access applications each installation should hold and the policies'
//! statuses.
//!
//! The same cases check the route lane (`lane`): a changed route spliced into the tables makes
//! the tables a full computation makes.
//!
//! `UPDATE_GOLDEN=1 cargo test -p tunnel-controller --test model` rewrites the out files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::listenersets::ListenerSet;
use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};
use tunnel_config::config::Config;
use tunnel_controller::api::{AccessPolicy, GatewayClassConfig, GatewayConfig};
use tunnel_controller::conditions::Verdict;
use tunnel_controller::events::Notice;
use tunnel_controller::keys::{ObjKey, ParentRef, PartitionKey, RouteId, RouteKind};
use tunnel_controller::model::access;
use tunnel_controller::model::dedicated::Verification;
use tunnel_controller::model::rules::hostnames;
use tunnel_controller::model::{self, Model, Plane, Settings};
use tunnel_controller::observe::world::Snapshot;
use tunnel_controller::publish::cloudflare::access::{AccessReport, AppVerdict};
use tunnel_controller::publish::cloudflare::dns::HostVerdict;
use tunnel_controller::status::{self, Effects, Write};

mod lane;

const CONTROLLER: &str = "cf.k8s.lex.la/tunnel-controller";

/// A case's input: the objects of the snapshot, the Cloudflare API's answers about tunnel
/// claims, and the round's I/O outcomes.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    gateway_classes: Vec<GatewayClass>,
    gateway_class_configs: Vec<GatewayClassConfig>,
    gateways: Vec<Gateway>,
    gateway_configs: Vec<GatewayConfig>,
    listener_sets: Vec<ListenerSet>,
    http_routes: Vec<HttpRoute>,
    grpc_routes: Vec<GrpcRoute>,
    reference_grants: Vec<ReferenceGrant>,
    #[serde(rename = "backendTLSPolicies")]
    backend_tls_policies: Vec<BackendTlsPolicy>,
    services: Vec<Service>,
    endpoint_slices: Vec<EndpointSlice>,
    secrets: Vec<Secret>,
    config_maps: Vec<ConfigMap>,
    namespaces: Vec<Namespace>,
    deployments: Vec<Deployment>,
    access_policies: Vec<AccessPolicy>,
    /// By tunnel id; a claim not listed is verified.
    verifications: BTreeMap<String, CaseVerification>,
    effects: CaseEffects,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
enum CaseVerification {
    Verified,
    Refused { reason: String, message: String },
    Pending(String),
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct CaseEffects {
    /// By tunnel id.
    tunnel_errors: BTreeMap<String, String>,
    /// By route (`HTTPRoute ns/name`).
    overflow: BTreeMap<String, Vec<String>>,
    /// By partition (`shared`, `gateway:ns/name`).
    push_failing: BTreeMap<String, String>,
    /// By Gateway (`ns/name`).
    render_errors: BTreeMap<String, String>,
    /// Partitions whose proxies do not all hold the document yet; the others have loaded it
    /// (unless their pushes keep failing or their plane could not be written).
    not_loaded: Vec<String>,
    /// Tunnels whose ingress document does not list the plan's hostnames yet (changes still
    /// arriving); the others list them (overflow left out), except those with a tunnel error.
    not_listed: Vec<String>,
    /// DNS verdicts by Gateway (`ns/name`) and hostname: `ready <tunnel>`, `elsewhere <why>`,
    /// `no-zone`, `failed <why>`.
    dns: BTreeMap<String, BTreeMap<String, String>>,
    /// The Access API's answers: policies (`ns/name`) whose application failed, with why, and
    /// destinations an application this controller did not make covers (uri → its name).
    access_failed: BTreeMap<String, String>,
    access_taken: BTreeMap<String, String>,
}

/// What the controller decides, projected for reading: times and generations left out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Out {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gateway_classes: Vec<ClassOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gateway_class_configs: Vec<ClassConfigOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gateways: Vec<GatewayOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    listener_sets: Vec<ListenerSetOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<RouteOut>,
    #[serde(rename = "backendTLSPolicies", skip_serializing_if = "Vec::is_empty")]
    backend_tls_policies: Vec<PolicyOut>,
    /// Each partition's route table.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    partitions: BTreeMap<String, serde_json::Value>,
    /// Each tunnel's ingress hostnames in priority order, with the route that brings each.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tunnels: BTreeMap<String, Vec<String>>,
    /// Tunnel claims still to verify with the Cloudflare API.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    verify_requests: Vec<String>,
    /// The Access applications by owner ID and policy.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    access_applications: BTreeMap<String, BTreeMap<String, AccessAppOut>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    access_policies: Vec<PolicyOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<EventOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AccessAppOut {
    destinations: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_duration: Option<String>,
    /// Cloudflare's policies as sent.
    policies: Vec<serde_json::Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Cond {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: String,
    message: String,
}

fn conds(c: &[Condition]) -> Vec<Cond> {
    c.iter()
        .map(|c| Cond {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClassOut {
    name: String,
    /// The finalizers written (only when they change).
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<Vec<String>>,
    conditions: Vec<Cond>,
    /// `status.supportedFeatures`, joined by ", " (when written).
    #[serde(rename = "supportedFeatures", skip_serializing_if = "Option::is_none")]
    supported_features: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClassConfigOut {
    name: String,
    /// `status.gateways` (what the admission policy reads).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gateways: Vec<String>,
    conditions: Vec<Cond>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GatewayOut {
    name: String,
    /// Where its routes go.
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tunnel: Option<String>,
    /// What happens to its dedicated plane's objects.
    plane: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    addresses: Vec<String>,
    /// `status.attachedListenerSets` (written for Gateways that admit ListenerSets).
    #[serde(skip_serializing_if = "Option::is_none")]
    attached_listener_sets: Option<i32>,
    conditions: Vec<Cond>,
    listeners: Vec<ListenerOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListenerSetOut {
    name: String,
    /// The parent Gateway.
    gateway: String,
    conditions: Vec<Cond>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    listeners: Vec<ListenerOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListenerOut {
    name: String,
    supported_kinds: Vec<String>,
    attached_routes: i32,
    conditions: Vec<Cond>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RouteOut {
    route: String,
    parents: Vec<ParentOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ParentOut {
    parent_ref: ParentRef,
    controller_name: String,
    /// The hostnames it serves through this parent (`*`: any); absent when not attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    hostnames: Option<Vec<String>>,
    conditions: Vec<Cond>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyOut {
    name: String,
    ancestors: Vec<AncestorOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AncestorOut {
    ancestor_ref: ParentRef,
    controller_name: String,
    conditions: Vec<Cond>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventOut {
    object: String,
    reason: String,
    message: String,
}

fn settings() -> Settings {
    Settings {
        controller_name: CONTROLLER.to_owned(),
        namespace: "cf-system".to_owned(),
        shared_plane_service: "tunnel-proxy-config".to_owned(),
        shared_plane_auth_secret: "tunnel-proxy-auth".to_owned(),
    }
}

fn arcs<T>(v: Vec<T>) -> Vec<Arc<T>> {
    v.into_iter().map(Arc::new).collect()
}

/// The snapshot of a case. Secrets' `stringData` is folded into `data`, as the API server does.
fn snapshot(case: Case) -> Snapshot {
    let secrets = case
        .secrets
        .into_iter()
        .map(|mut s| {
            for (k, v) in s.string_data.take().unwrap_or_default() {
                s.data
                    .get_or_insert_with(Default::default)
                    .insert(k, ByteString(v.into_bytes()));
            }
            s
        })
        .collect();
    Snapshot {
        gateway_classes: arcs(case.gateway_classes),
        gateways: arcs(case.gateways),
        http_routes: arcs(case.http_routes),
        grpc_routes: arcs(case.grpc_routes),
        listener_sets: arcs(case.listener_sets),
        reference_grants: arcs(case.reference_grants),
        backend_tls_policies: arcs(case.backend_tls_policies),
        services: arcs(case.services),
        endpoint_slices: arcs(case.endpoint_slices),
        secrets: arcs(secrets),
        config_maps: arcs(case.config_maps),
        namespaces: arcs(case.namespaces),
        class_configs: arcs(case.gateway_class_configs),
        gateway_configs: arcs(case.gateway_configs),
        access_policies: arcs(case.access_policies),
        deployments: arcs(case.deployments),
        network_policies: Vec::new(),
        hpas: Vec::new(),
        pdbs: Vec::new(),
    }
}

fn route_name(id: &RouteId) -> String {
    format!("{} {}", id.kind.as_str(), id.key)
}

fn obj_key(s: &str) -> ObjKey {
    let (namespace, name) = s.split_once('/').expect("namespace/name");
    ObjKey {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn effects(e: CaseEffects, model: &Model) -> Effects {
    let route = |s: &str| {
        let (kind, key) = s.split_once(' ').expect("`<kind> namespace/name`");
        let kind = match kind {
            "HTTPRoute" => RouteKind::Http,
            "GRPCRoute" => RouteKind::Grpc,
            other => panic!("route kind {other}"),
        };
        RouteId {
            kind,
            key: obj_key(key),
        }
    };
    let partition = |s: &str| match s.strip_prefix("gateway:") {
        Some(k) => PartitionKey::Dedicated(obj_key(k)),
        None if s == "shared" => PartitionKey::Shared,
        None => panic!("partition {s}"),
    };
    let overflow: Vec<&String> = e.overflow.values().flatten().collect();
    let ingress = model
        .tunnels
        .iter()
        .filter(|(t, _)| !e.tunnel_errors.contains_key(*t) && !e.not_listed.contains(t))
        .map(|(t, plan)| {
            let listed = plan
                .hostnames
                .iter()
                .map(|(h, _)| hostnames::normalize(h))
                .filter(|h| !overflow.contains(&h))
                .collect();
            (t.clone(), listed)
        })
        .collect();
    // A partition whose pushes keep failing, or whose plane could not be written, has not
    // loaded the document either.
    let not_loaded: Vec<PartitionKey> = e
        .not_loaded
        .iter()
        .chain(e.push_failing.keys())
        .map(|p| partition(p))
        .chain(
            e.render_errors
                .keys()
                .map(|g| PartitionKey::Dedicated(obj_key(g))),
        )
        .collect();
    Effects {
        loaded: model
            .partitions
            .keys()
            .filter(|k| !not_loaded.contains(k))
            .cloned()
            .collect(),
        ingress,
        dns: e
            .dns
            .into_iter()
            .map(|(g, hosts)| {
                let verdicts = hosts
                    .into_iter()
                    .map(|(h, v)| {
                        let (kind, rest) = v.split_once(' ').unwrap_or((v.as_str(), ""));
                        let v = match kind {
                            "ready" => HostVerdict::Ready {
                                tunnel: rest.to_owned(),
                            },
                            "elsewhere" => HostVerdict::OwnedElsewhere(rest.to_owned()),
                            "no-zone" => HostVerdict::NoZone,
                            "failed" => HostVerdict::Failed(rest.to_owned()),
                            other => panic!("DNS verdict {other}"),
                        };
                        (h, v)
                    })
                    .collect();
                (obj_key(&g), verdicts)
            })
            .collect(),
        tunnel_errors: e.tunnel_errors,
        overflow: e
            .overflow
            .into_iter()
            .map(|(r, h)| (route(&r), h))
            .collect(),
        push_failing: e
            .push_failing
            .into_iter()
            .map(|(p, m)| (partition(&p), m))
            .collect(),
        render_errors: e
            .render_errors
            .into_iter()
            .map(|(g, m)| (obj_key(&g), m))
            .collect(),
        // Cases run without the config API's TLS (its condition's placement is tested on the
        // controller binary: gateway_e2e `dedicated`, on_node `install`).
        config_tls: BTreeMap::new(),
    }
}

/// The model as the controller computes it after asking the Cloudflare API about every claim
/// (the case's answers; verified when it gives none).
fn compute(snap: &Snapshot, answers: &BTreeMap<String, CaseVerification>) -> Model {
    compute_with_context(snap, answers).0
}

/// The case's model (with its answers about tunnel claims) and its route context.
fn compute_with_context(
    snap: &Snapshot,
    answers: &BTreeMap<String, CaseVerification>,
) -> (Model, model::RouteContext) {
    let first = model::compute(snap, &settings(), &BTreeMap::new());
    let verifications = first
        .verify_requests
        .iter()
        .map(|r| {
            let answer = match answers.get(r.token.tunnel_id()) {
                None | Some(CaseVerification::Verified) => Verification::Verified,
                Some(CaseVerification::Refused { reason, message }) => {
                    Verification::Refused(Verdict::fail("Accepted", reason, message))
                }
                Some(CaseVerification::Pending(why)) => Verification::Pending(why.clone()),
            };
            (r.key.clone(), answer)
        })
        .collect();
    model::compute_with_context(snap, &settings(), &verifications)
}

fn project(model: &Model, writes: &[Write], notices: &[Notice]) -> Out {
    let mut out = Out {
        gateway_classes: Vec::new(),
        gateway_class_configs: Vec::new(),
        gateways: Vec::new(),
        listener_sets: Vec::new(),
        routes: Vec::new(),
        backend_tls_policies: Vec::new(),
        access_applications: BTreeMap::new(),
        access_policies: Vec::new(),
        partitions: BTreeMap::new(),
        tunnels: BTreeMap::new(),
        verify_requests: model
            .verify_requests
            .iter()
            .map(|r| r.token.tunnel_id().to_owned())
            .collect(),
        events: notices
            .iter()
            .map(|n| EventOut {
                object: format!(
                    "{}{} {}{}",
                    if n.warning { "" } else { "Normal " },
                    n.object.kind.as_deref().unwrap_or_default(),
                    n.object
                        .namespace
                        .as_deref()
                        .map(|ns| format!("{ns}/"))
                        .unwrap_or_default(),
                    n.object.name.as_deref().unwrap_or_default()
                ),
                reason: n.reason.clone(),
                message: n.message.clone(),
            })
            .collect(),
    };
    for w in writes {
        match w {
            Write::GatewayClass { name, status } => out.gateway_classes.push(ClassOut {
                name: name.clone(),
                finalizers: None,
                conditions: conds(status.conditions.as_deref().unwrap_or_default()),
                supported_features: status.supported_features.as_ref().map(|f| {
                    f.iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }),
            }),
            Write::ClassFinalizer {
                name, finalizers, ..
            } => match out.gateway_classes.iter_mut().find(|c| c.name == *name) {
                Some(c) => c.finalizers = Some(finalizers.clone()),
                None => out.gateway_classes.push(ClassOut {
                    name: name.clone(),
                    finalizers: Some(finalizers.clone()),
                    conditions: Vec::new(),
                    supported_features: None,
                }),
            },
            Write::ClassConfig {
                name,
                conditions,
                gateways,
            } => out.gateway_class_configs.push(ClassConfigOut {
                name: name.clone(),
                gateways: gateways.clone(),
                conditions: conds(conditions),
            }),
            Write::Gateway { key, status } => {
                let g = &model.gateways[key];
                out.gateways.push(GatewayOut {
                    name: key.to_string(),
                    partition: g.partition.as_ref().map(ToString::to_string),
                    tunnel: g.tunnel.clone(),
                    plane: match g.plane {
                        Plane::Shared => "shared",
                        Plane::Serve(_) => "serve",
                        Plane::Keep => "keep",
                        Plane::Remove => "remove",
                    },
                    addresses: status
                        .addresses
                        .iter()
                        .flatten()
                        .map(|a| a.value.clone())
                        .collect(),
                    attached_listener_sets: status.attached_listener_sets,
                    conditions: conds(status.conditions.as_deref().unwrap_or_default()),
                    listeners: status
                        .listeners
                        .iter()
                        .flatten()
                        .map(|l| ListenerOut {
                            name: l.name.clone(),
                            supported_kinds: l
                                .supported_kinds
                                .iter()
                                .flatten()
                                .map(|k| k.kind.clone())
                                .collect(),
                            attached_routes: l.attached_routes,
                            conditions: conds(&l.conditions),
                        })
                        .collect(),
                });
            }
            Write::ListenerSet { key, status } => out.listener_sets.push(ListenerSetOut {
                name: key.to_string(),
                gateway: model.listener_sets[key].gateway.to_string(),
                conditions: conds(status.conditions.as_deref().unwrap_or_default()),
                listeners: status
                    .listeners
                    .iter()
                    .flatten()
                    .map(|l| ListenerOut {
                        name: l.name.clone(),
                        supported_kinds: l
                            .supported_kinds
                            .iter()
                            .flatten()
                            .map(|k| k.kind.clone())
                            .collect(),
                        attached_routes: l.attached_routes,
                        conditions: conds(&l.conditions),
                    })
                    .collect(),
            }),
            Write::Route { id, parents, .. } => {
                let outcome = model.routes.iter().find(|r| r.id == *id);
                out.routes.push(RouteOut {
                    route: route_name(id),
                    parents: parents
                        .iter()
                        .map(|p| ParentOut {
                            parent_ref: p.parent_ref.clone(),
                            controller_name: p.controller_name.clone(),
                            hostnames: outcome
                                .filter(|_| p.controller_name == CONTROLLER)
                                .and_then(|r| {
                                    r.parents.iter().find(|o| o.parent_ref == p.parent_ref)
                                })
                                .and_then(|o| o.hostnames.clone())
                                .map(|h| {
                                    if h.is_empty() {
                                        vec!["*".to_owned()]
                                    } else {
                                        h
                                    }
                                }),
                            conditions: conds(&p.conditions),
                        })
                        .collect(),
                });
            }
            Write::Policy { key, ancestors, .. } => out.backend_tls_policies.push(PolicyOut {
                name: key.to_string(),
                ancestors: ancestors
                    .iter()
                    .map(|a| AncestorOut {
                        ancestor_ref: a.ancestor_ref.clone(),
                        controller_name: a.controller_name.clone(),
                        conditions: conds(&a.conditions),
                    })
                    .collect(),
            }),
            Write::AccessPolicy { key, ancestors, .. } => out.access_policies.push(PolicyOut {
                name: key.to_string(),
                ancestors: ancestors
                    .iter()
                    .map(|a| AncestorOut {
                        ancestor_ref: a.ancestor_ref.clone(),
                        controller_name: a.controller_name.clone(),
                        conditions: conds(&a.conditions),
                    })
                    .collect(),
            }),
        }
    }
    for (key, plan) in &model.partitions {
        out.partitions.insert(key.to_string(), compact(&plan.doc));
    }
    for (tunnel, plan) in &model.tunnels {
        out.tunnels.insert(
            tunnel.clone(),
            plan.hostnames
                .iter()
                .map(|(h, r)| format!("{h} ({})", route_name(r)))
                .collect(),
        );
    }
    out
}

/// The out file's text for the case in `input`.
/// A route table without its unset fields and empty lists.
fn compact(doc: &Config) -> serde_json::Value {
    fn strip(v: serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value;
        match v {
            Value::Null => None,
            Value::Array(a) if a.is_empty() => None,
            Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(strip).collect())),
            Value::Object(o) => Some(Value::Object(
                o.into_iter()
                    .filter_map(|(k, v)| strip(v).map(|v| (k, v)))
                    .collect(),
            )),
            v => Some(v),
        }
    }
    strip(serde_json::to_value(doc).expect("a route table serializes")).unwrap_or_default()
}

fn run(input: &Path) -> String {
    let text = std::fs::read_to_string(input).unwrap();
    let mut case: Case =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let answers = std::mem::take(&mut case.verifications);
    let mut case_effects = std::mem::take(&mut case.effects);
    let access_effects = CaseEffects {
        access_failed: std::mem::take(&mut case_effects.access_failed),
        access_taken: std::mem::take(&mut case_effects.access_taken),
        ..CaseEffects::default()
    };
    let snap = snapshot(case);
    let model = compute(&snap, &answers);
    let effects = effects(case_effects, &model);
    let (mut writes, mut notices) = status::plan(&model, &effects, CONTROLLER);
    let decision = access::decide(
        &snap.access_policies,
        &snap.http_routes,
        &snap.gateways,
        &model,
    );
    let reports = access_reports(&decision, &access_effects);
    let (more_writes, more_notices) =
        status::access::status_writes(&decision, &reports, CONTROLLER, &status::now());
    writes.extend(more_writes);
    notices.extend(more_notices);
    let mut out = project(&model, &writes, &notices);
    for (scope, apps) in decision.scopes.values() {
        for (policy, app) in apps {
            out.access_applications
                .entry(scope.owner.clone())
                .or_default()
                .insert(
                    policy.to_string(),
                    AccessAppOut {
                        destinations: app.uris.iter().cloned().collect(),
                        session_duration: app.session_duration.clone(),
                        policies: app
                            .rules
                            .iter()
                            .map(|r| serde_json::to_value(r).unwrap())
                            .collect(),
                    },
                );
        }
    }
    serde_saphyr::to_string(&out).expect("the projection serializes")
}

/// The Access API's answers as the case gives them: every application in place, except the
/// failed ones, with the foreign destinations left out.
fn access_reports(decision: &access::Decision, e: &CaseEffects) -> BTreeMap<String, AccessReport> {
    decision
        .scopes
        .iter()
        .map(|(key, (_, apps))| {
            let apps = apps
                .iter()
                .map(|(policy, app)| {
                    let verdict = match e.access_failed.get(&policy.to_string()) {
                        Some(why) => AppVerdict::Failed(why.clone()),
                        None => AppVerdict::Ready {
                            taken: e
                                .access_taken
                                .iter()
                                .filter(|(u, _)| app.uris.contains(*u))
                                .map(|(u, n)| (u.clone(), n.clone()))
                                .collect(),
                        },
                    };
                    (policy.clone(), verdict)
                })
                .collect();
            (
                key.clone(),
                AccessReport {
                    apps,
                    incomplete: false,
                },
            )
        })
        .collect()
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model/testdata")
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".in.yaml"))
        .collect();
    cases.sort();
    cases
}

fn out_path(input: &Path) -> PathBuf {
    PathBuf::from(input.to_string_lossy().replace(".in.yaml", ".out.yaml"))
}

#[test]
fn every_case_decides_as_its_golden_file_says() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut failed = Vec::new();
    for input in cases() {
        let got = run(&input);
        let path = out_path(&input);
        if update {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            eprintln!(
                "--- {} (want)\n{want}\n+++ got\n{got}",
                path.file_name().unwrap().to_string_lossy()
            );
            failed.push(input.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(
        failed.is_empty(),
        "cases differ from their golden files (UPDATE_GOLDEN=1 rewrites them): {failed:?}"
    );
}

/// Every condition reason the controller writes, and every Warning Event reason beyond them.
const REASONS: &[&str] = &[
    // GatewayClass, GatewayClassConfig.
    "Accepted",
    "InvalidParameters",
    "SecretsFound",
    "SecretsMissing",
    "Valid",
    "Invalid",
    // Gateway.
    "UnsupportedAddress",
    "ListenersNotValid",
    "Programmed",
    "Pending",
    "ResolvedRefs",
    "InvalidClientCertificateRef",
    "RefNotPermitted",
    "DataPlaneQuotaExceeded",
    "NoResources",
    "TunnelVerificationPending",
    "TunnelAccountMismatch",
    "TunnelNotFound",
    "TunnelSecretMismatch",
    "TunnelNotVerifiable",
    // Listeners.
    "UnsupportedProtocol",
    "InvalidRouteKinds",
    "HostnameConflict",
    "NoConflicts",
    "InvalidCertificateRef",
    // ListenerSets and their listeners.
    "NotAllowed",
    "ParentNotAccepted",
    "ParentNotProgrammed",
    "ProtocolConflict",
    "HostnameNotPermitted",
    // Route parents.
    "NoMatchingParent",
    "NotAllowedByListeners",
    "NoMatchingListenerHostname",
    "TunnelClaimRejected",
    "BackendNotFound",
    "InvalidKind",
    "UnsupportedValue",
    "TunnelSharedInNamespace",
    "TunnelSharedAcrossNamespaces",
    "IngressRuleLimitExceeded",
    "ProxyConfigPushFailed",
    "Published",
    "ListenerNotProgrammed",
    // BackendTLSPolicy.
    "NoValidCACertificate",
    "Conflicted",
    "InvalidCACertificateRef",
    // AccessPolicy.
    "TargetNotFound",
    "DomainOwnedElsewhere",
    "AccessAPIError",
    "NoHostnames",
    // Warning Events only.
    "CloudflareSyncFailed",
    "RenderFailed",
    "TunnelShared",
];

#[test]
fn the_cases_cover_every_reason_the_controller_writes() {
    let outs: String = cases().iter().map(|c| run(c)).collect();
    let missing: Vec<&str> = REASONS
        .iter()
        .copied()
        .filter(|r| !outs.contains(&format!("reason: {r}\n")))
        .collect();
    assert!(missing.is_empty(), "no golden case shows {missing:?}");
}
