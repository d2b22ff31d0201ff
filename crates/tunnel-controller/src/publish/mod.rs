//! The third stage: the model made true outside the controller. Each part returns what happened
//! (reports, verdicts, notices) for [`crate::status`] to write; none of them writes a status.
//!
//! - [`planes`]: the data planes: dedicated planes' objects rendered and provisioned, each
//!   partition's route table pushed to its proxies (versions, push health).
//! - [`config_api`]: the mutual TLS of those pushes: the controller's CA, each plane's
//!   certificates and Secret, their expiry.
//! - [`cloudflare`]: the Cloudflare API: tunnels' ingress documents, DNS records, Access
//!   applications, tunnel-claim verification.

pub mod cloudflare;
pub mod config_api;
pub mod planes;
