//! The controller's view of the cluster: one reflector (watch + in-memory store) per kind the
//! controller reads, and a [`Snapshot`] of all stores taken at the start of each sync round.
//!
//! Every watch event wakes the sync loop through one [`Notify`]; the loop debounces, so a burst
//! of changes becomes one round (and one Cloudflare write per tunnel). The [`Journal`] numbers
//! the events and remembers which routes changed, for the route lane (a route change spliced
//! into the tables of the last round's model while nothing else changed). Managed fields are dropped
//! before objects enter a store: the controller never reads them and they are most of an
//! object's size.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, PoisonError};

use futures::{StreamExt, TryStreamExt};
use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::listenersets::ListenerSet;
use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::api::{AccessPolicy, GatewayClassConfig, GatewayConfig};
use crate::keys::{ObjKey, RouteId, RouteKind};

/// A route as it is now (what the route lane decides again).
#[derive(Debug, Clone)]
pub enum RouteNow {
    Http(Arc<HttpRoute>),
    Grpc(Arc<GrpcRoute>),
}

/// When the watched objects last changed.
#[derive(Clone, Default)]
pub struct LastChange(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl LastChange {
    fn touch(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::time::Instant::now());
    }

    /// How long ago the last change arrived (`None`: none yet).
    pub fn elapsed(&self) -> Option<std::time::Duration> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|t| t.elapsed())
    }
}

/// The watch events in order: the number of the last one, of the last one that was not about a
/// route (leaving out those that cannot change a route table, see [`tables_unchanged`]), and of
/// the last one about each route since [`Journal::forget_until`].
#[derive(Clone, Default)]
pub struct Journal {
    state: Arc<std::sync::Mutex<JournalState>>,
    /// Notified on every route event.
    routes_changed: Arc<Notify>,
}

#[derive(Default)]
struct JournalState {
    seq: u64,
    other: u64,
    routes: BTreeMap<RouteId, u64>,
}

impl Journal {
    /// Numbers an event: about `route`, or about another object (`tables_unchanged`: one
    /// whose change cannot move any route table, which the route lane may let pass).
    fn record(&self, route: Option<RouteId>, tables_unchanged: bool) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.seq += 1;
        let seq = s.seq;
        match route {
            Some(id) => {
                s.routes.insert(id, seq);
                drop(s);
                self.routes_changed.notify_one();
            }
            None if tables_unchanged => {}
            None => s.other = seq,
        }
    }

    /// The number of the last event (everything up to it is in the stores).
    pub fn seq(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seq
    }

    /// The number of the last event, and the routes changed after event `seq`, at most `max`
    /// and one more (more is a burst, whose every event would otherwise copy it all); `None`
    /// when something other than a route changed after it.
    pub fn routes_since(&self, seq: u64, max: usize) -> Option<(u64, Vec<RouteId>)> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.other > seq {
            return None;
        }
        let routes = s
            .routes
            .iter()
            .filter(|(_, at)| **at > seq)
            .take(max.saturating_add(1))
            .map(|(id, _)| id.clone())
            .collect();
        Some((s.seq, routes))
    }

    /// Forgets the routes changed up to event `seq` (a round has seen them).
    pub fn forget_until(&self, seq: u64) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .routes
            .retain(|_, at| *at > seq);
    }

    /// Wakes [`Self::route_changed`] without an event: a round has a new model, against which
    /// the routes changed since its snapshot can now be decided.
    pub fn nudge(&self) {
        self.routes_changed.notify_one();
    }

    /// Wakes on the next route event or [`Self::nudge`] (or at once, for one that came unwaited).
    pub async fn route_changed(&self) {
        self.routes_changed.notified().await;
    }
}

