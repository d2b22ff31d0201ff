//! Data-plane delivery (TG-4, TG-10): for each partition, which proxies exist (the ready and
//! not-ready endpoints of its headless config Service, publishNotReadyAddresses), which version
//! each holds, and what to push next.
//!
//! A partition's document gets a new version only when its content changes. Each round pushes
//! the current version to every endpoint that does not hold it yet: after a change, all of
//! them; when a pod appears, just that pod (the last config is replayed without any route
//! change); after a failure, the ones that failed; and when a ready endpoint turns not ready,
//! that one again: its proxy may have restarted empty (a plane Pod's proxy restarts alone, its
//! readiness probe is `/readyz`, true only with a config), and nothing else would tell.
//! A proxy that holds the previous version gets a delta (only the routes that changed); any
//! other, or one that refuses the delta, gets the whole document.
//! [`PushHealth`] turns rounds into the `ProxyConfigPushed` condition.
//!
//! Between rounds, the route lane ([`Planes::lane`]) splices changed routes into the held
//! documents and pushes them at once the way the last round reached the proxies; a round made
//! from a snapshot older than the lane's changes pushes nothing (it would take them back).

pub mod provision;
pub mod push;
pub mod render;
pub mod target;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use tunnel_config::config::Config;
use tunnel_config::delta::Delta;

use crate::keys::PartitionKey;
use crate::model::lane::Splice;
use crate::publish::planes::push::{
    ConditionChange, PushHealth, PushOutcome, Pusher, Transport, VersionClock,
};

/// The config-API port name on the headless Service (and its EndpointSlices).
pub const CONFIG_PORT_NAME: &str = "config-api";
/// The config-API port when the slice does not name one.
pub const CONFIG_PORT: i32 = 8081;

/// A partition's config-API endpoints (`host:port`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigEndpoints {
    /// Every endpoint, ready or not: a new proxy is not ready until it has a config, so it must
    /// be pushed to before it is ready.
    pub all: Vec<String>,
    /// Those the EndpointSlices say are ready.
    pub ready: BTreeSet<String>,
}

/// The config-API endpoints in a Service's EndpointSlices (terminating ones left out).
pub fn config_endpoints(
    slices: &[std::sync::Arc<EndpointSlice>],
    namespace: &str,
    service: &str,
) -> ConfigEndpoints {
    let mut out = BTreeSet::new();
    let mut ready = BTreeSet::new();
    for s in slices {
        if s.namespace().as_deref() != Some(namespace)
            || s.labels()
                .get("kubernetes.io/service-name")
                .map(String::as_str)
                != Some(service)
        {
            continue;
        }
        let port = s
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(CONFIG_PORT_NAME))
            .or_else(|| s.ports.iter().flatten().next())
            .and_then(|p| p.port)
            .unwrap_or(CONFIG_PORT);
        for ep in s.endpoints.iter().flatten() {
            if ep.conditions.as_ref().and_then(|c| c.terminating) == Some(true) {
                continue;
            }
            // Unset means ready (EndpointSlice API).
            let is_ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            for a in &ep.addresses {
                let host = if s.address_type == "IPv6" {
                    format!("[{a}]")
                } else {
                    a.clone()
                };
                let addr = format!("{host}:{port}");
                if is_ready {
                    ready.insert(addr.clone());
                }
                out.insert(addr);
            }
        }
    }
    ConfigEndpoints {
        all: out.into_iter().collect(),
        ready,
    }
}

/// What a partition's round did.
#[derive(Debug, Clone, Default)]
pub struct RoundReport {
    pub outcomes: Vec<(String, PushOutcome)>,
    pub change: Option<ConditionChange>,
    /// Whether some endpoint still lacks the current version (retry later).
    pub incomplete: bool,
    /// Whether the condition is set after this round.
    pub failing: Option<String>,
    /// Whether every proxy of the partition (at least one) holds the current document.
    pub loaded: bool,
}

