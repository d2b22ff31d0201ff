//! Request and response types of the endpoints the controller calls.
//!
//! Shapes follow the response schemas of <https://developers.cloudflare.com/api/>:
//! - tunnel configuration: `.../zero_trust/subresources/tunnels/subresources/cloudflared/subresources/configurations/methods/get/`
//!   and `.../methods/update/` (result `{account_id, config{ingress[], originRequest, ...}, created_at, source, tunnel_id, version}`);
//! - tunnel: `.../zero_trust/subresources/tunnels/subresources/cloudflared/` ("Get a Cloudflare Tunnel");
//! - accounts: `.../api/resources/accounts/` ("List Accounts", with `result_info` for pages);
//! - token verification: `.../api/resources/user/subresources/tokens/methods/verify/` and
//!   `.../api/resources/accounts/subresources/tokens/methods/verify/` (result `{id, status}`).
//!
//! The configuration document is whole-document PUT, so every struct that round-trips keeps the
//! fields it does not model in a flattened `extra` map: a PUT after a GET sends them back intact.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiMessage;

/// The catch-all service the controller appends as the last ingress rule.
pub const CATCH_ALL_SERVICE: &str = "http_status:404";

/// The response envelope: `{success, errors, messages, result, result_info?}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Envelope<T> {
    /// Whether the call succeeded.
    pub success: bool,
    /// Errors (empty on success).
    #[serde(default)]
    pub errors: Vec<ApiMessage>,
    /// Informational messages.
    #[serde(default)]
    pub messages: Vec<ApiMessage>,
    /// The payload; absent or null on failure.
    #[serde(default = "Option::default")]
    pub result: Option<T>,
    /// Pagination data of list endpoints.
    #[serde(default)]
    pub result_info: Option<ResultInfo>,
}

/// Pagination info of list endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ResultInfo {
    /// Current page (1-based).
    #[serde(default)]
    pub page: u64,
    /// Page size.
    #[serde(default)]
    pub per_page: u64,
    /// Items on this page.
    #[serde(default)]
    pub count: u64,
    /// Items across all pages.
    #[serde(default)]
    pub total_count: u64,
}

/// An account, as listed by `GET /accounts`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Account {
    /// Account identifier (32 hex characters).
    pub id: String,
    /// Account name.
    #[serde(default)]
    pub name: String,
    /// Other fields (type, settings, created_on, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A Cloudflare Tunnel, as returned by `GET /accounts/{account_id}/cfd_tunnel/{tunnel_id}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Tunnel {
    /// Tunnel UUID.
    pub id: String,
    /// The owning account's ID.
    #[serde(default)]
    pub account_tag: String,
    /// Tunnel name.
    #[serde(default)]
    pub name: String,
    /// `"cloudflare"` for remotely managed tunnels, `"local"` otherwise.
    #[serde(default)]
    pub config_src: Option<String>,
    /// Deletion time; a deleted tunnel is still returned with this set.
    #[serde(default)]
    pub deleted_at: Option<String>,
    /// Other fields (status, connections, created_at, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Result of a token verification endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct TokenVerification {
    /// Token identifier (not the secret).
    pub id: String,
    /// `active`, `disabled` or `expired`.
    pub status: String,
}

impl TokenVerification {
    /// True when the token is usable.
    pub fn is_active(&self) -> bool {
        self.status == "active"
    }
}

/// One ingress rule of the tunnel configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct IngressRule {
    /// Public hostname; absent on the catch-all rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Path regex; absent when the rule matches every path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Origin URL or `http_status:NNN`.
    pub service: String,
    /// Per-rule origin settings, kept verbatim.
    #[serde(
        rename = "originRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub origin_request: Option<Map<String, Value>>,
    /// Fields this client does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl IngressRule {
    /// A rule sending `hostname` (and optional path regex) to `service`.
    pub fn new(hostname: impl Into<String>, service: impl Into<String>) -> IngressRule {
        IngressRule {
            hostname: Some(hostname.into()),
            service: service.into(),
            ..IngressRule::default()
        }
    }

    /// The catch-all rule: no hostname, no path, `http_status:404`.
    pub fn catch_all() -> IngressRule {
        IngressRule {
            service: CATCH_ALL_SERVICE.to_string(),
            ..IngressRule::default()
        }
    }

    /// True when the rule matches every request (no hostname or `*`, no path).
    pub fn is_catch_all(&self) -> bool {
        matches!(self.hostname.as_deref(), None | Some("") | Some("*"))
            && self.path.as_deref().unwrap_or("").is_empty()
    }
}

