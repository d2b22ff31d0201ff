//! The charts installed with `helm` into a real kube-apiserver (with the Gateway API and
//! Prometheus Operator CRDs; no node, so no Pod runs): every object of the release exists, its
//! Pod templates are admitted (server-side dry run) where the namespace enforces the
//! `restricted` Pod Security Standard, `kubectl auth can-i` allows every RBAC rule
//! the chart grants, `helm upgrade` applies a changed value, and `helm uninstall` removes
//! everything but the CRDs. The tunnel gateway's chart running on a node (leader, a route
//! through the edge, an upgrade under traffic): the tunnel controller's `on_node` tests.

use serde_json::Value;
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ControlPlaneBuilder};

fn spec() -> ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("charts"))
        .gateway_api()
        .prometheus_operator()
}

fn cluster() -> &'static Cluster {
    test_cluster::install_crypto_provider();
    test_cluster::shared(spec).cluster("charts")
}

async fn kubectl(args: &[&str]) -> String {
    cluster()
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn helm(args: &[&str]) -> String {
    cluster()
        .helm_ok(args)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The objects of release `release` in `ns` (`helm get manifest`).
async fn manifest(release: &str, ns: &str) -> Vec<Value> {
    let yaml = helm(&["get", "manifest", release, "-n", ns]).await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `kind/name` of `object` for kubectl, with its API group (kinds such as PodMonitor have no
/// short name kubectl knows without it).
fn reference(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap().to_lowercase();
    let group = object["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    let name = object["metadata"]["name"].as_str().unwrap();
    if group.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}.{group}/{name}")
    }
}

/// The objects of `objects` the API server has (`kubectl get --ignore-not-found`).
async fn existing(objects: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for o in objects {
        let r = reference(o);
        let mut args = vec!["get", r.as_str(), "--ignore-not-found", "-o", "name"];
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            args.extend(["-n", ns]);
        }
        if !kubectl(&args).await.trim().is_empty() {
            found.push(r);
        }
    }
    found
}

/// `kubectl auth can-i` as `user` for every verb on every resource (and resource name) of every
/// rule of `role` (a Role in `ns`, or a ClusterRole); the rules refused.
async fn refused_rules(role: &Value, user: &str) -> Vec<String> {
    let ns = role["metadata"]["namespace"].as_str();
    let mut refused = Vec::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    for rule in role["rules"].as_array().unwrap() {
        let names = strings(&rule["resourceNames"]);
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let (resource, sub) = match resource.split_once('/') {
                    Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                    None => (resource, None),
                };
                let base = if group.is_empty() {
                    resource
                } else {
                    format!("{resource}.{group}")
                };
                let targets: Vec<String> = if names.is_empty() {
                    vec![base]
                } else {
                    names.iter().map(|n| format!("{base}/{n}")).collect()
                };
                for verb in strings(&rule["verbs"]) {
                    for target in &targets {
                        let mut args = vec![
                            "auth".to_owned(),
                            "can-i".into(),
                            "--as".into(),
                            user.into(),
                            verb.clone(),
                            target.clone(),
                        ];
                        if let Some(sub) = &sub {
                            args.push(format!("--subresource={sub}"));
                        }
                        if let Some(ns) = ns {
                            args.extend(["-n".into(), ns.into()]);
                        }
                        let out = cluster().kubectl().args(&args).output().await.unwrap();
                        if String::from_utf8_lossy(&out.stdout).trim() != "yes" {
                            refused.push(args[4..].join(" "));
                        }
                    }
                }
            }
        }
    }
    refused
}

async fn can_i(user: &str, args: &[&str]) -> bool {
    let out = cluster()
        .kubectl()
        .args(["auth", "can-i", "--as", user])
        .args(args)
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

fn of_kind<'a>(objects: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
    objects.iter().filter(move |o| o["kind"] == kind)
}

/// The Pod templates of `objects`, each as a Pod created with a server-side dry run in its
/// namespace (PodSecurity admission enforces on Pods; with no node none is created for real):
/// the refusals.
async fn pods_refused(objects: &[Value]) -> Vec<String> {
    let mut refused = Vec::new();
    for o in objects
        .iter()
        .filter(|o| o["spec"]["template"]["spec"].is_object())
    {
        let template = &o["spec"]["template"];
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": format!("dry-run-{}", o["metadata"]["name"].as_str().unwrap()),
                "namespace": o["metadata"]["namespace"],
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
        });
        if let Err(e) = cluster()
            .kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &pod.to_string())
            .await
        {
            refused.push(format!("{}: {e}", reference(o)));
        }
    }
    refused
}

