//! The resource proxy: an aggregated-API server that serves a client (tenant) cluster's
//! configured custom-resource group/versions from a target cluster.
//!
//! Pure modules (no I/O beyond reading the configuration file):
//! - [`config`]: the YAML configuration, its validation and the resolved listeners (RP-1, RP-2).
//! - [`request_info`]: classifies a request path as discovery, OpenAPI, a resource request of
//!   the listener's group/version, or outside it (RP-5).
//! - [`labels`]: injects the owner labels into write bodies (RP-6).
//! - [`selector`]: label-selector parsing and the owner selector (RP-7).
//! - [`status`]: Kubernetes `Status` bodies for the proxy's own answers.
//! - [`names`]: names of the wiring objects in the client cluster (RP-3).
//!
//! The server built on them:
//! - [`serving`]: the serving certificate every replica shares; [`wiring`]: the APIService,
//!   Service and deletion-protection policy the leader keeps applied (RP-2, RP-3).
//! - [`caller_auth`]: only the aggregator may call (RP-4); [`server`]: the TLS listeners;
//!   [`handler`]: the request path (RP-5 to RP-8, RP-12); [`discovery`]: discovery with local
//!   fallback (RP-13); [`owner_refs`]: client owner references kept out of the target's
//!   garbage collector (RP-8); [`target`]: the connection to a target, over [`peers`] (health,
//!   quarantine, staleness) fed by a static list or [`peer_source`] (EndpointSlices),
//!   [`exchange`] (requests and whole answers over pooled HTTP/1.1 connections) and [`pool`]
//!   (watches on multiplexed HTTP/2 connections); [`metrics`]: RP-15.

pub mod answer_owner;
pub mod caller_auth;
pub mod config;
pub mod discovery;
mod dns;
pub mod exchange;
pub mod handler;
pub mod labels;
pub mod metrics;
pub mod names;
pub mod owner_refs;
pub mod peer_source;
pub mod peers;
pub mod pool;
pub mod request_info;
pub mod selector;
pub mod server;
pub mod serving;
pub mod status;
pub mod target;
pub mod wiring;
