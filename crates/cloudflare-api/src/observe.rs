//! Per-call observation hook and the controller's Cloudflare API metrics.
//!
//! The client reports every HTTP attempt to a [`CallObserver`]; it owns no registry.
//! [`ApiMetrics`] is the observer behind TG-12's series:
//! `cftunnel_cloudflare_api_calls_total{method,resource,status}` and
//! `cftunnel_cloudflare_api_errors_total{method,error_type}`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::error::ErrorKind;

/// Low-cardinality names of the API resources the client calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// `GET /accounts`.
    Accounts,
    /// `GET /user/tokens/verify` and `GET /accounts/{id}/tokens/verify`.
    TokenVerify,
    /// `GET /accounts/{id}/cfd_tunnel/{id}`.
    Tunnel,
    /// `GET /accounts/{id}/cfd_tunnel/{id}/token`.
    TunnelToken,
    /// `GET|PUT /accounts/{id}/cfd_tunnel/{id}/configurations`.
    TunnelConfigurations,
    /// `GET /zones`.
    Zones,
    /// `GET|POST|PATCH|DELETE /zones/{id}/dns_records[/{id}]`.
    DnsRecords,
    /// `GET|POST|PUT|DELETE /accounts/{id}/access/apps[/{id}]`.
    AccessApps,
}

impl Resource {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Accounts => "accounts",
            Resource::TokenVerify => "token_verify",
            Resource::Tunnel => "tunnel",
            Resource::TunnelToken => "tunnel_token",
            Resource::TunnelConfigurations => "tunnel_configurations",
            Resource::Zones => "zones",
            Resource::DnsRecords => "dns_records",
            Resource::AccessApps => "access_apps",
        }
    }
}

/// What happened on one HTTP attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRecord {
    /// `GET`, `PUT`, `POST`, `PATCH` or `DELETE`.
    pub method: &'static str,
    /// Which resource.
    pub resource: Resource,
    /// HTTP status, or `None` when no response arrived.
    pub status: Option<u16>,
    /// The error class when the call failed.
    pub error: Option<ErrorKind>,
    /// Wall time of the attempt.
    pub duration: Duration,
}

impl CallRecord {
    /// The `status` label: the HTTP code, or `none` without a response.
    pub fn status_label(&self) -> String {
        self.status
            .map_or_else(|| "none".to_string(), |s| s.to_string())
    }
}

/// Receives one [`CallRecord`] per HTTP attempt. Must be cheap and must not block.
pub trait CallObserver: Send + Sync {
    /// Called after each attempt.
    fn observe(&self, call: &CallRecord);
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    method: &'static str,
    resource: &'static str,
    status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    method: &'static str,
    error_type: &'static str,
}

/// The controller's Cloudflare API counters, registered once and shared with the client.
#[derive(Debug, Clone, Default)]
pub struct ApiMetrics {
    calls: Family<CallLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
}

impl ApiMetrics {
    /// Creates the counters and registers them (`cftunnel_cloudflare_api_calls_total`,
    /// `cftunnel_cloudflare_api_errors_total`).
    pub fn register(registry: &mut Registry) -> ApiMetrics {
        let metrics = ApiMetrics::default();
        registry.register(
            "cftunnel_cloudflare_api_calls",
            "Cloudflare API calls by method, resource and HTTP status (none without a response)",
            metrics.calls.clone(),
        );
        registry.register(
            "cftunnel_cloudflare_api_errors",
            "Failed Cloudflare API calls by method and error class",
            metrics.errors.clone(),
        );
        metrics
    }
}

impl CallObserver for ApiMetrics {
    fn observe(&self, call: &CallRecord) {
        self.calls
            .get_or_create(&CallLabels {
                method: call.method,
                resource: call.resource.as_str(),
                status: call.status_label(),
            })
            .inc();
        if let Some(kind) = call.error {
            self.errors
                .get_or_create(&ErrorLabels {
                    method: call.method,
                    error_type: kind.as_str(),
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn metrics_encode_expected_series() {
        let mut registry = Registry::default();
        let m = ApiMetrics::register(&mut registry);
        let ok = CallRecord {
            method: "PUT",
            resource: Resource::TunnelConfigurations,
            status: Some(200),
            error: None,
            duration: Duration::from_millis(3),
        };
        m.observe(&ok);
        m.observe(&ok);
        m.observe(&CallRecord {
            method: "GET",
            resource: Resource::Accounts,
            status: None,
            error: Some(ErrorKind::Network),
            duration: Duration::from_millis(3),
        });
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        assert!(
            out.contains(r#"cftunnel_cloudflare_api_calls_total{method="PUT",resource="tunnel_configurations",status="200"} 2"#),
            "{out}"
        );
        assert!(
            out.contains(
                r#"cftunnel_cloudflare_api_calls_total{method="GET",resource="accounts",status="none"} 1"#
            ),
            "{out}"
        );
        assert!(
            out.contains(
                r#"cftunnel_cloudflare_api_errors_total{method="GET",error_type="network"} 1"#
            ),
            "{out}"
        );
        assert!(!out.contains(r#"error_type="auth""#));
    }
}
