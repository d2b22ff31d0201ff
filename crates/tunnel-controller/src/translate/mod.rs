//! Route → data-plane config translation (TG-5): one HTTPRoute's or GRPCRoute's rules become
//! [`tunnel_config::config`] rules, and the verdicts about their contents (route parent
//! `ResolvedRefs`, `Accepted`, `PartiallyInvalid`; a BackendTLSPolicy's own `Accepted` and
//! `ResolvedRefs`; the Gateway's `ResolvedRefs` for its backend client certificate) are decided
//! on the way. Pure: everything read comes from a [`BackendIndex`] built once per sync, and
//! hostnames and parent attachment are the caller's.
//!
//! Invalid or unsupported parts fail closed and say so: an unusable backend reference answers
//! 500 for its share, an unsupported filter makes its rule answer 500, and a rule the proxy
//! would refuse is dropped, so one route can never make the proxy refuse a whole document.
//!
//! - `backends`: backend references → endpoints, protocol, TLS; the Gateway client certificate.
//! - `tls_policy`: BackendTLSPolicy precedence, settings and verdicts, and the proxy's check of
//!   TLS material (CA bundles, the client certificate); below `backends`, which it never calls.
//! - `parts`: what HTTPRoute and GRPCRoute rules share (header matches and modifiers, mirrors).
//! - `http`, `grpc`: the two route kinds.
//! - `report`: per-rule checking against the proxy's compiler and the route verdicts.

mod backends;
pub(crate) mod grants;
mod grpc;
mod http;
mod parts;
mod report;
mod tls_policy;

pub use backends::{BackendIndex, SecretRef, gateway_client_cert, gateway_tls_secret, tls_secret};
pub use grpc::grpc_route;
pub use http::http_route;
pub use report::Translated;
pub use tls_policy::ClientCert;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;

use crate::conditions::Verdict;

/// A BackendTLSPolicy's own `Accepted` and `ResolvedRefs` verdicts (see
/// `tls_policy::verdicts`); the caller writes them under each ancestor Gateway.
pub fn backend_tls_policy_verdicts(policy: &BackendTlsPolicy, idx: &BackendIndex) -> Vec<Verdict> {
    tls_policy::verdicts(policy, &idx.policies)
}

#[cfg(test)]
mod tests;
