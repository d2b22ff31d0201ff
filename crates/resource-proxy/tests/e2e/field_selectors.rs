//! Field selectors reach the target as the caller wrote them, ANDed with the owner selector in
//! `owned` mode: `metadata.name`, `metadata.namespace` and the CRD's `selectableFields`
//! (`spec.color`) select, through list, watch and delete-collection; an unsupported field is the
//! target API server's own 400.

use crate::*;

fn colored(name: &str, color: &str, labels: &str) -> String {
    format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Widget\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  color: {color}\n"
    )
}

/// `kubectl get widgets -o name` with extra arguments, sorted.
async fn names(cluster: &test_cluster::Cluster, args: &[&str]) -> Vec<String> {
    let mut all = vec!["get", "widgets", "-o", "name"];
    all.extend_from_slice(args);
    let out = kubectl(cluster, &all).await;
    let mut names: Vec<String> = out.lines().map(str::to_owned).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_select_within_the_callers_own_objects() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;
    let target = cp.cluster("target");
    let ns = namespace(tenant, "fields").await;
    for (name, color, labels) in [
        ("red", "red", "tier: a"),
        ("blue", "blue", "tier: a"),
        ("red-too", "red", "tier: b"),
    ] {
        kubectl_in(
            tenant,
            &["apply", "-n", &ns, "-f", "-"],
            &colored(name, color, labels),
        )
        .await;
    }
    // Someone else's red widget in the same namespace of the target.
    kubectl_in(
        target,
        &["apply", "-n", &ns, "-f", "-"],
        &colored("foreign-red", "red", ""),
    )
    .await;
    let w = |n: &str| format!("widget.example.test/{n}");

    // metadata.name, with and without a match.
    assert_eq!(
        names(
            tenant,
            &["-n", &ns, "--field-selector", "metadata.name=red"]
        )
        .await,
        [w("red")]
    );
    assert!(
        names(
            tenant,
            &["-n", &ns, "--field-selector", "metadata.name=foreign-red"]
        )
        .await
        .is_empty(),
        "another owner's object is not selected by name either"
    );
    // The CRD's selectable field, alone, negated, and with a label selector.
    assert_eq!(
        names(tenant, &["-n", &ns, "--field-selector", "spec.color=red"]).await,
        [w("red"), w("red-too")]
    );
    assert_eq!(
        names(tenant, &["-n", &ns, "--field-selector", "spec.color!=red"]).await,
        [w("blue")]
    );
    assert!(
        names(tenant, &["-n", &ns, "--field-selector", "spec.color=green"])
            .await
            .is_empty()
    );
    assert_eq!(
        names(
            tenant,
            &[
                "-n",
                &ns,
                "-l",
                "tier=b",
                "--field-selector",
                "spec.color=red"
            ]
        )
        .await,
        [w("red-too")]
    );
    assert!(
        names(
            tenant,
            &[
                "-n",
                &ns,
                "-l",
                "tier=a",
                "--field-selector",
                "spec.color=red,metadata.name=red-too"
            ]
        )
        .await
        .is_empty()
    );
    // metadata.namespace across all namespaces.
    assert_eq!(
        names(
            tenant,
            &[
                "-A",
                "--field-selector",
                &format!("metadata.namespace={ns}")
            ]
        )
        .await,
        [w("blue"), w("red"), w("red-too")]
    );

    // A watch sees only the selected objects.
    let events = kubectl(
        tenant,
        &[
            "get",
            "--raw",
            &format!(
                "/apis/{GROUP}/{VERSION}/namespaces/{ns}/widgets?watch=1&timeoutSeconds=2&fieldSelector=spec.color%3Dred"
            ),
        ],
    )
    .await;
    let mut watched: Vec<String> = events
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(e["type"], "ADDED", "{l}");
            e["object"]["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    watched.sort();
    assert_eq!(watched, ["red", "red-too"]);

    // An unsupported field: the target API server's 400, word for word.
    let err = kubectl_err(
        tenant,
        &[
            "get",
            "widgets",
            "-n",
            &ns,
            "--field-selector",
            "spec.size=1",
        ],
    )
    .await;
    assert!(err.contains("BadRequest"), "{err}");
    assert!(
        err.contains("field label not supported: spec.size"),
        "{err}"
    );
    let direct = kubectl_err(
        target,
        &[
            "get",
            "widgets",
            "-n",
            &ns,
            "--field-selector",
            "spec.size=1",
        ],
    )
    .await;
    assert!(
        direct.contains("field label not supported: spec.size"),
        "{direct}"
    );

    // Delete-collection by field: only the caller's red widgets go.
    let client = tenant.client().await.unwrap();
    let req = http::Request::delete(format!(
        "/apis/{GROUP}/{VERSION}/namespaces/{ns}/widgets?fieldSelector=spec.color%3Dred"
    ))
    .body(Vec::new())
    .unwrap();
    client.request_text(req).await.unwrap();
    let left = names(target, &["-n", &ns]).await;
    assert_eq!(left, [w("blue"), w("foreign-red")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_all_mode_field_selectors_select_among_every_object() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let owned = proxies::a().await;
    let all = proxies::c().await;
    let target = cp.cluster("target");
    let ns = namespace(owned.tenant, "fields-all").await;
    kubectl_in(
        owned.tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &colored("mine", "red", ""),
    )
    .await;
    kubectl_in(
        target,
        &["apply", "-n", &ns, "-f", "-"],
        &colored("theirs", "red", ""),
    )
    .await;
    kubectl_in(
        target,
        &["apply", "-n", &ns, "-f", "-"],
        &colored("other-color", "blue", ""),
    )
    .await;
    assert_eq!(
        names(
            all.tenant,
            &["-n", &ns, "--field-selector", "spec.color=red"]
        )
        .await,
        ["widget.example.test/mine", "widget.example.test/theirs"]
    );
    assert_eq!(
        names(
            all.tenant,
            &["-n", &ns, "--field-selector", "metadata.name=theirs"]
        )
        .await,
        ["widget.example.test/theirs"]
    );
    let err = kubectl_err(
        all.tenant,
        &[
            "get",
            "widgets",
            "-n",
            &ns,
            "--field-selector",
            "spec.size=1",
        ],
    )
    .await;
    assert!(
        err.contains("field label not supported: spec.size"),
        "{err}"
    );
}