/// The `config` document of a tunnel: ingress rules plus settings this client keeps verbatim
/// (`originRequest`, `warp-routing`, ...).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TunnelConfig {
    /// Ordered ingress rules; the last must be the catch-all.
    #[serde(default, deserialize_with = "null_as_default")]
    pub ingress: Vec<IngressRule>,
    /// Fields this client does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The configuration resource: the `config` document plus its metadata.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TunnelConfiguration {
    /// Owning account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Tunnel UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_id: Option<String>,
    /// Increments on every accepted PUT; 0 before the first.
    #[serde(default)]
    pub version: u64,
    /// The document; a never-configured tunnel may return `null`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub config: TunnelConfig,
    /// Who wrote it (`cloudflare` for the API/dashboard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When this version was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Fields this client does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A zone, as listed by `GET /zones` (doc: `.../api/resources/zones/methods/list/`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Zone {
    /// Zone identifier (32 hex characters).
    pub id: String,
    /// The domain name (`example.com`).
    pub name: String,
    /// `active`, `pending`, `initializing`, `moved`.
    #[serde(default)]
    pub status: Option<String>,
    /// Other fields (account, name_servers, plan, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A DNS record (doc: `.../api/resources/dns/subresources/records/methods/list/`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct DnsRecord {
    /// Record identifier (32 hex characters).
    pub id: String,
    /// Fully qualified name, lower-case, without a trailing dot (`*.example.com` for wildcards).
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `TXT`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The record's value (a CNAME's target; a TXT's text, quotes included).
    #[serde(default)]
    pub content: String,
    /// Whether traffic goes through Cloudflare's proxy.
    #[serde(default)]
    pub proxied: Option<bool>,
    /// Other fields (ttl, comment, zone_id, created_on, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The body of a DNS record create or PATCH.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewDnsRecord {
    /// Record type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Fully qualified name.
    pub name: String,
    /// The value.
    pub content: String,
    /// Proxied through Cloudflare (CNAME/A/AAAA only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxied: Option<bool>,
    /// Time to live in seconds; 1 means automatic (the only value of proxied records).
    pub ttl: u32,
    /// Free-text comment shown in the dashboard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// Exact-match filters of `GET /zones/{id}/dns_records`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only records with this name.
    pub name: Option<String>,
    /// Only records of this type.
    pub kind: Option<String>,
}

/// An Access application (doc:
/// <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/methods/list/>:
/// `{id, uid, type, name, domain, destinations[{type, uri}], session_duration, policies[], aud,
/// created_at, updated_at, ...}`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AccessApp {
    /// The application's UUID.
    pub id: String,
    /// The friendly name.
    #[serde(default)]
    pub name: String,
    /// `self_hosted`, `saas`, `ssh`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The primary domain (`host` or `host/path`).
    #[serde(default)]
    pub domain: String,
    /// The public destinations it covers (the primary domain among them).
    #[serde(default, deserialize_with = "null_as_default")]
    pub destinations: Vec<AccessDestination>,
    /// How long a login lasts (`24h`).
    #[serde(default)]
    pub session_duration: Option<String>,
    /// Its policies, in precedence order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub policies: Vec<AccessAppPolicy>,
    /// Other fields (aud, created_at, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AccessApp {
    /// The URIs it covers: its public destinations, or its domain when it lists none.
    pub fn uris(&self) -> Vec<String> {
        let uris: Vec<String> = self
            .destinations
            .iter()
            .filter(|d| d.kind.is_empty() || d.kind == "public")
            .map(|d| d.uri.clone())
            .collect();
        if uris.is_empty() && !self.domain.is_empty() {
            return vec![self.domain.clone()];
        }
        uris
    }
}

