//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! - [`api`]: the project's own resources, GatewayClassConfig and GatewayConfig (TG-1), and the
//!   CRD YAML generated from them.
//! - [`cap`]: the per-namespace cap on dedicated data planes (TG-9).
//! - [`claims`]: tunnel-claim arbitration between dedicated Gateways, and the status address
//!   that records possession (TG-8).
//! - [`conditions`]: status conditions as decided ([`conditions::Verdict`]) and their merge into
//!   `metav1.Condition` lists.
//! - [`grants`]: ReferenceGrant checks for cross-namespace backend references.
//! - [`hostnames`]: listener and route hostname intersection (TG-5, Gateway API).
//! - [`ingress`]: a tunnel's ingress document from the hostnames of its routes (TG-3).
//! - [`push`]: config push to a partition's proxies, versions and push health (TG-4, TG-10).
//! - [`render`]: a Gateway's dedicated data plane as Kubernetes objects, and the ownership guard
//!   (TG-7).
//! - [`seniority`]: Gateway keys and the oldest-first order shared by tunnel claims and the
//!   data-plane cap.
//! - [`verify`]: claim verification with the Cloudflare API: the token is a real token of a
//!   tunnel in the credentials' account (TG-8).

pub mod api;
pub mod cap;
pub mod claims;
pub mod conditions;
pub mod grants;
pub mod hostnames;
pub mod ingress;
pub mod push;
pub mod render;
pub mod seniority;
pub mod verify;
