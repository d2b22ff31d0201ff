//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! A round goes through four stages, each a folder, data flowing one way; a stage imports only
//! the stages before it and the shared vocabulary, never one after it:
//!
//! 1. [`observe`]: reflectors of every watched kind and the snapshot a round reads.
//! 2. [`model`]: the decisions for one snapshot, without I/O: classes, Gateways, listeners,
//!    route attachment, partitions' route tables, tunnels' hostnames, dedicated planes,
//!    AccessPolicies; golden tests in `tests/model/`. It calls [`translate`] for each route's
//!    rules (TG-5).
//! 3. [`publish`]: the decisions made true: planes provisioned and pushed to, the config API's
//!    certificates, the Cloudflare API's tunnels, DNS records and Access applications. Each
//!    returns what happened.
//! 4. [`status`]: the model and what happened, as status writes and Events.
//!
//! [`controller`] runs the rounds (leader only) and the route lane, and owns the metrics.
//!
//! The shared vocabulary, below every stage: [`api`] (GatewayClassConfig, GatewayConfig,
//! AccessPolicy, TG-1, and their CRD YAML), [`keys`] (object, Gateway, partition and route keys,
//! typed parent references), [`conditions`] (status conditions as decided, and their merge),
//! [`events`] (Events as decided), [`credentials`] (Cloudflare credentials, Secret values),
//! [`names`] (the field manager, dedicated planes' object names, label values, hashes).

pub mod api;
pub mod conditions;
pub mod controller;
pub mod credentials;
pub mod events;
pub mod keys;
pub mod model;
pub mod names;
pub mod observe;
pub mod publish;
pub mod status;
pub mod translate;
