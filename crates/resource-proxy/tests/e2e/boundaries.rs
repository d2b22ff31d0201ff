//! The proxy's boundaries under attack and bad input: only the aggregator may call it, bad
//! requests get the Status the API server would give and write nothing, the target's RBAC is the
//! proxy identity's, and namespaces follow the client cluster.

use serde_json::Value;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_aggregator_with_the_front_proxy_certificate_may_call_the_proxy() {
    let cp = cp();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;
    let discovery = format!("/apis/{GROUP}/{VERSION}");
    let spoofed = [
        ("X-Remote-User", "system:admin"),
        ("X-Remote-Group", "system:masters"),
    ];

    let (code, body) = direct_request(proxy, "GET", &discovery, None, &[], vec![]).await;
    assert_eq!(code, 401, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");

    let (code, _) = direct_request(proxy, "GET", &discovery, None, &spoofed, vec![]).await;
    assert_eq!(code, 401, "spoofed identity headers without a certificate");

    // A genuine certificate of the tenant cluster, but not from the request-header CA.
    let admin = tenant.pki().admin().unwrap();
    let (code, _) = direct_request(proxy, "GET", &discovery, Some(&admin), &spoofed, vec![]).await;
    assert_eq!(
        code, 401,
        "a cluster-CA client certificate is not the aggregator"
    );

    // Signed by the request-header CA, but a CN that is not an allowed name.
    let intruder = tenant
        .pki()
        .front_proxy_ca
        .client_cert("intruder", &[])
        .unwrap();
    let (code, _) =
        direct_request(proxy, "GET", &discovery, Some(&intruder), &spoofed, vec![]).await;
    assert_eq!(
        code, 401,
        "a request-header CA certificate with a CN that is not allowed"
    );

    // Another tenant's front-proxy certificate is worthless here.
    let other = cp.cluster("tenant-b").pki().front_proxy_client().unwrap();
    let (code, _) = direct_request(proxy, "GET", &discovery, Some(&other), &spoofed, vec![]).await;
    assert_eq!(code, 401, "another cluster's aggregator certificate");

    // The real aggregator certificate works (so the refusals above are about identity).
    let aggregator = tenant.pki().front_proxy_client().unwrap();
    let (code, body) = direct_request(
        proxy,
        "GET",
        &discovery,
        Some(&aggregator),
        &spoofed,
        vec![],
    )
    .await;
    assert_eq!(code, 200, "{body}");

    // Even the aggregator cannot reach other groups, escape the group/version, or upgrade.
    for path in [
        "/apis/other.test/v1/namespaces/default/things",
        "/api/v1/namespaces/kube-system/secrets",
        "/apis/example.test/v1/../../../api/v1/secrets",
        "/apis/example.test/v1/%2e%2e/%2e%2e/%2e%2e/api/v1/secrets",
        "/apis/example.test/v1%2f..%2f..%2fapi%2fv1%2fsecrets",
    ] {
        let (code, body) =
            direct_request(proxy, "GET", path, Some(&aggregator), &spoofed, vec![]).await;
        assert_eq!(code, 404, "{path}: {body}");
    }
    let (code, _) = direct_request(
        proxy,
        "GET",
        "/apis/example.test/v1/namespaces/default/widgets/x/exec",
        Some(&aggregator),
        &[
            ("X-Remote-User", "someone"),
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
        ],
        vec![],
    )
    .await;
    assert_eq!(code, 501);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_api_servers_status_and_writes_nothing() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;
    let ns = namespace(tenant, "badinput").await;
    let client = tenant.client().await.unwrap();
    let collection = format!("/apis/{GROUP}/{VERSION}/namespaces/{ns}/widgets");
    let send = |ct: &'static str, body: Vec<u8>| {
        let client = client.clone();
        let collection = collection.clone();
        async move {
            let req = http::Request::post(collection)
                .header("content-type", ct)
                .body(body)
                .unwrap();
            match client.request_text(req).await {
                Ok(t) => (200, t),
                Err(kube::Error::Api(s)) => (s.code, s.message),
                Err(e) => panic!("{e}"),
            }
        }
    };
    let (code, msg) = send("application/json", b"{not json".to_vec()).await;
    assert_eq!(code, 400, "{msg}");
    let (code, msg) = send("application/yaml", b"metadata: [unclosed".to_vec()).await;
    assert_eq!(code, 400, "{msg}");
    let (code, msg) = send("text/plain", b"hello".to_vec()).await;
    assert_eq!(code, 415, "{msg}");
    let big = format!(
        r#"{{"apiVersion":"example.test/v1","kind":"Widget","metadata":{{"name":"big"}},"spec":{{"blob":"{}"}}}}"#,
        "x".repeat(3 * 1024 * 1024 + 10)
    );
    let (code, msg) = send("application/json", big.into_bytes()).await;
    assert_eq!(code, 413, "{msg}");

    let err = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            GROUP, VERSION, "Widget",
        )),
    )
    .list(&kube::api::ListParams::default().labels("a in (b"))
    .await
    .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err}"
    );

    // None of it reached the target.
    let target_ns = kubectl(
        cp.cluster("target"),
        &["get", "widgets", "-n", &ns, "-o", "name"],
    )
    .await;
    assert_eq!(target_ns.trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_follow_the_client_cluster_and_dry_run_creates_nothing() {
    let cp = cp();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;
    let target = cp.cluster("target");

    let err = tenant
        .kubectl_stdin(
            &["create", "-n", "does-not-exist-anywhere", "-f", "-"],
            &widget("w", ""),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"namespaces "does-not-exist-anywhere" not found"#),
        "{err}"
    );

    // Dry-run creates nothing: not the namespace (a namespace never mirrored stays absent in the
    // target, and the target's own answer is passed on) ...
    let fresh = namespace(tenant, "dryrun").await;
    let _ = tenant
        .kubectl_stdin(
            &["apply", "--dry-run=server", "-n", &fresh, "-f", "-"],
            &widget("w", ""),
        )
        .await;
    assert!(
        target
            .kubectl_ok(&["get", "namespace", &fresh])
            .await
            .is_err(),
        "dry run created the namespace in the target"
    );

    // ... and not the object, where the namespace is mirrored already.
    let ns = namespace(tenant, "mirrored").await;
    kubectl_in(
        tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("real", ""),
    )
    .await;
    kubectl(target, &["get", "namespace", &ns]).await;
    let out = kubectl_in(
        tenant,
        &["apply", "--dry-run=server", "-n", &ns, "-f", "-"],
        &widget("dry", ""),
    )
    .await;
    assert!(out.contains("server dry run"), "{out}");
    let listed = kubectl(target, &["get", "widgets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(listed.trim(), "widget.example.test/real");

    // A terminating namespace takes no new objects (no namespace controller runs in the
    // tenant, so it stays Terminating).
    let doomed = namespace(tenant, "doomed").await;
    kubectl_in(
        tenant,
        &["apply", "-n", &doomed, "-f", "-"],
        &widget("before", ""),
    )
    .await;
    kubectl(tenant, &["delete", "namespace", &doomed, "--wait=false"]).await;
    let err = tenant
        .kubectl_stdin(&["create", "-n", &doomed, "-f", "-"], &widget("after", ""))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("because it is being terminated"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_targets_rbac_for_the_proxy_identity_decides() {
    let cp = cp();
    let proxy = proxies::c().await;
    let tenant = proxy.tenant;
    let target = cp.cluster("target");
    let ns = namespace(tenant, "rbac").await;
    kubectl_in(tenant, &["apply", "-n", &ns, "-f", "-"], &widget("w", "")).await;

    let role = format!("proxy-gamma-{}", GROUP.replace('.', "-"));
    kubectl(target, &["patch", "clusterrole", &role, "--type", "json", "-p",
        r#"[{"op":"replace","path":"/rules/0/verbs","value":["get","list","watch","create","update","patch"]}]"#]).await;
    let err = kubectl_err(tenant, &["delete", "widget", "w", "-n", &ns]).await;
    kubectl(
        target,
        &[
            "patch",
            "clusterrole",
            &role,
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/rules/0/verbs","value":["*"]}]"#,
        ],
    )
    .await;
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    assert!(
        err.contains(&proxy.identity),
        "the target names the proxy identity: {err}"
    );
    kubectl(tenant, &["delete", "widget", "w", "-n", &ns]).await;
}
