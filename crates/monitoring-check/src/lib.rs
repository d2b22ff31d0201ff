//! Test-only: do the monitoring manifests under `deploy/*/monitoring/` query only what the
//! binaries export? The products' e2e tests scrape the real processes' `/metrics` after some
//! traffic into an [`Exposition`] and hand it to [`check()`] with what [`manifests::load`] finds
//! (every Grafana panel and query variable, every PrometheusRule expression, the monitors'
//! scrape-time labels).
//!
//! Stages, each importing only those after it: [`check`](mod@check) (the comparison),
//! [`manifests`] (the queries of a monitoring directory), [`promql`] (the metric selectors of one
//! expression), [`exposition`] (series and label names of a `/metrics` text). All pure but the
//! file reads.

pub mod check;
pub mod exposition;
pub mod manifests;
pub mod promql;

pub use check::{Problem, Report, check};
pub use exposition::Exposition;
pub use manifests::{Monitoring, Query};
