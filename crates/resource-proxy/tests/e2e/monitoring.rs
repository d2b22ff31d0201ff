//! The monitoring manifests (deploy/resource-proxy/monitoring) query only what the proxy
//! exports. prometheus-client writes a series only once something created it, and most of the
//! dashboard's are about failures, so the check runs where they all happened: at the end of
//! the outage test (writes, reads, a watch, the target stopped and restarted, discovery
//! answered locally, namespaces cleaned up).

/// Fails unless every series and label a dashboard panel, a dashboard variable or an alert of
/// the monitoring component selects is in `response` (a proxy's `/metrics` HTTP response).
pub fn assert_monitoring_queries_exported(response: &str) {
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    monitoring_check::assert_exported(
        &test_cluster::repo_root().join("deploy/resource-proxy/monitoring"),
        &[body],
        20,
    );
}
