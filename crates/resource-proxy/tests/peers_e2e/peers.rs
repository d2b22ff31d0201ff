//! Peers from EndpointSlices against an HA target: rotation, a peer dying and coming back,
//! every peer down, and the peer watch dropping — with the metrics after each scenario.

use std::time::Duration;

use tokio::time::Instant;

use crate::*;

const LIST: &str = "/apis/example.test/v1/namespaces/default/widgets";
const T: (&str, &str) = ("target", "ha/target");

async fn state(proxy: &Proxy, state: &str) -> f64 {
    proxy
        .metric("vcluster_proxy_peers", &[T, ("state", state)])
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slice_peers_rotate_quarantine_recover_fail_fast_and_survive_a_dropped_watch() {
    let cp = cp().await;
    let _serial = serial().await;
    let _logs = cp.logs_on_failure();
    let target = cp.cluster("target");
    let host = cp.cluster("host");
    let proxy = start_proxy(&ProxySpec {
        tenant: "tenant",
        client_name: "peers",
        project: "ha",
        peers_yaml: format!(
            "      endpointSlice:\n        kubeconfig: {}\n        namespace: {PEER_NAMESPACE}\n        service: {PEER_SERVICE}\n        portName: https\n",
            host.kubeconfig_path().display()
        ),
        target,
        target_name: "target",
        identity: "peers-0",
    })
    .await;
    wait_available(proxy.tenant, "the tenant to list widgets").await;
    wait_serving(&proxy).await;
    let log = proxy.log();
    for i in 0..2 {
        assert!(
            log.contains(&format!("{PEER_HOST}:{}", target.server_port(i))),
            "both peers published: {log}"
        );
    }
    assert_eq!(state(&proxy, "healthy").await, 2.0);
    assert_eq!(
        proxy.metric("vcluster_proxy_peer_cache_synced", &[T]).await,
        1.0
    );

    // 1. Requests alternate between the two API servers.
    let before = [
        widget_lists_served(target, 0).await,
        widget_lists_served(target, 1).await,
    ];
    for _ in 0..8 {
        let a = direct(&proxy, "GET", LIST, "").await;
        assert_eq!(a.code, 200, "{a:?}");
    }
    let served = [
        widget_lists_served(target, 0).await - before[0],
        widget_lists_served(target, 1).await - before[1],
    ];
    assert_eq!(served[0] + served[1], 8.0, "{served:?}");
    assert!(
        served[0] >= 2.0 && served[1] >= 2.0,
        "both peers serve: {served:?}"
    );

    // 2. The peer watch drops (the host's API server stops): the cached list keeps working.
    host.stop_server(0);
    wait_until(
        "the peer watch to go down",
        Duration::from_secs(30),
        || async { proxy.metric("vcluster_proxy_peer_cache_synced", &[T]).await == 0.0 },
    )
    .await;
    assert!(
        proxy.log().contains("peer watch went down"),
        "{}",
        proxy.log_tail()
    );
    for _ in 0..4 {
        let a = direct(&proxy, "GET", LIST, "").await;
        assert_eq!(a.code, 200, "the cached list is used: {a:?}");
    }
    let age = proxy
        .metric("vcluster_proxy_peer_list_age_seconds", &[T])
        .await;
    assert!(age > 0.0 && age < 60.0, "list age {age}");
    host.restart_server(0).await.unwrap();
    wait_until(
        "the peer watch to recover",
        Duration::from_secs(30),
        || async { proxy.metric("vcluster_proxy_peer_cache_synced", &[T]).await == 1.0 },
    )
    .await;
    assert!(
        proxy
            .log()
            .contains("peer watch recovered after being down for"),
        "{}",
        proxy.log_tail()
    );
    assert_eq!(
        proxy
            .metric("vcluster_proxy_peer_list_age_seconds", &[T])
            .await,
        0.0
    );

    // 3. One peer dies: three failed dials quarantine it; each of those requests is retried on
    //    the other peer (nothing was sent), so none fails; then every request goes to the other.
    target.stop_server(1);
    let mut failed = 0;
    let mut quarantined_at = None;
    for i in 0..14 {
        let a = direct(&proxy, "GET", LIST, "").await;
        if a.code == 503 {
            assert_eq!(a.retry_after.as_deref(), Some("1"), "{a:?}");
            failed += 1;
            assert!(i < 8, "request {i} failed after the quarantine: {a:?}");
        } else {
            assert_eq!(a.code, 200, "{a:?}");
        }
        if quarantined_at.is_none()
            && proxy
                .metric("vcluster_proxy_peer_quarantines_total", &[T])
                .await
                == 1.0
        {
            quarantined_at = Some(Instant::now());
        }
    }
    let quarantined_at = quarantined_at.expect("the dead peer was quarantined");
    assert_eq!(
        failed, 0,
        "a request whose dial failed is answered by the other peer"
    );
    let dial_failures = proxy
        .metric(
            "vcluster_proxy_peer_dial_failures_total",
            &[T, ("reason", "error")],
        )
        .await;
    assert_eq!(dial_failures, 3.0);
    assert_eq!(
        proxy
            .metric(
                "vcluster_proxy_request_total",
                &[T, ("code", "503"), ("reason", "error")]
            )
            .await,
        f64::from(failed)
    );
    assert_eq!(
        (
            state(&proxy, "healthy").await,
            state(&proxy, "quarantined").await
        ),
        (1.0, 1.0)
    );
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("peer quarantined")
            && l.contains(&format!("{PEER_HOST}:{}", target.server_port(1)))),
        "the log names the quarantined host: {log}"
    );

    // 4. It comes back: in rotation again after the 20 s quarantine and one trial dial.
    target.restart_server(1).await.unwrap();
    let served_before = widget_lists_served(target, 1).await;
    wait_until("the peer to recover", Duration::from_secs(45), || async {
        let a = direct(&proxy, "GET", LIST, "").await;
        // A restarted API server answers 429 until its watch cache is ready: its own answer.
        assert!(
            a.code == 200 || (a.code == 429 && a.body.contains("initializing")),
            "the other peer serves meanwhile: {a:?}"
        );
        proxy
            .metric("vcluster_proxy_peer_recoveries_total", &[T])
            .await
            == 1.0
    })
    .await;
    let recovered_after = quarantined_at.elapsed();
    assert!(
        recovered_after >= Duration::from_millis(19_500),
        "not before the quarantine ended: {recovered_after:?}"
    );
    wait_serving(&proxy).await;
    assert!(
        widget_lists_served(target, 1).await > served_before,
        "the recovered peer serves again"
    );
    let quarantines = proxy
        .metric("vcluster_proxy_peer_quarantines_total", &[T])
        .await;
    // A trial that met the server still starting would quarantine it once more.
    assert_eq!(
        proxy
            .metric(
                "vcluster_proxy_peer_dial_failures_total",
                &[T, ("reason", "error")]
            )
            .await,
        3.0 + (quarantines - 1.0)
    );
    assert_eq!(
        (
            state(&proxy, "healthy").await,
            state(&proxy, "quarantined").await,
            state(&proxy, "half_open").await
        ),
        (2.0, 0.0, 0.0)
    );
    eprintln!(
        "peer recovered {recovered_after:?} after its quarantine ({quarantines} quarantines)"
    );

    // 5. Every peer down: once both are quarantined, requests fail at once with 503.
    target.stop_server(0);
    target.stop_server(1);
    for _ in 0..12 {
        let a = direct(&proxy, "GET", LIST, "").await;
        assert_eq!(
            (a.code, a.retry_after.as_deref()),
            (503, Some("1")),
            "{a:?}"
        );
        if proxy
            .metric("vcluster_proxy_target_all_peers_quarantined_total", &[T])
            .await
            == 1.0
        {
            break;
        }
    }
    assert_eq!(
        proxy
            .metric("vcluster_proxy_target_all_peers_quarantined_total", &[T])
            .await,
        1.0
    );
    for _ in 0..3 {
        let a = direct(&proxy, "GET", LIST, "").await;
        assert_eq!(
            (a.code, a.retry_after.as_deref()),
            (503, Some("1")),
            "{a:?}"
        );
        assert!(a.elapsed < Duration::from_secs(1), "at once: {a:?}");
        assert!(a.body.contains("is unavailable"), "{a:?}");
    }
    assert!(
        proxy
            .metric(
                "vcluster_proxy_request_total",
                &[T, ("code", "503"), ("reason", "all_quarantined")]
            )
            .await
            >= 3.0
    );
    assert_eq!(state(&proxy, "healthy").await, 0.0);
    assert!(
        proxy
            .log()
            .contains("all peers of the target are quarantined")
    );
    let err = proxy
        .tenant
        .kubectl_ok(&["get", "widgets", "-n", "default"])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is unavailable"), "{err}");
    let listed = proxy
        .tenant
        .kubectl_ok(&["api-resources", "--api-group", GROUP, "-o", "name"])
        .await
        .unwrap();
    assert!(listed.contains("widgets.example.test"), "{listed}");

    target.restart_server(0).await.unwrap();
    target.restart_server(1).await.unwrap();
}
