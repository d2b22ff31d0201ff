//! Real Kubernetes control planes on loopback, for tests and the demo.
//!
//! One etcd, any number of named clusters on it (each a kube-apiserver with its own
//! `--etcd-prefix`, optionally an HA peer and kube-controller-manager), a Rust-generated PKI per
//! cluster, the aggregation layer configured as kubeadm does, RBAC authorization. Binaries come
//! from `scripts/build-control-plane.sh` (built from the Go module proxy, cached by version).
//!
//! ```no_run
//! # async fn demo() -> Result<(), test_cluster::Error> {
//! use test_cluster::{ClusterSpec, ControlPlane};
//! let cp = ControlPlane::builder()
//!     .cluster(ClusterSpec::new("client"))
//!     .cluster(ClusterSpec::new("target").ha().controller_manager())
//!     .start()
//!     .await?;
//! let client = cp.cluster("target").client().await?;
//! # Ok(()) }
//! ```

mod apiserver;
mod binaries;
mod cluster;
mod control_plane;
mod etcd;
pub mod gateway_api;
pub mod kubeconfig;
pub mod manifests;
pub mod netns;
pub mod node;
pub mod pki;
mod process;
pub mod prometheus_operator;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use binaries::{Binaries, echo_basic, helm, repo_root, test_images};
pub use cluster::{Cluster, ClusterSpec};
pub use control_plane::{ControlPlane, ControlPlaneBuilder, LogsOnFailure, shared, unique_name};
pub use process::{ManagedProcess, RefusingPort, free_port, tail_file};

/// Installs ring as the process-wide rustls provider (idempotent). Every harness calls it first.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Everything that can go wrong while starting or driving a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} failed ({status}); its messages are above", script.display())]
    Script {
        script: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("control-plane binaries: {} is missing", .0.display())]
    MissingBinary(PathBuf),
    /// What a step done once per process (finding the binaries, fetching the CRDs) failed with,
    /// as every caller of that step gets it.
    #[error(transparent)]
    Once(std::sync::Arc<Error>),
    #[error("certificate generation: {0}")]
    Pki(String),
    #[error("the node's image store: {0}")]
    Image(String),
    #[error("no free port found on 127.0.0.1")]
    NoFreePort,
    #[error("port {0} on 127.0.0.1 is already in use")]
    PortInUse(u16),
    #[error("invalid cluster name {0:?}: use lower-case letters, digits and '-', at most 40")]
    BadClusterName(String),
    #[error("{component} exited ({status}); last log lines:\n{log_tail}")]
    Exited {
        component: String,
        status: String,
        log_tail: String,
    },
    #[error("{component} not ready after {waited:?}; last log lines:\n{log_tail}")]
    NotReady {
        component: String,
        waited: Duration,
        log_tail: String,
    },
    /// Creating or configuring a network namespace, a bridge or a veth failed.
    #[error("network namespaces: {0}")]
    Network(String),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("manifest: {0}")]
    Manifest(String),
    #[error("kubectl {args} failed ({status}): {stderr}")]
    Kubectl {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("helm {args} failed ({status}): {stderr}")]
    Helm {
        args: String,
        status: String,
        stderr: String,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}
