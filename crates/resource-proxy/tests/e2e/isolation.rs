//! Tenants are adversaries: two clients proxying the same group/version to one target in
//! `owned` mode never see, read, watch, change or delete each other's objects, through any verb
//! or patch type; a third client in `all` mode sees everything.

use std::time::Duration;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_mode_hides_and_protects_another_clients_objects_through_every_verb() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let (a, b, c) = (proxies::a().await, proxies::b().await, proxies::c().await);
    // Same namespace name in both tenant clusters.
    let ns = test_cluster::unique_name("shared");
    kubectl(a.tenant, &["create", "namespace", &ns]).await;
    kubectl(b.tenant, &["create", "namespace", &ns]).await;

    kubectl_in(
        a.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("secret", "owner: a"),
    )
    .await;
    kubectl_in(
        b.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("mine", "owner: b"),
    )
    .await;

    // B sees only its own objects: list, get, and a watch that receives nothing of A's.
    let listed = kubectl(b.tenant, &["get", "widgets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(listed.trim(), "widget.example.test/mine");
    let all_ns = kubectl(b.tenant, &["get", "widgets", "-A", "-o", "name"]).await;
    assert!(!all_ns.contains("secret"), "{all_ns}");
    let err = kubectl_err(b.tenant, &["get", "widget", "secret", "-n", &ns]).await;
    assert!(
        err.contains(r#"widgets.example.test "secret" not found"#),
        "{err}"
    );
    // A selector cannot widen visibility.
    let sel = kubectl(
        b.tenant,
        &[
            "get",
            "widgets",
            "-n",
            &ns,
            "-l",
            "vcluster.com/owner-vcluster=alpha",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(sel.trim(), "");
    let sel = kubectl(
        b.tenant,
        &[
            "get",
            "widgets",
            "-n",
            &ns,
            "-l",
            "vcluster.com/owner-vcluster!=beta",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(sel.trim(), "");
    let mut watch = b.tenant.kubectl();
    watch
        .args(["get", "widgets", "-n", &ns, "-w", "-o", "name"])
        .stdout(std::process::Stdio::piped());
    let watch = watch.spawn().unwrap();

    // Every write verb on A's object is a NotFound for B, indistinguishable from a missing one.
    for args in [
        vec![
            "patch",
            "widget",
            "secret",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":99}}"#,
        ],
        vec![
            "patch",
            "widget",
            "secret",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/size","value":99}]"#,
        ],
        vec!["label", "widget", "secret", "stolen=yes"],
        vec!["delete", "widget", "secret"],
    ] {
        let mut full = args.clone();
        full.extend(["-n", &ns]);
        let err = kubectl_err(b.tenant, &full).await;
        assert!(
            err.contains(r#"widgets.example.test "secret" not found"#),
            "{args:?}: {err}"
        );
    }
    let missing = kubectl_err(b.tenant, &["delete", "widget", "never-existed", "-n", &ns]).await;
    assert_eq!(
        missing.split("Error from server").nth(1),
        kubectl_err(b.tenant, &["delete", "widget", "secret", "-n", &ns])
            .await
            .replace("secret", "never-existed")
            .split("Error from server")
            .nth(1),
        "a hidden object answers exactly like a missing one"
    );
    // Server-side apply and replace cannot take it over either.
    let takeover =
        "apiVersion: example.test/v1\nkind: Widget\nmetadata:\n  name: secret\nspec:\n  size: 42\n";
    let err = b
        .tenant
        .kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-n",
                &ns,
                "-f",
                "-",
            ],
            takeover,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not found"), "{err}");
    // Creating the same name is refused by the target: it stays A's.
    let err = b
        .tenant
        .kubectl_stdin(&["create", "-n", &ns, "-f", "-"], &widget("secret", ""))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    // delete --all deletes only B's objects.
    kubectl(b.tenant, &["delete", "widgets", "--all", "-n", &ns]).await;

    // A's object is untouched.
    let labels = target_labels(&ns, "secret").await;
    assert_eq!(labels["vcluster.com/owner-vcluster"], "alpha");
    assert_eq!(labels["owner"], "a");
    assert!(!labels.as_object().unwrap().contains_key("stolen"));
    let size = kubectl(
        cp.cluster("target"),
        &[
            "get",
            "widget",
            "secret",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.size}",
        ],
    )
    .await;
    assert_eq!(size, "1");
    assert_eq!(
        kubectl(
            cp.cluster("target"),
            &[
                "get",
                "widget",
                "mine",
                "-n",
                &ns,
                "--ignore-not-found",
                "-o",
                "name"
            ]
        )
        .await
        .trim(),
        ""
    );

    // B's watch saw its own object and nothing of A's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut watch = watch;
    let _ = watch.start_kill();
    let out = watch.wait_with_output().await.unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("widget.example.test/mine"), "{seen}");
    assert!(!seen.contains("secret"), "{seen}");

    // C, in `all` mode, sees A's object (and labels what it writes as its own).
    let seen_by_c = kubectl(c.tenant, &["get", "widgets", "-A", "-o", "name"]).await;
    assert!(
        seen_by_c.contains("widget.example.test/secret"),
        "{seen_by_c}"
    );
}

/// A named GET checks ownership on the target's answer itself (one request). In every
/// representation a client can ask for, another tenant's object answers exactly like a missing
/// one, and the client's own object comes back in the representation asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_object_reads_like_a_missing_one_in_every_representation() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let (a, b) = (proxies::a().await, proxies::b().await);
    let ns = test_cluster::unique_name("repr");
    kubectl(a.tenant, &["create", "namespace", &ns]).await;
    kubectl(b.tenant, &["create", "namespace", &ns]).await;
    kubectl_in(
        a.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("hidden", ""),
    )
    .await;
    kubectl_in(
        b.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("own", ""),
    )
    .await;

    let aggregator = b.tenant.pki().front_proxy_client().unwrap();
    let get = |name: String, accept: &'static str, query: &'static str| {
        let aggregator = aggregator.clone();
        let path = format!("/apis/{GROUP}/{VERSION}/namespaces/{ns}/widgets/{name}{query}");
        async move {
            direct_request(
                b,
                "GET",
                &path,
                Some(&aggregator),
                &[
                    ("X-Remote-User", "admin"),
                    ("X-Remote-Group", "system:masters"),
                    ("Accept", accept),
                ],
                vec![],
            )
            .await
        }
    };
    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    const META: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
    let representations: [(&str, &str, &str); 6] = [
        ("application/json", "", "Widget"),
        ("*/*", "", "Widget"),
        (TABLE, "", "Table"),
        (TABLE, "?includeObject=None", "Table"),
        (META, "", "PartialObjectMetadata"),
        ("application/yaml", "", "kind: Widget"),
    ];
    for (accept, query, kind) in representations {
        let hidden = get("hidden".into(), accept, query).await;
        let missing = get("no-such-widget".into(), accept, query).await;
        assert_eq!(hidden.0, 404, "{accept}{query}: {}", hidden.1);
        assert_eq!(
            (hidden.0, hidden.1.replace("hidden", "no-such-widget")),
            missing,
            "{accept}{query}: a hidden object answers exactly like a missing one"
        );
        let (code, body) = get("own".into(), accept, query).await;
        assert_eq!(code, 200, "{accept}{query}: {body}");
        if accept.contains("yaml") {
            assert!(body.contains(kind), "{body}");
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["kind"], kind, "{accept}{query}: {body}");
        if kind == "Table" {
            let row = &v["rows"][0];
            assert_eq!(row["cells"][0], "own", "{body}");
            assert_eq!(
                row.get("object").is_some(),
                query.is_empty(),
                "row objects only when asked for: {body}"
            );
        } else {
            assert_eq!(v["metadata"]["name"], "own", "{body}");
        }
    }
}
