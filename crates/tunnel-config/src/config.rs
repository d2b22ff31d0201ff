//! The versioned JSON document the controller pushes to `PUT /config`.
//!
//! These are plain serde types: they say what the controller asked for, nothing is checked
//! here. [`crate::compile`] validates a document and turns it into the route table.
//! Field names are camelCase; unknown fields are rejected so a typo in the controller fails
//! loudly instead of silently dropping a match or a filter.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Monotonically increasing; a push older than the loaded one is refused (409).
    pub version: u64,
    /// Listener hostnames of the Gateway(s) this plane serves. When non-empty, a request whose
    /// host matches none of them is answered 404 whatever the routes say.
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Routes in precedence order for the cross-route tie-break: the controller sorts them by
    /// creationTimestamp, then `{namespace}/{name}` (oldest first).
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// A Gateway listener, reduced to what the data plane needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listener {
    pub name: String,
    /// Exact (`a.example.com`) or wildcard (`*.example.com`); absent = any host.
    #[serde(default)]
    pub hostname: Option<String>,
}

/// An HTTPRoute or a GRPCRoute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum Route {
    #[serde(rename = "HTTPRoute")]
    Http(HttpRoute),
    #[serde(rename = "GRPCRoute")]
    Grpc(GrpcRoute),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRoute {
    /// `{namespace}/{name}`, used in logs.
    pub name: String,
    /// Hostnames already intersected with the listeners'; empty = any host.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Listener isolation: hosts this route does not serve, keyed by the entry of `hostnames`
    /// they fall under (`*` when `hostnames` is empty). They belong to a more specific listener
    /// of the Gateway the route is attached through.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub excluded_hostnames: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub rules: Vec<HttpRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrpcRoute {
    pub name: String,
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// As [`HttpRoute::excluded_hostnames`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub excluded_hostnames: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub rules: Vec<GrpcRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRule {
    #[serde(default)]
    pub name: Option<String>,
    /// Empty = one match on PathPrefix `/` (the Gateway API default).
    #[serde(default)]
    pub matches: Vec<HttpMatch>,
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default)]
    pub backends: Vec<Backend>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Fail closed: every request this rule matches is answered with this status (e.g. 500 for
    /// an unsupported filter) and nothing is forwarded.
    #[serde(default)]
    pub failure_status: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrpcRule {
    #[serde(default)]
    pub name: Option<String>,
    /// Empty = matches every gRPC request on the route's hostnames.
    #[serde(default)]
    pub matches: Vec<GrpcMatch>,
    /// Only the header modifiers are valid on gRPC rules.
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default)]
    pub backends: Vec<Backend>,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub failure_status: Option<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpMatch {
    #[serde(default)]
    pub path: Option<PathMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
    #[serde(default)]
    pub query_params: Vec<ValueMatch>,
    #[serde(default)]
    pub method: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PathMatch {
    #[serde(rename = "type", default = "PathMatchType::default_prefix")]
    pub kind: PathMatchType,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PathMatchType {
    Exact,
    PathPrefix,
    RegularExpression,
}

impl PathMatchType {
    fn default_prefix() -> Self {
        Self::PathPrefix
    }
}

/// A header or query parameter match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchType,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueMatchType {
    #[default]
    Exact,
    RegularExpression,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrpcMatch {
    #[serde(default)]
    pub method: Option<GrpcMethodMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
}

/// GRPCRoute method match: at least one of `service` and `method`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrpcMethodMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchType,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
}

/// Gateway API filters, internally tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Filter {
    RequestHeaderModifier(HeaderModifier),
    ResponseHeaderModifier(HeaderModifier),
    RequestRedirect(RequestRedirect),
    #[serde(rename = "URLRewrite")]
    UrlRewrite(UrlRewrite),
    RequestMirror(RequestMirror),
    /// Only on an HTTPRoute rule (not a backendRef, not a GRPCRoute).
    #[serde(rename = "CORS")]
    Cors(Cors),
}

