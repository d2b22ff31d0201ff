//! Dedicated data planes (TG-7 .. TG-10): Gateways carrying `spec.infrastructure.parametersRef`
//! get a plane of their own, serving the tunnel their connector token names.
//!
//! - `decide`: which Gateways get a plane this round, without I/O (configuration and Secrets
//!   resolved, claims verified, arbitrated and counted against the cap).
//! - [`claims`]: tunnel-claim arbitration between dedicated Gateways, and the status address
//!   that records possession (TG-8).
//! - [`cap`]: the per-namespace cap on dedicated data planes (TG-9).
//! - [`seniority`]: the oldest-first order shared by tunnel claims and the cap.
//! - [`verify`]: claim verification with the Cloudflare API: the token is a real token of a
//!   tunnel in the credentials' account (TG-8).
//! - [`render`]: a Gateway's plane as Kubernetes objects (TG-7).
//! - [`provision`]: planes' objects applied (drift healed) and removed, never foreign ones.

pub mod cap;
pub mod claims;
mod decide;
pub mod provision;
pub mod render;
pub mod seniority;
pub mod verify;

pub use decide::{
    AuthToken, ClassPolicy, Decision, Resolved, Verification, VerifyRequest, decide, resolve,
    verification_key,
};
