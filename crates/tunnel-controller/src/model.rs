//! The controller's decisions for one snapshot, computed without I/O: which GatewayClasses,
//! Gateways and listeners are accepted, which route parents attach (allowedRoutes, sectionName,
//! port, hostname intersection), the route table of each data-plane partition, and the
//! hostnames of each tunnel's ingress document in priority order.
//!
//! Outcomes of I/O (a tunnel's Cloudflare sync, a partition's pushes) are applied afterwards by
//! [`crate::status`]; this module only says what the cluster asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use gateway_api::apis::standard::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom, GatewayStatusAddresses,
};
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::{Value, json};
use tunnel_config::config::{self, Config};

use crate::api::{DEFAULT_API_TOKEN_KEY, GROUP, GatewayClassConfig};
use crate::claims::{self, Sharing};
use crate::conditions::Verdict;
use crate::dedicated::{self, ClassPolicy, Decision, Resolved, Verification, VerifyRequest};
use crate::hostnames;
use crate::render::{self, PlaneNames};
use crate::translate::{self, BackendIndex};
use crate::world::Snapshot;

/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// Condition type set on routes while their partition's pushes keep failing.
pub const PROXY_CONFIG_PUSHED: &str = "cf.k8s.lex.la/ProxyConfigPushed";
/// The finalizer on a GatewayClass while Gateways use it (Gateway API convention).
pub const CLASS_FINALIZER: &str = "gateway-exists-finalizer.gateway.networking.k8s.io";

/// What the controller is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `spec.controllerName` of the GatewayClasses this controller serves.
    pub controller_name: String,
    /// The controller's namespace (default namespace of class credentials, shared plane).
    pub namespace: String,
    /// The shared plane's headless config Service (in `namespace`).
    pub shared_plane_service: String,
    /// The Secret (in `namespace`, key `auth-token`) with the shared plane's config-API token.
    pub shared_plane_auth_secret: String,
}

/// `namespace/name` of an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub fn of<K: ResourceExt>(o: &K) -> ObjKey {
        ObjKey {
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        }
    }
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which proxies serve a Gateway, and with which token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartitionKey {
    /// The plane deployed with the controller (Gateways without parametersRef, TG-2).
    Shared,
    /// A Gateway's own plane (TG-7).
    Dedicated(ObjKey),
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartitionKey::Shared => f.write_str("shared"),
            PartitionKey::Dedicated(k) => write!(f, "gateway:{k}"),
        }
    }
}

/// HTTPRoute or GRPCRoute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
}

impl RouteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
        }
    }
}

/// A route's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteId {
    pub kind: RouteKind,
    pub key: ObjKey,
}

/// The Cloudflare side of the class: the shared plane's tunnel and the API credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub api_token: String,
    /// From the GatewayClassConfig or the Secret's `account-id`; looked up when `None`.
    pub account_id: Option<String>,
}

/// One of our GatewayClasses.
#[derive(Debug, Clone)]
pub struct ClassOutcome {
    pub class: Arc<GatewayClass>,
    pub accepted: Verdict,
    /// Whether Gateways use it (the finalizer must be present).
    pub in_use: bool,
}

/// A GatewayClassConfig's own status.
#[derive(Debug, Clone)]
pub struct ClassConfigOutcome {
    pub config: Arc<GatewayClassConfig>,
    pub verdicts: Vec<Verdict>,
}

/// A listener's status.
#[derive(Debug, Clone)]
pub struct ListenerOutcome {
    pub name: String,
    pub supported_kinds: Vec<&'static str>,
    pub verdicts: Vec<Verdict>,
    pub attached_routes: i32,
    /// Routes may attach (valid, not conflicted).
    usable: bool,
}

