//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! - [`api`]: the project's own resources, GatewayClassConfig and GatewayConfig (TG-1), and the
//!   CRD YAML generated from them.

pub mod api;