#[derive(Default)]
struct PartitionState {
    /// The current document, with its version.
    doc: Option<Config>,
    /// The document before `doc`, with its version: a proxy holding it gets a delta.
    prev: Option<Config>,
    held: BTreeMap<String, u64>,
    /// The endpoints ready in the last round.
    ready: BTreeSet<String>,
    health: PushHealth,
    last_error: String,
    /// How the last round reached the proxies (the route lane pushes between rounds).
    reach: Option<Reach>,
    /// The watch event up to which the route lane brought route changes into `doc`.
    lane_seq: u64,
}

/// A partition's proxies, as the last round reached them.
struct Reach {
    endpoints: Vec<String>,
    token: String,
    transport: Transport,
}

/// Push state of every partition.
pub struct Planes {
    pusher: Pusher,
    clock: VersionClock,
    partitions: BTreeMap<PartitionKey, PartitionState>,
}

impl Planes {
    pub fn new(pusher: Pusher) -> Self {
        Self {
            pusher,
            clock: VersionClock::default(),
            partitions: BTreeMap::new(),
        }
    }

    /// Delivers `doc` (version ignored), made from the snapshot of watch events up to `seq`, to
    /// `endpoints` of `partition` with `token` over `transport`. A token or transport error
    /// (`Err`) counts as a failed round for every endpoint. When the route lane has brought
    /// newer route changes into the partition than the snapshot holds, nothing is pushed (it
    /// would take them back) and the round is incomplete: the next one, after those events,
    /// pushes.
    pub async fn round(
        &mut self,
        partition: &PartitionKey,
        doc: &Config,
        endpoints: &ConfigEndpoints,
        token: Result<&str, &str>,
        transport: Result<&Transport, &str>,
        seq: u64,
    ) -> RoundReport {
        let state = self.partitions.entry(partition.clone()).or_default();
        for gone_unready in state.ready.difference(&endpoints.ready) {
            state.held.remove(gone_unready);
        }
        state.ready = endpoints.ready.clone();
        let endpoints = &endpoints.all;
        state.held.retain(|ep, _| endpoints.contains(ep));
        state.reach = match (token, transport) {
            (Ok(token), Ok(transport)) => Some(Reach {
                endpoints: endpoints.clone(),
                token: token.to_owned(),
                transport: transport.clone(),
            }),
            _ => None,
        };
        let holds_current = |state: &PartitionState| {
            !endpoints.is_empty()
                && endpoints
                    .iter()
                    .all(|ep| state.held.get(ep) == state.doc.as_ref().map(|d| &d.version))
        };
        if seq < state.lane_seq {
            tracing::debug!(partition = %partition, seq, lane = state.lane_seq, "the route lane is ahead of this round's snapshot; not pushed");
            return RoundReport {
                incomplete: true,
                loaded: holds_current(state),
                failing: state.health.is_failing().then(|| state.last_error.clone()),
                ..Default::default()
            };
        }
        let same = state
            .doc
            .as_ref()
            .is_some_and(|d| d.routes == doc.routes && d.listeners == doc.listeners);
        if !same {
            let mut next = doc.clone();
            next.version = self.clock.next();
            state.prev = state.doc.replace(next);
        }
        let Some(current) = state.doc.as_ref() else {
            return RoundReport::default();
        };
        let targets: Vec<String> = endpoints
            .iter()
            .filter(|ep| state.held.get(*ep) != Some(&current.version))
            .cloned()
            .collect();
        if targets.is_empty() {
            // Every proxy holds the current version: a failing partition has recovered (the
            // proxy that refused is gone, or took the config on its own retry).
            let change = (state.health.is_failing() && !endpoints.is_empty()).then(|| {
                let all: Vec<(String, PushOutcome)> = endpoints
                    .iter()
                    .map(|e| (e.clone(), PushOutcome::Loaded))
                    .collect();
                state.health.record(&all)
            });
            return RoundReport {
                failing: state.health.is_failing().then(|| state.last_error.clone()),
                change,
                loaded: !endpoints.is_empty(),
                ..Default::default()
            };
        }
        // Proxies holding the previous version get only what changed since.
        let delta = state.prev.as_ref().and_then(|base| {
            let based: BTreeSet<String> = targets
                .iter()
                .filter(|ep| state.held.get(*ep) == Some(&base.version))
                .cloned()
                .collect();
            (!based.is_empty()).then(|| (Delta::between(base, current), based))
        });
        let outcomes: Vec<(String, PushOutcome)> = match token.and_then(|t| Ok((t, transport?))) {
            Ok((token, transport)) => {
                let delta = delta.as_ref().map(|(d, based)| (d, based));
                self.pusher
                    .push(&targets, token, current, delta, &self.clock, transport)
                    .await
            }
            Err(e) => targets
                .iter()
                .map(|t| (t.clone(), PushOutcome::Failed(e.to_owned())))
                .collect(),
        };
        let version = current.version;
        record_outcomes(state, version, &outcomes);
        let change = state.health.record(&outcomes);
        let incomplete = outcomes.iter().any(|(_, o)| !o.is_loaded());
        RoundReport {
            loaded: !incomplete,
            incomplete,
            failing: state.health.is_failing().then(|| state.last_error.clone()),
            outcomes,
            change: Some(change),
        }
    }

