//! The rendered plane against a real API server: it is accepted as rendered, every field the
//! controller sets reads back with the same value (so comparing rendered with live finds drift
//! only where someone changed the object), and applying it again changes nothing. The namespace
//! enforces the `restricted` Pod Security Standard, and the API server's PodSecurity admission
//! admits a Pod made of each rendered pod template. Beside it, the config API CA's Secret
//! (`config_ca`): created once, never overwritten, rotated and retired.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use test_cluster::{ClusterSpec, ControlPlane};
use tunnel_controller::api::{GatewayConfig, GatewayConfigSpec};
use tunnel_controller::publish::planes::render::{
    RenderInputs, Rendered, generate_auth_token, render,
};

const NAMESPACE: &str = "tenant-a";

fn gateway(name: &str) -> gateway_api::apis::standard::gateways::Gateway {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("8d7c1f4e-0000-4000-8000-{:0>12}", name.len())},
        "spec": {
            "gatewayClassName": "cloudflare-tunnel",
            "infrastructure": {
                "labels": {"team": "a"},
                "annotations": {"cost-center": "42"},
                "parametersRef": {"group": "cf.k8s.lex.la", "kind": "GatewayConfig", "name": "cfg"}
            },
            "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS"}]
        }
    }))
    .unwrap()
}

fn config(spec: Value) -> GatewayConfig {
    let spec: GatewayConfigSpec = serde_json::from_value(spec).unwrap();
    let mut c = GatewayConfig::new("cfg", spec);
    c.metadata.namespace = Some(NAMESPACE.into());
    c
}

fn inputs() -> RenderInputs {
    RenderInputs {
        controller_namespace: "cf-system".into(),
        controller_pod_labels: BTreeMap::from([(
            "app.kubernetes.io/name".to_owned(),
            "tunnel-controller".to_owned(),
        )]),
        monitoring_namespace_selector: Some(
            serde_json::from_value(
                json!({"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}),
            )
            .unwrap(),
        ),
        default_proxy_image: Some("ghcr.io/example/tunnel-proxy:1.0.0".into()),
        connector_image: "cloudflare/cloudflared:2026.8.0".into(),
        drain_grace_seconds: 30,
        tunnel_token: "tunnel-token-value".into(),
        auth_token: generate_auth_token(),
        config_tls: true,
    }
}

fn documents(r: &Rendered) -> Vec<Value> {
    let mut docs = vec![
        serde_json::to_value(&r.deployment).unwrap(),
        serde_json::to_value(&r.config_service).unwrap(),
        serde_json::to_value(&r.network_policy).unwrap(),
    ];
    docs.extend(r.hpa.as_ref().map(|h| serde_json::to_value(h).unwrap()));
    docs.extend(r.pdb.as_ref().map(|p| serde_json::to_value(p).unwrap()));
    docs.extend(
        r.generated_auth_secret
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap()),
    );
    docs
}

/// The first place where `live` does not carry `rendered`'s value, if any.
fn missing(rendered: &Value, live: &Value, path: &str) -> Option<String> {
    match (rendered, live) {
        (Value::Object(r), Value::Object(l)) => r.iter().find_map(|(k, v)| match l.get(k) {
            Some(lv) => missing(v, lv, &format!("{path}.{k}")),
            None => Some(format!("{path}.{k}: absent, rendered {v}")),
        }),
        (Value::Array(r), Value::Array(l)) if r.len() == l.len() => r
            .iter()
            .zip(l)
            .enumerate()
            .find_map(|(i, (rv, lv))| missing(rv, lv, &format!("{path}[{i}]"))),
        _ if rendered == live => None,
        _ => Some(format!("{path}: rendered {rendered}, live {live}")),
    }
}

#[tokio::test]
async fn the_api_server_stores_the_rendered_plane_as_rendered_and_a_second_apply_changes_nothing() {
    test_cluster::install_crypto_provider();
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("render"))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let cluster = cp.cluster("render");
    cluster
        .kubectl_ok(&["create", "namespace", NAMESPACE])
        .await
        .unwrap();
    cluster
        .kubectl_ok(&[
            "label",
            "namespace",
            NAMESPACE,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ])
        .await
        .unwrap();
    let client = cluster.client().await.unwrap();

    let planes = [
        render(
            &gateway("fixed"),
            &config(json!({"tunnelTokenSecretRef": {"name": "t"}, "replicas": 3})),
            &inputs(),
        )
        .unwrap(),
        render(
            &gateway(&format!("autoscaled-{}", "x".repeat(60))),
            &config(json!({
                "tunnelTokenSecretRef": {"name": "t", "key": "token"},
                "authTokenSecretRef": {"name": "byo"},
                "autoscaling": {"maxReplicas": 10, "targetInflightPerPod": 50}
            })),
            &inputs(),
        )
        .unwrap(),
        render(
            &gateway("single"),
            &config(json!({"tunnelTokenSecretRef": {"name": "t"}, "replicas": 1})),
            &inputs(),
        )
        .unwrap(),
    ];
    let mut applied = 0;
    for plane in &planes {
        let name = plane.deployment.metadata.name.clone().unwrap();
        admitted_as_a_pod(&client, &name, &plane.deployment).await;
        for doc in documents(plane) {
            let kind = doc["kind"].as_str().unwrap().to_owned();
            let first = test_cluster::manifests::apply_value(&client, doc.clone(), NAMESPACE)
                .await
                .unwrap_or_else(|e| panic!("{kind} refused: {e}"));
            let live = serde_json::to_value(&first).unwrap();
            if let Some(diff) = missing(&doc, &live, &kind) {
                panic!("the API server changed a rendered field: {diff}");
            }
            let again = test_cluster::manifests::apply_value(&client, doc, NAMESPACE)
                .await
                .unwrap();
            assert_eq!(
                again.metadata.resource_version, first.metadata.resource_version,
                "re-applying the same {kind} is a no-op"
            );
            applied += 1;
        }
    }
    assert_eq!(
        applied, 14,
        "fixed (3 replicas): Deployment, Service, NetworkPolicy, PDB, generated Secret; autoscaled (min 2): the same with an HPA instead of the Secret; single (1 replica): Deployment, Service, NetworkPolicy, Secret, no PDB"
    );
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await
        .unwrap();
    let mut names: Vec<_> = budgets.items.iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(
        names,
        [planes[1].deployment.name_any(), "cf-proxy-fixed".to_owned()],
        "a budget for each plane of two or more pods, none for the single pod"
    );

    // The check can fail: the same template with root allowed in either container (the
    // connector, or the proxy, a sidecar among the init containers) is refused.
    for container in ["cloudflared", "proxy"] {
        let mut loose = planes[0].deployment.clone();
        let template = &mut loose.spec.as_mut().unwrap().template;
        let spec = template.spec.as_mut().unwrap();
        spec.containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
            .find(|c| c.name == container)
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .run_as_user = Some(0);
        let refused = dry_run_pod(&client, "loose", template).await.unwrap_err();
        assert!(
            refused.contains("violates PodSecurity \"restricted:latest\"")
                && refused.contains(&format!("runAsUser=0 (container \"{container}\"")),
            "{container}: {refused}"
        );
    }
}

