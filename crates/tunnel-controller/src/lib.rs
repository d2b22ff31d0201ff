//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! Reading the cluster:
//! - [`api`]: the project's own resources, GatewayClassConfig and GatewayConfig (TG-1), and the
//!   CRD YAML generated from them.
//! - [`world`]: reflectors of every watched kind and the snapshot a sync round reads.
//!
//! Deciding, without I/O:
//! - [`model`]: the decisions for one snapshot (classes, Gateways, listeners, route attachment,
//!   partitions' route tables, tunnels' hostnames); golden tests in `tests/model/`.
//! - [`translate`]: one route's rules → data-plane config rules, with the verdicts about its
//!   backends, filters and BackendTLSPolicies (TG-5).
//! - [`dedicated`]: Gateways with a plane of their own (TG-7 .. TG-10): which get one
//!   (resolution, verified claims, cap), its objects rendered and provisioned, claims verified
//!   with the Cloudflare API.
//! - [`hostnames`]: listener and route hostname intersection (TG-5, Gateway API).
//! - [`ownership`]: which namespaces may serve which hostnames (hostname ownership, opt-in).
//! - [`shadowing`]: routes of different namespaces losing requests to each other in one table.
//! - [`grants`]: ReferenceGrant checks for cross-namespace references.
//! - [`ingress`]: a tunnel's ingress document from the hostnames of its routes (TG-3).
//! - [`conditions`]: status conditions as decided ([`conditions::Verdict`]) and their merge into
//!   `metav1.Condition` lists.
//! - [`keys`], [`credentials`], [`names`]: what the layers above share: object, Gateway,
//!   partition and route keys and typed parent references; Cloudflare credentials and Secret
//!   values; dedicated planes' object names, label values and hashes.
//!
//! Acting on the decisions:
//! - [`controller`]: the debounced sync loop (leader only): model → Cloudflare → pushes → statuses.
//! - [`tunnels`]: per-tunnel ingress document sync with the Cloudflare API (TG-3).
//! - [`dns`]: the opt-in DNS records of the tunnels' hostnames (a pure plan: desired vs
//!   existing records, ownership records; and its application through the Cloudflare API).
//! - [`access`]: Cloudflare Access applications of AccessPolicies (a pure decision with GEP-713
//!   precedence, a pure plan against the existing applications, and its application).
//! - [`planes`]: which proxies of a partition hold which version; what to push next (TG-4).
//! - [`push`]: config push to a partition's proxies, versions and push health (TG-4, TG-10),
//!   over mutual TLS (or plain HTTP, opted out).
//! - [`config_pki`]: the config API's certificates from the controller's CA (pure issuance,
//!   the CA's create/rotate/retire decision); [`config_ca`]: its Secret, read and written;
//!   [`config_tls`]: both driven by the sync loop; [`config_expiry`]: whether a plane's
//!   certificates are missing or near their end (a pure verdict, the metric's series).
//! - [`status`]: status writes (skipping no-ops, keeping other controllers' parents) and Events.
//! - [`metrics`]: the `cftunnel_*` controller series (TG-12).

pub mod access;
pub mod api;
pub mod conditions;
pub mod config_ca;
pub mod config_expiry;
pub mod config_pki;
pub mod config_tls;
pub mod controller;
pub mod credentials;
pub mod dedicated;
pub mod dns;
pub mod features;
pub mod grants;
pub mod hostnames;
pub mod ingress;
pub mod keys;
pub mod metrics;
pub mod model;
pub mod names;
pub mod ownership;
pub mod planes;
pub mod push;
pub mod shadowing;
pub mod status;
pub mod translate;
pub mod tunnels;
pub mod world;
