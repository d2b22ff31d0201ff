//! The `cf.k8s.lex.la/v1alpha1` resources (TG-1): GatewayClassConfig (cluster-scoped, the
//! GatewayClass's parametersRef), GatewayConfig (namespaced, a Gateway's
//! `spec.infrastructure.parametersRef`) and AccessPolicy (namespaced, a GEP-713 policy putting
//! Cloudflare Access in front of HTTPRoutes and Gateways). Validation lives in the schema (OpenAPI bounds and
//! patterns; CEL where a rule spans fields), so the API server refuses bad objects.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// The API group of the project's resources.
pub const GROUP: &str = "cf.k8s.lex.la";
/// The default key of the Cloudflare API token in a credentials Secret.
pub const DEFAULT_API_TOKEN_KEY: &str = "api-token";
/// The default key of the connector token in a tunnel-token Secret.
pub const DEFAULT_TUNNEL_TOKEN_KEY: &str = "tunnel-token";
/// The default key of the config-API token in an auth Secret.
pub const DEFAULT_AUTH_TOKEN_KEY: &str = "auth-token";
/// Replicas of a dedicated plane when neither `replicas` nor `autoscaling` is set.
pub const DEFAULT_REPLICAS: i32 = 2;
/// The metric the HPA scales on unless `autoscaling.metricName` says otherwise.
pub const DEFAULT_AUTOSCALING_METRIC: &str = "cftunnel_proxy_requests_in_flight";

/// Cluster-wide settings of the `cloudflare-tunnel` GatewayClass: the operator's tunnel and
/// credentials, and the per-namespace policy for dedicated data planes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cf.k8s.lex.la",
    version = "v1alpha1",
    kind = "GatewayClassConfig",
    shortname = "gcconfig",
    status = "GatewayClassConfigStatus",
    printcolumn = r#"{"name":"Tunnel ID","type":"string","jsonPath":".spec.tunnelID"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassConfigSpec {
    /// The shared plane's Cloudflare Tunnel (lower-case UUID).
    #[serde(rename = "tunnelID")]
    #[schemars(regex(
        pattern = r"^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$"
    ))]
    pub tunnel_id: String,
    /// The Cloudflare account (32 lower-case hex). When unset: the credentials Secret's
    /// `account-id` key, else the only account the API token can see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-f0-9]{32}$"))]
    pub account_id: Option<String>,
    /// The Secret holding the Cloudflare API token.
    pub cloudflare_credentials_secret_ref: SecretKeyRef,
    /// Let dedicated Gateways in different namespaces share one tunnel (their routes are merged
    /// into one ingress document and pushed to every plane of that tunnel). Off by default:
    /// a tunnel then belongs to one claimant.
    #[serde(default)]
    pub allow_shared_tunnels: bool,
    /// At most this many dedicated data planes per namespace; unset means no cap. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_data_planes_per_namespace: Option<i32>,
    /// Hostname ownership for multi-tenant clusters: when set, a route attached to a Gateway of
    /// this class may serve only hostnames delegated to its namespace (others get
    /// `Accepted=False/HostnameNotPermitted` and are neither pushed nor published). Unset: any
    /// namespace a listener admits may serve any hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname_ownership: Option<HostnameOwnership>,
    /// DNS records for the routes' hostnames (opt-in): a proxied CNAME to the tunnel in the
    /// zone the API token can see, next to an ownership TXT record; records of others are never
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsSettings>,
}

/// The `spec.dns` of a GatewayClassConfig (see docs/tunnel-gateway.md, "DNS records").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DnsSettings {
    /// Create, update and delete the records. Off by default: no DNS call is made.
    #[serde(default)]
    pub enabled: bool,
    /// Written into the ownership records: the controller touches only records carrying it.
    /// Unique per installation sharing a zone; defaults to the GatewayClassConfig's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")
    )]
    pub owner_id: Option<String>,
}

/// Which namespaces may serve which hostnames (see docs/tunnel-gateway.md, "Hostname
/// ownership"). An empty list permits nothing.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HostnameOwnership {
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub delegations: Vec<HostnameDelegation>,
}

