//! Dedicated data planes (TG-7 .. TG-10): Gateways carrying `spec.infrastructure.parametersRef`
//! get a plane of their own, serving the tunnel their connector token names.
//!
//! - `decide`: which Gateways get a plane this round, without I/O (configuration and Secrets
//!   resolved, claims verified, arbitrated and counted against the cap).
//! - [`claims`]: tunnel-claim arbitration between dedicated Gateways, and the status address
//!   that records possession (TG-8).
//! - [`cap`]: the per-namespace cap on dedicated data planes (TG-9).
//! - [`seniority`]: the oldest-first order shared by tunnel claims and the cap.
//!
//! Acting on the decision is [`crate::publish`]'s: claims verified with the Cloudflare API
//! ([`crate::publish::cloudflare::verify`]), planes rendered and provisioned
//! ([`crate::publish::planes::render`], [`crate::publish::planes::provision`]).

pub mod cap;
pub mod claims;
mod decide;
pub mod seniority;

pub use decide::{
    AuthToken, ClassPolicy, Decision, Resolved, Verification, VerifyRequest, decide, resolve,
    verification_key,
};
