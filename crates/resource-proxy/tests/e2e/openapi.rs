//! The OpenAPI v2 document: the listener serves the target's, cut down to its group/version, so
//! the client's aggregator merges it (instead of logging a failed download every minute) and
//! `kubectl explain --output=plaintext-openapiv2` works in the client.

use std::time::Duration;

use serde_json::Value;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_v2_holds_only_the_group_version_and_kubectl_explain_reads_it() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;

    let aggregator = tenant.pki().front_proxy_client().unwrap();
    let (code, body) = direct_request(
        proxy,
        "GET",
        "/openapi/v2",
        Some(&aggregator),
        &[
            ("X-Remote-User", "system:kube-aggregator"),
            ("Accept", "application/json"),
        ],
        vec![],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(
        paths.contains_key(&format!(
            "/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/widgets"
        )),
        "{:?}",
        paths.keys().collect::<Vec<_>>()
    );
    for path in paths.keys() {
        assert!(
            path.starts_with(&format!("/apis/{GROUP}/{VERSION}/")),
            "outside the group/version: {path}"
        );
    }
    let definitions = doc["definitions"].as_object().unwrap();
    assert!(
        definitions.contains_key("test.example.v1.Widget"),
        "{:?}",
        definitions.keys().collect::<Vec<_>>()
    );
    assert!(
        !definitions
            .keys()
            .any(|d| d.starts_with("io.k8s.api.core.")),
        "only what the group/version refers to"
    );

    // The client's aggregator downloads it when the APIService turns Available (and every
    // minute); retry until it has.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match tenant
            .kubectl_ok(&["explain", "widgets", "--output=plaintext-openapiv2"])
            .await
        {
            Ok(out) if out.contains("Widget") => {
                assert!(out.contains(GROUP), "{out}");
                break;
            }
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "kubectl explain --output=plaintext-openapiv2: {other:?}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    // And the aggregator has had no reason to complain (klog quotes the key as \"v1.<group>\").
    let log = std::fs::read_to_string(tenant.dir().join("kube-apiserver-0.log")).unwrap();
    let key = format!("{VERSION}.{GROUP}");
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("loading OpenAPI spec for") && l.contains(&key))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