/// A Gateway of one of our classes.
#[derive(Debug, Clone)]
pub struct GatewayOutcome {
    pub gateway: Arc<Gateway>,
    pub accepted: Verdict,
    pub programmed: Verdict,
    /// The backend client certificate's verdict.
    pub resolved_refs: Verdict,
    pub listeners: Vec<ListenerOutcome>,
    /// `status.addresses`: `<tunnel-id>.cfargotunnel.com` of the tunnel it serves (or keeps).
    pub addresses: Vec<GatewayStatusAddresses>,
    /// Where its routes go; `None` when nothing is delivered.
    pub partition: Option<PartitionKey>,
    /// The tunnel whose ingress document lists its routes' hostnames.
    pub tunnel: Option<String>,
    /// The credentials that write that tunnel's document.
    pub credentials: Option<Credentials>,
    /// What to do with its dedicated plane's objects.
    pub plane: Plane,
    /// What its routes say on this parent when it serves nothing.
    pub route_refusal: Option<Verdict>,
    /// The Warning Event reason when `Accepted` turns False (default: the condition's reason).
    pub accepted_event: Option<&'static str>,
    /// Other dedicated Gateways on its tunnel.
    pub sharing: Option<Sharing>,
    client_cert: Option<translate::ClientCert>,
}

/// A Gateway's dedicated plane, as this round wants it.
#[derive(Debug, Clone)]
pub enum Plane {
    /// Served by the shared plane: owned plane objects (from an earlier parametersRef) go.
    Shared,
    /// Render, apply, heal drift.
    Serve(Box<Resolved>),
    /// Leave the running plane as it is (post-render breakage).
    Keep,
    /// Refused: owned plane objects go.
    Remove,
}

/// One parentRef of a route that names a Gateway of ours.
#[derive(Debug, Clone)]
pub struct ParentOutcome {
    /// The parentRef as written in status (`group`, `kind`, `namespace`, `name`, ...).
    pub parent_ref: Value,
    pub gateway: ObjKey,
    /// `Accepted` first, then `ResolvedRefs`, then optional extras.
    pub verdicts: Vec<Verdict>,
    /// Hostnames the route serves through this parent (empty: any host); `None` when not
    /// attached.
    pub hostnames: Option<Vec<String>>,
}

/// A route and its parents of ours.
#[derive(Debug, Clone)]
pub struct RouteOutcome {
    pub id: RouteId,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
    /// The current `status.parents` entries, as JSON.
    pub current_parents: Vec<Value>,
    pub parents: Vec<ParentOutcome>,
}

/// What one partition's proxies should hold.
#[derive(Debug, Clone, Default)]
pub struct PartitionPlan {
    /// The route table (version 0; the pusher stamps versions).
    pub doc: Config,
}

/// A BackendTLSPolicy in use by routes of ours: its verdicts, under each Gateway (ancestor)
/// whose routes reach a Service it targets.
#[derive(Debug, Clone)]
pub struct PolicyOutcome {
    pub policy: Arc<BackendTlsPolicy>,
    pub verdicts: Vec<Verdict>,
    pub ancestors: BTreeSet<ObjKey>,
}

/// One tunnel's ingress document input.
#[derive(Debug, Clone)]
pub struct TunnelPlan {
    pub credentials: Credentials,
    /// Hostnames in priority order (oldest route first), with the route that brings each.
    pub hostnames: Vec<(String, RouteId)>,
}

/// Everything decided for one snapshot.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Tunnel claims to verify with the Cloudflare API before they can be served.
    pub verify_requests: Vec<VerifyRequest>,
    pub classes: Vec<ClassOutcome>,
    pub policies: Vec<PolicyOutcome>,
    pub class_configs: Vec<ClassConfigOutcome>,
    pub gateways: BTreeMap<ObjKey, GatewayOutcome>,
    pub routes: Vec<RouteOutcome>,
    pub partitions: BTreeMap<PartitionKey, PartitionPlan>,
    pub tunnels: BTreeMap<String, TunnelPlan>,
}

/// The class's resolved settings.
#[derive(Debug, Clone)]
struct ClassSettings {
    tunnel_id: String,
    credentials: Credentials,
    allow_shared_tunnels: bool,
    max_per_namespace: Option<i32>,
}