/// Hostnames delegated to namespaces. An entry is an exact name (`a.example.com`) or a wildcard
/// (`*.a.example.com`: every name below `a.example.com`, not the apex); a more specific entry
/// delegated to other namespaces takes its names out of a less specific one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostnameDelegation {
    /// Namespace names (not a label selector: whoever may label a namespace could then claim
    /// hostnames).
    #[schemars(
        length(min = 1, max = 64),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub namespaces: Vec<String>,
    /// Gateway API hostnames (lower-case, an optional leading `*.` label).
    #[schemars(
        length(min = 1, max = 64),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
            )
        )
    )]
    pub hostnames: Vec<String>,
}

/// A reference to a key of a Secret, possibly in another namespace (operator-owned config only).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(min = 1))]
    pub name: String,
    /// Defaults to the controller's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Defaults to `api-token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Observed state of a GatewayClassConfig.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassConfigStatus {
    /// `SecretsResolved` and `Valid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Gateways (`namespace/name`) of the GatewayClasses using this config: the optional
    /// hostname admission policy checks only routes whose parentRefs name one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
}

/// A dedicated data plane for one Gateway: its own tunnel (from the connector token), its own
/// proxy Deployment, its own config-API credentials.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cf.k8s.lex.la",
    version = "v1alpha1",
    kind = "GatewayConfig",
    namespaced,
    shortname = "gwconfig",
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("!(has(self.replicas) && has(self.autoscaling))").message("replicas and autoscaling are mutually exclusive: set one"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayConfigSpec {
    /// The Secret (same namespace) holding the connector token; the tunnel is the token's.
    pub tunnel_token_secret_ref: LocalSecretKeyRef,
    /// Cloudflare API credentials for this tunnel's ingress document (key `api-token` by
    /// default); the GatewayClassConfig's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudflare_credentials_secret_ref: Option<LocalSecretKeyRef>,
    /// The config-API token of this plane (key `auth-token` by default); generated into
    /// `cf-proxy-<gateway>-auth` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token_secret_ref: Option<LocalSecretKeyRef>,
    /// Fixed replica count (default 2). Exclusive with `autoscaling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: Option<i32>,
    /// Horizontal autoscaling on in-flight requests per pod. Exclusive with `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// Resources of the proxy container; the controller's defaults when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The proxy image; the controller's `--proxy-image` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = r"^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$"))]
    pub image: Option<String>,
}

/// A key of a Secret in the object's own namespace (there is deliberately no namespace field).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretKeyRef {
    #[schemars(length(min = 1))]
    pub name: String,
    /// The key; each reference documents its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl LocalSecretKeyRef {
    /// The key, or `default` when unset.
    pub fn key_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(default)
    }
}

/// HPA settings (autoscaling/v2, Pods metric, average value per pod).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.maxReplicas >= (has(self.minReplicas) ? self.minReplicas : 2)").message("maxReplicas must be at least minReplicas (2 when unset)"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub min_replicas: Option<i32>,
    #[schemars(range(min = 1, max = 100))]
    pub max_replicas: i32,
    /// Target average of in-flight requests per pod.
    #[schemars(range(min = 1))]
    pub target_inflight_per_pod: i32,
    /// Default `cftunnel_proxy_requests_in_flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub metric_name: Option<String>,
}

/// Cloudflare Access in front of HTTPRoutes or Gateways of the policy's namespace (GEP-713
/// policy attachment, see docs/tunnel-gateway.md, "Cloudflare Access"): the controller keeps
/// one Access application covering the targets' hostnames (and a route's path prefixes), with
/// `rules` as its policies.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cf.k8s.lex.la",
    version = "v1alpha1",
    kind = "AccessPolicy",
    namespaced,
    shortname = "cfaccess",
    status = "AccessPolicyStatus",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AccessPolicySpec {
    /// HTTPRoutes or Gateways in the policy's namespace (there is deliberately no namespace
    /// field). A route's `sectionName` names one of its rules, a Gateway's one of its
    /// listeners.
    #[schemars(length(min = 1, max = 16))]
    pub target_refs: Vec<AccessTargetRef>,
    /// How long a login lasts, as a Go duration (`30m`, `24h`); Cloudflare's default (24h) when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub session_duration: Option<String>,
    /// The Access policies of the application, evaluated in this order.
    #[schemars(length(min = 1, max = 16))]
    pub rules: Vec<AccessRule>,
}

