//! The tunnel gateway controller: a Gateway API implementation (controllerName
//! `cf.k8s.lex.la/tunnel-controller`) that publishes routes through Cloudflare Tunnel.
//!
//! - [`api`]: the project's own resources, GatewayClassConfig and GatewayConfig (TG-1), and the
//!   CRD YAML generated from them.
//! - [`ingress`]: a tunnel's ingress document from the hostnames of its routes (TG-3).

pub mod api;
pub mod ingress;
