//! Shared plumbing of the project's Kubernetes processes (the resource proxy and the tunnel
//! gateway controller): leader election on a Lease ([`leader`]), and, re-exported from
//! `service-support` (which the processes without Kubernetes share), the admin HTTP server
//! ([`admin`]: `/metrics`, `/healthz`, `/readyz`), logging setup ([`telemetry`]) and the
//! proxies' tokio runtime ([`runtime`]).

pub mod leader;

pub use service_support::admin;
pub use service_support::logging as telemetry;
pub use service_support::runtime;

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
}
