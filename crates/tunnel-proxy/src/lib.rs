//! `tunnel-proxy`: the L7 data plane of the tunnel gateway. It serves every route of a
//! Gateway on one port, with the route table pushed by the controller over a config API on
//! another (mutual TLS, [`config_tls`]). No Kubernetes dependency: the controller resolves everything into the document, whose
//! types, compiler and routing rules are the `tunnel-config` crate the controller shares.
#![forbid(unsafe_code)]

pub mod admin;
pub mod config_tls;
pub mod metrics;
pub mod proxy;
pub mod state;
pub mod table;
pub mod upstream;
