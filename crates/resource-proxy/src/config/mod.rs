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
//!
//! The parts: the file as written ([`ConfigFile`] and its sections), the rules (`validate`), the
//! defaults (`defaults`), the resolved view ([`Config`] and its parts), the `check-config`
//! output ([`render_listeners`]); the DNS name rules the configuration and the label selectors
//! share (`dns`), and the names of the objects that wire each listener into the client cluster
//! ([`names`], RP-3).

mod defaults;
pub(crate) mod dns;
mod file;
pub mod names;
mod render;
mod resolved;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

pub use file::*;
pub use render::render_listeners;
pub use resolved::*;

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
