//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! - [`api`]: the project's own resources, GatewayClassConfig and GatewayConfig (TG-1), and the
//!   CRD YAML generated from them.
//! - [`world`]: reflectors of every watched kind and the snapshot a sync round reads.
//! - [`model`]: the decisions for one snapshot (classes, Gateways, listeners, route attachment,
//!   partitions' route tables, tunnels' hostnames), without I/O.
//! - [`dedicated`]: which Gateways get a dedicated plane (resolution, verified claims, cap).
//! - [`controller`]: the debounced sync loop (leader only): model → Cloudflare → pushes → statuses.
//! - [`provision`]: dedicated planes' objects applied (drift healed) and removed, never foreign ones.
//! - [`tunnels`]: per-tunnel ingress document sync with the Cloudflare API (TG-3).
//! - [`planes`]: which proxies of a partition hold which version; what to push next (TG-4).
//! - [`status`]: status writes (skipping no-ops, keeping other controllers' parents) and Events.
//! - [`metrics`]: the `cftunnel_*` controller series (TG-12).
//! - [`cap`]: the per-namespace cap on dedicated data planes (TG-9).
//! - [`claims`]: tunnel-claim arbitration between dedicated Gateways, and the status address
//!   that records possession (TG-8).
//! - [`conditions`]: status conditions as decided ([`conditions::Verdict`]) and their merge into
//!   `metav1.Condition` lists.
//! - [`grants`]: ReferenceGrant checks for cross-namespace backend references.
//! - [`hostnames`]: listener and route hostname intersection (TG-5, Gateway API).
//! - [`ingress`]: a tunnel's ingress document from the hostnames of its routes (TG-3).
//! - [`push`]: config push to a partition's proxies, versions and push health (TG-4, TG-10).
//! - [`translate`]: one route's rules → data-plane config rules, with the verdicts about its
//!   backends, filters and BackendTLSPolicies (TG-5).
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
pub mod controller;
pub mod dedicated;
pub mod grants;
pub mod hostnames;
pub mod ingress;
pub mod metrics;
pub mod model;
pub mod planes;
pub mod provision;
pub mod push;
pub mod render;
pub mod seniority;
pub mod status;
pub mod translate;
pub mod tunnels;
pub mod verify;
pub mod world;
