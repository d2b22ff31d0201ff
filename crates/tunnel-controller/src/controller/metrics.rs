//! The controller's Prometheus series (TG-12). The Cloudflare API counters
//! (`cftunnel_cloudflare_api_calls_total`, `cftunnel_cloudflare_api_errors_total`) are
//! `cloudflare_api::ApiMetrics`, registered here with the rest.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use cloudflare_api::ApiMetrics;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TunnelLabel {
    pub tunnel: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PushLabels {
    pub partition: String,
    pub result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TlsExpiryLabels {
    /// `shared` or `<namespace>/<gateway>`.
    pub plane: String,
    /// `ca`, `serving` or `client`.
    pub kind: &'static str,
}

/// Every series of the controller.
#[derive(Clone)]
pub struct Metrics {
    pub api: ApiMetrics,
    /// One sync round (snapshot → Cloudflare → pushes → statuses), by outcome.
    pub sync_duration: Family<StatusLabel, Histogram>,
    /// Rules in each tunnel's ingress document (the catch-all included).
    pub ingress_rules: Family<TunnelLabel, Gauge>,
    /// Reconciles by kind: status writes (GatewayClass, Gateway, HTTPRoute, ...), tunnel syncs
    /// (`Tunnel`) and partition push rounds (`Partition`).
    pub reconciles: Family<KindLabel, Counter>,
    pub reconcile_errors: Family<KindLabel, Counter>,
    /// Config pushes by partition and result (`loaded`, `unauthorized`, `rejected`, `stale`,
    /// `failed`).
    pub pushes: Family<PushLabels, Counter>,
    /// DNS record changes by outcome (`created`, `updated`, `deleted`, `failed`, `refused`).
    pub dns_changes: Family<crate::publish::cloudflare::dns::OutcomeLabel, Counter>,
    /// Access application changes by op (`created`, `updated`, `deleted`, `failed`, `refused`).
    pub access_changes: Family<crate::publish::cloudflare::access::OpLabel, Counter>,
    /// Route parents not accepted, by reason (`HostnameNotPermitted`, `NotAllowedByListeners`,
    /// `TunnelClaimRejected`, ...), as of the last round; a reason no longer seen reads 0.
    pub refused_parents: Family<ReasonLabel, Gauge>,
    /// Route parents losing requests to a route of another namespace, as of the last round.
    pub shadowed_parents: Gauge,
    /// When each plane's config API certificates end (Unix seconds), as of the last round
    /// ([`crate::publish::config_api::expiry`]); a plane gone or a certificate missing has no series.
    pub config_tls_expiry: Family<TlsExpiryLabels, Gauge>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            api: ApiMetrics::register(registry),
            sync_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            ingress_rules: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            pushes: Family::default(),
            dns_changes: Family::default(),
            access_changes: Family::default(),
            refused_parents: Family::default(),
            shadowed_parents: Gauge::default(),
            config_tls_expiry: Family::default(),
        };
        registry.register(
            "cftunnel_sync_duration_seconds",
            "Duration of a sync round (statuses, Cloudflare ingress documents, config pushes)",
            m.sync_duration.clone(),
        );
        registry.register(
            "cftunnel_ingress_rules",
            "Rules in a tunnel's ingress document, the catch-all included",
            m.ingress_rules.clone(),
        );
        registry.register(
            "cftunnel_reconcile",
            "Reconciles by kind (status writes, tunnel syncs, partition push rounds)",
            m.reconciles.clone(),
        );
        registry.register(
            "cftunnel_reconcile_errors",
            "Failed reconciles by kind",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "cftunnel_config_pushes",
            "Config pushes to data-plane proxies by partition and result",
            m.pushes.clone(),
        );
        registry.register(
            "cftunnel_dns_record_changes",
            "DNS record changes by outcome (created, updated, deleted, failed; refused: a hostname whose record is owned elsewhere)",
            m.dns_changes.clone(),
        );
        registry.register(
            "cftunnel_access_application_changes",
            "Cloudflare Access application changes by op (created, updated, deleted, failed; refused: a destination another application covers)",
            m.access_changes.clone(),
        );
        registry.register(
            "cftunnel_route_parents_refused",
            "Route parents (a route on one Gateway) not accepted, by reason",
            m.refused_parents.clone(),
        );
        registry.register(
            "cftunnel_route_parents_shadowed",
            "Route parents losing requests to a route of another namespace (RouteShadowed)",
            m.shadowed_parents.clone(),
        );
        registry.register(
            "cftunnel_config_tls_expiry_timestamp_seconds",
            "When a data plane's config API certificates end (Unix seconds), by plane and kind (ca, serving, client)",
            m.config_tls_expiry.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn the_specified_series_are_exposed() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.sync_duration
            .get_or_create(&StatusLabel { status: "success" })
            .observe(0.1);
        m.ingress_rules
            .get_or_create(&TunnelLabel { tunnel: "t".into() })
            .set(3);
        m.reconciles
            .get_or_create(&KindLabel { kind: "Gateway" })
            .inc();
        m.config_tls_expiry
            .get_or_create(&TlsExpiryLabels {
                plane: "shop/web".into(),
                kind: "serving",
            })
            .set(1_800_000_000);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for series in [
            "cftunnel_sync_duration_seconds_bucket{",
            "cftunnel_ingress_rules{tunnel=\"t\"} 3",
            "cftunnel_reconcile_total{kind=\"Gateway\"} 1",
            "cftunnel_config_tls_expiry_timestamp_seconds{plane=\"shop/web\",kind=\"serving\"} 1800000000",
        ] {
            assert!(out.contains(series), "missing {series} in\n{out}");
        }
    }
}
