//! The monitoring manifests (deploy/tunnel-gateway/monitoring) query only what the processes
//! export. prometheus-client writes a series only once something created it, so the test first
//! makes everything the dashboard and the alerts watch happen: a served request, a backend that
//! refuses connections, and a Cloudflare API outage the controller recovers from. Then the
//! leading controller's and a shared-plane proxy's `/metrics` must hold every series and label
//! a panel, a variable or an alert selects.

use std::time::Duration;

use cloudflare_double::{Fault, FaultRule};
use test_cluster::unique_name;

use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

async fn scrape(addr: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn every_series_and_label_the_dashboard_and_alerts_query_is_exported() {
    let w = world();
    // The Cloudflare outage below concerns every route.
    let _exclusive = w.lock.write().await;
    let ns = unique_name("monitoring");
    let (host, dead_host) = (
        format!("{ns}.example.com"),
        format!("dead-{ns}.example.com"),
    );
    let port = spawn_backend("monitoring").await;
    // A Service whose endpoint nobody listens on: connecting fails.
    let refusing = test_cluster::RefusingPort::bind().unwrap();
    let dead_port = refusing.port();
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&service_yaml(&ns, "dead", dead_port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;
    apply(&http_route(&ns, "dead", &dead_host, &ns, "dead")).await;
    crate::routing::wait_traffic(&host, "/", 200, "monitoring /").await;
    let proxy = &w.proxies[0];
    eventually("a backend error counted", WAIT, || async {
        let _ = get_via(proxy.data, &dead_host, "/").await;
        let text = scrape(proxy.admin).await;
        if text.contains("cftunnel_proxy_backend_errors_total{") {
            Ok(())
        } else {
            Err("no backend error yet".to_owned())
        }
    })
    .await;

    // Cloudflare answers 502 until the next change's sync has failed, then recovers.
    w.double
        .inject(FaultRule::new("/accounts/*", Fault::Status(502)).times(100_000));
    let late = format!("late-{ns}.example.com");
    apply(&http_route(&ns, "late", &late, &ns, "echo")).await;
    wait_route_condition("httproute", &ns, "late", "Accepted", "False", "Pending").await;
    w.double.clear_faults();
    wait_route_condition("httproute", &ns, "late", "Accepted", "True", "Accepted").await;

    let controller = scrape(leader_metrics().await).await;
    let plane = scrape(proxy.admin).await;
    monitoring_check::assert_exported(
        &test_cluster::repo_root().join("deploy/tunnel-gateway/monitoring"),
        &[&controller, &plane],
        20,
    );
}