/// The stores of every watched kind.
#[derive(Clone)]
pub struct Stores {
    last_change: LastChange,
    journal: Journal,
    gateway_classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    http_routes: Store<HttpRoute>,
    grpc_routes: Store<GrpcRoute>,
    listener_sets: Store<ListenerSet>,
    reference_grants: Store<ReferenceGrant>,
    backend_tls_policies: Store<BackendTlsPolicy>,
    services: Store<Service>,
    endpoint_slices: Store<EndpointSlice>,
    secrets: Store<Secret>,
    config_maps: Store<ConfigMap>,
    namespaces: Store<Namespace>,
    class_configs: Store<GatewayClassConfig>,
    gateway_configs: Store<GatewayConfig>,
    access_policies: Store<AccessPolicy>,
    deployments: Store<Deployment>,
    network_policies: Store<NetworkPolicy>,
    hpas: Store<HorizontalPodAutoscaler>,
    pdbs: Store<PodDisruptionBudget>,
}

/// Everything the controller reads, as of one moment.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub gateway_classes: Vec<Arc<GatewayClass>>,
    pub gateways: Vec<Arc<Gateway>>,
    pub http_routes: Vec<Arc<HttpRoute>>,
    pub grpc_routes: Vec<Arc<GrpcRoute>>,
    pub listener_sets: Vec<Arc<ListenerSet>>,
    pub reference_grants: Vec<Arc<ReferenceGrant>>,
    pub backend_tls_policies: Vec<Arc<BackendTlsPolicy>>,
    pub services: Vec<Arc<Service>>,
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    pub secrets: Vec<Arc<Secret>>,
    pub config_maps: Vec<Arc<ConfigMap>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub class_configs: Vec<Arc<GatewayClassConfig>>,
    pub gateway_configs: Vec<Arc<GatewayConfig>>,
    pub access_policies: Vec<Arc<AccessPolicy>>,
    /// Dedicated planes' objects (those labelled as the controller's; a foreign object at a
    /// rendered name is looked up directly before anything is written there).
    pub deployments: Vec<Arc<Deployment>>,
    pub network_policies: Vec<Arc<NetworkPolicy>>,
    pub hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
}

impl Stores {
    /// Starts a reflector per kind (cluster-wide); each event notifies `changed`.
    pub fn start(client: &Client, changed: Arc<Notify>) -> Stores {
        let last = LastChange::default();
        let journal = Journal::default();
        let changed = &(changed, last.clone(), journal.clone());
        Stores {
            last_change: last.clone(),
            journal,
            gateway_classes: reflect(client, changed, None),
            gateways: reflect(client, changed, None),
            http_routes: reflect(client, changed, None),
            grpc_routes: reflect(client, changed, None),
            listener_sets: reflect(client, changed, None),
            reference_grants: reflect(client, changed, None),
            backend_tls_policies: reflect(client, changed, None),
            services: reflect(client, changed, None),
            endpoint_slices: reflect(client, changed, None),
            secrets: reflect(client, changed, None),
            config_maps: reflect(client, changed, None),
            namespaces: reflect(client, changed, None),
            class_configs: reflect(client, changed, None),
            gateway_configs: reflect(client, changed, None),
            access_policies: reflect(client, changed, None),
            deployments: reflect(client, changed, Some(PLANE_SELECTOR)),
            network_policies: reflect(client, changed, Some(PLANE_SELECTOR)),
            hpas: reflect(client, changed, Some(PLANE_SELECTOR)),
            pdbs: reflect(client, changed, Some(PLANE_SELECTOR)),
        }
    }

    /// Waits until every store has listed once (before that a snapshot would be partial and the
    /// controller would, for example, remove hostnames of routes it has not seen yet). Await it
    /// from one task only: with two waiters, one was observed never to wake.
    pub async fn ready(&self) {
        // A store's only error is its writer being dropped, which ends the process anyway.
        let _ = futures::join!(
            self.gateway_classes.wait_until_ready(),
            self.gateways.wait_until_ready(),
            self.http_routes.wait_until_ready(),
            self.grpc_routes.wait_until_ready(),
            self.listener_sets.wait_until_ready(),
            self.reference_grants.wait_until_ready(),
            self.backend_tls_policies.wait_until_ready(),
            self.services.wait_until_ready(),
            self.endpoint_slices.wait_until_ready(),
            self.secrets.wait_until_ready(),
            self.config_maps.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.class_configs.wait_until_ready(),
            self.gateway_configs.wait_until_ready(),
            self.access_policies.wait_until_ready(),
            self.deployments.wait_until_ready(),
            self.network_policies.wait_until_ready(),
            self.hpas.wait_until_ready(),
            self.pdbs.wait_until_ready(),
        );
    }

