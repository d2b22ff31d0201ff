//! `tunnel-config`: the contract between the tunnel gateway's controller and its data plane.
//! The document the controller pushes ([`config`]), the compiler that checks it and turns it
//! into a route table ([`compile`]), and the pure rules that table applies: request matching
//! ([`routing`]), filters ([`filters`], [`cors`]) and what a backend's endpoints and TLS settings must be
//! ([`backend`]); the config API's mutual TLS on both ends ([`config_api`]); a push of only what changed
//! ([`delta`]). No I/O: the controller validates what it translates with the same compiler
//! the proxy compiles a push with.
#![forbid(unsafe_code)]

pub mod backend;
pub mod compile;
pub mod config;
pub mod config_api;
pub mod cors;
pub mod delta;
pub mod filters;
pub mod routing;
