//! Shared plumbing of the project's Kubernetes processes (the resource proxy and the tunnel
//! gateway controller): leader election on a Lease, the admin HTTP server (`/metrics`,
//! `/healthz`, `/readyz`), and logging setup.

pub mod admin;
pub mod leader;
pub mod telemetry;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error("admin server on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}