    /// The route lane between rounds: `splice` edits the held documents (all or none, see
    /// [`crate::model::lane::splice`]); each partition it changed gets a new version, pushed at
    /// once as a delta to the proxies that held the one before (the whole document to any other)
    /// the way the last round reached them. Partitions no round has reached yet are not
    /// offered. `seq`: the watch event the changes go up to. Push failures are left to the
    /// next round (the proxy no longer counts as holding a version, so it is pushed again).
    pub async fn lane<E>(
        &mut self,
        seq: u64,
        splice: impl FnOnce(
            Vec<(&PartitionKey, &mut Config)>,
        ) -> Result<BTreeMap<PartitionKey, Splice>, E>,
    ) -> Result<Vec<(PartitionKey, Vec<(String, PushOutcome)>)>, E> {
        let docs = self
            .partitions
            .iter_mut()
            .filter(|(_, s)| s.reach.is_some())
            .filter_map(|(k, s)| s.doc.as_mut().map(|d| (k, d)))
            .collect();
        let splices = splice(docs)?;
        let mut pushed = Vec::new();
        for (partition, at) in splices {
            let Some(state) = self.partitions.get_mut(&partition) else {
                continue;
            };
            let (Some(doc), Some(reach)) = (state.doc.as_mut(), state.reach.as_ref()) else {
                continue;
            };
            let base = doc.version;
            doc.version = self.clock.next();
            let delta = Delta {
                base_version: base,
                version: doc.version,
                listeners: None,
                start: at.start,
                remove: at.remove,
                routes: doc.routes[at.start..at.start + at.insert].to_vec(),
            };
            // The document before is gone (edited in place): a proxy still holding it gets the
            // whole document next.
            state.prev = None;
            state.lane_seq = seq;
            let based: BTreeSet<String> = reach
                .endpoints
                .iter()
                .filter(|ep| state.held.get(*ep) == Some(&base))
                .cloned()
                .collect();
            let outcomes = self
                .pusher
                .push(
                    &reach.endpoints,
                    &reach.token,
                    doc,
                    Some((&delta, &based)),
                    &self.clock,
                    &reach.transport,
                )
                .await;
            let version = doc.version;
            record_outcomes(state, version, &outcomes);
            pushed.push((partition, outcomes));
        }
        Ok(pushed)
    }

    /// Forgets partitions that no longer exist.
    pub fn retain(&mut self, keep: impl Fn(&PartitionKey) -> bool) {
        self.partitions.retain(|k, _| keep(k));
        let known: BTreeSet<String> = self
            .partitions
            .values()
            .flat_map(|p| p.held.keys().chain(&p.ready))
            .cloned()
            .collect();
        self.pusher.retain_presented(|ep| known.contains(ep));
    }

    /// The serving certificate (DER) `endpoint` presented on its last answered TLS push.
    pub fn presented(&self, endpoint: &str) -> Option<Vec<u8>> {
        self.pusher.presented(endpoint)
    }

    /// Pushes the current version to `endpoint` of `partition` again next round, though it
    /// holds it (to see which certificate it serves now).
    pub fn repush(&mut self, partition: &PartitionKey, endpoint: &str) {
        if let Some(p) = self.partitions.get_mut(partition) {
            p.held.remove(endpoint);
        }
    }
}

