//! The model's vocabulary: what the controller is configured with, and the outcome types of
//! one snapshot's decisions ([`Model`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use gateway_api::apis::standard::gateways::{Gateway, GatewayStatusAddresses};
use gateway_api::apis::standard::listenersets::ListenerSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use tunnel_config::config::Config;

use crate::api::GatewayClassConfig;
use crate::conditions::Verdict;
use crate::credentials::Credentials;
use crate::keys::{ObjKey, ParentRef, PartitionKey, RouteId};
use crate::model::dedicated::claims::Sharing;
use crate::model::dedicated::{Resolved, VerifyRequest};
use crate::model::rules::ownership::Delegations;
use crate::translate;

/// Condition type set on routes while their partition's pushes keep failing.
pub const PROXY_CONFIG_PUSHED: &str = "cf.k8s.lex.la/ProxyConfigPushed";
/// Condition type on a route parent losing requests to a route of another namespace.
pub const ROUTE_SHADOWED: &str = "cf.k8s.lex.la/RouteShadowed";
/// Condition type on a listener open to routes of all namespaces without a hostname.
pub const PERMISSIVE_HOSTNAME: &str = "cf.k8s.lex.la/PermissiveHostname";
/// The route parent reason when a hostname is not delegated to the route's namespace.
pub const HOSTNAME_NOT_PERMITTED: &str = "HostnameNotPermitted";
/// The route kinds listeners support.
pub(super) const SUPPORTED_KINDS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];
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
    /// `status.gateways`: the Gateways (`namespace/name`) of the classes using it.
    pub gateways: Vec<String>,
}

/// A listener's status.
#[derive(Debug, Clone)]
pub struct ListenerOutcome {
    pub name: String,
    pub supported_kinds: Vec<&'static str>,
    pub verdicts: Vec<Verdict>,
    pub attached_routes: i32,
    /// Routes may attach and are counted in `attached_routes` (accepted, not conflicted, some
    /// route kind supported).
    pub(super) attachable: bool,
    /// Its routes are served: attachable and its references resolve. Routes attached to a
    /// listener that is not served (an HTTPS listener whose certificate does not resolve) are
    /// counted, but its hostnames reach neither the data plane nor the ingress document.
    pub(super) served: bool,
}

/// A Gateway of one of our classes.
#[derive(Debug, Clone)]
pub struct GatewayOutcome {
    /// For a ListenerSet's view (see [`ListenerSetOutcome`]): the ListenerSet's namespace and
    /// name, and its listeners as Gateway listeners.
    pub gateway: Arc<Gateway>,
    /// `Gateway`, or `ListenerSet` for a ListenerSet's view: what messages call the parent.
    pub kind: &'static str,
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
    /// The class's hostname delegations when ownership is on.
    pub ownership: Option<Arc<Delegations>>,
    /// The class's DNS records' owner ID when DNS records are on.
    pub dns_owner: Option<String>,
    /// The class's owner ID, marking its Access applications.
    pub owner_id: Option<String>,
    pub(super) client_cert: Option<translate::ClientCert>,
}

/// A ListenerSet whose parentRef names a Gateway of ours.
#[derive(Debug, Clone)]
pub struct ListenerSetOutcome {
    pub listener_set: Arc<ListenerSet>,
    /// The parent Gateway.
    pub gateway: ObjKey,
    pub accepted: Verdict,
    pub programmed: Verdict,
    /// The parent's outcome with the ListenerSet's namespace, name and listeners, which routes
    /// naming the ListenerSet attach through like a Gateway (serving nothing unless accepted).
    pub view: GatewayOutcome,
}

impl ListenerSetOutcome {
    /// The status of its listeners (none while the Gateway does not admit it).
    pub fn listeners(&self) -> &[ListenerOutcome] {
        &self.view.listeners
    }

    /// `Accepted=True`: counted in the Gateway's `status.attachedListenerSets`.
    pub fn attached(&self) -> bool {
        self.accepted.status
    }
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
    /// The parentRef as written in status (`group`, `kind`, `namespace` spelled out).
    pub parent_ref: ParentRef,
    /// The Gateway (for a ListenerSet parent: its parent Gateway, whose plane serves it).
    pub gateway: ObjKey,
    /// The ListenerSet when the parentRef names one.
    pub listener_set: Option<ObjKey>,
    /// `Accepted` first, then `ResolvedRefs`, then optional extras.
    pub verdicts: Vec<Verdict>,
    /// The route is accepted and counted on the listeners it attached through.
    pub attached: bool,
    /// The indices of the listeners it attached through.
    pub(crate) listeners: Vec<usize>,
    /// Hostnames the route serves through this parent (empty: any host); `None` when nothing
    /// is served: not attached, or attached only through listeners that are not served, or
    /// `isolated`.
    pub hostnames: Option<Vec<String>>,
    /// Attached through served listeners, but each of its hostnames there belongs to a more
    /// specific listener of the Gateway (listener isolation), so nothing is served.
    pub isolated: bool,
}