/// One destination of an Access application.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct AccessDestination {
    /// `public` (a hostname with an optional path) or `private`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `host` or `host/path`, no scheme.
    #[serde(default)]
    pub uri: String,
}

impl AccessDestination {
    /// A public destination.
    pub fn public(uri: impl Into<String>) -> Self {
        AccessDestination {
            kind: "public".into(),
            uri: uri.into(),
        }
    }
}

/// A policy of an Access application as the API returns it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AccessAppPolicy {
    /// Its UUID.
    #[serde(default)]
    pub id: Option<String>,
    /// The rule set.
    #[serde(flatten)]
    pub rule: AccessPolicyRule,
}

/// An Access policy's content: decision and rules, each rule one object such as
/// `{"email": {"email": "a@example.com"}}` (doc: `.../access/subresources/policies/`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AccessPolicyRule {
    /// The policy's name.
    #[serde(default)]
    pub name: String,
    /// `allow`, `deny`, `non_identity` (service auth) or `bypass`.
    #[serde(default)]
    pub decision: String,
    /// A request must match one of these.
    #[serde(default, deserialize_with = "null_as_default")]
    pub include: Vec<Value>,
    /// A request matching one of these is not admitted by this policy.
    #[serde(default, deserialize_with = "null_as_default")]
    pub exclude: Vec<Value>,
    /// A request must match all of these.
    #[serde(default, deserialize_with = "null_as_default")]
    pub require: Vec<Value>,
    /// 1 is evaluated first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precedence: Option<u32>,
}

/// The body of an Access application create or update (PUT replaces the application).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewAccessApp {
    /// The friendly name.
    pub name: String,
    /// `self_hosted`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The primary domain (the first destination).
    pub domain: String,
    /// Every destination.
    pub destinations: Vec<AccessDestination>,
    /// How long a login lasts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_duration: Option<String>,
    /// Policies created with the application, in precedence order.
    pub policies: Vec<AccessPolicyRule>,
}

/// The body of `PUT .../configurations`.
#[derive(Debug, Serialize)]
pub(crate) struct PutConfigurationBody<'a> {
    pub config: &'a TunnelConfig,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configuration_round_trip_keeps_unknown_fields() {
        let raw = json!({
            "account_id": "a",
            "tunnel_id": "t",
            "version": 7,
            "source": "cloudflare",
            "config": {
                "ingress": [
                    {"hostname": "a.example.com", "service": "http://localhost:8080",
                     "originRequest": {"noTLSVerify": true}, "futureField": 1},
                    {"service": "http_status:404"}
                ],
                "originRequest": {"connectTimeout": 30},
                "warp-routing": {"enabled": true}
            },
            "newTopLevel": "x"
        });
        let parsed: TunnelConfiguration = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(parsed.version, 7);
        assert_eq!(parsed.config.ingress.len(), 2);
        assert!(parsed.config.ingress[1].is_catch_all());
        assert!(!parsed.config.ingress[0].is_catch_all());
        let back = serde_json::to_value(&parsed).unwrap();
        assert_eq!(back, raw);
    }

    #[test]
    fn null_config_and_null_ingress_are_empty() {
        let parsed: TunnelConfiguration =
            serde_json::from_value(json!({"version": 0, "config": null})).unwrap();
        assert!(parsed.config.ingress.is_empty());
        let parsed: TunnelConfig = serde_json::from_value(json!({"ingress": null})).unwrap();
        assert!(parsed.ingress.is_empty());
    }

    #[test]
    fn catch_all_serialises_without_hostname() {
        let v = serde_json::to_value(IngressRule::catch_all()).unwrap();
        assert_eq!(v, json!({"service": "http_status:404"}));
        assert!(
            IngressRule {
                hostname: Some("*".into()),
                ..IngressRule::catch_all()
            }
            .is_catch_all()
        );
        assert!(
            !IngressRule {
                path: Some("^/api".into()),
                ..IngressRule::catch_all()
            }
            .is_catch_all()
        );
    }
}
