//! Data-plane delivery (TG-4, TG-10): for each partition, which proxies exist (the ready and
//! not-ready endpoints of its headless config Service, publishNotReadyAddresses), which version
//! each holds, and what to push next.
//!
//! A partition's document gets a new version only when its content changes. Each round pushes
//! the current version to every endpoint that does not hold it yet: after a change, all of
//! them; when a pod appears, just that pod (the last config is replayed without any route
//! change); after a failure, the ones that failed. [`PushHealth`] turns rounds into the
//! `ProxyConfigPushed` condition.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use tunnel_config::config::Config;

use crate::keys::PartitionKey;
use crate::push::{ConditionChange, PushHealth, PushOutcome, Pusher, VersionClock};

/// The config-API port name on the headless Service (and its EndpointSlices).
pub const CONFIG_PORT_NAME: &str = "config-api";
/// The config-API port when the slice does not name one.
pub const CONFIG_PORT: i32 = 8081;

/// The config-API endpoints (`host:port`) in a Service's EndpointSlices, ready or not: a new
/// proxy is not ready until it has a config, so it must be pushed to before it is ready.
pub fn config_endpoints(
    slices: &[std::sync::Arc<EndpointSlice>],
    namespace: &str,
    service: &str,
) -> Vec<String> {
    let mut out = BTreeSet::new();
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
            for a in &ep.addresses {
                let host = if s.address_type == "IPv6" {
                    format!("[{a}]")
                } else {
                    a.clone()
                };
                out.insert(format!("{host}:{port}"));
            }
        }
    }
    out.into_iter().collect()
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
    doc: Option<Config>,
    version: u64,
    held: BTreeMap<String, u64>,
    health: PushHealth,
    last_error: String,
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

    /// Delivers `doc` (version ignored) to `endpoints` of `partition` with `token`. A token
    /// error (`Err`) counts as a failed round for every endpoint.
    pub async fn round(
        &mut self,
        partition: &PartitionKey,
        doc: &Config,
        endpoints: &[String],
        token: Result<&str, &str>,
    ) -> RoundReport {
        let state = self.partitions.entry(partition.clone()).or_default();
        let mut content = doc.clone();
        content.version = 0;
        if state.doc.as_ref() != Some(&content) {
            state.version = self.clock.next();
            state.doc = Some(content);
        }
        state.held.retain(|ep, _| endpoints.contains(ep));
        let targets: Vec<String> = endpoints
            .iter()
            .filter(|ep| state.held.get(*ep) != Some(&state.version))
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
        let mut versioned = state.doc.clone().unwrap_or_default();
        versioned.version = state.version;
        let outcomes: Vec<(String, PushOutcome)> = match token {
            Ok(token) => {
                self.pusher
                    .push(&targets, token, &versioned, &self.clock)
                    .await
            }
            Err(e) => targets
                .iter()
                .map(|t| (t.clone(), PushOutcome::Failed(e.to_owned())))
                .collect(),
        };
        for (ep, o) in &outcomes {
            if o.is_loaded() {
                state.held.insert(ep.clone(), state.version);
            } else {
                state.held.remove(ep);
                state.last_error = format!("{ep}: {}", describe(o));
            }
        }
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

    /// Forgets partitions that no longer exist.
    pub fn retain(&mut self, keep: impl Fn(&PartitionKey) -> bool) {
        self.partitions.retain(|k, _| keep(k));
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
