//! Proves the harness against the real binaries: CRDs and objects through kube-rs and kubectl,
//! cluster isolation on one etcd, HA peers, garbage collection, the aggregation layer through an
//! ExternalName Service, process cleanup, and the command-line entry.
//!
//! Tests share one control plane per binary and each works in its own namespace.

mod aggregation;
mod cli;
mod lifecycle;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use test_cluster::{ClusterSpec, ControlPlane, ControlPlaneBuilder};

fn spec() -> ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("alpha").controller_manager())
        .cluster(ClusterSpec::new("beta").ha())
}

/// The shared control plane, with the rustls provider installed.
pub fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(spec)
}

/// Creates a namespace and returns its name.
pub async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = test_cluster::unique_name(prefix);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub fn config_map(name: &str, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("value".to_owned(), data.to_owned())].into()),
        ..Default::default()
    }
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

mod objects {
    use std::time::Duration;

    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{
        Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
        PatchParams, PostParams,
    };
    use kube::runtime::watcher::{self, Event};
    use serde_json::json;

    use super::{config_map, cp, eventually, namespace};

    const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.harness.example.test
spec:
  group: harness.example.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
"#;

    fn widget_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("harness.example.test", "v1", "Widget");
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
    }

    fn widget(name: &str, size: i64) -> serde_json::Value {
        json!({
            "apiVersion": "harness.example.test/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"size": size},
        })
    }

    #[tokio::test]
    async fn crd_objects_are_created_listed_and_watched_with_kube_rs_and_seen_with_kubectl() {
        let cp = cp();
        let _logs = cp.logs_on_failure();
        let alpha = cp.cluster("alpha");
        let client = alpha.client().await.unwrap();
        let crds = test_cluster::manifests::apply_crds_yaml(&client, WIDGET_CRD)
            .await
            .unwrap();
        assert_eq!(crds, ["widgets.harness.example.test"]);
        let ns = namespace(&client, "widgets").await;
        let api = widget_api(&client, &ns);

        // A watch opened before the writes sees each of them.
        let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
        for (name, size) in [("a", 1), ("b", 2), ("c", 3)] {
            test_cluster::manifests::apply_value(&client, widget(name, size), &ns)
                .await
                .unwrap();
        }
        let mut seen = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), async {
            while seen.len() < 3 {
                match events
                    .try_next()
                    .await
                    .unwrap()
                    .expect("watch stream ended")
                {
                    Event::Apply(o) | Event::InitApply(o) => {
                        let n = o.metadata.name.unwrap();
                        if !seen.contains(&n) {
                            seen.push(n);
                        }
                    }
                    _ => {}
                }
            }
        })
        .await
        .expect("watch events for a, b, c");
        seen.sort();
        assert_eq!(seen, ["a", "b", "c"]);

        let listed: Vec<String> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|o| o.metadata.name.unwrap())
            .collect();
        assert_eq!(listed, ["a", "b", "c"]);

        // The schema is enforced by the real API server.
        let err = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(widget("bad", 0)).unwrap(),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("spec.size"), "{err}");

        // The built kubectl sees the same objects.
        let out = alpha
            .kubectl_ok(&[
                "get",
                "widgets",
                "-n",
                &ns,
                "-o",
                "custom-columns=NAME:.metadata.name,SIZE:.spec.size",
                "--no-headers",
            ])
            .await
            .unwrap();
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows, [["a", "1"], ["b", "2"], ["c", "3"]]);

        // And its writes are visible to kube-rs.
        alpha
            .kubectl_ok(&["delete", "widget", "b", "-n", &ns])
            .await
            .unwrap();
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 10}})),
        )
        .await
        .unwrap();
        let a = api.get("a").await.unwrap();
        assert_eq!(a.data["spec"]["size"], 10);
        eventually("b to be gone", Duration::from_secs(30), || async {
            api.get_opt("b").await.unwrap().is_none().then_some(())
        })
        .await;
    }

    #[tokio::test]
    async fn kubectl_is_the_built_v1_36_client_and_server() {
        let cp = cp();
        let out = cp
            .cluster("alpha")
            .kubectl_ok(&["version", "-o", "json"])
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["clientVersion"]["minor"], "36", "{v}");
        assert_eq!(v["serverVersion"]["minor"], "36", "{v}");
    }

    #[tokio::test]
    async fn two_clusters_on_one_etcd_do_not_see_each_others_objects() {
        let cp = cp();
        let _logs = cp.logs_on_failure();
        let alpha = cp.cluster("alpha").client().await.unwrap();
        let beta = cp.cluster("beta").client().await.unwrap();
        let ns = namespace(&alpha, "isolation").await;

        Api::<ConfigMap>::namespaced(alpha.clone(), &ns)
            .create(&PostParams::default(), &config_map("shared-name", "alpha"))
            .await
            .unwrap();
        // The namespace and the object exist only in alpha.
        assert!(
            Api::<k8s_openapi::api::core::v1::Namespace>::all(beta.clone())
                .get_opt(&ns)
                .await
                .unwrap()
                .is_none()
        );
        let beta_all: Vec<String> = Api::<ConfigMap>::all(beta.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.namespace)
            .collect();
        assert!(!beta_all.contains(&ns));

        // The same name in the same namespace in beta is beta's own.
        namespace_named(&beta, &ns).await;
        Api::<ConfigMap>::namespaced(beta.clone(), &ns)
            .create(&PostParams::default(), &config_map("shared-name", "beta"))
            .await
            .unwrap();
        let a = Api::<ConfigMap>::namespaced(alpha.clone(), &ns)
            .get("shared-name")
            .await
            .unwrap();
        let b = Api::<ConfigMap>::namespaced(beta.clone(), &ns)
            .get("shared-name")
            .await
            .unwrap();
        assert_eq!(a.data.unwrap()["value"], "alpha");
        assert_eq!(b.data.unwrap()["value"], "beta");
        assert_ne!(a.metadata.uid, b.metadata.uid);

        // A credential of one cluster is refused by the other (separate CAs).
        let alpha_cert_on_beta =
            test_cluster::kubeconfig::client_from_yaml(&test_cluster::kubeconfig::render(
                "cross",
                &cp.cluster("beta").server_url(0),
                &cp.cluster("beta").ca_pem(),
                "intruder",
                &cp.cluster("alpha")
                    .mint_client_cert("intruder", &["system:masters"])
                    .unwrap(),
            ))
            .await
            .unwrap();
        let err = Api::<ConfigMap>::namespaced(alpha_cert_on_beta, &ns)
            .get("shared-name")
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 401),
            "{err}"
        );
    }

    async fn namespace_named(client: &kube::Client, name: &str) {
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_ha_peer_serves_the_same_objects_and_survives_its_sibling_stopping() {
        let cp = cp();
        let _logs = cp.logs_on_failure();
        let beta = cp.cluster("beta");
        assert_eq!(beta.server_count(), 2);
        assert_ne!(beta.server_port(0), beta.server_port(1));
        let first = beta.client_for_server(0).await.unwrap();
        let second = beta.client_for_server(1).await.unwrap();
        let ns = namespace(&first, "ha").await;
        Api::<ConfigMap>::namespaced(first.clone(), &ns)
            .create(&PostParams::default(), &config_map("written-on-0", "x"))
            .await
            .unwrap();
        let on_second = Api::<ConfigMap>::namespaced(second.clone(), &ns);
        eventually(
            "the peer to serve the object",
            Duration::from_secs(30),
            || async { on_second.get_opt("written-on-0").await.unwrap().map(|_| ()) },
        )
        .await;

        // Stop the peer: the first server keeps serving; restart it on the same port and it
        // serves what was written meanwhile.
        beta.stop_server(1);
        assert!(!beta.server_running(1));
        assert!(on_second.get("written-on-0").await.is_err());
        Api::<ConfigMap>::namespaced(first.clone(), &ns)
            .create(
                &PostParams::default(),
                &config_map("written-while-down", "y"),
            )
            .await
            .unwrap();
        beta.restart_server(1).await.unwrap();
        let second = beta.client_for_server(1).await.unwrap();
        let got = Api::<ConfigMap>::namespaced(second, &ns)
            .get("written-while-down")
            .await
            .unwrap();
        assert_eq!(got.data.unwrap()["value"], "y");
    }

    #[tokio::test]
    async fn deleting_an_owner_garbage_collects_its_dependent() {
        let cp = cp();
        let _logs = cp.logs_on_failure();
        let client = cp.cluster("alpha").client().await.unwrap();
        let ns = namespace(&client, "gc").await;
        let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
        let owner = api
            .create(&PostParams::default(), &config_map("owner", "o"))
            .await
            .unwrap();
        let mut dependent = config_map("dependent", "d");
        dependent.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                ..Default::default()
            },
        ]);
        api.create(&PostParams::default(), &dependent)
            .await
            .unwrap();
        // Without the owner gone nothing is collected.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(api.get_opt("dependent").await.unwrap().is_some());

        api.delete("owner", &DeleteParams::background())
            .await
            .unwrap();
        eventually(
            "the garbage collector to delete the dependent",
            Duration::from_secs(90),
            || async {
                api.get_opt("dependent")
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
}

mod identities {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use kube::api::{Api, PostParams};

    use super::cp;

    async fn whoami(client: kube::Client) -> (String, Vec<String>) {
        let review: SelfSubjectReview = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}
        }))
        .unwrap();
        let got = Api::<SelfSubjectReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .unwrap();
        let info = got.status.unwrap().user_info.unwrap();
        (info.username.unwrap(), info.groups.unwrap_or_default())
    }

    #[tokio::test]
    async fn minted_client_certificates_authenticate_as_their_user_and_groups() {
        let alpha = cp().cluster("alpha");
        let (user, groups) = whoami(
            alpha
                .client_as("loft:vcluster:p-demo:tenant", &["devs", "ops"])
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(user, "loft:vcluster:p-demo:tenant");
        assert_eq!(groups, ["devs", "ops", "system:authenticated"]);

        let (user, groups) = whoami(alpha.client().await.unwrap()).await;
        assert_eq!(user, test_cluster::pki::ADMIN_USER);
        assert!(groups.contains(&"system:masters".to_owned()));

        let err = alpha
            .mint_client_cert("many", &["a", "b", "c"])
            .unwrap_err();
        assert!(err.to_string().contains("at most two groups"), "{err}");
    }
}

