//! The configuration file (RP-1) and the listeners it resolves to (RP-2).
//!
//! Loading has three steps:
//! 1. [`ConfigFile::from_yaml`] parses the YAML into [`ConfigFile`], which keeps every value as
//!    written (optional fields stay `None`), because some rules compare entries before defaults
//!    apply. Syntax errors, unknown keys and wrong types stop here with one error.
//! 2. [`ConfigFile::validate`] checks every rule and returns all violations at once, each naming
//!    the key path (`customResources['widgets.example.com/v1'].accessResources`).
//! 3. [`ConfigFile::resolve`] applies defaults and produces [`Config`]: the client identity, the
//!    targets, and one [`GroupVersionListener`] per enabled group/version, sorted by
//!    `<group>/<version>` with port `basePort + index`, so every replica agrees.
//!
//! The `customResources` section has the shape and rules of vCluster's
//! `experimental.proxy.customResources`.

pub(crate) mod dns;
pub mod names;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::dns::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};

/// Default first listener port.
pub const DEFAULT_BASE_PORT: u16 = 9100;

/// Default address of the metrics, `/healthz` and `/readyz` server. Port 9099 sits below the
/// default listener range.
pub const DEFAULT_METRICS_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9099);

/// Address every group/version listener binds; the client's kube-apiserver reaches it through
/// an ExternalName Service pointing at `localhost`.
pub const LISTENER_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Default EndpointSlice port name of a target's API server Service.
pub const DEFAULT_ENDPOINT_PORT_NAME: &str = "https";

/// Key of a wildcard entry's resource part.
const WILDCARD: &str = "*";

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML of the expected shape (syntax, unknown key, wrong type).
    #[error("parsing configuration: {0}")]
    Parse(String),
    /// Valid YAML that breaks one or more rules.
    #[error("{0}")]
    Invalid(ValidationErrors),
}

/// One rule violation, naming the key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Key path in the file, e.g. `targets['default/target'].tls.caFile`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every rule violation of one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid configuration ({n} error{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The file as written.

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

// ---------------------------------------------------------------------------------------------
// The resolved view.

/// The client's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Client name (label `vcluster.com/owner-vcluster`).
    pub name: String,
    /// Project name (label `vcluster.com/owner-project`).
    pub project: String,
    /// Project namespace.
    pub project_namespace: String,
}

impl ClientIdentity {
    /// The user the target must see: `loft:vcluster:<project-namespace>:<name>`.
    pub fn target_user(&self) -> String {
        format!("loft:vcluster:{}:{}", self.project_namespace, self.name)
    }
}

/// How to reach the client cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAccess {
    /// From a kubeconfig file.
    Kubeconfig(PathBuf),
    /// With the pod's service account.
    InCluster,
}

/// A target's key: `<project>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetRef {
    /// Platform project.
    pub project: String,
    /// Virtual cluster name.
    pub name: String,
}

impl fmt::Display for TargetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project, self.name)
    }
}

/// Visibility mode of a group/version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessMode {
    /// Only objects carrying this client's owner labels.
    Owned,
    /// Every object the target's RBAC allows.
    All,
}

impl AccessMode {
    /// The configuration spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            AccessMode::Owned => "owned",
            AccessMode::All => "all",
        }
    }
}

/// Resources named by the enabled entries of a group/version (used for fallback discovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resources {
    /// A `*.group/version` entry: whatever the target serves.
    Wildcard,
    /// Explicit resource plurals, sorted.
    Named(Vec<String>),
}

/// One listener: an enabled group/version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupVersionListener {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Port on [`LISTENER_ADDRESS`].
    pub port: u16,
    /// Configured resources.
    pub resources: Resources,
    /// Where requests go.
    pub target: TargetRef,
    /// Visibility mode.
    pub access: AccessMode,
    /// The enabled `customResources` keys behind this listener.
    pub entries: Vec<String>,
}

impl GroupVersionListener {
    /// `<group>/<version>`.
    pub fn group_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// Socket address to bind.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(LISTENER_ADDRESS, self.port)
    }
}

/// A `host:port` peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerAddress {
    /// Host name or IP (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Where a target's peers come from (RP-9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSource {
    /// A fixed list.
    Static(Vec<PeerAddress>),
    /// EndpointSlices of a Service in the cluster hosting the target's control plane.
    EndpointSlice {
        /// Kubeconfig of that cluster.
        kubeconfig: PathBuf,
        /// Namespace of the Service.
        namespace: String,
        /// Service name.
        service: String,
        /// Port name in the EndpointSlices.
        port_name: String,
    },
}

/// A credential file pair or token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseCredential {
    /// Client certificate and key.
    ClientCertificate {
        /// Certificate file.
        cert_file: PathBuf,
        /// Key file.
        key_file: PathBuf,
    },
    /// Bearer token file.
    TokenFile(PathBuf),
}

/// How the proxy authenticates to a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The credential itself maps to the client's identity.
    Direct(BaseCredential),
    /// A privileged credential impersonating [`ClientIdentity::target_user`].
    Impersonate {
        /// The privileged credential.
        using: BaseCredential,
        /// Impersonated user.
        user: String,
        /// Impersonated groups.
        groups: Vec<String>,
    },
}

/// A resolved target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Peer source.
    pub peers: PeerSource,
    /// CA bundle file.
    pub ca_file: PathBuf,
    /// TLS server name.
    pub server_name: String,
    /// Credential.
    pub credential: Credential,
}

