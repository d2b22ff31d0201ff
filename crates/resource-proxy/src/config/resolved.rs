//! The resolved view of the configuration: the client, its targets and the group/version
//! listeners, with defaults applied.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

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

/// The resources of a group/version the enabled entries route: what requests may reach, what
/// discovery and the OpenAPI documents show, and what the fallback discovery lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resources {
    /// A `*.group/version` entry: whatever the target serves.
    Wildcard,
    /// Explicit resource plurals, sorted: only these (with their subresources).
    Named(Vec<String>),
}

impl Resources {
    /// Whether `resource` is routed. It is a plural as in a request path (`widgets`) or a
    /// discovery name with its subresource (`widgets/status`); a subresource goes with its
    /// resource.
    pub fn routes(&self, resource: &str) -> bool {
        match self {
            Resources::Wildcard => true,
            Resources::Named(names) => {
                let plural = resource.split_once('/').map_or(resource, |(p, _)| p);
                names.iter().any(|n| n == plural)
            }
        }
    }
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
    /// The named resources configured `scope: Cluster`, sorted: cluster-scoped in the discovery
    /// synthesized before the target has answered.
    pub cluster_scoped: Vec<String>,
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
    /// Apply the owner-label policy in every target ([`crate::owner_label_policy`]).
    pub apply_owner_label_policy: bool,
}
