//! Owner references across clusters: the client's owners never reach the target's garbage
//! collector (which would delete the object, not finding the owner), while the client's garbage
//! collector sees them and deletes dependents of deleted client objects.

use std::time::Duration;

use serde_json::Value;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_owner_references_drive_the_clients_garbage_collector_never_the_targets() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::b().await;
    let tenant = proxy.tenant;
    let target = cp.cluster("target");
    let ns = namespace(tenant, "owners").await;
    kubectl(tenant, &["create", "configmap", "owner", "-n", &ns]).await;
    let uid = kubectl(
        tenant,
        &[
            "get",
            "configmap",
            "owner",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
    .await;
    let dependent = format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Widget\nmetadata:\n  name: dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: {uid}\nspec:\n  size: 1\n"
    );
    kubectl_in(tenant, &["apply", "-n", &ns, "-f", "-"], &dependent).await;

    // Through the proxy the owner reference is there ...
    let seen: Value = serde_json::from_str(
        &kubectl(
            tenant,
            &["get", "widget", "dependent", "-n", &ns, "-o", "json"],
        )
        .await,
    )
    .unwrap();
    assert_eq!(seen["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
    assert!(
        seen["metadata"]["annotations"]
            .get(resource_proxy::tenancy::owner_refs::ANNOTATION)
            .is_none()
    );
    // ... in the target it is only an annotation.
    let stored: Value = serde_json::from_str(
        &kubectl(
            target,
            &["get", "widget", "dependent", "-n", &ns, "-o", "json"],
        )
        .await,
    )
    .unwrap();
    assert!(
        stored["metadata"].get("ownerReferences").is_none(),
        "{stored}"
    );
    assert!(
        stored["metadata"]["annotations"][resource_proxy::tenancy::owner_refs::ANNOTATION]
            .as_str()
            .unwrap()
            .contains(uid.as_str())
    );

    // The target's garbage collector leaves it alone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    kubectl(target, &["get", "widget", "dependent", "-n", &ns]).await;

    // Deleting the owner in the client lets the client's garbage collector delete the dependent
    // through the proxy.
    kubectl(tenant, &["delete", "configmap", "owner", "-n", &ns]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = kubectl(target, &["get", "widgets", "-n", &ns, "-o", "name"]).await;
        if left.trim().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client's garbage collector did not delete the dependent"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