/// Serving certificate files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingCertificate {
    /// Certificate file.
    pub cert_file: PathBuf,
    /// Key file.
    pub key_file: PathBuf,
    /// CA file for the `caBundle`; `None`: the last certificate of `cert_file`.
    pub ca_file: Option<PathBuf>,
}

/// The validated configuration with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Client identity.
    pub client: ClientIdentity,
    /// Client cluster access.
    pub client_cluster: ClusterAccess,
    /// Enabled group/versions, sorted, with their ports.
    pub listeners: Vec<GroupVersionListener>,
    /// Targets.
    pub targets: BTreeMap<TargetRef, Target>,
    /// Metrics and health address.
    pub metrics_address: SocketAddr,
    /// Serving certificate, when configured.
    pub serving: Option<ServingCertificate>,
}

impl Config {
    /// Reads, validates and resolves a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses, validates and resolves YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        ConfigFile::from_yaml(text)?
            .resolve()
            .map_err(ConfigError::Invalid)
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation.

/// A parsed `customResources` key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourceKey {
    /// `None` for `*`.
    resource: Option<String>,
    group: String,
    version: String,
}

/// Splits `resource.group/version` like vCluster (`schema.ParseGroupResource` on the part before
/// the slash: resource up to the first dot, group after it), then checks each part's syntax.
fn parse_resource_key(key: &str) -> Result<ResourceKey, String> {
    let parts: Vec<&str> = key.split('/').collect();
    let [group_resource, version] = parts.as_slice() else {
        return Err("it must contain exactly one '/'".to_owned());
    };
    let Some((resource, group)) = group_resource.split_once('.') else {
        return Err(format!("{group_resource:?} has no group"));
    };
    if resource.is_empty() {
        return Err("the resource part is empty".to_owned());
    }
    if resource != WILDCARD && !is_dns1123_label(resource) {
        return Err(format!(
            "resource {resource:?} must be '*' or a lower-case resource plural (DNS label)"
        ));
    }
    if !is_dns1123_subdomain(group) {
        return Err(format!(
            "group {group:?} must be a lower-case DNS subdomain"
        ));
    }
    if !is_dns1035_label(version) {
        return Err(format!(
            "version {version:?} must be a lower-case DNS label starting with a letter"
        ));
    }
    Ok(ResourceKey {
        resource: (resource != WILDCARD).then(|| resource.to_owned()),
        group: group.to_owned(),
        version: (*version).to_owned(),
    })
}

fn parse_peer_address(s: &str) -> Result<PeerAddress, String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, port) = rest
            .split_once("]:")
            .ok_or_else(|| "expected [ipv6]:port".to_owned())?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{host:?} is not an IPv6 address"));
        }
        (host, port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| "expected host:port".to_owned())?;
        if host.contains(':') {
            return Err("an IPv6 address must be written in brackets: [addr]:port".to_owned());
        }
        if host.parse::<Ipv4Addr>().is_err() && !is_dns1123_subdomain(&host.to_ascii_lowercase()) {
            return Err(format!("{host:?} is neither an IP address nor a DNS name"));
        }
        (host, port)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("port {port:?} must be a number from 1 to 65535"))?;
    Ok(PeerAddress {
        host: host.to_owned(),
        port,
    })
}

