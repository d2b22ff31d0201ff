//! Topologies and operations: mutual proxying, deletion protection of the wiring, metrics, the
//! target going away, and `check-config`.

use std::time::Duration;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_proxy_to_each_other_at_once() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let (a, b) = (cp.cluster("tenant-a"), cp.cluster("tenant-b"));
    test_cluster::manifests::apply_crds_yaml(
        &b.client().await.unwrap(),
        &crd("ab.test", "gizmos", "Gizmo"),
    )
    .await
    .unwrap();
    test_cluster::manifests::apply_crds_yaml(
        &a.client().await.unwrap(),
        &crd("ba.test", "gadgets", "Gadget"),
    )
    .await
    .unwrap();
    let a_to_b = start_proxy(ProxySpec {
        cp,
        group: "ab.test",
        tenant: "tenant-a",
        client_name: "a-to-b",
        project: "mutual",
        target: "tenant-b",
        access: "owned",
        resources: vec!["gizmos"],
    });
    let b_to_a = start_proxy(ProxySpec {
        cp,
        group: "ba.test",
        tenant: "tenant-b",
        client_name: "b-to-a",
        project: "mutual",
        target: "tenant-a",
        access: "owned",
        resources: vec!["gadgets"],
    });
    let (_p1, _p2) = tokio::join!(a_to_b, b_to_a);

    let ns_a = namespace(a, "mutual").await;
    let ns_b = namespace(b, "mutual").await;
    kubectl_in(
        a,
        &["apply", "-n", &ns_a, "-f", "-"],
        "apiVersion: ab.test/v1\nkind: Gizmo\nmetadata: {name: from-a}\n",
    )
    .await;
    kubectl_in(
        b,
        &["apply", "-n", &ns_b, "-f", "-"],
        "apiVersion: ba.test/v1\nkind: Gadget\nmetadata: {name: from-b}\n",
    )
    .await;
    // Each lives in the other cluster.
    assert_eq!(
        kubectl(b, &["get", "gizmos.ab.test", "-n", &ns_a, "-o", "name"])
            .await
            .trim(),
        "gizmo.ab.test/from-a"
    );
    assert_eq!(
        kubectl(a, &["get", "gadgets.ba.test", "-n", &ns_b, "-o", "name"])
            .await
            .trim(),
        "gadget.ba.test/from-b"
    );
    // And each client sees its own through its proxy.
    assert_eq!(
        kubectl(a, &["get", "gizmos.ab.test", "-n", &ns_a, "-o", "name"])
            .await
            .trim(),
        "gizmo.ab.test/from-a"
    );
    assert_eq!(
        kubectl(b, &["get", "gadgets.ba.test", "-n", &ns_b, "-o", "name"])
            .await
            .trim(),
        "gadget.ba.test/from-b"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_wiring_is_denied_with_the_documented_message() {
    let cp = cp();
    let proxy = proxies::a().await;
    let apiservice = resource_proxy::config::names::api_service_name(GROUP, VERSION);
    let service = resource_proxy::config::names::service_name(GROUP, VERSION);
    let err = kubectl_err(proxy.tenant, &["delete", "apiservice", &apiservice]).await;
    assert!(
        err.contains(resource_proxy::config::names::PROTECTION_MESSAGE),
        "{err}"
    );
    let err = kubectl_err(
        proxy.tenant,
        &["delete", "service", "-n", "kube-system", &service],
    )
    .await;
    assert!(
        err.contains(resource_proxy::config::names::PROTECTION_MESSAGE),
        "{err}"
    );
    // Still served.
    kubectl(proxy.tenant, &["get", "apiservice", &apiservice]).await;
    let _ = cp;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_group_version_verb_code_and_reason() {
    let proxy = proxies::a().await;
    let ns = namespace(proxy.tenant, "metrics").await;
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

    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", proxy.metrics_port))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let created = out.lines().any(|l| {
        l.starts_with("vcluster_proxy_request_total{")
            && l.contains(r#"target="team-a/target""#)
            && l.contains(r#"group_version="example.test/v1""#)
            && l.contains(r#"verb="create""#)
            && l.contains(r#"code="201""#)
            && l.contains(r#"reason="upstream""#)
    });
    assert!(created, "{out}");
    let masked = out.lines().any(|l| {
        l.starts_with("vcluster_proxy_request_total{")
            && l.contains(r#"verb="get""#)
            && l.contains(r#"code="404""#)
    });
    assert!(masked, "{out}");
    assert!(out.contains("vcluster_proxy_inflight_requests"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_target_down_discovery_still_lists_the_group_and_the_apiservice_stays_available() {
    test_cluster::install_crypto_provider();
    let cp: &'static test_cluster::ControlPlane = Box::leak(Box::new(
        test_cluster::ControlPlane::builder()
            .cluster(test_cluster::ClusterSpec::new("target"))
            .cluster(test_cluster::ClusterSpec::new("tenant-a"))
            .start()
            .await
            .unwrap(),
    ));
    let _logs = cp.logs_on_failure();
    let target = cp.cluster("target");
    test_cluster::manifests::apply_crds_yaml(&target.client().await.unwrap(), WIDGET_CRD)
        .await
        .unwrap();
    let proxy = start_proxy(ProxySpec {
        cp,
        group: GROUP,
        tenant: "tenant-a",
        client_name: "outage",
        project: "ops",
        target: "target",
        access: "owned",
        resources: vec!["widgets"],
    })
    .await;
    let tenant = proxy.tenant;

    target.stop_server(0);
    // Requests fail with the documented 503, naming the target.
    let err = kubectl_err(tenant, &["get", "widgets", "-n", "default"]).await;
    assert!(err.contains("is unavailable"), "{err}");
    // Discovery is served from the last good answer, across availability checks.
    for _ in 0..4 {
        let listed = kubectl(
            tenant,
            &["api-resources", "--api-group", GROUP, "-o", "name"],
        )
        .await;
        assert!(listed.contains("widgets.example.test"), "{listed}");
        let available = kubectl(
            tenant,
            &[
                "get",
                "apiservice",
                &format!("{VERSION}.{GROUP}"),
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Available")].status}"#,
            ],
        )
        .await;
        assert_eq!(available, "True");
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    target.restart_server(0).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tenant
        .kubectl_ok(&["get", "widgets", "-n", "default"])
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "requests did not recover after the target came back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn check_config_prints_the_listeners_or_names_every_error() {
    let bin = env!("CARGO_BIN_EXE_resource-proxy");
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/resource-proxy/example-config.yaml"
    );
    let out = std::process::Command::new(bin)
        .args(["check-config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gadgets.example.com/v1") || text.contains("example.com/v1"),
        "{text}"
    );
    assert!(text.contains("9100") || text.contains("9101"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "client: {name: x, project: p, kubeconfig: /k}\ncustomResources:\n  'not a key':\n    enabled: true\n    targetVirtualCluster: {name: t}\n  widgets.example.com/v1:\n    enabled: true\n    accessResources: sometimes\n").unwrap();
    let out = std::process::Command::new(bin)
        .args(["check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a key"), "{err}");
    assert!(err.contains("accessResources"), "{err}");
    assert!(err.contains("targetVirtualCluster"), "{err}");
}
