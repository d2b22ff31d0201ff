//! Pure, cluster-independent core of the resource proxy: an aggregated-API server that serves a
//! client (tenant) cluster's configured custom-resource group/versions from a target cluster.
//!
//! The modules here hold no I/O beyond reading the configuration file; the HTTP server, TLS,
//! leader election and the Kubernetes clients build on them:
//! - [`config`]: the YAML configuration, its validation and the resolved listeners (RP-1, RP-2).
//! - [`request_info`]: classifies a request path as discovery, OpenAPI, a resource request of
//!   the listener's group/version, or outside it (RP-5).
//! - [`labels`]: injects the owner labels into write bodies (RP-6).
//! - [`selector`]: label-selector parsing and the owner selector (RP-7).
//! - [`status`]: Kubernetes `Status` bodies for the proxy's own answers.
//! - [`names`]: names of the wiring objects in the client cluster (RP-3).

pub mod caller_auth;
pub mod config;
pub mod discovery;
mod dns;
pub mod handler;
pub mod labels;
pub mod metrics;
pub mod names;
pub mod request_info;
pub mod selector;
pub mod server;
pub mod serving;
pub mod status;
pub mod target;
pub mod wiring;