/// The HTTPRoute CORS filter, fields as in Gateway API v1.5.1 (`*` allowed in each list).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cors {
    #[serde(default)]
    pub allow_origins: Vec<String>,
    #[serde(default)]
    pub allow_methods: Vec<String>,
    #[serde(default)]
    pub allow_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    #[serde(default)]
    pub allow_credentials: bool,
    /// Seconds; absent is 5.
    #[serde(default)]
    pub max_age: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderModifier {
    #[serde(default)]
    pub set: Vec<Header>,
    #[serde(default)]
    pub add: Vec<Header>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestRedirect {
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    /// The port of the Gateway listener the route is attached to (the controller fills it in):
    /// the redirect port when neither `scheme` nor `port` is set. Absent: the port of the
    /// request's `Host` stands in for it.
    #[serde(default)]
    pub listener_port: Option<u16>,
    #[serde(default)]
    pub path: Option<PathModifier>,
    /// 301, 302 (default), 303, 307 or 308.
    #[serde(default)]
    pub status_code: Option<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlRewrite {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub path: Option<PathModifier>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum PathModifier {
    ReplaceFullPath(String),
    ReplacePrefixMatch(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestMirror {
    pub backend: Backend,
    /// 0..=100, default 100.
    #[serde(default)]
    pub percent: Option<u32>,
}

/// One backendRef, resolved by the controller into endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backend {
    /// `{namespace}/{service}:{port}`, used in logs.
    pub name: String,
    /// Gateway API weight; 0 takes no traffic. Default 1.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// `ip:port`, `[v6]:port` or `dns-name:port`; balanced round-robin.
    #[serde(default)]
    pub endpoints: Vec<String>,
    #[serde(default)]
    pub protocol: BackendProtocol,
    #[serde(default)]
    pub tls: Option<BackendTls>,
    /// Fail closed for this backend's share of the traffic: 500 for an invalid or unsupported
    /// reference, 503 for a Service without ready endpoints.
    #[serde(default)]
    pub failure_status: Option<u16>,
    /// The backendRef's own filters: applied after the rule's, only to requests forwarded to
    /// this backend (RequestHeaderModifier, ResponseHeaderModifier, URLRewrite, RequestMirror;
    /// the header modifiers and RequestMirror on a GRPCRoute). Not on a mirror's backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
}

fn default_weight() -> u32 {
    1
}

/// Wire protocol towards the backend. `http2` without `tls` is h2c with prior knowledge;
/// with `tls` the ALPN offer is exactly the chosen protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendProtocol {
    #[default]
    Http1,
    Http2,
}

/// BackendTLSPolicy plus the Gateway's backend client certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendTls {
    /// PEM, one or more CA certificates. Required: system roots are not used.
    pub ca_bundle_pem: String,
    /// SNI, and the name verified when `subjectAltNames` and `subjectAltUris` are empty.
    pub server_name: String,
    /// DNS names; when this or `subjectAltUris` is non-empty the backend certificate must be
    /// valid for one of these names or carry one of those URIs.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    /// URI subject alternative names (e.g. SPIFFE IDs), compared exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_uris: Vec<String>,
    #[serde(default)]
    pub client_cert_pem: Option<String>,
    #[serde(default)]
    pub client_key_pem: Option<String>,
}

/// Gateway API durations (`10s`, `1m30s`, `500ms`); `0s` disables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timeouts {
    #[serde(default)]
    pub request: Option<String>,
    #[serde(default)]
    pub backend_request: Option<String>,
}

impl Config {
    /// A copy safe to hand out on `GET /config`: private keys are replaced.
    pub fn redacted(&self) -> Config {
        let mut out = self.clone();
        let redact = |b: &mut Backend| {
            if let Some(tls) = b.tls.as_mut()
                && tls.client_key_pem.is_some()
            {
                tls.client_key_pem = Some("<redacted>".to_owned());
            }
        };
        for route in &mut out.routes {
            let (backends, filters): (Vec<&mut Backend>, Vec<&mut Filter>) = match route {
                Route::Http(r) => r
                    .rules
                    .iter_mut()
                    .map(|rule| (&mut rule.backends, &mut rule.filters))
                    .fold((Vec::new(), Vec::new()), |mut acc, (b, f)| {
                        acc.0.extend(b.iter_mut());
                        acc.1.extend(f.iter_mut());
                        acc
                    }),
                Route::Grpc(r) => r
                    .rules
                    .iter_mut()
                    .map(|rule| (&mut rule.backends, &mut rule.filters))
                    .fold((Vec::new(), Vec::new()), |mut acc, (b, f)| {
                        acc.0.extend(b.iter_mut());
                        acc.1.extend(f.iter_mut());
                        acc
                    }),
            };
            for b in backends {
                redact(b);
                for f in &mut b.filters {
                    if let Filter::RequestMirror(m) = f {
                        redact(&mut m.backend);
                    }
                }
            }
            for f in filters {
                if let Filter::RequestMirror(m) = f {
                    redact(&mut m.backend);
                }
            }
        }
        out
    }
}