/// `Some(s)` unless absent or empty: vCluster's Go types treat an empty string as not written.
fn written(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

const DNS_LABEL_RULE: &str = "must be a DNS label (lower-case alphanumerics or '-', starting and ending alphanumeric, at most 63 characters)";

struct Collector(Vec<FieldError>);

impl Collector {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn dns_label(&mut self, path: String, value: &str) {
        if !is_dns1123_label(value) {
            self.push(path, format!("invalid value {value:?}: {DNS_LABEL_RULE}"));
        }
    }

    fn required_path(&mut self, path: String, value: &Option<PathBuf>) {
        match value {
            Some(p) if !p.as_os_str().is_empty() => {}
            _ => self.push(path, "is required"),
        }
    }
}

fn entry_path(key: &str) -> String {
    format!("customResources['{key}']")
}

fn target_path(key: &str) -> String {
    format!("targets['{key}']")
}

impl ConfigFile {
    /// Parses YAML text (no validation).
    pub fn from_yaml(text: &str) -> Result<ConfigFile, ConfigError> {
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// The client's project as written, for defaults.
    fn client_project(&self) -> Option<&str> {
        written(&self.client.project)
    }

    /// Checks every rule; returns all violations.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = Collector(Vec::new());
        self.validate_client(&mut errs);
        let keys = self.validate_entries(&mut errs);
        self.validate_group_versions(&keys, &mut errs);
        for (key, target) in &self.targets {
            validate_target(key, target, &mut errs);
        }
        self.validate_ports(&keys, &mut errs);
        if errs.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errs.0))
        }
    }

    fn validate_client(&self, errs: &mut Collector) {
        let client = &self.client;
        match written(&client.name) {
            Some(name) => errs.dns_label("client.name".into(), name),
            None => errs.push("client.name", "is required"),
        }
        match written(&client.project) {
            Some(project) => errs.dns_label("client.project".into(), project),
            None => errs.push("client.project", "is required"),
        }
        if let Some(ns) = written(&client.project_namespace) {
            errs.dns_label("client.projectNamespace".into(), ns);
        }
        let has_kubeconfig = client
            .kubeconfig
            .as_ref()
            .is_some_and(|p| !p.as_os_str().is_empty());
        if has_kubeconfig == client.in_cluster {
            errs.push(
                "client",
                "set exactly one of client.kubeconfig or client.inCluster: true",
            );
        }
    }

    /// Per-entry rules; returns the parsed keys of the entries whose key is valid.
    fn validate_entries(&self, errs: &mut Collector) -> BTreeMap<String, ResourceKey> {
        let mut keys = BTreeMap::new();
        for (key, entry) in &self.custom_resources {
            let path = entry_path(key);
            match parse_resource_key(key) {
                Ok(parsed) => {
                    keys.insert(key.clone(), parsed);
                }
                Err(why) => errs.push(
                    path.clone(),
                    format!(
                        "invalid resource path {key:?}, expected format 'resource.group/version' \
                         or '*.group/version' (e.g. 'resource.my-org.com/v1'): {why}"
                    ),
                ),
            }
            let target = entry.target_virtual_cluster.clone().unwrap_or_default();
            match written(&target.name) {
                Some(name) => errs.dns_label(format!("{path}.targetVirtualCluster.name"), name),
                None => errs.push(
                    format!("{path}.targetVirtualCluster.name"),
                    "is required: targetVirtualCluster names the target tenant cluster",
                ),
            }
            if let Some(project) = written(&target.project) {
                errs.dns_label(format!("{path}.targetVirtualCluster.project"), project);
            }
            if let Some(mode) = written(&entry.access_resources)
                && mode != "owned"
                && mode != "all"
            {
                errs.push(
                    format!("{path}.accessResources"),
                    format!("invalid value {mode:?}, must be 'owned' or 'all'"),
                );
            }
        }
        keys
    }

    /// Rules across the enabled entries of one group/version, and target existence.
    fn validate_group_versions(&self, keys: &BTreeMap<String, ResourceKey>, errs: &mut Collector) {
        for (gv, entries) in self.enabled_by_group_version(keys) {
            let wildcards: Vec<&str> = entries
                .iter()
                .filter(|(_, k, _)| k.resource.is_none())
                .map(|(key, _, _)| *key)
                .collect();
            let explicit: Vec<&str> = entries
                .iter()
                .filter(|(_, k, _)| k.resource.is_some())
                .map(|(key, _, _)| *key)
                .collect();
            if !wildcards.is_empty() && !explicit.is_empty() {
                errs.push(
                    entry_path(wildcards[0]),
                    format!(
                        "a wildcard entry and explicit entries ({}) are all enabled for {gv}; a \
                         wildcard already routes the whole group/version, enable only one kind",
                        quoted_list(&explicit)
                    ),
                );
            }
            let (first_key, _, first) = entries[0];
            for (key, _, entry) in &entries[1..] {
                if as_written_target(entry) != as_written_target(first) {
                    errs.push(
                        format!("{}.targetVirtualCluster", entry_path(key)),
                        format!(
                            "differs from customResources['{first_key}'].targetVirtualCluster; all \
                             enabled entries of {gv} must name the same target, written the same \
                             way (defaults are not applied before comparing)"
                        ),
                    );
                }
                if written(&entry.access_resources) != written(&first.access_resources) {
                    errs.push(
                        format!("{}.accessResources", entry_path(key)),
                        format!(
                            "differs from customResources['{first_key}'].accessResources; all \
                             enabled entries of {gv} must have the same access mode, written the \
                             same way (defaults are not applied before comparing)"
                        ),
                    );
                }
            }
        }
        let Some(client_project) = self.client_project() else {
            return;
        };
        for (key, entry) in &self.custom_resources {
            if !entry.enabled {
                continue;
            }
            let target = entry.target_virtual_cluster.clone().unwrap_or_default();
            let Some(name) = written(&target.name) else {
                continue;
            };
            let project = written(&target.project).unwrap_or(client_project);
            let target_key = format!("{project}/{name}");
            if !self.targets.contains_key(&target_key) {
                errs.push(
                    format!("{}.targetVirtualCluster", entry_path(key)),
                    format!("target {target_key:?} is not defined in targets"),
                );
            }
        }
    }

    fn validate_ports(&self, keys: &BTreeMap<String, ResourceKey>, errs: &mut Collector) {
        let base = self.listeners.base_port.unwrap_or(DEFAULT_BASE_PORT);
        let count = self.enabled_by_group_version(keys).len();
        if base == 0 {
            errs.push("listeners.basePort", "must be from 1 to 65535");
        } else if count > 0 && usize::from(base) + count - 1 > usize::from(u16::MAX) {
            errs.push(
                "listeners.basePort",
                format!("{base} + {count} group/versions exceeds port 65535"),
            );
        }
        match (
            &self.listeners.serving_cert_file,
            &self.listeners.serving_key_file,
        ) {
            (Some(_), None) => errs.push(
                "listeners.servingKeyFile",
                "is required with servingCertFile",
            ),
            (None, Some(_)) => errs.push(
                "listeners.servingCertFile",
                "is required with servingKeyFile",
            ),
            _ => {}
        }
        if self.listeners.serving_ca_file.is_some() && self.listeners.serving_cert_file.is_none() {
            errs.push(
                "listeners.servingCaFile",
                "is only valid with servingCertFile and servingKeyFile",
            );
        }
        if let Some(address) = &self.metrics.address {
            match address.parse::<SocketAddr>() {
                Ok(addr) => {
                    let port = usize::from(addr.port());
                    if base != 0 && port >= usize::from(base) && port < usize::from(base) + count {
                        errs.push(
                            "metrics.address",
                            format!(
                                "port {port} is also a group/version listener port ({base}..{})",
                                usize::from(base) + count - 1
                            ),
                        );
                    }
                }
                Err(_) => errs.push(
                    "metrics.address",
                    format!("invalid value {address:?}: expected ip:port, e.g. 0.0.0.0:9099"),
                ),
            }
        }
    }

    /// Enabled entries with a valid key, grouped by `<group>/<version>`, sorted by that string;
    /// entries within a group sorted by key.
    fn enabled_by_group_version<'a>(
        &'a self,
        keys: &'a BTreeMap<String, ResourceKey>,
    ) -> BTreeMap<String, Vec<(&'a str, &'a ResourceKey, &'a CustomResourceProxy)>> {
        let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for (key, entry) in &self.custom_resources {
            if !entry.enabled {
                continue;
            }
            if let Some(parsed) = keys.get(key) {
                out.entry(format!("{}/{}", parsed.group, parsed.version))
                    .or_default()
                    .push((key.as_str(), parsed, entry));
            }
        }
        out
    }

    /// Validates, then applies defaults.
    pub fn resolve(self) -> Result<Config, ValidationErrors> {
        self.validate()?;
        let valid = "validated above";
        let client_name = written(&self.client.name).expect(valid).to_owned();
        let project = written(&self.client.project).expect(valid).to_owned();
        let client = ClientIdentity {
            project_namespace: written(&self.client.project_namespace)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("p-{project}")),
            name: client_name,
            project,
        };
        let client_cluster = match &self.client.kubeconfig {
            Some(path) if !self.client.in_cluster => ClusterAccess::Kubeconfig(path.clone()),
            _ => ClusterAccess::InCluster,
        };
        let keys: BTreeMap<String, ResourceKey> = self
            .custom_resources
            .keys()
            .filter_map(|k| parse_resource_key(k).ok().map(|p| (k.clone(), p)))
            .collect();
        let base = self.listeners.base_port.unwrap_or(DEFAULT_BASE_PORT);
        let listeners = self
            .enabled_by_group_version(&keys)
            .into_values()
            .enumerate()
            .map(|(index, entries)| {
                let (_, first_parsed, first) = entries[0];
                let target = first.target_virtual_cluster.clone().unwrap_or_default();
                let named: Vec<String> = entries
                    .iter()
                    .filter_map(|(_, k, _)| k.resource.clone())
                    .collect();
                GroupVersionListener {
                    group: first_parsed.group.clone(),
                    version: first_parsed.version.clone(),
                    // Bounded by validate_ports.
                    port: base + u16::try_from(index).expect(valid),
                    resources: if named.is_empty() {
                        Resources::Wildcard
                    } else {
                        Resources::Named(named)
                    },
                    target: TargetRef {
                        project: written(&target.project)
                            .unwrap_or(&client.project)
                            .to_owned(),
                        name: written(&target.name).expect(valid).to_owned(),
                    },
                    access: match written(&first.access_resources) {
                        Some("all") => AccessMode::All,
                        _ => AccessMode::Owned,
                    },
                    entries: entries
                        .iter()
                        .map(|(key, _, _)| (*key).to_owned())
                        .collect(),
                }
            })
            .collect();
        let targets = self
            .targets
            .iter()
            .map(|(key, t)| {
                (
                    parse_target_key(key).expect(valid),
                    resolve_target(t, &client),
                )
            })
            .collect();
        let metrics_address = self
            .metrics
            .address
            .as_deref()
            .map(|a| a.parse().expect(valid))
            .unwrap_or(DEFAULT_METRICS_ADDRESS);
        let serving = match (
            &self.listeners.serving_cert_file,
            &self.listeners.serving_key_file,
        ) {
            (Some(cert), Some(key)) => Some(ServingCertificate {
                cert_file: cert.clone(),
                key_file: key.clone(),
                ca_file: self.listeners.serving_ca_file.clone(),
            }),
            _ => None,
        };
        Ok(Config {
            client,
            client_cluster,
            listeners,
            targets,
            metrics_address,
            serving,
        })
    }
}