/// The decisions for `snap`; `verifications` are the Cloudflare API's answers about dedicated
/// Gateways' tunnel claims so far (claims not in it are listed in `Model::verify_requests`).
pub fn compute(
    snap: &Snapshot,
    settings: &Settings,
    verifications: &BTreeMap<String, Verification>,
) -> Model {
    let mut model = Model::default();
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
            model.class_configs.push(ClassConfigOutcome {
                config: cfg.clone(),
                verdicts,
            });
        }
    }

    let idx = BackendIndex::new(
        snap.services.iter().cloned(),
        snap.endpoint_slices.iter().cloned(),
        snap.reference_grants.iter().cloned(),
        snap.backend_tls_policies.iter().cloned(),
        snap.config_maps.iter().cloned(),
        snap.secrets.iter().cloned(),
    );

    // Dedicated planes: one decision per class over all its Gateways with a parametersRef.
    let mut decisions: BTreeMap<ObjKey, Decision> = BTreeMap::new();
    for (class, cs) in &class_settings {
        let dedicated: Vec<Arc<Gateway>> = snap
            .gateways
            .iter()
            .filter(|g| g.spec.gateway_class_name == *class)
            .filter(|g| {
                g.spec
                    .infrastructure
                    .as_ref()
                    .and_then(|i| i.parameters_ref.as_ref())
                    .is_some()
            })
            .cloned()
            .collect();
        decisions.extend(dedicated::decide(
            &dedicated,
            snap,
            &ClassPolicy {
                class_tunnel: &cs.tunnel_id,
                credentials: &cs.credentials,
                allow_shared_tunnels: cs.allow_shared_tunnels,
                max_per_namespace: cs.max_per_namespace,
            },
            verifications,
            &mut model.verify_requests,
        ));
    }

    // Gateways.
    let class_names: BTreeSet<String> = ours.iter().map(|c| c.name_any()).collect();
    for gw in &snap.gateways {
        if !class_names.contains(&gw.spec.gateway_class_name) {
            continue;
        }
        let key = ObjKey::of(gw.as_ref());
        let outcome = gateway_outcome(
            gw,
            class_settings.get(&gw.spec.gateway_class_name),
            decisions.get(&key),
            snap,
            &idx,
        );
        model.gateways.insert(key, outcome);
    }

    // Routes, oldest first (the Gateway API tie-break and the ingress rule priority).
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
    let namespaces: BTreeMap<String, &Arc<Namespace>> =
        snap.namespaces.iter().map(|n| (n.name_any(), n)).collect();
    // Which Gateways reach each Service, for BackendTLSPolicy ancestors.
    let mut uses: BTreeMap<(String, String), BTreeSet<ObjKey>> = BTreeMap::new();
    for route in &routes {
        route_outcome(route, &mut model, &mut uses, &namespaces, &idx);
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
                verdicts: translate::backend_tls_policy_verdicts(policy, &idx),
                ancestors,
            });
        }
    }

    // Listener hostnames per partition, for the data plane's own listener check.
    for gw in model.gateways.values() {
        let Some(partition) = &gw.partition else {
            continue;
        };
        let plan = model.partitions.entry(partition.clone()).or_default();
        for (l, out) in gw.gateway.spec.listeners.iter().zip(&gw.listeners) {
            if out.usable {
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
    let mut groups: BTreeMap<String, Vec<PartitionKey>> = BTreeMap::new();
    for gw in model.gateways.values() {
        if let (Some(tunnel), Some(p @ PartitionKey::Dedicated(_)), Some(_)) =
            (&gw.tunnel, &gw.partition, &gw.sharing)
        {
            groups.entry(tunnel.clone()).or_default().push(p.clone());
        }
    }
    for members in groups.values().filter(|m| m.len() > 1) {
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
            for h in hosts {
                tunnel.hostnames.push((h.clone(), route.id.clone()));
            }
        }
    }
    model
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
        allow_shared_tunnels: cfg.spec.allow_shared_tunnels,
        max_per_namespace: cfg.spec.max_data_planes_per_namespace,
        tunnel_id: cfg.spec.tunnel_id.clone(),
        credentials: Credentials {
            api_token,
            account_id: cfg.spec.account_id.clone().or(account_hint),
        },
    })
}

