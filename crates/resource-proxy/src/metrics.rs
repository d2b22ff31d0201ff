//! The proxy's Prometheus series (RP-15), every one labelled with the target
//! (`<project>/<name>`), with the names operators of the original product alert on.
//!
//! | Series | Labels | Meaning |
//! |---|---|---|
//! | `vcluster_proxy_request_total` | group_version, verb, code, reason | requests answered |
//! | `vcluster_proxy_request_duration_seconds` | verb | time to the response headers (non-watch) |
//! | `vcluster_proxy_request_terminations_total` | reason | requests cut before their answer ended |
//! | `vcluster_proxy_inflight_requests` | | requests being handled |
//! | `vcluster_proxy_discovery_fallbacks_total` | group_version, reason | discovery answered locally |
//! | `vcluster_proxy_peers` | group_version, state | peers per health state |
//! | `vcluster_proxy_peer_cache_synced` | | 1 while the peer list mirrors its source |
//! | `vcluster_proxy_peer_list_age_seconds` | | how long the peer list has gone unconfirmed |
//! | `vcluster_proxy_peer_quarantines_total` | | hosts put into quarantine |
//! | `vcluster_proxy_target_all_peers_quarantined_total` | | times no host was left |
//! | `vcluster_proxy_peer_recoveries_total` | | quarantined hosts back in rotation |
//! | `vcluster_proxy_peer_dial_failures_total` | reason | failed dials (`timeout`, `error`) |
//! | `vcluster_proxy_peer_dial_duration_seconds` | | dial (TCP + TLS) durations |
//! | `vcluster_proxy_active_watches` | | watch streams open |
//! | `vcluster_proxy_watch_events_total` | | watch events passed to callers |
//! | `vcluster_proxy_namespace_cleanups_total` | reason | namespaces of deleted client namespaces cleaned up |
//! | `vcluster_proxy_namespace_cleanup_objects_total` | group_version | objects those cleanups deleted |
//! | `vcluster_proxy_mirrored_namespaces_deleted_total` | | mirrored namespaces deleted |

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub target: String,
    pub group_version: String,
    pub verb: String,
    pub code: u16,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub target: String,
    pub verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub target: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupVersionReasonLabels {
    pub target: String,
    pub group_version: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupVersionLabels {
    pub target: String,
    pub group_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerStateLabels {
    pub target: String,
    pub group_version: String,
    pub state: String,
}

/// A gauge of seconds.
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// Every series of the proxy.
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<VerbLabels, Histogram>,
    pub request_terminations: Family<ReasonLabels, Counter>,
    pub inflight: Family<TargetLabels, Gauge>,
    pub active_watches: Family<TargetLabels, Gauge>,
    pub watch_events: Family<TargetLabels, Counter>,
    pub discovery_fallbacks: Family<GroupVersionReasonLabels, Counter>,
    pub unlabelled_writes: Family<GroupVersionReasonLabels, Counter>,
    pub peers: Family<PeerStateLabels, Gauge>,
    pub peer_cache_synced: Family<TargetLabels, Gauge>,
    pub peer_list_age: Family<TargetLabels, SecondsGauge>,
    pub peer_quarantines: Family<TargetLabels, Counter>,
    pub all_peers_quarantined: Family<TargetLabels, Counter>,
    pub peer_recoveries: Family<TargetLabels, Counter>,
    pub peer_dial_failures: Family<ReasonLabels, Counter>,
    pub peer_dial_duration: Family<TargetLabels, Histogram>,
    pub namespace_cleanups: Family<ReasonLabels, Counter>,
    pub namespace_cleanup_objects: Family<GroupVersionLabels, Counter>,
    pub mirrored_namespaces_deleted: Family<TargetLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The series, not registered anywhere (tests, or before a registry exists).
    pub fn new() -> Self {
        Self {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            request_terminations: Family::default(),
            inflight: Family::default(),
            active_watches: Family::default(),
            watch_events: Family::default(),
            discovery_fallbacks: Family::default(),
            unlabelled_writes: Family::default(),
            peers: Family::default(),
            peer_cache_synced: Family::default(),
            peer_list_age: Family::default(),
            peer_quarantines: Family::default(),
            all_peers_quarantined: Family::default(),
            peer_recoveries: Family::default(),
            peer_dial_failures: Family::default(),
            peer_dial_duration: Family::new_with_constructor(|| {
                // 1 ms .. ~8 s: the dial timeout (5 s) falls in the last buckets.
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            namespace_cleanups: Family::default(),
            namespace_cleanup_objects: Family::default(),
            mirrored_namespaces_deleted: Family::default(),
        }
    }

    /// Creates the series and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::new();
        registry.register(
            "vcluster_proxy_request",
            "Requests answered, by group/version, verb, HTTP code and reason (upstream = the target's answer)",
            m.requests.clone(),
        );
        registry.register(
            "vcluster_proxy_request_duration_seconds",
            "Time to the response headers of non-watch requests",
            m.request_duration.clone(),
        );
        registry.register(
            "vcluster_proxy_request_terminations",
            "Requests ended before their answer was complete: deadline (cut by the proxy at 60 s), canceled (the caller went away), error (a watch stream broke off)",
            m.request_terminations.clone(),
        );
        registry.register(
            "vcluster_proxy_inflight_requests",
            "Requests being handled, watches included",
            m.inflight.clone(),
        );
        registry.register(
            "vcluster_proxy_active_watches",
            "Watch streams open to callers",
            m.active_watches.clone(),
        );
        registry.register(
            "vcluster_proxy_watch_events",
            "Chunks of watch streams passed to callers (one event each, as the target flushes them)",
            m.watch_events.clone(),
        );
        registry.register(
            "vcluster_proxy_discovery_fallbacks",
            "Discovery answered locally (last good answer or synthesized) because the target could not",
            m.discovery_fallbacks.clone(),
        );
        registry.register(
            "vcluster_proxy_unlabelled_writes",
            "Write bodies forwarded without owner labels because they could not be rewritten",
            m.unlabelled_writes.clone(),
        );
        registry.register(
            "vcluster_proxy_peers",
            "Peers (API servers) of the target per health state: healthy, quarantined, half_open",
            m.peers.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_cache_synced",
            "1 while the peer list mirrors its source (static lists: always; EndpointSlice watches: synced and up)",
            m.peer_cache_synced.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_list_age_seconds",
            "How long the peer list has gone unconfirmed: 0 while its watch is up, else seconds since it dropped (distrusted past 60)",
            m.peer_list_age.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_quarantines",
            "Hosts quarantined after consecutive dial failures (or a failed trial dial)",
            m.peer_quarantines.clone(),
        );
        registry.register(
            "vcluster_proxy_target_all_peers_quarantined",
            "Times every peer of the target became unselectable",
            m.all_peers_quarantined.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_recoveries",
            "Quarantined hosts returned to rotation by a successful trial dial",
            m.peer_recoveries.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_dial_failures",
            "Failed dials (TCP + TLS) to peers: timeout (5 s) or error",
            m.peer_dial_failures.clone(),
        );
        registry.register(
            "vcluster_proxy_peer_dial_duration_seconds",
            "Duration of dials (TCP + TLS) to peers, failed ones included",
            m.peer_dial_duration.clone(),
        );
        registry.register(
            "vcluster_proxy_namespace_cleanups",
            "Target namespaces whose client namespace was deleted (reason namespace_deleted) or deleted and recreated (namespace_recreated), cleaned of the client's objects",
            m.namespace_cleanups.clone(),
        );
        registry.register(
            "vcluster_proxy_namespace_cleanup_objects",
            "Objects deleted from the target by namespace cleanups",
            m.namespace_cleanup_objects.clone(),
        );
        registry.register(
            "vcluster_proxy_mirrored_namespaces_deleted",
            "Mirrored namespaces deleted from the target after their client namespace was deleted",
            m.mirrored_namespaces_deleted.clone(),
        );
        m
    }
}

/// Verb, code and reason of a `vcluster_proxy_request_total` series of one listener.
type RequestKey = (String, u16, &'static str);

/// The series one listener updates on every request, each resolved once: a family's
/// `get_or_create` builds the label strings and hashes them on every call, which the request
/// path would pay three times per request. Series are still created on first use.
pub struct RequestSeries {
    metrics: Metrics,
    target: String,
    group_version: String,
    inflight: OnceLock<Gauge>,
    requests: Mutex<Vec<(RequestKey, Counter)>>,
    durations: Mutex<Vec<(String, Histogram)>>,
}

impl RequestSeries {
    /// The series of the listener serving `group_version` from `target`.
    pub fn new(metrics: &Metrics, target: &str, group_version: String) -> Self {
        Self {
            metrics: metrics.clone(),
            target: target.to_owned(),
            group_version,
            inflight: OnceLock::new(),
            requests: Mutex::new(Vec::new()),
            durations: Mutex::new(Vec::new()),
        }
    }

    /// `vcluster_proxy_inflight_requests` of the target.
    pub fn inflight(&self) -> &Gauge {
        self.inflight.get_or_init(|| {
            self.metrics
                .inflight
                .get_or_create(&TargetLabels {
                    target: self.target.clone(),
                })
                .clone()
        })
    }

    /// Counts an answered request in `vcluster_proxy_request_total`.
    pub fn count(&self, verb: &str, code: u16, reason: &'static str) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, c)) = requests
            .iter()
            .find(|((v, c, r), _)| *c == code && *r == reason && v == verb)
        {
            c.inc();
            return;
        }
        let counter = self
            .metrics
            .requests
            .get_or_create(&RequestLabels {
                target: self.target.clone(),
                group_version: self.group_version.clone(),
                verb: verb.to_owned(),
                code,
                reason: reason.to_owned(),
            })
            .clone();
        counter.inc();
        requests.push(((verb.to_owned(), code, reason), counter));
    }

    /// Records a request's time to its response headers in
    /// `vcluster_proxy_request_duration_seconds`.
    pub fn observe_duration(&self, verb: &str, seconds: f64) {
        let mut durations = self
            .durations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, h)) = durations.iter().find(|(v, _)| v == verb) {
            h.observe(seconds);
            return;
        }
        let histogram = self
            .metrics
            .request_duration
            .get_or_create(&VerbLabels {
                target: self.target.clone(),
                verb: verb.to_owned(),
            })
            .clone();
        histogram.observe(seconds);
        durations.push((verb.to_owned(), histogram));
    }
}