fn as_written_target(entry: &CustomResourceProxy) -> (Option<&str>, Option<&str>) {
    match &entry.target_virtual_cluster {
        Some(t) => (written(&t.name), written(&t.project)),
        None => (None, None),
    }
}

fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_target_key(key: &str) -> Result<TargetRef, String> {
    let Some((project, name)) = key.split_once('/') else {
        return Err("expected <project>/<name>".to_owned());
    };
    if !is_dns1123_label(project) || !is_dns1123_label(name) {
        return Err(
            "expected <project>/<name>, both DNS labels (lower-case alphanumerics or '-')"
                .to_owned(),
        );
    }
    Ok(TargetRef {
        project: project.to_owned(),
        name: name.to_owned(),
    })
}

fn validate_target(key: &str, target: &TargetSection, errs: &mut Collector) {
    let path = target_path(key);
    if let Err(why) = parse_target_key(key) {
        errs.push(path.clone(), format!("invalid key {key:?}: {why}"));
    }
    match &target.peers {
        None => errs.push(format!("{path}.peers"), "is required"),
        Some(peers) => match (&peers.static_peers, &peers.endpoint_slice) {
            (Some(list), None) => {
                if list.is_empty() {
                    errs.push(
                        format!("{path}.peers.static"),
                        "must list at least one host:port",
                    );
                }
                for (i, peer) in list.iter().enumerate() {
                    if let Err(why) = parse_peer_address(peer) {
                        errs.push(
                            format!("{path}.peers.static[{i}]"),
                            format!("invalid value {peer:?}: {why}"),
                        );
                    }
                }
            }
            (None, Some(slice)) => {
                let p = format!("{path}.peers.endpointSlice");
                errs.required_path(format!("{p}.kubeconfig"), &slice.kubeconfig);
                match written(&slice.namespace) {
                    Some(ns) => errs.dns_label(format!("{p}.namespace"), ns),
                    None => errs.push(format!("{p}.namespace"), "is required"),
                }
                match written(&slice.service) {
                    Some(svc) => errs.dns_label(format!("{p}.service"), svc),
                    None => errs.push(format!("{p}.service"), "is required"),
                }
            }
            _ => errs.push(
                format!("{path}.peers"),
                "set exactly one of peers.static or peers.endpointSlice",
            ),
        },
    }
    match &target.tls {
        None => errs.push(format!("{path}.tls"), "is required (caFile and serverName)"),
        Some(tls) => {
            errs.required_path(format!("{path}.tls.caFile"), &tls.ca_file);
            if written(&tls.server_name).is_none() {
                errs.push(format!("{path}.tls.serverName"), "is required");
            }
        }
    }
    match &target.credential {
        None => errs.push(format!("{path}.credential"), "is required"),
        Some(cred) => {
            let p = format!("{path}.credential");
            let kinds = usize::from(cred.client_certificate.is_some())
                + usize::from(cred.token_file.is_some())
                + usize::from(cred.impersonate.is_some());
            if kinds != 1 {
                errs.push(
                    p.clone(),
                    "set exactly one of clientCertificate, tokenFile or impersonate",
                );
            }
            validate_base_credential(&p, &cred.client_certificate, &cred.token_file, errs);
            if let Some(imp) = &cred.impersonate {
                let ip = format!("{p}.impersonate");
                if usize::from(imp.client_certificate.is_some())
                    + usize::from(imp.token_file.is_some())
                    != 1
                {
                    errs.push(
                        ip.clone(),
                        "set exactly one privileged credential: clientCertificate or tokenFile",
                    );
                }
                validate_base_credential(&ip, &imp.client_certificate, &imp.token_file, errs);
                for (i, g) in imp.groups.iter().enumerate() {
                    if g.is_empty() {
                        errs.push(format!("{ip}.groups[{i}]"), "must not be empty");
                    }
                }
            }
        }
    }
}