/// A Secret value as trimmed UTF-8; `None` when absent or empty.
pub fn secret_value(secret: &k8s_openapi::api::core::v1::Secret, key: &str) -> Option<String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })?;
    let s = String::from_utf8(bytes).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

const SUPPORTED_KINDS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];

fn gateway_outcome(
    gw: &Arc<Gateway>,
    class: Option<&ClassSettings>,
    decision: Option<&Decision>,
    snap: &Snapshot,
    idx: &BackendIndex,
) -> GatewayOutcome {
    let listeners = listener_outcomes(&gw.spec.listeners);
    let (client_cert, resolved_refs) = translate::gateway_client_cert(gw, idx);
    let usable = listeners.iter().filter(|l| l.usable).count();
    let key = ObjKey::of(gw.as_ref());
    let mut out = GatewayOutcome {
        gateway: gw.clone(),
        accepted: Verdict::ok("Accepted", "the Gateway is accepted"),
        programmed: Verdict::ok("Programmed", "routes are served by the shared data plane"),
        resolved_refs,
        listeners,
        addresses: Vec::new(),
        partition: None,
        tunnel: None,
        client_cert,
        plane: Plane::Shared,
        route_refusal: None,
        accepted_event: None,
        sharing: None,
        credentials: class.map(|c| c.credentials.clone()),
    };
    let refuse = |out: &mut GatewayOutcome, v: Verdict| {
        out.programmed = Verdict::fail("Programmed", "Invalid", v.message.clone());
        out.accepted = v;
    };
    if let Some(a) = gw.spec.addresses.as_ref().filter(|a| !a.is_empty()) {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "UnsupportedAddress",
                format!(
                    "spec.addresses ({} given) is not supported: the address is the tunnel's <tunnel-id>.cfargotunnel.com",
                    a.len()
                ),
            ),
        );
        return out;
    }
    let Some(class) = class else {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "InvalidParameters",
                format!(
                    "GatewayClass {} is not accepted; see its status",
                    gw.spec.gateway_class_name
                ),
            ),
        );
        return out;
    };
    match decision {
        None => {
            out.addresses = vec![claims::tunnel_address(&class.tunnel_id)];
            out.partition = Some(PartitionKey::Shared);
            out.tunnel = Some(class.tunnel_id.clone());
        }
        Some(Decision::Serve { resolved, sharing }) => {
            let tunnel = resolved.token.tunnel_id().to_ascii_lowercase();
            out.addresses = claims::status_addresses(gw, Some(&tunnel));
            out.partition = Some(PartitionKey::Dedicated(key.clone()));
            out.tunnel = Some(tunnel);
            out.credentials = Some(resolved.credentials.clone());
            out.sharing = sharing.clone();
            out.programmed = plane_programmed(gw, snap);
            out.plane = Plane::Serve(resolved.clone());
        }
        Some(Decision::Keep { tunnel, accepted }) => {
            out.addresses = claims::status_addresses(gw, Some(tunnel));
            out.plane = Plane::Keep;
            out.route_refusal = Some(Verdict::fail(
                "Accepted",
                accepted.reason.clone(),
                format!(
                    "parent Gateway {key} takes no new configuration (its data plane keeps serving the last one): {}",
                    accepted.message
                ),
            ));
            refuse(&mut out, accepted.clone());
            out.accepted_event = Some("RenderFailed");
            return out;
        }
        Some(Decision::Refuse {
            accepted,
            programmed,
            route,
            event,
        }) => {
            out.addresses = claims::status_addresses(gw, None);
            out.plane = Plane::Remove;
            out.route_refusal = Some(route.clone());
            out.accepted = accepted.clone();
            out.programmed = programmed.clone();
            out.accepted_event = Some(event);
            return out;
        }
    }
    if usable == 0 {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "ListenersNotValid",
                "no listener is valid; see the listener conditions",
            ),
        );
        out.partition = None;
        out.tunnel = None;
    } else if usable < out.listeners.len() {
        out.accepted = Verdict::new(
            "Accepted",
            true,
            "ListenersNotValid",
            "some listeners are not valid; see the listener conditions",
        );
    }
    out
}

