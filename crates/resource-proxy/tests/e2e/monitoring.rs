//! The monitoring manifests (deploy/resource-proxy/monitoring) query only what the proxy
//! exports. prometheus-client writes a series only once something created it, and most of the
//! dashboard's are about failures, so the check runs where they all happened: at the end of
//! the outage test (writes, reads, a watch, the target stopped and restarted, discovery
//! answered locally, namespaces cleaned up).

/// Fails unless every series and label a dashboard panel, a dashboard variable or an alert of
/// the monitoring component selects is in `response` (a proxy's `/metrics` HTTP response).
pub fn assert_monitoring_queries_exported(response: &str) {
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    let mut exported = monitoring_check::Exposition::default();
    exported.add(body);
    let dir = test_cluster::repo_root().join("deploy/resource-proxy/monitoring");
    let monitoring = monitoring_check::manifests::load(&dir).unwrap();
    let report = monitoring_check::check(&monitoring, &exported);
    for (source, metric, labels) in &report.unverified {
        eprintln!("not checked (no sample): {source}: {metric} {labels:?}");
    }
    assert!(
        report.problems.is_empty(),
        "queries of {} that the proxy does not answer:\n{}\n/metrics:\n{body}",
        dir.display(),
        report.problems_text()
    );
    assert!(report.selectors >= 20, "{} selectors", report.selectors);
}
