//! A controller-runtime informer (Go, `tests/informer-go`, built and cached by
//! `scripts/build-informer.sh`) on the proxied Widgets, through the client cluster, across a
//! restart of the target: its handler sees every change exactly once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::*;

fn informer_binary() -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/build-informer.sh"
    );
    let out = std::process::Command::new("bash")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "build-informer.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// How often the handler saw each (event, name).
fn counts(events: &[Value]) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for e in events {
        let key = (
            e["event"].as_str().unwrap_or_default().to_owned(),
            e["name"].as_str().unwrap_or_default().to_owned(),
        );
        *m.entry(key).or_default() += 1;
    }
    m
}

async fn apply_retrying(tenant: &test_cluster::Cluster, ns: &str, yaml: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = tenant
        .kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml)
        .await
    {
        assert!(tokio::time::Instant::now() < deadline, "{e}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_runtime_informer_sees_each_change_once_across_a_target_restart() {
    let binary = informer_binary();
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
        client_name: "informer",
        project: "ops",
        target: "target",
        access: "owned",
        resources: vec!["widgets"],
    })
    .await;
    let tenant = proxy.tenant;
    let ns = namespace(tenant, "informer").await;
    apply_retrying(tenant, &ns, &widget("w1", "")).await;
    apply_retrying(tenant, &ns, &widget("w2", "")).await;

    let kubeconfig = tenant
        .kubeconfig_for("informer", &["system:masters"])
        .unwrap();
    let mut child = tokio::process::Command::new(&binary)
        .arg(&kubeconfig)
        .arg(&ns)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let events: Arc<Mutex<Vec<Value>>> = Arc::default();
    let synced = Arc::new(tokio::sync::Notify::new());
    {
        let events = events.clone();
        let synced = synced.clone();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v["event"] == "synced" {
                    synced.notify_one();
                } else {
                    events.lock().unwrap().push(v);
                }
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(60), synced.notified())
        .await
        .expect("the informer synced");
    let seen = || counts(&events.lock().unwrap());
    let key = |e: &str, n: &str| (e.to_owned(), n.to_owned());

    let watches = || async {
        let text = crate::outage::metrics(proxy.metrics_port).await;
        crate::outage::sample(&text, "vcluster_proxy_request_total", &["verb=\"watch\""])
    };
    let watches_before = watches().await;
    assert!(watches_before >= 1.0);

    target.stop_server(0);
    // Long enough for the informer's watch to break and its re-watches and relists to fail.
    tokio::time::sleep(Duration::from_secs(15)).await;
    target.restart_server(0).await.unwrap();
    apply_retrying(tenant, &ns, &widget("w3", "")).await;
    apply_retrying(tenant, &ns, &widget("w1", "changed: \"yes\"")).await;
    kubectl(tenant, &["delete", "widget", "w2", "-n", &ns]).await;

    let want: BTreeMap<_, _> = [
        (key("add", "w1"), 1),
        (key("add", "w2"), 1),
        (key("add", "w3"), 1),
        (key("update", "w1"), 1),
        (key("delete", "w2"), 1),
    ]
    .into();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while seen() != want {
        assert!(
            tokio::time::Instant::now() < deadline
                && seen()
                    .iter()
                    .all(|(k, n)| want.get(k).is_some_and(|w| n <= w)),
            "the informer's handler saw {:?}, want {want:?}",
            events.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Nothing more arrives late (a relist would have to repeat something).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(seen(), want, "{:?}", events.lock().unwrap());
    // The update the handler saw is the object's current version.
    let rv = kubectl(
        target,
        &[
            "get",
            "widget",
            "w1",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    )
    .await;
    let update = events
        .lock()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "update")
        .cloned()
        .unwrap();
    assert_eq!(update["rv"], rv.as_str());
    // The informer's watch went through the restart: it was opened again.
    assert!(watches().await > watches_before);
    child.kill().await.unwrap();
}
