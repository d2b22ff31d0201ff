//! kube-support against real parts: leader election on a real kube-apiserver's Lease API, and the
//! admin server over TCP.

use std::sync::Arc;
use std::time::Duration;

use kube_support::admin::{Readiness, router, serve};
use kube_support::leader::{LeaseConfig, elect};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use test_cluster::{ClusterSpec, ControlPlane};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(|| ControlPlane::builder().cluster(ClusterSpec::new("leases")))
}

async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn lease(name: &str, identity: &str) -> LeaseConfig {
    let mut c = LeaseConfig::new("default", name, identity);
    c.duration_seconds = 4;
    c.grace_seconds = 1;
    c
}

#[tokio::test]
async fn exactly_one_replica_leads_and_a_released_lease_passes_on_at_once() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let client = cp.cluster("leases").client().await.unwrap();
    let a = elect(client.clone(), &lease("released", "replica-a"))
        .await
        .unwrap();
    let b = elect(client.clone(), &lease("released", "replica-b"))
        .await
        .unwrap();
    wait_for("a leader", Duration::from_secs(10), || {
        a.is_leader() || b.is_leader()
    })
    .await;
    assert!(a.is_leader() ^ b.is_leader(), "exactly one leader");
    let (leader, follower) = if a.is_leader() { (a, b) } else { (b, a) };

    // The follower stays a follower while the leader renews (well past the lease duration).
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(leader.is_leader() && !follower.is_leader());

    let released_at = tokio::time::Instant::now();
    leader.release().await;
    wait_for("the follower to take over", Duration::from_secs(10), || {
        follower.is_leader()
    })
    .await;
    // A released lease is free at once; no need to wait for expiry.
    assert!(
        released_at.elapsed() < Duration::from_secs(4),
        "took {:?}",
        released_at.elapsed()
    );
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_within_the_lease_duration() {
    let cp = cp();
    let client = cp.cluster("leases").client().await.unwrap();
    let a = elect(client.clone(), &lease("crashed", "replica-a"))
        .await
        .unwrap();
    wait_for("a to lead", Duration::from_secs(10), || a.is_leader()).await;
    let b = elect(client.clone(), &lease("crashed", "replica-b"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.is_leader());

    let crashed_at = tokio::time::Instant::now();
    a.abandon();
    wait_for("b to take over", Duration::from_secs(15), || b.is_leader()).await;
    let took = crashed_at.elapsed();
    // The lease must expire first (4 s), plus the follower's polling.
    assert!(
        took >= Duration::from_secs(2),
        "took over too early: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let status = buf[9..12].parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn admin_server_serves_metrics_health_and_readiness_with_its_reason() {
    let mut registry = Registry::default();
    let counter = Counter::<u64>::default();
    registry.register("demo_things", "Things counted", counter.clone());
    counter.inc_by(3);
    let readiness = Readiness::new("waiting for the first sync");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = serve(
        "127.0.0.1:0".parse().unwrap(),
        router(Arc::new(registry), readiness.clone()),
        async {
            let _ = rx.await;
        },
    )
    .await
    .unwrap();

    assert_eq!(get(addr, "/healthz").await, (200, "ok".into()));
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("waiting for the first sync"), "{body}");
    readiness.set_ready();
    assert_eq!(get(addr, "/readyz").await, (200, "ok".into()));
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("demo_things_total 3"), "{body}");
    assert_eq!(get(addr, "/nope").await.0, 404);

    // Shutdown ends the server task (and with it the listener). Probing the port afterwards
    // would race with other tests that may be handed the freed port.
    tx.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("the server stops on shutdown")
        .unwrap()
        .unwrap();

    // A taken port is a clear error.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = serve(taken.local_addr().unwrap(), axum::Router::new(), async {})
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&taken.local_addr().unwrap().to_string()),
        "{err}"
    );
}