fn validate_base_credential(
    path: &str,
    cert: &Option<ClientCertificateSection>,
    token: &Option<PathBuf>,
    errs: &mut Collector,
) {
    if let Some(cert) = cert {
        errs.required_path(
            format!("{path}.clientCertificate.certFile"),
            &cert.cert_file,
        );
        errs.required_path(format!("{path}.clientCertificate.keyFile"), &cert.key_file);
    }
    if token.is_some() {
        errs.required_path(format!("{path}.tokenFile"), token);
    }
}

fn resolve_base(
    cert: &Option<ClientCertificateSection>,
    token: &Option<PathBuf>,
) -> BaseCredential {
    match (cert, token) {
        (Some(c), _) => BaseCredential::ClientCertificate {
            cert_file: c.cert_file.clone().unwrap_or_default(),
            key_file: c.key_file.clone().unwrap_or_default(),
        },
        (None, t) => BaseCredential::TokenFile(t.clone().unwrap_or_default()),
    }
}

/// Only called on a validated section.
fn resolve_target(t: &TargetSection, client: &ClientIdentity) -> Target {
    let peers = t.peers.clone().unwrap_or_default();
    let peers = match (peers.static_peers, peers.endpoint_slice) {
        (Some(list), _) => PeerSource::Static(
            list.iter()
                .filter_map(|p| parse_peer_address(p).ok())
                .collect(),
        ),
        (None, slice) => {
            let s = slice.unwrap_or_default();
            PeerSource::EndpointSlice {
                kubeconfig: s.kubeconfig.unwrap_or_default(),
                namespace: s.namespace.unwrap_or_default(),
                service: s.service.unwrap_or_default(),
                port_name: written(&s.port_name)
                    .unwrap_or(DEFAULT_ENDPOINT_PORT_NAME)
                    .to_owned(),
            }
        }
    };
    let tls = t.tls.clone().unwrap_or_default();
    let cred = t.credential.clone().unwrap_or_default();
    let credential = match cred.impersonate {
        Some(imp) => Credential::Impersonate {
            using: resolve_base(&imp.client_certificate, &imp.token_file),
            user: client.target_user(),
            groups: imp.groups,
        },
        None => Credential::Direct(resolve_base(&cred.client_certificate, &cred.token_file)),
    };
    Target {
        peers,
        ca_file: tls.ca_file.unwrap_or_default(),
        server_name: tls.server_name.unwrap_or_default(),
        credential,
    }
}

// ---------------------------------------------------------------------------------------------
// check-config output.

