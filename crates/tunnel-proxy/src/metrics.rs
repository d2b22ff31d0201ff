//! Prometheus metrics of the data plane, served on the admin port.
//!
//! The `hostname` label is always a route hostname pattern (or [`UNMATCHED`]), never the raw
//! `Host`, so clients cannot blow up cardinality. Per-hostname handles are resolved when a
//! config is compiled ([`HostMetrics`]), keeping label hashing off the request path.

use std::fmt::Write as _;
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label of requests no route matched.
pub const UNMATCHED: &str = "<none>";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    hostname: String,
    status_class: StatusClass,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            Self::Informational => "1xx",
            Self::Success => "2xx",
            Self::Redirection => "3xx",
            Self::ClientError => "4xx",
            Self::ServerError => "5xx",
        })
    }
}

const CLASSES: [StatusClass; 5] = [
    StatusClass::Informational,
    StatusClass::Success,
    StatusClass::Redirection,
    StatusClass::ClientError,
    StatusClass::ServerError,
];

/// Which of the config API's certificates: `serving`, or `client_ca` (the bundle's earliest).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TlsKindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabel {
    hostname: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendErrorLabels {
    hostname: String,
    reason: BackendErrorReason,
}

/// Why a request to a backend failed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum BackendErrorReason {
    /// TCP connect failed (refused, unreachable, DNS).
    Connect,
    /// TLS handshake or certificate verification failed.
    Tls,
    /// No response headers within the request or backend timeout.
    Timeout,
    /// The connection broke or the backend spoke bad HTTP.
    Protocol,
    /// A WebSocket (or other) upgrade failed after the backend accepted it.
    Upgrade,
}

impl BackendErrorReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Timeout => "timeout",
            Self::Protocol => "protocol",
            Self::Upgrade => "upgrade",
        }
    }
}

impl EncodeLabelValue for BackendErrorReason {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

const REASONS: [BackendErrorReason; 5] = [
    BackendErrorReason::Connect,
    BackendErrorReason::Tls,
    BackendErrorReason::Timeout,
    BackendErrorReason::Protocol,
    BackendErrorReason::Upgrade,
];

/// Every metric of the proxy.
pub struct Metrics {
    in_flight: Gauge,
    requests: Family<RequestLabels, Counter>,
    duration: Family<HostLabel, Histogram>,
    backend_errors: Family<BackendErrorLabels, Counter>,
    unmatched: Arc<HostMetrics>,
    config_tls_expiry: Family<TlsKindLabel, Gauge>,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let in_flight = Gauge::default();
        let requests = Family::default();
        let duration = Family::<HostLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ])
        });
        let backend_errors = Family::default();
        registry.register(
            "cftunnel_proxy_requests_in_flight",
            "Requests being served (the autoscaling signal)",
            in_flight.clone(),
        );
        registry.register(
            "cftunnel_proxy_requests",
            "Requests answered, by matched route hostname and status class",
            requests.clone(),
        );
        registry.register(
            "cftunnel_proxy_request_duration_seconds",
            "Time from request to the end of the response body, by matched route hostname",
            duration.clone(),
        );
        registry.register(
            "cftunnel_proxy_backend_errors",
            "Failed backend requests, by matched route hostname and reason",
            backend_errors.clone(),
        );
        let config_tls_expiry = Family::default();
        registry.register(
            "cftunnel_proxy_config_tls_expiry_timestamp_seconds",
            "When the config API's loaded certificates expire (Unix seconds), by kind: serving, client_ca",
            config_tls_expiry.clone(),
        );
        let unmatched = Arc::new(host_metrics(
            &requests,
            &duration,
            &backend_errors,
            UNMATCHED,
        ));
        Self {
            in_flight,
            requests,
            duration,
            backend_errors,
            unmatched,
            config_tls_expiry,
        }
    }

    /// The config API certificates' expiry gauge (set by [`crate::config_tls`] on each load).
    pub fn config_tls_expiry(&self) -> &Family<TlsKindLabel, Gauge> {
        &self.config_tls_expiry
    }

    /// Handles for one hostname label; creates its series.
    pub fn host(&self, hostname: &str) -> HostMetrics {
        host_metrics(
            &self.requests,
            &self.duration,
            &self.backend_errors,
            hostname,
        )
    }

    pub fn unmatched(&self) -> &Arc<HostMetrics> {
        &self.unmatched
    }

    pub fn in_flight(&self) -> &Gauge {
        &self.in_flight
    }
}

/// Pre-resolved series of one hostname label.
#[derive(Clone, Debug)]
pub struct HostMetrics {
    requests: [Counter; 5],
    duration: Histogram,
    backend_errors: [Counter; 5],
}

fn host_metrics(
    requests: &Family<RequestLabels, Counter>,
    duration: &Family<HostLabel, Histogram>,
    backend_errors: &Family<BackendErrorLabels, Counter>,
    hostname: &str,
) -> HostMetrics {
    HostMetrics {
        requests: CLASSES.map(|status_class| {
            requests.get_or_create_owned(&RequestLabels {
                hostname: hostname.to_owned(),
                status_class,
            })
        }),
        duration: duration.get_or_create_owned(&HostLabel {
            hostname: hostname.to_owned(),
        }),
        backend_errors: REASONS.map(|reason| {
            backend_errors.get_or_create_owned(&BackendErrorLabels {
                hostname: hostname.to_owned(),
                reason,
            })
        }),
    }
}

impl HostMetrics {
    /// Counts a response by its status class (codes outside 100..=599 cannot occur in hyper).
    pub fn response(&self, status: http::StatusCode) {
        let i = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.requests[i].inc();
    }

    pub fn duration(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    pub fn backend_error(&self, reason: BackendErrorReason) {
        let i = REASONS.iter().position(|r| *r == reason).unwrap_or(0);
        self.backend_errors[i].inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn series_are_named_as_specified_and_labelled_by_pattern() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let h = m.host("*.example.com");
        h.response(http::StatusCode::OK);
        h.response(http::StatusCode::BAD_GATEWAY);
        h.backend_error(BackendErrorReason::Timeout);
        h.duration(0.01);
        m.unmatched().response(http::StatusCode::NOT_FOUND);
        m.in_flight().inc();
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "cftunnel_proxy_requests_in_flight 1",
            r#"cftunnel_proxy_requests_total{hostname="*.example.com",status_class="2xx"} 1"#,
            r#"cftunnel_proxy_requests_total{hostname="*.example.com",status_class="5xx"} 1"#,
            r#"cftunnel_proxy_requests_total{hostname="<none>",status_class="4xx"} 1"#,
            r#"cftunnel_proxy_backend_errors_total{hostname="*.example.com",reason="timeout"} 1"#,
            r#"cftunnel_proxy_request_duration_seconds_count{hostname="*.example.com"} 1"#,
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
    }
}