    /// When a watched object last changed (the controller's own status writes included).
    pub fn last_change(&self) -> &LastChange {
        &self.last_change
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// A route as the store holds it now (`None`: not there).
    pub fn route(&self, id: &RouteId) -> Option<RouteNow> {
        let ObjKey { namespace, name } = &id.key;
        match id.kind {
            RouteKind::Http => self
                .http_routes
                .get(&ObjectRef::new(name).within(namespace))
                .map(RouteNow::Http),
            RouteKind::Grpc => self
                .grpc_routes
                .get(&ObjectRef::new(name).within(namespace))
                .map(RouteNow::Grpc),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            gateway_classes: self.gateway_classes.state(),
            gateways: self.gateways.state(),
            http_routes: self.http_routes.state(),
            grpc_routes: self.grpc_routes.state(),
            listener_sets: self.listener_sets.state(),
            reference_grants: self.reference_grants.state(),
            backend_tls_policies: self.backend_tls_policies.state(),
            services: self.services.state(),
            endpoint_slices: self.endpoint_slices.state(),
            secrets: self.secrets.state(),
            config_maps: self.config_maps.state(),
            namespaces: self.namespaces.state(),
            class_configs: self.class_configs.state(),
            gateway_configs: self.gateway_configs.state(),
            access_policies: self.access_policies.state(),
            deployments: self.deployments.state(),
            network_policies: self.network_policies.state(),
            hpas: self.hpas.state(),
            pdbs: self.pdbs.state(),
        }
    }
}

/// The label every rendered plane object carries.
const PLANE_SELECTOR: &str = "app.kubernetes.io/managed-by=tunnel-controller";

type Changed = (Arc<Notify>, LastChange, Journal);

/// A store of every `K` (those with the `labels` selector, if given), kept by a reflector whose
/// every event wakes the sync loop and is recorded in the journal.
fn reflect<K>(client: &Client, changed: &Changed, labels: Option<&str>) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let api: Api<K> = Api::all(client.clone());
    let mut config = watcher::Config::default().any_semantic();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let changed = changed.clone();
    // Updates known not to move any table, by object and resourceVersion, from the step that
    // still sees the store's previous version to the one that records the event.
    let neutral: Arc<std::sync::Mutex<BTreeSet<(ObjKey, String)>>> = Arc::default();
    let classify = {
        let (reader, neutral) = (reader.clone(), neutral.clone());
        move |event: watcher::Event<K>| {
            if let watcher::Event::Apply(new) = &event
                && let Some(old) = reader.get(&ObjectRef::from_obj(new))
                && tables_unchanged(old.as_ref(), new)
            {
                neutral
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((ObjKey::of(new), new.resource_version().unwrap_or_default()));
            }
            event
        }
    };
    let stream = watcher(api, config)
        .default_backoff()
        .map_ok(classify)
        .modify(|o: &mut K| o.managed_fields_mut().clear())
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = &event {
                tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying with backoff");
            }
            if let Ok(obj) = &event {
                let kind = match K::kind(&()).as_ref() {
                    "HTTPRoute" => Some(RouteKind::Http),
                    "GRPCRoute" => Some(RouteKind::Grpc),
                    _ => None,
                };
                let key = ObjKey::of(obj);
                let unchanged = neutral
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&(key.clone(), obj.resource_version().unwrap_or_default()));
                changed
                    .2
                    .record(kind.map(|kind| RouteId { kind, key }), unchanged);
            }
            changed.1.touch();
            changed.0.notify_one();
        }
    });
    reader
}