/// A route and its parents of ours.
#[derive(Debug, Clone)]
pub struct RouteOutcome {
    pub id: RouteId,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
    /// The current `status.parents` entries (ours and other controllers').
    pub current_parents: Vec<RouteParentStatus>,
    pub parents: Vec<ParentOutcome>,
}

/// One `status.parents` entry of a route, as Gateway API's `RouteParentStatus`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    pub parent_ref: ParentRef,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
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

/// The DNS records of one owner ID, written with one class's credentials (DNS records on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsScope {
    pub owner: String,
    pub credentials: Credentials,
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
    pub listener_sets: BTreeMap<ObjKey, ListenerSetOutcome>,
    pub routes: Vec<RouteOutcome>,
    pub partitions: BTreeMap<PartitionKey, PartitionPlan>,
    pub tunnels: BTreeMap<String, TunnelPlan>,
    /// Owners of DNS records: every accepted class with DNS records on (dedicated Gateways'
    /// own credentials may add more).
    pub dns_scopes: Vec<DnsScope>,
}

/// How many route parents (a route on one Gateway) the model refuses, by the reason of their
/// `Accepted=False`, and how many lose requests to a route of another namespace
/// ([`ROUTE_SHADOWED`]): what `cftunnel_route_parents_refused` and
/// `cftunnel_route_parents_shadowed` publish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentTallies {
    pub refused: BTreeMap<String, i64>,
    pub shadowed: i64,
}

impl Model {
    pub fn parent_tallies(&self) -> ParentTallies {
        let mut t = ParentTallies::default();
        for verdict in self
            .routes
            .iter()
            .flat_map(|r| &r.parents)
            .flat_map(|p| &p.verdicts)
        {
            match (verdict.type_.as_str(), verdict.status) {
                ("Accepted", false) => *t.refused.entry(verdict.reason.clone()).or_default() += 1,
                (ROUTE_SHADOWED, true) => t.shadowed += 1,
                _ => {}
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::RouteKind;

    fn route(name: &str, verdicts: &[Vec<Verdict>]) -> RouteOutcome {
        let key = ObjKey {
            namespace: "t".into(),
            name: name.into(),
        };
        RouteOutcome {
            id: RouteId {
                kind: RouteKind::Http,
                key: key.clone(),
            },
            generation: None,
            resource_version: None,
            current_parents: vec![],
            parents: verdicts
                .iter()
                .map(|v| ParentOutcome {
                    parent_ref: ParentRef::to_gateway(&key, None, None),
                    gateway: key.clone(),
                    listener_set: None,
                    verdicts: v.clone(),
                    attached: false,
                    listeners: Vec::new(),
                    hostnames: None,
                    isolated: false,
                })
                .collect(),
        }
    }

    #[test]
    fn tallies_count_each_refused_or_shadowed_parent() {
        let accepted = Verdict::new("Accepted", true, "Accepted", "");
        let not = |reason: &str| Verdict::new("Accepted", false, reason, "");
        let resolved = Verdict::new("ResolvedRefs", false, "BackendNotFound", "");
        let shadowed = Verdict::new(ROUTE_SHADOWED, true, "ShadowedByOtherNamespace", "");
        let model = Model {
            routes: vec![
                route(
                    "a",
                    &[
                        vec![not(HOSTNAME_NOT_PERMITTED), resolved.clone()],
                        vec![accepted.clone(), resolved, shadowed.clone()],
                    ],
                ),
                route("b", &[vec![not(HOSTNAME_NOT_PERMITTED)]]),
                route("c", &[vec![not("NotAllowedByListeners")]]),
                route("d", &[vec![accepted, shadowed]]),
            ],
            ..Model::default()
        };
        let t = model.parent_tallies();
        assert_eq!(
            t.refused,
            BTreeMap::from([
                (HOSTNAME_NOT_PERMITTED.to_owned(), 2),
                ("NotAllowedByListeners".to_owned(), 1),
            ])
        );
        assert_eq!(t.shadowed, 2);
    }
}