/// `Programmed` of a dedicated Gateway: True once its Deployment reports a ready replica.
fn plane_programmed(gw: &Gateway, snap: &Snapshot) -> Verdict {
    let ns = gw.namespace().unwrap_or_default();
    let name = PlaneNames::for_gateway(&gw.name_any()).deployment;
    let ready = snap
        .deployments
        .iter()
        .find(|d| d.namespace().as_deref() == Some(ns.as_str()) && d.name_any() == name)
        .filter(|d| render::owned_by_gateway(&d.metadata, gw))
        .and_then(|d| d.status.as_ref().and_then(|s| s.ready_replicas))
        .unwrap_or(0);
    if ready > 0 {
        Verdict::ok(
            "Programmed",
            format!("the dedicated data plane {ns}/{name} has {ready} ready replica(s)"),
        )
    } else {
        Verdict::fail(
            "Programmed",
            "Pending",
            format!(
                "waiting for a ready replica of the dedicated data plane Deployment {ns}/{name}"
            ),
        )
    }
}

fn listener_outcomes(listeners: &[GatewayListeners]) -> Vec<ListenerOutcome> {
    let mut seen: BTreeMap<(i32, String), String> = BTreeMap::new();
    listeners
        .iter()
        .map(|l| {
            let mut kinds: Vec<&'static str> = Vec::new();
            let mut invalid_kinds = Vec::new();
            match l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
                Some(asked) if !asked.is_empty() => {
                    for k in asked {
                        let group_ok = k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP;
                        match SUPPORTED_KINDS.iter().find(|s| **s == k.kind) {
                            Some(s) if group_ok => kinds.push(s),
                            _ => invalid_kinds.push(format!(
                                "{}/{}",
                                k.group.as_deref().unwrap_or(GATEWAY_GROUP),
                                k.kind
                            )),
                        }
                    }
                }
                _ => kinds.extend(SUPPORTED_KINDS),
            }
            let protocol_ok = l.protocol == "HTTP";
            let host_key = (
                l.port,
                l.hostname.clone().unwrap_or_default().to_ascii_lowercase(),
            );
            let conflict = protocol_ok
                .then(|| seen.get(&host_key).cloned())
                .flatten();
            if protocol_ok && conflict.is_none() {
                seen.insert(host_key, l.name.clone());
            }
            let mut verdicts = Vec::new();
            let accepted = if !protocol_ok {
                Verdict::fail(
                    "Accepted",
                    "UnsupportedProtocol",
                    format!(
                        "protocol {} is not supported: Cloudflare terminates TLS at the edge and the tunnel carries HTTP; use protocol HTTP",
                        l.protocol
                    ),
                )
            } else {
                Verdict::ok("Accepted", "the listener is accepted")
            };
            let resolved = if invalid_kinds.is_empty() {
                Verdict::ok("ResolvedRefs", "all references resolve")
            } else {
                Verdict::fail(
                    "ResolvedRefs",
                    "InvalidRouteKinds",
                    format!(
                        "unsupported route kinds {}: supported are HTTPRoute and GRPCRoute",
                        invalid_kinds.join(", ")
                    ),
                )
            };
            let conflicted = match &conflict {
                Some(other) => Verdict::new(
                    "Conflicted",
                    true,
                    "HostnameConflict",
                    format!("listener {other} already serves this port and hostname"),
                ),
                None => Verdict::new("Conflicted", false, "NoConflicts", "no conflicts"),
            };
            let usable = protocol_ok && conflict.is_none() && !kinds.is_empty();
            let programmed = if usable {
                Verdict::ok("Programmed", "the listener is programmed")
            } else {
                Verdict::fail("Programmed", "Invalid", "the listener is not valid")
            };
            verdicts.extend([accepted, resolved, conflicted, programmed]);
            ListenerOutcome {
                name: l.name.clone(),
                supported_kinds: kinds,
                verdicts,
                attached_routes: 0,
                usable,
            }
        })
        .collect()
}

