//! Every kubectl verb a user relies on works through the proxy, and the objects live in the
//! target with both owner labels.

use serde_json::Value;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_verbs_work_and_objects_live_in_the_target_with_owner_labels() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let tenant = proxy.tenant;
    let ns = namespace(tenant, "verbs").await;

    // apply (client-side): the namespace exists only in the tenant, so the proxy mirrors it.
    let out = kubectl_in(
        tenant,
        &["apply", "-n", &ns, "-f", "-"],
        &widget("one", "app: demo"),
    )
    .await;
    assert!(out.contains("widget.example.test/one created"), "{out}");
    let labels = target_labels(&ns, "one").await;
    assert_eq!(labels["vcluster.com/owner-vcluster"], "alpha");
    assert_eq!(labels["vcluster.com/owner-project"], "team-a");
    assert_eq!(labels["app"], "demo");

    // get, get -o yaml
    let out = kubectl(tenant, &["get", "widgets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(out.trim(), "widget.example.test/one");
    let yaml = kubectl(tenant, &["get", "widget", "one", "-n", &ns, "-o", "yaml"]).await;
    assert!(
        yaml.contains("vcluster.com/owner-vcluster: alpha"),
        "{yaml}"
    );

    // A caller cannot forge or remove the owner labels.
    let forged = widget(
        "forged",
        "vcluster.com/owner-vcluster: someone-else, vcluster.com/owner-project: other",
    );
    kubectl_in(tenant, &["apply", "-n", &ns, "-f", "-"], &forged).await;
    let labels = target_labels(&ns, "forged").await;
    assert_eq!(labels["vcluster.com/owner-vcluster"], "alpha");
    assert_eq!(labels["vcluster.com/owner-project"], "team-a");

    // patch --type merge (also trying to null the labels)
    kubectl(
        tenant,
        &[
            "patch",
            "widget",
            "one",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":2},"metadata":{"labels":{"vcluster.com/owner-vcluster":null}}}"#,
        ],
    )
    .await;
    let got: Value = serde_json::from_str(
        &kubectl(tenant, &["get", "widget", "one", "-n", &ns, "-o", "json"]).await,
    )
    .unwrap();
    assert_eq!(got["spec"]["size"], 2);
    assert_eq!(
        got["metadata"]["labels"]["vcluster.com/owner-vcluster"],
        "alpha"
    );

    // patch --type json (also trying to remove the labels)
    kubectl(tenant, &["patch", "widget", "one", "-n", &ns, "--type", "json", "-p",
        r#"[{"op":"replace","path":"/spec/size","value":3},{"op":"remove","path":"/metadata/labels"}]"#]).await;
    let labels = target_labels(&ns, "one").await;
    assert_eq!(labels["vcluster.com/owner-vcluster"], "alpha");
    let got: Value = serde_json::from_str(
        &kubectl(tenant, &["get", "widget", "one", "-n", &ns, "-o", "json"]).await,
    )
    .unwrap();
    assert_eq!(got["spec"]["size"], 3);

    // apply --server-side
    let ssa =
        "apiVersion: example.test/v1\nkind: Widget\nmetadata:\n  name: ssa\nspec:\n  size: 7\n";
    let out = kubectl_in(
        tenant,
        &["apply", "--server-side", "-n", &ns, "-f", "-"],
        ssa,
    )
    .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let labels = target_labels(&ns, "ssa").await;
    assert_eq!(labels["vcluster.com/owner-project"], "team-a");

    // delete, delete --all
    let out = kubectl(tenant, &["delete", "widget", "one", "-n", &ns]).await;
    assert!(out.contains("deleted"), "{out}");
    kubectl(tenant, &["delete", "widgets", "--all", "-n", &ns]).await;
    let left = kubectl(
        cp.cluster("target"),
        &["get", "widgets", "-n", &ns, "-o", "name"],
    )
    .await;
    assert_eq!(left.trim(), "", "everything deleted in the target");
}
