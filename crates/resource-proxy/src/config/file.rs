//! The configuration file as written: every value as the YAML has it (optional fields stay
//! `None`), because some rules compare entries before defaults apply.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::error::ConfigError;

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigFile {
    /// Who the client is and how to reach its cluster.
    #[serde(default)]
    pub client: ClientSection,
    /// Proxied group/versions, vCluster's `experimental.proxy.customResources` shape.
    #[serde(default)]
    pub custom_resources: BTreeMap<String, CustomResourceProxy>,
    /// Targets keyed by `<project>/<name>`.
    #[serde(default)]
    pub targets: BTreeMap<String, TargetSection>,
    /// Group/version listeners.
    #[serde(default)]
    pub listeners: ListenerSection,
    /// Metrics and health server.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// Apply the owner-label ValidatingAdmissionPolicy in every target at start
    /// ([`crate::owner_label_policy`]); default `false`.
    #[serde(default)]
    pub apply_owner_label_policy: bool,
}

/// `client`: the client identity and how to reach the client cluster.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientSection {
    /// The client's (virtual cluster's) name.
    pub name: Option<String>,
    /// The platform project the client belongs to.
    pub project: Option<String>,
    /// The project's namespace; default `p-<project>`.
    pub project_namespace: Option<String>,
    /// Kubeconfig of the client cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Use the in-cluster service account instead of a kubeconfig.
    #[serde(default)]
    pub in_cluster: bool,
}

/// One `customResources` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CustomResourceProxy {
    /// Whether the entry routes its group/version. Disabled entries are still validated.
    #[serde(default)]
    pub enabled: bool,
    /// The target tenant cluster.
    pub target_virtual_cluster: Option<TargetVirtualCluster>,
    /// `owned` (default) or `all`.
    pub access_resources: Option<String>,
    /// `Namespaced` (default) or `Cluster`: the resource's scope in the discovery synthesized
    /// before the target has answered (the target's discovery decides once it has). Only on an
    /// entry that names its resource. An addition to vCluster's shape.
    pub scope: Option<String>,
}

/// `targetVirtualCluster` of an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetVirtualCluster {
    /// Target name (required, DNS label).
    pub name: Option<String>,
    /// Target project; default the client's project.
    pub project: Option<String>,
}

/// One `targets` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetSection {
    /// Where the target's API servers are.
    pub peers: Option<PeersSection>,
    /// How to verify them.
    pub tls: Option<TlsSection>,
    /// How the proxy authenticates to them.
    pub credential: Option<CredentialSection>,
}

/// `peers`: exactly one source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PeersSection {
    /// Fixed `host:port` list.
    #[serde(rename = "static")]
    pub static_peers: Option<Vec<String>>,
    /// Watch the EndpointSlices of a Service.
    pub endpoint_slice: Option<EndpointSliceSection>,
}

/// `peers.endpointSlice`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointSliceSection {
    /// Kubeconfig of the cluster hosting the target's control plane.
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the Service.
    pub namespace: Option<String>,
    /// Name of the Service.
    pub service: Option<String>,
    /// EndpointSlice port name; default `https`.
    pub port_name: Option<String>,
}

/// `tls`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSection {
    /// CA bundle the target's serving certificates chain to.
    pub ca_file: Option<PathBuf>,
    /// Name verified in the target's serving certificate.
    pub server_name: Option<String>,
}

/// `credential`: exactly one kind.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CredentialSection {
    /// Client certificate the target maps to the client's identity.
    pub client_certificate: Option<ClientCertificateSection>,
    /// Bearer token file (re-read by the transport on rotation).
    pub token_file: Option<PathBuf>,
    /// A privileged credential that impersonates the client's identity.
    pub impersonate: Option<ImpersonateSection>,
}

/// `clientCertificate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientCertificateSection {
    /// PEM certificate (chain).
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
}

/// `credential.impersonate`: exactly one privileged credential, plus optional groups.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImpersonateSection {
    /// Privileged client certificate.
    pub client_certificate: Option<ClientCertificateSection>,
    /// Privileged token file.
    pub token_file: Option<PathBuf>,
    /// Groups to impersonate along with the user.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `listeners`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListenerSection {
    /// First port; default 9100.
    pub base_port: Option<u16>,
    /// Serving certificate (PEM); when absent the proxy generates one at start.
    pub serving_cert_file: Option<PathBuf>,
    /// Its key.
    pub serving_key_file: Option<PathBuf>,
    /// CA the serving certificate chains to, published as the APIServices' `caBundle`; default
    /// the last certificate of `servingCertFile`. Only with `servingCertFile`.
    pub serving_ca_file: Option<PathBuf>,
}

/// `metrics`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsSection {
    /// `ip:port`; default `0.0.0.0:9099`.
    pub address: Option<String>,
}

impl ConfigFile {
    /// Parses YAML text (no validation).
    pub fn from_yaml(text: &str) -> Result<ConfigFile, ConfigError> {
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
    }
}
