//! Namespaces deleted while the target is down: the client's namespace controller finishes in
//! its normal time, and once the target is back the proxy's sweep deletes what those namespaces
//! left there, while a namespace recreated meanwhile keeps its objects.

use std::time::Duration;

use crate::*;

/// The names of the widgets in `ns` of `cluster` (sorted).
async fn widgets(cluster: &test_cluster::Cluster, ns: &str) -> Vec<String> {
    let out = kubectl(
        cluster,
        &[
            "get",
            "widgets",
            "-n",
            ns,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    )
    .await;
    let mut names: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
    names.sort();
    names
}

async fn uid(cluster: &test_cluster::Cluster, ns: &str) -> String {
    kubectl(
        cluster,
        &["get", "namespace", ns, "-o", "jsonpath={.metadata.uid}"],
    )
    .await
}

/// The `/metrics` text of a proxy.
pub async fn metrics(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The sum of the samples of `name` whose label sets contain every one of `labels`.
pub fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_deleted_during_an_outage_go_at_once_and_leave_nothing_in_the_target() {
    test_cluster::install_crypto_provider();
    // A control plane of its own: its target is stopped. Namespace controllers in both.
    let cp: &'static test_cluster::ControlPlane = Box::leak(Box::new(
        test_cluster::ControlPlane::builder()
            .cluster(test_cluster::ClusterSpec::new("target").controller_manager())
            .cluster(test_cluster::ClusterSpec::new("tenant-a").controller_manager())
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
        client_name: "orphans",
        project: "ops",
        target: "target",
        access: "owned",
        resources: vec!["widgets"],
    })
    .await;
    let tenant = proxy.tenant;

    // gone: deleted during the outage. again: deleted and recreated during the outage. shared:
    // deleted, but the target holds another user's widget there. kept: left alone.
    let [gone, again, shared, kept] =
        ["gone", "again", "shared", "kept"].map(test_cluster::unique_name);
    for (ns, names) in [
        (&gone, &["g1", "g2"][..]),
        (&again, &["old"]),
        (&shared, &["ours"]),
        (&kept, &["stay"]),
    ] {
        kubectl(tenant, &["create", "namespace", ns]).await;
        for name in names {
            // A just-established CRD may answer 429 for a moment: retry the first write.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while let Err(e) = tenant
                .kubectl_stdin(&["apply", "-n", ns, "-f", "-"], &widget(name, ""))
                .await
            {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    kubectl_in(
        target,
        &["apply", "-n", &shared, "-f", "-"],
        &widget("theirs", ""),
    )
    .await;
    assert_eq!(widgets(target, &gone).await, ["g1", "g2"]);
    let old_uid = uid(tenant, &again).await;

    // The normal time: a namespace with a widget deleted while the target is up (the namespace
    // controller deletes the widget through the proxy; the sweep then deletes the mirrored
    // namespace, which held nothing else).
    let before = test_cluster::unique_name("before");
    kubectl(tenant, &["create", "namespace", &before]).await;
    kubectl_in(
        tenant,
        &["apply", "-n", &before, "-f", "-"],
        &widget("b1", ""),
    )
    .await;
    let started = tokio::time::Instant::now();
    kubectl(tenant, &["delete", "namespace", &before, "--timeout=90s"]).await;
    println!(
        "namespace deletion with the target up took {:?}",
        started.elapsed()
    );

    // A watch (cut by kubectl after 2 s) for the watch series of the monitoring check below.
    let _ = tenant
        .kubectl_ok(&[
            "get",
            "widgets",
            "-n",
            &kept,
            "--watch",
            "--request-timeout=2s",
        ])
        .await;

    target.stop_server(0);
    let err = kubectl_err(tenant, &["get", "widgets", "-n", &kept]).await;
    assert!(err.contains("is unavailable"), "{err}");
    // Discovery of the group/version is answered by the proxy itself.
    kubectl(
        tenant,
        &["get", "--raw", &format!("/apis/{GROUP}/{VERSION}")],
    )
    .await;

    // The namespace controller finishes while the target is down.
    let started = tokio::time::Instant::now();
    kubectl(
        tenant,
        &[
            "delete",
            "namespace",
            &gone,
            &again,
            &shared,
            "--timeout=90s",
        ],
    )
    .await;
    let took = started.elapsed();
    println!("namespace deletion with the target down took {took:?}");
    assert!(took < Duration::from_secs(45), "took {took:?}");
    for ns in [&gone, &again, &shared] {
        let left = tenant
            .kubectl_ok(&["get", "namespace", ns])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            left.contains("NotFound") || left.contains("not found"),
            "{left}"
        );
    }
    // Other requests still fail as during any outage.
    let err = kubectl_err(tenant, &["get", "widgets", "-n", &kept]).await;
    assert!(err.contains("is unavailable"), "{err}");
    kubectl(tenant, &["create", "namespace", &again]).await;
    assert_ne!(uid(tenant, &again).await, old_uid);

    target.restart_server(0).await.unwrap();
    // The recreated namespace gets a widget as soon as the proxy can write again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = tenant
        .kubectl_stdin(&["apply", "-n", &again, "-f", "-"], &widget("fresh", ""))
        .await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no write after recovery: {e}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The sweep deletes the orphans and the mirrored namespace nothing else lives in.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let gone_ns = target.kubectl_ok(&["get", "namespace", &gone]).await;
        let before_ns = target.kubectl_ok(&["get", "namespace", &before]).await;
        let done = gone_ns.is_err()
            && before_ns.is_err()
            && widgets(target, &again).await == ["fresh"]
            && widgets(target, &shared).await == ["theirs"];
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the target still holds orphans: {gone_ns:?}, again: {:?}, shared: {:?}\n{}",
            widgets(target, &again).await,
            widgets(target, &shared).await,
            proxy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // More sweeps change nothing: the new namespace's widget, the untouched namespace and the
    // other user's widget (and so its namespace) stay.
    tokio::time::sleep(
        resource_proxy::reconcile::namespaces::SWEEP_INTERVAL * 2 + Duration::from_secs(1),
    )
    .await;
    assert_eq!(widgets(target, &again).await, ["fresh"]);
    assert_eq!(widgets(tenant, &again).await, ["fresh"]);
    assert_eq!(widgets(target, &kept).await, ["stay"]);
    assert_eq!(widgets(target, &shared).await, ["theirs"]);
    let text = metrics(proxy.metrics_port).await;
    crate::monitoring::assert_monitoring_queries_exported(&text);
    let gv = format!("group_version=\"{GROUP}/{VERSION}\"");
    assert_eq!(
        sample(
            &text,
            "vcluster_proxy_namespace_cleanup_objects_total",
            &[&gv]
        ),
        4.0,
        "g1, g2, old, ours\n{text}"
    );
    assert!(
        sample(
            &text,
            "vcluster_proxy_namespace_cleanups_total",
            &["reason=\"namespace_deleted\""]
        ) >= 3.0,
        "{text}"
    );
    assert!(
        sample(
            &text,
            "vcluster_proxy_namespace_cleanups_total",
            &["reason=\"namespace_recreated\""]
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "vcluster_proxy_mirrored_namespaces_deleted_total",
            &[]
        ),
        2.0,
        "gone and before\n{text}"
    );
    let log = std::fs::read_to_string(proxy.dir.path().join("proxy.log")).unwrap();
    for ns in [&gone, &again, &shared] {
        assert!(
            log.lines()
                .any(|l| l.contains("deleted the client's objects") && l.contains(ns.as_str())),
            "no cleanup log line for {ns}"
        );
    }
}