/// A GEP-713 `LocalPolicyTargetReferenceWithSectionName`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AccessTargetRef {
    /// `gateway.networking.k8s.io`.
    #[schemars(regex(pattern = r"^gateway\.networking\.k8s\.io$"))]
    pub group: String,
    pub kind: AccessTargetKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A rule name of an HTTPRoute, a listener name of a Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub section_name: Option<String>,
}

/// What an AccessPolicy may target.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum AccessTargetKind {
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
    Gateway,
}

/// One Access policy: who matches (`include`, minus `exclude`, and all of `require`) gets the
/// `decision`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AccessRule {
    /// Shown in the Cloudflare dashboard; `rule-<n>` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub name: Option<String>,
    pub decision: AccessDecision,
    /// A request must match one of these (at least one subject).
    pub include: AccessSubjects,
    /// A request matching one of these does not match the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<AccessSubjects>,
    /// A request must match every one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<AccessSubjects>,
}

/// Cloudflare Access decisions. `ServiceAuth` (Cloudflare's `non_identity`) is the decision
/// for service tokens.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessDecision {
    Allow,
    Deny,
    Bypass,
    ServiceAuth,
}

/// Who a rule is about.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AccessSubjects {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 3, max = 254), regex(pattern = r"^[^@\s]+@[^@\s]+$"))
    )]
    pub emails: Vec<String>,
    /// `example.com`: every address of the domain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
        )
    )]
    pub email_domains: Vec<String>,
    /// Cloudflare Access group IDs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 64)))]
    pub access_groups: Vec<String>,
    /// Groups of an identity provider configured in Cloudflare Zero Trust.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub idp_groups: Vec<IdpGroup>,
    /// Service token IDs (rules with `decision: ServiceAuth` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 64)))]
    pub service_tokens: Vec<String>,
    /// Any service token of the account (rules with `decision: ServiceAuth` only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_valid_service_token: bool,
    /// Everyone (with `Bypass`: the path is public).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub everyone: bool,
}

/// A group of an identity provider.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IdpGroup {
    pub provider: IdpProvider,
    /// The identity provider's ID in Cloudflare Zero Trust.
    #[serde(rename = "identityProviderID")]
    #[schemars(length(min = 1, max = 64))]
    pub identity_provider_id: String,
    /// The group: its object ID (AzureAD), name (Okta, GitHubOrganization) or e-mail address
    /// (GoogleWorkspace).
    #[schemars(length(min = 1, max = 256))]
    pub group: String,
}

/// Identity providers whose groups rules can name.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdpProvider {
    #[serde(rename = "AzureAD")]
    AzureAd,
    Okta,
    GoogleWorkspace,
    GitHubOrganization,
}

/// Observed state of an AccessPolicy (GEP-713 `PolicyStatus`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AccessPolicyStatus {
    /// Per Gateway a target attaches to (a target not found: the target itself), this
    /// controller's `Accepted` and `Programmed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<AccessAncestorStatus>,
}

/// One `status.ancestors` entry.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AccessAncestorStatus {
    pub ancestor_ref: AncestorRef,
    pub controller_name: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A Gateway API `ParentReference`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AncestorRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// The CRD manifests of the resources as one multi-document YAML (what the chart's `crds/` carries).
pub fn crds_yaml() -> String {
    let crds = [
        GatewayClassConfig::crd(),
        GatewayConfig::crd(),
        AccessPolicy::crd(),
    ];
    let mut out = String::from(
        "# Generated by `cargo run -p tunnel-controller --bin crdgen`; do not edit.\n",
    );
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).expect("a CRD serializes to YAML"));
    }
    out
}