#[tokio::test]
async fn the_resource_proxy_chart_installs_upgrades_and_uninstalls() {
    let cp = test_cluster::shared(spec);
    let _logs = cp.logs_on_failure();
    let chart = charts::RESOURCE_PROXY.dir();
    let chart = chart.to_str().unwrap();
    let ns = "kube-system";
    helm(&["install", "resource-proxy", chart, "-n", ns]).await;
    let objects = manifest("resource-proxy", ns).await;
    assert_eq!(existing(&objects).await.len(), objects.len(), "{objects:?}");

    // Every rule of its roles, for both subjects the bindings name.
    for user in [
        "system:serviceaccount:kube-system:resource-proxy",
        "resource-proxy",
    ] {
        for role in of_kind(&objects, "ClusterRole").chain(of_kind(&objects, "Role")) {
            let refused = refused_rules(role, user).await;
            assert!(refused.is_empty(), "{user}: refused {refused:?}");
        }
    }
    let sa = "system:serviceaccount:kube-system:resource-proxy";
    assert!(can_i(sa, &["update", "leases/resource-proxy-client-a", "-n", ns]).await);
    assert!(!can_i(sa, &["update", "leases/resource-proxy-other", "-n", ns]).await);
    assert!(!can_i(sa, &["get", "secrets/other", "-n", ns]).await);

    // Another client name: the names the Role grants follow, and the DaemonSet rolls.
    let checksum = || async {
        kubectl(&[
            "-n",
            ns,
            "get",
            "daemonset",
            "resource-proxy",
            "-o",
            "jsonpath={.spec.template.metadata.annotations.checksum/config}",
        ])
        .await
    };
    let before = checksum().await;
    helm(&[
        "upgrade",
        "resource-proxy",
        chart,
        "-n",
        ns,
        "--reuse-values",
        "--set",
        "config.client.name=tenant-b",
    ])
    .await;
    assert_ne!(checksum().await, before);
    assert!(can_i(sa, &["update", "leases/resource-proxy-tenant-b", "-n", ns]).await);
    assert!(!can_i(sa, &["update", "leases/resource-proxy-client-a", "-n", ns]).await);
    let config = kubectl(&[
        "-n",
        ns,
        "get",
        "configmap",
        "resource-proxy-config",
        "-o",
        "jsonpath={.data.config\\.yaml}",
    ])
    .await;
    assert!(config.contains("name: tenant-b"), "{config}");

    helm(&["uninstall", "resource-proxy", "-n", ns, "--wait"]).await;
    let left = existing(&objects).await;
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
}

#[tokio::test]
async fn the_tunnel_gateway_chart_installs_into_a_restricted_namespace_and_uninstalls_all_but_its_crds()
 {
    let cp = test_cluster::shared(spec);
    let _logs = cp.logs_on_failure();
    let chart = charts::TUNNEL_GATEWAY.dir();
    let chart = chart.to_str().unwrap();
    let ns = charts::TUNNEL_GATEWAY.namespace;
    // The namespace as the guide creates it: enforcing `restricted`.
    cluster()
        .kubectl_stdin(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
                 pod-security.kubernetes.io/enforce: restricted\n    \
                 pod-security.kubernetes.io/enforce-version: latest\n"
            ),
        )
        .await
        .unwrap();
    // Every opt-in part on, so every template is installed.
    helm(&[
        "install",
        "tunnel-gateway",
        chart,
        "-n",
        ns,
        "--set",
        "gatewayClassConfig.create=true,gatewayClassConfig.tunnelID=6ff42ae2-765d-4adf-8112-31c55c1551ef,\
         hostnameOwnershipPolicy.enabled=true,podMonitor.enabled=true,prometheusRule.enabled=true,\
         grafanaDashboard.enabled=true",
    ])
    .await;
    let objects = manifest("tunnel-gateway", ns).await;
    assert_eq!(existing(&objects).await.len(), objects.len(), "{objects:?}");
    for kind in [
        "GatewayClassConfig",
        "PodMonitor",
        "PrometheusRule",
        "ValidatingAdmissionPolicy",
    ] {
        assert!(of_kind(&objects, kind).next().is_some(), "no {kind}");
    }

    // The Pods of both Deployments are admitted under `restricted`.
    let refused = pods_refused(&objects).await;
    assert!(refused.is_empty(), "{refused:#?}");
    // ... and the namespace does enforce: the controller's template run as root is refused.
    let mut root = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap()
        .clone();
    root["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = false.into();
    let refused = pods_refused(&[root]).await;
    assert!(
        refused.len() == 1 && refused[0].contains("runAsNonRoot"),
        "{refused:?}"
    );

    let sa = format!("system:serviceaccount:{ns}:tunnel-gateway-controller");
    for role in of_kind(&objects, "ClusterRole").chain(of_kind(&objects, "Role")) {
        let refused = refused_rules(role, &sa).await;
        assert!(refused.is_empty(), "refused {refused:?}");
    }
    // Secrets are updated (the config API certificates), never deleted.
    assert!(!can_i(&sa, &["delete", "secrets", "-n", ns]).await);
    assert!(!can_i(&sa, &["create", "pods", "-n", ns]).await);

    helm(&["uninstall", "tunnel-gateway", "-n", ns, "--wait"]).await;
    let left = existing(&objects).await;
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
    // Helm's convention for crds/: installed once, never upgraded or deleted.
    for crd in [
        "accesspolicies.cf.k8s.lex.la",
        "gatewayclassconfigs.cf.k8s.lex.la",
        "gatewayconfigs.cf.k8s.lex.la",
    ] {
        kubectl(&["get", "crd", crd]).await;
    }
}
