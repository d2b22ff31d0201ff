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

/// The check as a product's e2e test runs it: every query of the monitoring directory `dir`
/// against the `/metrics` texts scraped from the running processes. Panics naming each query
/// they do not answer, or when fewer than `min_selectors` selectors were checked (a directory
/// that lost its queries would pass otherwise). Metrics exported without a sample yet are
/// printed, not failed: their labels cannot be checked.
pub fn assert_exported(dir: &std::path::Path, scrapes: &[&str], min_selectors: usize) {
    let mut exported = Exposition::default();
    for text in scrapes {
        exported.add(text);
    }
    let monitoring = manifests::load(dir)
        .unwrap_or_else(|e| panic!("monitoring manifests of {}: {e}", dir.display()));
    let report = check(&monitoring, &exported);
    for (source, metric, labels) in &report.unverified {
        eprintln!("not checked (no sample): {source}: {metric} {labels:?}");
    }
    assert!(
        report.problems.is_empty(),
        "queries of {} that the processes do not answer:\n{}\n/metrics:\n{}",
        dir.display(),
        report.problems_text(),
        scrapes.join("\n")
    );
    assert!(
        report.selectors >= min_selectors,
        "{} selectors checked in {}, expected at least {min_selectors}",
        report.selectors,
        dir.display()
    );
}
