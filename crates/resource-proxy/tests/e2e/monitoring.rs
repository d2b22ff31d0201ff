//! The monitoring manifests (deploy/resource-proxy/monitoring) query only what the proxy
//! exports: after a create, a get of a missing object, a list and a watch, the proxy's
//! `/metrics` holds every series and label a dashboard panel or an alert selects.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_and_label_the_dashboard_and_alerts_query_is_exported() {
    let proxy = proxies::a().await;
    let ns = namespace(proxy.tenant, "monitoring").await;
    kubectl_in(
        proxy.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("m", ""),
    )
    .await;
    let _ = proxy
        .tenant
        .kubectl_ok(&["get", "widget", "not-there", "-n", &ns])
        .await;
    kubectl(proxy.tenant, &["get", "widgets", "-n", &ns]).await;
    // A watch, cut by kubectl after 3 s (its exit status is not the point).
    let _ = proxy
        .tenant
        .kubectl_ok(&["get", "widgets", "-n", &ns, "--watch", "--request-timeout=3s"])
        .await;

    let mut exported = monitoring_check::Exposition::default();
    let response = crate::outage::metrics(proxy.metrics_port).await;
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    exported.add(body);
    let dir = test_cluster::repo_root().join("deploy/resource-proxy/monitoring");
    let monitoring = monitoring_check::manifests::load(&dir).unwrap();
    let report = monitoring_check::check(&monitoring, &exported);
    for (source, metric, labels) in &report.unverified {
        eprintln!("not checked (no series yet): {source}: {metric} {labels:?}");
    }
    assert!(
        report.problems.is_empty(),
        "queries of {} that the proxy does not answer:\n{}",
        dir.display(),
        report.problems_text()
    );
    assert!(report.selectors >= 30, "{} selectors", report.selectors);
}
