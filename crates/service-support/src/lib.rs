//! What every binary of the workspace shares and that needs no Kubernetes: the logging setup
//! ([`logging`]), the admin HTTP server with `/metrics`, `/healthz` and `/readyz`
//! ([`admin`]) and the data-plane binaries' tokio runtime ([`runtime`]). `kube-support` re-exports both for the controllers; `tunnel-proxy`,
//! `cloudflare-double`, `test-cluster` and `demo` use them directly.

pub mod admin;
pub mod logging;
pub mod runtime;