/// Whether an update from `old` to `new` cannot move any route table: a Gateway whose status
/// conditions or listener statuses alone changed (what this controller writes after every
/// round; the model reads a Gateway's spec, metadata and `status.addresses` only, the tunnel it
/// holds). Anything else, and every other kind, may.
fn tables_unchanged<K: Resource<DynamicType = ()> + Serialize>(old: &K, new: &K) -> bool {
    if K::kind(&()) != "Gateway" {
        return false;
    }
    let comparable = |o: &K| {
        let mut v = serde_json::to_value(o).ok()?;
        let metadata = v.get_mut("metadata")?.as_object_mut()?;
        metadata.remove("resourceVersion");
        metadata.remove("managedFields");
        if let Some(status) = v.get_mut("status").and_then(|s| s.as_object_mut()) {
            status.remove("conditions");
            status.remove("listeners");
        }
        Some(v)
    };
    match (comparable(old), comparable(new)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(v: serde_json::Value) -> Gateway {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> serde_json::Value {
        json!({
            "metadata": {"name": "gw", "namespace": "ns", "resourceVersion": "1", "generation": 1,
                         "labels": {"team": "a"}},
            "spec": {"gatewayClassName": "c", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "a.example"}]},
            "status": {
                "addresses": [{"type": "Hostname", "value": "t.cfargotunnel.com"}],
                "conditions": [{"type": "Accepted", "status": "False", "reason": "Pending",
                                "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
            },
        })
    }

    fn route(n: usize) -> RouteId {
        RouteId {
            kind: RouteKind::Http,
            key: ObjKey {
                namespace: "ns".into(),
                name: format!("r-{n}"),
            },
        }
    }

    #[test]
    fn the_journal_names_the_routes_changed_since_a_snapshot_until_something_else_changes() {
        let journal = Journal::default();
        journal.record(Some(route(0)), false);
        let seen = journal.seq();
        for n in 1..=10 {
            journal.record(Some(route(n)), false);
        }
        // A Gateway's own status echo: the routes still count alone.
        journal.record(None, true);
        let (seq, routes) = journal.routes_since(seen, 64).unwrap();
        assert_eq!(seq, 12);
        assert_eq!(routes.len(), 10);
        assert!(!routes.contains(&route(0)));
        // A burst: no more than the caller's bound and one.
        assert_eq!(journal.routes_since(seen, 3).unwrap().1.len(), 4);
        journal.forget_until(seq);
        assert!(journal.routes_since(seen, 64).unwrap().1.is_empty());
        // Anything else: the round decides.
        journal.record(Some(route(1)), false);
        journal.record(None, false);
        assert!(journal.routes_since(seq, 64).is_none());
    }

    type Change = fn(&mut serde_json::Value);

    /// Each change, and whether the route lane may let it pass.
    #[test]
    fn only_a_gateways_conditions_and_listener_statuses_leave_the_tables_alone() {
        let old = gateway(base());
        let cases: [(&str, Change, bool); 6] = [
            (
                "conditions written",
                |v| {
                    v["metadata"]["resourceVersion"] = json!("2");
                    v["status"]["conditions"][0]["status"] = json!("True");
                },
                true,
            ),
            (
                "listener statuses written",
                |v| {
                    v["metadata"]["resourceVersion"] = json!("2");
                    v["status"]["listeners"] = json!([{"name": "http", "attachedRoutes": 3,
                    "supportedKinds": [], "conditions": []}]);
                },
                true,
            ),
            (
                "the tunnel address changed (a claim)",
                |v| {
                    v["status"]["addresses"][0]["value"] = json!("u.cfargotunnel.com");
                },
                false,
            ),
            (
                "a listener's hostname changed",
                |v| {
                    v["spec"]["listeners"][0]["hostname"] = json!("b.example");
                    v["metadata"]["generation"] = json!(2);
                },
                false,
            ),
            (
                "a label changed",
                |v| {
                    v["metadata"]["labels"]["team"] = json!("b");
                },
                false,
            ),
            (
                "deletion started",
                |v| {
                    v["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
                },
                false,
            ),
        ];
        for (what, change, expected) in cases {
            let mut v = base();
            change(&mut v);
            assert_eq!(tables_unchanged(&old, &gateway(v)), expected, "{what}");
        }
        // Any other kind: never.
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
        assert!(!tables_unchanged(&svc, &svc));
    }
}