/// Which endpoints hold `version` after a push.
fn record_outcomes(state: &mut PartitionState, version: u64, outcomes: &[(String, PushOutcome)]) {
    for (ep, o) in outcomes {
        if o.is_loaded() {
            state.held.insert(ep.clone(), version);
        } else {
            state.held.remove(ep);
            state.last_error = format!("{ep}: {}", describe(o));
        }
    }
    // The previous document is kept only while some proxy holds it (a delta's base).
    if let Some(base) = &state.prev
        && !state.held.values().any(|v| *v == base.version)
    {
        state.prev = None;
    }
}

fn describe(o: &PushOutcome) -> String {
    match o {
        PushOutcome::Loaded => "loaded".to_owned(),
        PushOutcome::Unauthorized => {
            "the proxy refused the partition's token (401): the proxy belongs to another partition or its token changed".to_owned()
        }
        PushOutcome::Rejected { status, message } => {
            format!("the proxy refused the document ({status}): {message}")
        }
        PushOutcome::Stale { loaded } => {
            format!("the proxy holds a newer version ({loaded}) after a re-push")
        }
        PushOutcome::Failed(e) => e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A config API that loads whatever it is sent and counts the pushes.
    async fn counting_proxy() -> (String, Arc<AtomicUsize>) {
        let pushes = Arc::new(AtomicUsize::new(0));
        let counter = pushes.clone();
        let app = axum::Router::new().route(
            "/config",
            axum::routing::put(move || {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    "{}"
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(l, app).await });
        (addr, pushes)
    }

    fn endpoints(addr: &str, ready: bool) -> ConfigEndpoints {
        ConfigEndpoints {
            all: vec![addr.to_owned()],
            ready: if ready {
                BTreeSet::from([addr.to_owned()])
            } else {
                BTreeSet::new()
            },
        }
    }

    #[tokio::test]
    async fn a_proxy_that_turns_unready_is_pushed_again() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (addr, pushes) = counting_proxy().await;
        let mut planes = Planes::new(Pusher::new().unwrap());
        let doc = Config::default();
        let key = PartitionKey::Shared;
        let mut round = async |ready: bool| {
            let report = planes
                .round(
                    &key,
                    &doc,
                    &endpoints(&addr, ready),
                    Ok("t"),
                    Ok(&Transport::Plain),
                    0,
                )
                .await;
            assert!(!report.incomplete, "{report:?}");
            pushes.load(Ordering::SeqCst)
        };
        // A new proxy, not ready until it has a config: pushed.
        assert_eq!(round(false).await, 1);
        // Ready now, nothing changed: nothing to push.
        assert_eq!(round(true).await, 1);
        assert_eq!(round(true).await, 1);
        // Ready -> not ready: it may have restarted empty, so it gets the config again, once.
        assert_eq!(round(false).await, 2);
        assert_eq!(round(false).await, 2);
        assert_eq!(round(true).await, 2);
    }

    #[test]
    fn endpoints_keep_readiness_and_drop_terminating_ones() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "s-1",
                "namespace": "ns",
                "labels": {"kubernetes.io/service-name": "cfg"},
            },
            "addressType": "IPv4",
            "ports": [{"name": CONFIG_PORT_NAME, "port": 9000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"]},
                {"addresses": ["10.0.0.4"], "conditions": {"ready": false, "terminating": true}},
            ],
        }))
        .unwrap();
        let other: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "o-1",
                "namespace": "ns",
                "labels": {"kubernetes.io/service-name": "other"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.9"]}],
        }))
        .unwrap();
        let got = config_endpoints(&[Arc::new(slice), Arc::new(other)], "ns", "cfg");
        assert_eq!(got.all, ["10.0.0.1:9000", "10.0.0.2:9000", "10.0.0.3:9000"]);
        assert_eq!(
            got.ready,
            BTreeSet::from(["10.0.0.1:9000".to_owned(), "10.0.0.3:9000".to_owned()])
        );
    }
}