/// A Pod of `template`'s spec, created with a server-side dry run: Err with the API server's
/// message when refused.
async fn dry_run_pod(
    client: &kube::Client,
    name: &str,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
) -> Result<(), String> {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(format!("{name}-psa")),
            namespace: Some(NAMESPACE.to_owned()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .create(&params, &pod)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The cluster creates no Pods (no node), so the proof is a dry-run Pod of the template: the
/// PodSecurity admission enforces on Pods, and only warns about Deployments.
async fn admitted_as_a_pod(client: &kube::Client, name: &str, deployment: &Deployment) {
    let template = &deployment.spec.as_ref().unwrap().template;
    if let Err(e) = dry_run_pod(client, name, template).await {
        panic!("a Pod of {name}'s template was refused: {e}");
    }
}

/// The config API CA's Secret against a real API server: created once by racing replicas,
/// never overwritten, rotated on request with the old CA kept, retired once the planes moved.
#[tokio::test]
async fn the_config_api_ca_is_created_once_never_overwritten_and_rotated_on_request() {
    use std::time::SystemTime;
    use tunnel_controller::publish::config_api::ca::{self, CaError};
    use tunnel_controller::publish::config_api::pki::ROTATE_ANNOTATION;

    test_cluster::install_crypto_provider();
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("config-ca"))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let cluster = cp.cluster("config-ca");
    cluster
        .kubectl_ok(&["create", "namespace", "cf-system"])
        .await
        .unwrap();
    let client = cluster.client().await.unwrap();
    let now = SystemTime::now();
    let sync = |moved: bool| ca::sync(&client, "cf-system", "config-ca", moved, now);

    // Two replicas racing: one CA, both end up with it.
    let (a, b) = tokio::join!(sync(false), sync(false));
    let (a, b) = (a.unwrap(), b.unwrap());
    let first = a.active.clone().expect("a CA");
    assert_eq!(b.active.as_ref(), Some(&first));
    assert_eq!(sync(true).await.unwrap().active.as_ref(), Some(&first));
    assert_eq!(a.previous, None);

    // Rotation on request: the new CA issues, the old one stays trusted ...
    cluster
        .kubectl_ok(&[
            "-n",
            "cf-system",
            "annotate",
            "secret",
            "config-ca",
            &format!("{ROTATE_ANNOTATION}=1"),
        ])
        .await
        .unwrap();
    let rotated = sync(false).await.unwrap();
    let second = rotated.active.clone().unwrap();
    assert_ne!(second, first);
    assert_eq!(rotated.previous.as_ref(), Some(&first));
    assert_eq!(rotated.rotated.as_deref(), Some("1"));
    // ... until every plane serves the new one; the request is answered once.
    assert_eq!(sync(false).await.unwrap(), rotated);
    let retired = sync(true).await.unwrap();
    assert_eq!(retired.active.as_ref(), Some(&second));
    assert_eq!(retired.previous, None);
    assert_eq!(sync(true).await.unwrap(), retired);

    // An operator's CA (or one this controller cannot read) is never overwritten.
    cluster
        .kubectl_ok(&[
            "-n",
            "cf-system",
            "create",
            "secret",
            "generic",
            "broken-ca",
            "--from-literal=ca.crt=not a certificate",
            "--from-literal=ca.key=not a key",
        ])
        .await
        .unwrap();
    let err = ca::sync(&client, "cf-system", "broken-ca", true, now)
        .await
        .unwrap_err();
    assert!(matches!(err, CaError::Broken(..)), "{err}");
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "cf-system");
    let kept = api.get("broken-ca").await.unwrap();
    assert_eq!(
        kept.data.unwrap()["ca.crt"].0,
        b"not a certificate".to_vec(),
        "left as the operator wrote it"
    );
}
