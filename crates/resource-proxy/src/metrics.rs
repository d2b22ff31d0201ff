//! The proxy's Prometheus series (RP-15), every one labelled with the target
//! (`<project>/<name>`), with the names operators of the original product alert on.

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
pub struct GroupVersionReasonLabels {
    pub target: String,
    pub group_version: String,
    pub reason: String,
}

/// Every series of the proxy.
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<VerbLabels, Histogram>,
    pub inflight: Family<TargetLabels, Gauge>,
    pub active_watches: Family<TargetLabels, Gauge>,
    pub watch_events: Family<TargetLabels, Counter>,
    pub discovery_fallbacks: Family<GroupVersionReasonLabels, Counter>,
    pub unlabelled_writes: Family<GroupVersionReasonLabels, Counter>,
}

impl Metrics {
    /// Creates the series and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            inflight: Family::default(),
            active_watches: Family::default(),
            watch_events: Family::default(),
            discovery_fallbacks: Family::default(),
            unlabelled_writes: Family::default(),
        };
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
        m
    }
}
