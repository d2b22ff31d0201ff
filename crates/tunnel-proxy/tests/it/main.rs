//! Integration tests of `tunnel-proxy` against real backends on loopback. One test binary
//! (modules below) so the crate links once.

mod admin;
mod client_errors;
mod common;
mod config_tls;
mod cors;
mod data_plane;
mod drain;
mod fast_path;
mod grpc;
mod hostile;
mod tls;
mod websocket;