/// The parts of a route that attachment reads, the same for both kinds.
struct RouteView {
    id: RouteId,
    created: Option<Time>,
    generation: Option<i64>,
    resource_version: Option<String>,
    hostnames: Vec<String>,
    parent_refs: Vec<Value>,
    current_parents: Vec<Value>,
    http: Option<Arc<HttpRoute>>,
    grpc: Option<Arc<GrpcRoute>>,
}

impl RouteView {
    fn http(r: &Arc<HttpRoute>) -> RouteView {
        RouteView {
            id: RouteId {
                kind: RouteKind::Http,
                key: ObjKey::of(r.as_ref()),
            },
            created: r.metadata.creation_timestamp.clone(),
            generation: r.metadata.generation,
            resource_version: r.metadata.resource_version.clone(),
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            parent_refs: to_values(r.spec.parent_refs.as_deref().unwrap_or_default()),
            current_parents: r
                .status
                .as_ref()
                .map(|s| to_values(&s.parents))
                .unwrap_or_default(),
            http: Some(r.clone()),
            grpc: None,
        }
    }

    fn grpc(r: &Arc<GrpcRoute>) -> RouteView {
        RouteView {
            id: RouteId {
                kind: RouteKind::Grpc,
                key: ObjKey::of(r.as_ref()),
            },
            created: r.metadata.creation_timestamp.clone(),
            generation: r.metadata.generation,
            resource_version: r.metadata.resource_version.clone(),
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            parent_refs: to_values(r.spec.parent_refs.as_deref().unwrap_or_default()),
            current_parents: r
                .status
                .as_ref()
                .map(|s| to_values(&s.parents))
                .unwrap_or_default(),
            http: None,
            grpc: Some(r.clone()),
        }
    }
}

fn to_values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|i| serde_json::to_value(i).ok())
        .collect()
}