mod gateway_api {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    use serde_json::json;

    use super::{cp, namespace};

    #[tokio::test]
    async fn gateway_api_v1_5_1_crds_install_and_serve_their_kinds() {
        let cp = cp();
        let _logs = cp.logs_on_failure();
        let beta = cp.cluster("beta");
        let client = beta.client().await.unwrap();
        let mut crds = test_cluster::gateway_api::install_crds(&client)
            .await
            .unwrap();
        crds.sort();
        for kind in [
            "gatewayclasses",
            "gateways",
            "httproutes",
            "grpcroutes",
            "referencegrants",
            "backendtlspolicies",
        ] {
            assert!(
                crds.contains(&format!("{kind}.gateway.networking.k8s.io")),
                "{kind} missing from {crds:?}"
            );
        }
        // Installing again is a no-op, not an error.
        test_cluster::gateway_api::install_crds(&client)
            .await
            .unwrap();

        let bundle = beta
            .kubectl_ok(&[
                "get",
                "crd",
                "gateways.gateway.networking.k8s.io",
                "-o",
                "jsonpath={.metadata.annotations.gateway\\.networking\\.k8s\\.io/bundle-version}",
            ])
            .await
            .unwrap();
        assert_eq!(
            bundle.trim(),
            test_cluster::gateway_api::GATEWAY_API_VERSION
        );
        // The upstream safe-upgrade admission policy comes with the standard channel.
        let vap = beta
            .kubectl_ok(&["get", "validatingadmissionpolicy", "-o", "name"])
            .await
            .unwrap();
        assert!(
            vap.contains("safe-upgrades.gateway.networking.k8s.io"),
            "{vap}"
        );

        let ns = namespace(&client, "gwapi").await;
        let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
        let routes: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
        let route = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["app.example.test"],
                     "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]}
        });
        routes
            .create(
                &PostParams::default(),
                &serde_json::from_value(route).unwrap(),
            )
            .await
            .unwrap();
        // The CRD's own validation runs: an invalid hostname is refused.
        let bad = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "bad"},
            "spec": {"hostnames": ["Not A Hostname"]}
        });
        let err = routes
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).unwrap(),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("hostnames"), "{err}");
    }
}