/// Text for `resource-proxy check-config FILE`: the client, the expected target identity, and
/// every listener with its port, resources, target, access mode and wiring names.
pub fn render_listeners(config: &Config) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &config.client;
    let _ = writeln!(
        out,
        "client: {} (project {}, project namespace {})",
        c.name, c.project, c.project_namespace
    );
    let _ = writeln!(out, "target identity: {}", c.target_user());
    let _ = writeln!(out, "metrics: {}", config.metrics_address);
    if config.listeners.is_empty() {
        let _ = writeln!(
            out,
            "listeners: none (no enabled customResources entry; the proxy would not start)"
        );
        return out;
    }
    let _ = writeln!(out, "listeners: {}", config.listeners.len());
    for l in &config.listeners {
        let resources = match &l.resources {
            Resources::Wildcard => "* (every resource the target serves)".to_owned(),
            Resources::Named(names) => names.join(", "),
        };
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", l.group_version());
        let _ = writeln!(out, "  listen:     {}", l.address());
        let _ = writeln!(out, "  resources:  {resources}");
        let _ = writeln!(out, "  target:     {}", l.target);
        let _ = writeln!(out, "  access:     {}", l.access.as_str());
        let _ = writeln!(out, "  entries:    {}", l.entries.join(", "));
        let _ = writeln!(
            out,
            "  apiservice: {}",
            names::api_service_name(&l.group, &l.version)
        );
        let _ = writeln!(
            out,
            "  service:    {}/{}",
            names::SERVICE_NAMESPACE,
            names::service_name(&l.group, &l.version)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGETS: &str = r#"
targets:
  default/target:
    peers:
      static: ["127.0.0.1:6443"]
    tls:
      caFile: /ca.crt
      serverName: kubernetes.default.svc
    credential:
      tokenFile: /token
  other/target-b:
    peers:
      static: ["127.0.0.1:7443"]
    tls:
      caFile: /ca.crt
      serverName: kubernetes.default.svc
    credential:
      tokenFile: /token
"#;

    fn with_resources(resources: &str) -> String {
        format!(
            "client:\n  name: client-a\n  project: default\n  kubeconfig: /kc\n{TARGETS}\ncustomResources:\n{resources}"
        )
    }

    fn errors(yaml: &str) -> Vec<FieldError> {
        match ConfigFile::from_yaml(yaml).unwrap().validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.0,
        }
    }

    fn error_paths(yaml: &str) -> Vec<String> {
        errors(yaml).into_iter().map(|e| e.path).collect()
    }

    fn resolved(yaml: &str) -> Config {
        Config::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn example_config_in_deploy_parses_and_resolves() {
        let config = resolved(include_str!(
            "../../../../deploy/resource-proxy/example-config.yaml"
        ));
        assert_eq!(
            config.client.target_user(),
            "loft:vcluster:p-default:client-a"
        );
        let got: Vec<(String, u16, &Resources, AccessMode)> = config
            .listeners
            .iter()
            .map(|l| (l.group_version(), l.port, &l.resources, l.access))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "example.com/v1".to_owned(),
                    9100,
                    &Resources::Named(vec!["gadgets".into(), "widgets".into()]),
                    AccessMode::Owned
                ),
                (
                    "reports.example.com/v1alpha1".to_owned(),
                    9101,
                    &Resources::Wildcard,
                    AccessMode::All
                ),
            ]
        );
    }

    #[test]
    fn valid_minimal_config_resolves_with_defaults() {
        let config = resolved(&with_resources(
            "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster:\n      name: target\n",
        ));
        assert_eq!(config.client.project_namespace, "p-default");
        assert_eq!(
            config.client_cluster,
            ClusterAccess::Kubeconfig("/kc".into())
        );
        assert_eq!(config.metrics_address, DEFAULT_METRICS_ADDRESS);
        assert_eq!(config.serving, None);
        let l = &config.listeners[0];
        assert_eq!(l.group_version(), "example.com/v1");
        assert_eq!(l.port, 9100);
        assert_eq!(l.address().to_string(), "127.0.0.1:9100");
        assert_eq!(l.access, AccessMode::Owned);
        assert_eq!(
            l.target,
            TargetRef {
                project: "default".into(),
                name: "target".into()
            }
        );
        assert_eq!(l.resources, Resources::Named(vec!["widgets".into()]));
    }

    #[test]
    fn project_namespace_can_be_set() {
        let yaml = with_resources("  {}\n").replace(
            "  project: default\n",
            "  project: default\n  projectNamespace: loft-p-default\n",
        );
        let config = resolved(&yaml);
        assert_eq!(
            config.client.target_user(),
            "loft:vcluster:loft-p-default:client-a"
        );
    }

    #[test]
    fn ports_follow_the_alphabetical_order_of_group_versions() {
        let yaml = with_resources(
            "  zebras.zoo.io/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v2:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 gadgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 off.aaa.io/v1:\n    enabled: false\n    targetVirtualCluster: {name: target}\n",
        );
        let config = resolved(&yaml);
        let got: Vec<(String, u16)> = config
            .listeners
            .iter()
            .map(|l| (l.group_version(), l.port))
            .collect();
        assert_eq!(
            got,
            vec![
                ("example.com/v1".to_owned(), 9100),
                ("example.com/v2".to_owned(), 9101),
                ("zoo.io/v1".to_owned(), 9102),
            ]
        );
        assert_eq!(
            config.listeners[0].resources,
            Resources::Named(vec!["gadgets".into(), "widgets".into()])
        );
    }

    #[test]
    fn ports_sort_by_the_group_version_string() {
        // '.' sorts before '/', so example.com.au/v1 comes before example.com/v1.
        let yaml = with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 a.example.com.au/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
        );
        let config = resolved(&yaml);
        assert_eq!(config.listeners[0].group_version(), "example.com.au/v1");
        assert_eq!(config.listeners[1].group_version(), "example.com/v1");
    }

    #[test]
    fn base_port_is_configurable() {
        let yaml = format!(
            "{}listeners:\n  basePort: 20000\n",
            with_resources(
                "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n"
            )
        );
        assert_eq!(resolved(&yaml).listeners[0].port, 20000);
    }

    #[test]
    fn wildcard_entry_resolves_to_wildcard_resources() {
        let config = resolved(&with_resources(
            "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
        ));
        assert_eq!(config.listeners[0].resources, Resources::Wildcard);
    }

    #[test]
    fn target_project_defaults_to_the_client_project_and_access_all_is_kept() {
        let config = resolved(&with_resources(
            "  widgets.example.com/v1:\n    enabled: true\n    accessResources: all\n    targetVirtualCluster: {name: target-b, project: other}\n",
        ));
        assert_eq!(config.listeners[0].target.to_string(), "other/target-b");
        assert_eq!(config.listeners[0].access, AccessMode::All);
    }

    #[test]
    fn bad_key_shapes_are_rejected_naming_the_key() {
        for key in [
            "widgets.example.com",
            "widgets/v1",
            "widgets.example.com/v1/x",
            ".example.com/v1",
            "widgets.example.com/",
            "Widgets.example.com/v1",
            "widgets.Example.com/v1",
            "widgets.example.com/1v",
            "widgets.*.com/v1",
        ] {
            let errs = errors(&with_resources(&format!(
                "  '{key}':\n    targetVirtualCluster: {{name: target}}\n"
            )));
            assert_eq!(errs.len(), 1, "{key}: {errs:?}");
            assert_eq!(errs[0].path, format!("customResources['{key}']"));
            assert!(
                errs[0]
                    .message
                    .contains("expected format 'resource.group/version'"),
                "{}",
                errs[0].message
            );
        }
    }

    #[test]
    fn missing_target_name_is_rejected_even_when_disabled() {
        let paths = error_paths(&with_resources(
            "  widgets.example.com/v1:\n    enabled: false\n  gadgets.example.com/v1:\n    targetVirtualCluster: {project: default}\n",
        ));
        assert_eq!(
            paths,
            vec![
                "customResources['gadgets.example.com/v1'].targetVirtualCluster.name",
                "customResources['widgets.example.com/v1'].targetVirtualCluster.name",
            ]
        );
    }

    #[test]
    fn target_name_and_project_must_be_dns_labels() {
        let errs = errors(&with_resources(
            "  widgets.example.com/v1:\n    targetVirtualCluster: {name: Target_1, project: 'a.b'}\n",
        ));
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "customResources['widgets.example.com/v1'].targetVirtualCluster.name",
                "customResources['widgets.example.com/v1'].targetVirtualCluster.project",
            ]
        );
        assert!(errs[0].message.contains("\"Target_1\""));
    }

    #[test]
    fn bad_access_mode_is_rejected() {
        let errs = errors(&with_resources(
            "  widgets.example.com/v1:\n    accessResources: mine\n    targetVirtualCluster: {name: target}\n",
        ));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "customResources['widgets.example.com/v1'].accessResources: invalid value \"mine\", must be 'owned' or 'all'"
        );
    }

    #[test]
    fn wildcard_and_explicit_enabled_for_one_group_version_is_rejected() {
        let errs = errors(&with_resources(
            "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
        ));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].path, "customResources['*.example.com/v1']");
        assert!(errs[0].message.contains("'widgets.example.com/v1'"));
    }

    #[test]
    fn wildcard_and_explicit_are_fine_when_one_is_disabled_or_versions_differ() {
        assert!(errors(&with_resources(
            "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: false\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v2:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
        ))
        .is_empty());
    }

    #[test]
    fn enabled_entries_disagreeing_on_target_are_rejected() {
        let paths = error_paths(&with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target-b, project: other}\n",
        ));
        assert_eq!(
            paths,
            vec!["customResources['b.example.com/v1'].targetVirtualCluster"]
        );
    }

    #[test]
    fn entries_are_compared_as_written_before_defaults() {
        // Same effective target and mode, written differently: both differences are errors.
        let paths = error_paths(&with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    enabled: true\n    accessResources: owned\n    targetVirtualCluster: {name: target, project: default}\n",
        ));
        assert_eq!(
            paths,
            vec![
                "customResources['b.example.com/v1'].targetVirtualCluster",
                "customResources['b.example.com/v1'].accessResources",
            ]
        );
    }

    #[test]
    fn disabled_entries_may_disagree() {
        assert!(errors(&with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    accessResources: all\n    targetVirtualCluster: {name: target-b}\n",
        ))
        .is_empty());
    }

    #[test]
    fn enabled_entry_target_must_be_defined() {
        let errs = errors(&with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: missing}\n\
             \x20 b.example.com/v2:\n    enabled: false\n    targetVirtualCluster: {name: missing-too}\n",
        ));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].to_string(),
            "customResources['a.example.com/v1'].targetVirtualCluster: target \"default/missing\" is not defined in targets"
        );
    }

    #[test]
    fn all_errors_are_returned_at_once() {
        let yaml = "client:\n  name: Bad_Name\ncustomResources:\n  bad-key:\n    accessResources: x\n\
                    targets:\n  nope:\n    peers: {static: ['a:b']}\n";
        let paths = error_paths(yaml);
        assert_eq!(
            paths,
            vec![
                "client.name",
                "client.project",
                "client",
                "customResources['bad-key']",
                "customResources['bad-key'].targetVirtualCluster.name",
                "customResources['bad-key'].accessResources",
                "targets['nope']",
                "targets['nope'].peers.static[0]",
                "targets['nope'].tls",
                "targets['nope'].credential",
            ]
        );
        let text = ConfigFile::from_yaml(yaml)
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with("invalid configuration (10 errors):"),
            "{text}"
        );
    }

    #[test]
    fn client_needs_exactly_one_way_to_reach_the_cluster() {
        let both = with_resources("  {}\n").replace(
            "  kubeconfig: /kc\n",
            "  kubeconfig: /kc\n  inCluster: true\n",
        );
        assert_eq!(error_paths(&both), vec!["client"]);
        let in_cluster =
            with_resources("  {}\n").replace("  kubeconfig: /kc\n", "  inCluster: true\n");
        assert_eq!(
            resolved(&in_cluster).client_cluster,
            ClusterAccess::InCluster
        );
    }

    #[test]
    fn unknown_keys_are_parse_errors() {
        let err = ConfigFile::from_yaml("client:\n  nmae: x\n").unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err}");
        assert!(err.to_string().contains("nmae"), "{err}");
    }

    #[test]
    fn target_sections_are_validated() {
        let yaml = "client: {name: c, project: p, inCluster: true}\ntargets:\n  p/t:\n    peers:\n      static: []\n      endpointSlice: {namespace: ns}\n    tls: {serverName: x}\n    credential:\n      tokenFile: /t\n      clientCertificate: {certFile: /c}\n  p/u:\n    peers:\n      endpointSlice: {namespace: NS}\n    tls: {caFile: /ca}\n    credential:\n      impersonate:\n        groups: ['']\n";
        let paths = error_paths(yaml);
        assert_eq!(
            paths,
            vec![
                "targets['p/t'].peers",
                "targets['p/t'].tls.caFile",
                "targets['p/t'].credential",
                "targets['p/t'].credential.clientCertificate.keyFile",
                "targets['p/u'].peers.endpointSlice.kubeconfig",
                "targets['p/u'].peers.endpointSlice.namespace",
                "targets['p/u'].peers.endpointSlice.service",
                "targets['p/u'].tls.serverName",
                "targets['p/u'].credential.impersonate",
                "targets['p/u'].credential.impersonate.groups[0]",
            ]
        );
    }

    #[test]
    fn peer_addresses_are_parsed() {
        assert_eq!(
            parse_peer_address("[::1]:6443").unwrap().to_string(),
            "[::1]:6443"
        );
        assert_eq!(
            parse_peer_address("api.example.com:443").unwrap(),
            PeerAddress {
                host: "api.example.com".into(),
                port: 443
            }
        );
        for bad in [
            "::1:6443",
            "host",
            "host:0",
            "host:70000",
            "[zz]:1",
            "bad_host:1",
            ":1",
        ] {
            assert!(parse_peer_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoint_slice_and_impersonation_resolve() {
        let yaml = "client: {name: c, project: p, inCluster: true}\ncustomResources:\n  w.example.com/v1: {enabled: true, targetVirtualCluster: {name: t}}\ntargets:\n  p/t:\n    peers:\n      endpointSlice: {kubeconfig: /host.kc, namespace: vc-t, service: t}\n    tls: {caFile: /ca, serverName: t.vc-t}\n    credential:\n      impersonate:\n        tokenFile: /admin-token\n        groups: [system:authenticated]\n";
        let config = resolved(yaml);
        let target = &config.targets[&TargetRef {
            project: "p".into(),
            name: "t".into(),
        }];
        assert_eq!(
            target.peers,
            PeerSource::EndpointSlice {
                kubeconfig: "/host.kc".into(),
                namespace: "vc-t".into(),
                service: "t".into(),
                port_name: "https".into(),
            }
        );
        assert_eq!(
            target.credential,
            Credential::Impersonate {
                using: BaseCredential::TokenFile("/admin-token".into()),
                user: "loft:vcluster:p-p:c".into(),
                groups: vec!["system:authenticated".into()],
            }
        );
    }

    #[test]
    fn listener_ports_must_fit_and_not_collide_with_metrics() {
        let base = with_resources(
            "  a.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}\n\
             \x20 a.example.com/v2: {enabled: true, targetVirtualCluster: {name: target}}\n",
        );
        assert_eq!(
            error_paths(&format!("{base}listeners:\n  basePort: 65535\n")),
            vec!["listeners.basePort"]
        );
        assert_eq!(
            error_paths(&format!("{base}metrics:\n  address: 127.0.0.1:9101\n")),
            vec!["metrics.address"]
        );
        assert_eq!(
            error_paths(&format!("{base}metrics:\n  address: localhost\n")),
            vec!["metrics.address"]
        );
        assert_eq!(
            error_paths(&format!("{base}listeners:\n  servingCertFile: /c\n")),
            vec!["listeners.servingKeyFile"]
        );
        assert_eq!(
            error_paths(&format!("{base}listeners:\n  servingCaFile: /ca\n")),
            vec!["listeners.servingCaFile"]
        );
        let files = format!(
            "{base}listeners:\n  servingCertFile: /c\n  servingKeyFile: /k\n  servingCaFile: /ca\n"
        );
        assert_eq!(
            resolved(&files).serving.and_then(|s| s.ca_file),
            Some(PathBuf::from("/ca"))
        );
    }

    #[test]
    fn render_lists_every_listener_with_port_and_wiring() {
        let config = resolved(&with_resources(
            "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 '*.other.io/v1beta1':\n    enabled: true\n    accessResources: all\n    targetVirtualCluster: {name: target}\n",
        ));
        let text = render_listeners(&config);
        assert!(
            text.contains("target identity: loft:vcluster:p-default:client-a"),
            "{text}"
        );
        assert!(text.contains("listeners: 2"), "{text}");
        assert!(
            text.contains(
                "example.com/v1\n  listen:     127.0.0.1:9100\n  resources:  widgets\n  target:     default/target\n  access:     owned\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("other.io/v1beta1\n  listen:     127.0.0.1:9101\n  resources:  * "),
            "{text}"
        );
        assert!(
            text.contains(
                "  apiservice: v1beta1.other.io\n  service:    kube-system/proxy-other-io-v1beta1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn render_says_when_nothing_is_enabled() {
        let config = resolved(&with_resources("  {}\n"));
        assert!(render_listeners(&config).contains("listeners: none"));
    }
}