fn route_outcome(
    route: &RouteView,
    model: &mut Model,
    uses: &mut BTreeMap<(String, String), BTreeSet<ObjKey>>,
    namespaces: &BTreeMap<String, &Arc<Namespace>>,
    idx: &BackendIndex,
) {
    let mut parents = Vec::new();
    // Per partition: the hostnames the route serves there (None inside = any host).
    let mut served: BTreeMap<PartitionKey, (Option<BTreeSet<String>>, ObjKey)> = BTreeMap::new();
    for pref in &route.parent_refs {
        let group = pref["group"].as_str().unwrap_or(GATEWAY_GROUP);
        let kind = pref["kind"].as_str().unwrap_or("Gateway");
        if group != GATEWAY_GROUP || kind != "Gateway" {
            continue;
        }
        let gw_key = ObjKey {
            namespace: pref["namespace"]
                .as_str()
                .unwrap_or(&route.id.key.namespace)
                .to_owned(),
            name: pref["name"].as_str().unwrap_or_default().to_owned(),
        };
        let Some(gw) = model.gateways.get_mut(&gw_key) else {
            continue; // not a Gateway of ours (or not there): another controller's business
        };
        let status_ref = status_parent_ref(pref, &gw_key);
        let section = pref["sectionName"].as_str();
        let port = pref["port"].as_i64();
        let (accepted, hostnames) = attach(route, gw, section, port, namespaces);
        parents.push(ParentOutcome {
            parent_ref: status_ref,
            gateway: gw_key.clone(),
            verdicts: vec![accepted],
            hostnames: hostnames.clone(),
        });
        if let (Some(hosts), Some(partition)) = (hostnames, gw.partition.clone()) {
            let entry = served
                .entry(partition)
                .or_insert_with(|| (Some(BTreeSet::new()), gw_key.clone()));
            match (&mut entry.0, hosts.is_empty()) {
                (_, true) => entry.0 = None,
                (Some(set), false) => set.extend(hosts),
                (None, false) => {}
            }
        }
    }
    if parents.is_empty() {
        return;
    }

    // Rule contents: translated once per partition (the backend client certificate is the first
    // attached Gateway's there).
    let mut content: Option<(Verdict, Option<Verdict>, Option<Verdict>)> = None;
    let mut services: BTreeSet<(String, String)> = BTreeSet::new();
    for (partition, (hosts, gw_key)) in &served {
        let cert = model
            .gateways
            .get(gw_key)
            .and_then(|g| g.client_cert.clone());
        let hostnames: Vec<String> = hosts
            .clone()
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        let name = route.id.key.to_string();
        let (entry, verdicts) = if let Some(r) = &route.http {
            let t = translate::http_route(r, idx, cert.as_ref());
            services.extend(t.services.iter().cloned());
            let v = (t.resolved_refs, t.accepted, t.partially_invalid);
            (
                config::Route::Http(config::HttpRoute {
                    name,
                    hostnames,
                    rules: t.rules,
                }),
                v,
            )
        } else if let Some(r) = &route.grpc {
            let t = translate::grpc_route(r, idx, cert.as_ref());
            services.extend(t.services.iter().cloned());
            let v = (t.resolved_refs, t.accepted, t.partially_invalid);
            (
                config::Route::Grpc(config::GrpcRoute {
                    name,
                    hostnames,
                    rules: t.rules,
                }),
                v,
            )
        } else {
            continue;
        };
        let plan = model.partitions.entry(partition.clone()).or_default();
        if verdicts.1.is_none() {
            plan.doc.routes.push(entry);
        }
        content.get_or_insert(verdicts);
    }

    // Verdicts about the rules apply to every attached parent.
    for p in &mut parents {
        let attached = p.hostnames.is_some();
        match &content {
            Some((resolved, refused, partial)) if attached => {
                if let Some(refused) = refused {
                    p.verdicts[0] = refused.clone();
                    p.hostnames = None;
                }
                p.verdicts.push(resolved.clone());
                p.verdicts.extend(partial.clone());
            }
            _ => p
                .verdicts
                .push(Verdict::ok("ResolvedRefs", "all references resolve")),
        }
        if p.hostnames.is_some()
            && let Some(sharing) = model
                .gateways
                .get(&p.gateway)
                .and_then(|g| g.sharing.as_ref())
        {
            p.verdicts.push(sharing.route_verdict());
        }
        if p.hostnames.is_some()
            && let Some(gw) = model.gateways.get_mut(&p.gateway)
        {
            count_attachment(gw, route, p);
        }
    }
    for p in parents.iter().filter(|p| p.hostnames.is_some()) {
        for svc in &services {
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
        parents,
    });
}

/// The parentRef as it appears in status: group, kind and namespace always spelled out.
fn status_parent_ref(pref: &Value, gw: &ObjKey) -> Value {
    let mut out = json!({
        "group": GATEWAY_GROUP,
        "kind": "Gateway",
        "namespace": gw.namespace,
        "name": gw.name,
    });
    for k in ["sectionName", "port"] {
        if !pref[k].is_null() {
            out[k] = pref[k].clone();
        }
    }
    out
}

