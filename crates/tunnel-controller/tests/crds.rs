//! The project's CRDs: the committed YAML is what the Rust types generate, and a real API server
//! enforces their validation (bounds, patterns, CEL).

use serde_json::json;
use test_cluster::{ClusterSpec, ControlPlane};

#[test]
fn committed_crd_yaml_matches_the_rust_types() {
    let committed = include_str!("../../../charts/tunnel-gateway/crds/crds.yaml");
    assert!(
        committed == tunnel_controller::api::crds_yaml(),
        "charts/tunnel-gateway/crds/crds.yaml is stale: run `cargo run -p tunnel-controller --bin crdgen > charts/tunnel-gateway/crds/crds.yaml && scripts/render-deploy.sh`"
    );
}

async fn apply(cluster: &test_cluster::Cluster, doc: serde_json::Value) -> Result<(), String> {
    let client = cluster.client().await.unwrap();
    test_cluster::manifests::apply_value(&client, doc, "default")
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn class_config(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "tunnelID": "6ff42ae2-765d-4adf-8112-31c55c1551ef",
        "cloudflareCredentialsSecretRef": {"name": "cloudflare", "namespace": "cf-system"}
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"apiVersion": "cf.k8s.lex.la/v1alpha1", "kind": "GatewayClassConfig", "metadata": {"name": name}, "spec": spec})
}

fn gateway_config(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "cf.k8s.lex.la/v1alpha1", "kind": "GatewayConfig", "metadata": {"name": name}, "spec": spec})
}

fn access_policy(
    name: &str,
    target: serde_json::Value,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut spec = json!({
        "targetRefs": [target],
        "rules": [{"decision": "Allow", "include": {"emails": ["a@example.com"]}}]
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"apiVersion": "cf.k8s.lex.la/v1alpha1", "kind": "AccessPolicy", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_enforces_the_schema() {
    test_cluster::install_crypto_provider();
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("crds"))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let cluster = cp.cluster("crds");
    let client = cluster.client().await.unwrap();
    test_cluster::manifests::apply_crds_yaml(&client, &tunnel_controller::api::crds_yaml())
        .await
        .unwrap();

    // Valid objects are accepted, with defaults applied.
    apply(cluster, class_config("ok", json!({"maxDataPlanesPerNamespace": 1, "accountId": "0123456789abcdef0123456789abcdef"}))).await.unwrap();
    let out = cluster
        .kubectl_ok(&[
            "get",
            "gcconfig",
            "ok",
            "-o",
            "jsonpath={.spec.allowSharedTunnels}",
        ])
        .await
        .unwrap();
    assert_eq!(out, "false");
    let token = json!({"name": "tunnel"});
    apply(
        cluster,
        gateway_config(
            "fixed",
            json!({"tunnelTokenSecretRef": token, "replicas": 3}),
        ),
    )
    .await
    .unwrap();
    let route = json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "app"});
    apply(
        cluster,
        access_policy(
            "ok",
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "sectionName": "http"}),
            json!({"sessionDuration": "1h30m"}),
        ),
    )
    .await
    .unwrap();
    apply(cluster, gateway_config("scaled", json!({"tunnelTokenSecretRef": token, "autoscaling": {"maxReplicas": 5, "targetInflightPerPod": 50}}))).await.unwrap();

    // Each invalid object is refused by the API server with a message naming the field.
    let refused = [
        (
            class_config("zero-cap", json!({"maxDataPlanesPerNamespace": 0})),
            "maxDataPlanesPerNamespace",
        ),
        (
            class_config("bad-tunnel", json!({"tunnelID": "NOT-A-UUID"})),
            "tunnelID",
        ),
        (
            class_config("bad-account", json!({"accountId": "xyz"})),
            "accountId",
        ),
        (
            class_config(
                "upper-case-delegation",
                json!({"hostnameOwnership": {"delegations": [{"namespaces": ["a"], "hostnames": ["A.example.com"]}]}}),
            ),
            "hostnames",
        ),
        (
            class_config(
                "bare-wildcard-delegation",
                json!({"hostnameOwnership": {"delegations": [{"namespaces": ["a"], "hostnames": ["*"]}]}}),
            ),
            "hostnames",
        ),
        (
            class_config(
                "delegation-without-namespaces",
                json!({"hostnameOwnership": {"delegations": [{"namespaces": [], "hostnames": ["a.example.com"]}]}}),
            ),
            "namespaces",
        ),
        (
            gateway_config(
                "both",
                json!({"tunnelTokenSecretRef": token, "replicas": 2, "autoscaling": {"maxReplicas": 5, "targetInflightPerPod": 1}}),
            ),
            "mutually exclusive",
        ),
        (
            gateway_config(
                "max-below-min",
                json!({"tunnelTokenSecretRef": token, "autoscaling": {"minReplicas": 4, "maxReplicas": 3, "targetInflightPerPod": 1}}),
            ),
            "maxReplicas must be at least minReplicas",
        ),
        (
            gateway_config(
                "max-below-default-min",
                json!({"tunnelTokenSecretRef": token, "autoscaling": {"maxReplicas": 1, "targetInflightPerPod": 1}}),
            ),
            "maxReplicas must be at least minReplicas",
        ),
        (
            gateway_config(
                "too-many",
                json!({"tunnelTokenSecretRef": token, "replicas": 101}),
            ),
            "replicas",
        ),
        (
            gateway_config("no-token", json!({"replicas": 2})),
            "tunnelTokenSecretRef",
        ),
        (
            gateway_config(
                "bad-image",
                json!({"tunnelTokenSecretRef": token, "image": "-evil image"}),
            ),
            "image",
        ),
        (
            gateway_config(
                "empty-secret-name",
                json!({"tunnelTokenSecretRef": {"name": ""}}),
            ),
            "name",
        ),
        (
            access_policy(
                "configmap-target",
                json!({"group": "", "kind": "ConfigMap", "name": "x"}),
                json!({}),
            ),
            "kind",
        ),
        (
            access_policy(
                "other-group",
                json!({"group": "example.com", "kind": "HTTPRoute", "name": "x"}),
                json!({}),
            ),
            "group",
        ),
        (
            access_policy("day", route.clone(), json!({"sessionDuration": "1 day"})),
            "sessionDuration",
        ),
        (
            access_policy("no-rules", route.clone(), json!({"rules": []})),
            "rules",
        ),
        (
            access_policy(
                "bad-decision",
                route.clone(),
                json!({"rules": [{"decision": "Maybe", "include": {"everyone": true}}]}),
            ),
            "decision",
        ),
        (
            access_policy(
                "bad-email",
                route.clone(),
                json!({"rules": [{"decision": "Allow", "include": {"emails": ["nobody"]}}]}),
            ),
            "emails",
        ),
        (
            access_policy(
                "namespaced-target",
                json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "x", "namespace": "other"}),
                json!({}),
            ),
            "namespace",
        ),
    ];
    for (doc, needle) in refused {
        let name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        let err = apply(cluster, doc)
            .await
            .expect_err(&format!("{name} must be refused"));
        assert!(err.contains(needle), "{name}: {err}");
    }
}