/// Whether a route attaches to a Gateway through a parentRef, and with which hostnames.
fn attach(
    route: &RouteView,
    gw: &GatewayOutcome,
    section: Option<&str>,
    port: Option<i64>,
    namespaces: &BTreeMap<String, &Arc<Namespace>>,
) -> (Verdict, Option<Vec<String>>) {
    if let Some(v) = &gw.route_refusal {
        return (v.clone(), None);
    }
    if gw.partition.is_none() {
        return (
            Verdict::fail(
                "Accepted",
                "Pending",
                format!(
                    "Gateway {} is not accepted: {}",
                    ObjKey::of(gw.gateway.as_ref()),
                    gw.accepted.message
                ),
            ),
            None,
        );
    }
    let candidates: Vec<(&GatewayListeners, &ListenerOutcome)> = gw
        .gateway
        .spec
        .listeners
        .iter()
        .zip(&gw.listeners)
        .filter(|(l, _)| section.is_none_or(|s| s == l.name))
        .filter(|(l, _)| port.is_none_or(|p| p == l.port as i64))
        .collect();
    if candidates.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NoMatchingParent",
                format!(
                    "Gateway {} has no listener{}{}",
                    ObjKey::of(gw.gateway.as_ref()),
                    section.map(|s| format!(" named {s}")).unwrap_or_default(),
                    port.map(|p| format!(" on port {p}")).unwrap_or_default()
                ),
            ),
            None,
        );
    }
    let allowed: Vec<&GatewayListeners> = candidates
        .iter()
        .filter(|(l, out)| {
            out.usable
                && out.supported_kinds.contains(&route.id.kind.as_str())
                && namespace_allowed(l, &gw.gateway, &route.id.key.namespace, namespaces)
        })
        .map(|(l, _)| *l)
        .collect();
    if allowed.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NotAllowedByListeners",
                format!(
                    "no listener of Gateway {} allows {} from namespace {} (see the listeners' allowedRoutes)",
                    ObjKey::of(gw.gateway.as_ref()),
                    route.id.kind.as_str(),
                    route.id.key.namespace
                ),
            ),
            None,
        );
    }
    let mut any = false;
    let mut hosts = BTreeSet::new();
    for l in &allowed {
        if let Some(h) = hostnames::intersect(l.hostname.as_deref(), &route.hostnames) {
            if h.is_empty() {
                any = true;
            }
            hosts.extend(h);
        }
    }
    if !any && hosts.is_empty() {
        return (
            Verdict::fail(
                "Accepted",
                "NoMatchingListenerHostname",
                format!(
                    "none of the route's hostnames ({}) matches a listener hostname of Gateway {}",
                    route.hostnames.join(", "),
                    ObjKey::of(gw.gateway.as_ref())
                ),
            ),
            None,
        );
    }
    (
        Verdict::ok("Accepted", "the route is accepted"),
        Some(if any {
            Vec::new()
        } else {
            hosts.into_iter().collect()
        }),
    )
}

fn namespace_allowed(
    l: &GatewayListeners,
    gw: &Gateway,
    route_ns: &str,
    namespaces: &BTreeMap<String, &Arc<Namespace>>,
) -> bool {
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.clone()) {
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => {
            let Some(sel) = ns.and_then(|n| n.selector.as_ref()) else {
                return false;
            };
            let labels = namespaces
                .get(route_ns)
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            let labels_ok = sel
                .match_labels
                .iter()
                .flatten()
                .all(|(k, v)| labels.get(k) == Some(v));
            let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
                let has = labels.get(&e.key);
                let values = e.values.clone().unwrap_or_default();
                match e.operator.as_str() {
                    "In" => has.is_some_and(|v| values.contains(v)),
                    "NotIn" => has.is_none_or(|v| !values.contains(v)),
                    "Exists" => has.is_some(),
                    "DoesNotExist" => has.is_none(),
                    _ => false,
                }
            });
            labels_ok && exprs_ok
        }
        _ => gw.namespace().as_deref() == Some(route_ns),
    }
}

/// Counts the route on each listener it attached through.
fn count_attachment(gw: &mut GatewayOutcome, route: &RouteView, parent: &ParentOutcome) {
    let section = parent.parent_ref["sectionName"].as_str();
    let port = parent.parent_ref["port"].as_i64();
    let gateway = gw.gateway.clone();
    for (l, out) in gateway.spec.listeners.iter().zip(gw.listeners.iter_mut()) {
        let matches = out.usable
            && section.is_none_or(|s| s == l.name)
            && port.is_none_or(|p| p == l.port as i64)
            && out.supported_kinds.contains(&route.id.kind.as_str())
            && hostnames::intersect(l.hostname.as_deref(), &route.hostnames).is_some();
        if matches {
            out.attached_routes += 1;
        }
    }
}
