//! The deploy manifests under `deploy/resource-proxy/` against real kube-apiservers: they apply
//! (server-side dry run), their configurations pass `resource-proxy check-config`, and their RBAC
//! allows every API call the proxy makes (and not much more), and the proxy's pods meet the
//! `restricted` Pod Security Standard as the API server's PodSecurity admission enforces it
//! (the DaemonSet except for its host network). The demo (`tests/demo.rs`) also runs
//! the proxy end to end as the user of `client-rbac.yaml` with exactly that RBAC.

use std::path::{Path, PathBuf};

use test_cluster::{Cluster, ClusterSpec, ControlPlane, ControlPlaneBuilder};
use tokio::sync::OnceCell;

fn spec() -> ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("client"))
        .cluster(ClusterSpec::new("target"))
        .prometheus_operator()
}

fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(spec)
}

fn deploy_dir() -> PathBuf {
    test_cluster::repo_root()
        .join("deploy/resource-proxy")
        .canonicalize()
        .unwrap()
}

async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// The proxied resource of the manifests' configuration, in the target (kubectl resolves
/// `can-i` resources through discovery).
const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// Serializes the real apply with the dry runs (a dry-run create racing a real one fails with
/// AlreadyExists).
static APPLYING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Applies the client kustomization, the target RBAC and the widgets CRD for real, once.
async fn applied() {
    static APPLIED: OnceCell<()> = OnceCell::const_new();
    APPLIED
        .get_or_init(|| async {
            let _serial = APPLYING.lock().await;
            let dir = deploy_dir();
            kubectl(
                cp().cluster("client"),
                &["apply", "-k", dir.to_str().unwrap()],
            )
            .await;
            kubectl(
                cp().cluster("target"),
                &["apply", "-k", dir.join("target").to_str().unwrap()],
            )
            .await;
            let admin = cp().cluster("target").client().await.unwrap();
            test_cluster::manifests::apply_crds_yaml(&admin, WIDGET_CRD)
                .await
                .unwrap();
        })
        .await;
}

#[tokio::test]
async fn the_client_kustomization_applies_with_server_dry_run() {
    let _logs = cp().logs_on_failure();
    let _serial = APPLYING.lock().await;
    let dir = deploy_dir();
    let out = kubectl(
        cp().cluster("client"),
        &["apply", "-k", dir.to_str().unwrap(), "--dry-run=server"],
    )
    .await;
    for object in [
        "serviceaccount/resource-proxy",
        "clusterrole.rbac.authorization.k8s.io/resource-proxy",
        "clusterrolebinding.rbac.authorization.k8s.io/resource-proxy",
        "role.rbac.authorization.k8s.io/resource-proxy",
        "rolebinding.rbac.authorization.k8s.io/resource-proxy",
        "rolebinding.rbac.authorization.k8s.io/resource-proxy:extension-apiserver-authentication-reader",
        "configmap/resource-proxy-config ",
        "daemonset.apps/resource-proxy",
    ] {
        assert!(out.contains(object), "no {object} in the dry run:\n{out}");
    }
    assert!(out.contains("(server dry run)"), "{out}");
}

#[tokio::test]
async fn the_target_kustomization_applies_with_server_dry_run() {
    let _logs = cp().logs_on_failure();
    let _serial = APPLYING.lock().await;
    let out = kubectl(
        cp().cluster("target"),
        &[
            "apply",
            "-k",
            deploy_dir().join("target").to_str().unwrap(),
            "--dry-run=server",
        ],
    )
    .await;
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/resource-proxy:default:client-a"),
        "{out}"
    );
    assert!(
        out.contains(
            "clusterrolebinding.rbac.authorization.k8s.io/resource-proxy:default:client-a"
        ),
        "{out}"
    );
}

/// The opt-in monitoring component (deploy/resource-proxy/monitoring) composed with the client
/// kustomization as the guide says, against the Prometheus Operator CRDs: the API server accepts
/// the PodMonitor, the PrometheusRule and the dashboard ConfigMap for the Grafana sidecar.
#[tokio::test]
async fn the_monitoring_component_applies_with_the_prometheus_operator_crds() {
    let _logs = cp().logs_on_failure();
    let _serial = APPLYING.lock().await;
    let dir = deploy_dir();
    let work =
        test_cluster::manifests::kustomization_with(&[&dir], &[&dir.join("monitoring")]).unwrap();
    let path = work.path().to_str().unwrap();
    let client = cp().cluster("client");
    let out = kubectl(client, &["apply", "-k", path, "--dry-run=server"]).await;
    for object in [
        "podmonitor.monitoring.coreos.com/resource-proxy created",
        "prometheusrule.monitoring.coreos.com/resource-proxy created",
        "configmap/resource-proxy-dashboard created",
        "daemonset.apps/resource-proxy",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(object) && l.ends_with("(server dry run)")),
            "no {object} in the dry run:\n{out}"
        );
    }
    let json = kubectl(
        client,
        &["apply", "-k", path, "--dry-run=server", "-o", "json"],
    )
    .await;
    let list: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cm = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "resource-proxy-dashboard")
        .unwrap_or_else(|| panic!("no dashboard ConfigMap in {json}"));
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], "kube-system");
    let dashboard: serde_json::Value =
        serde_json::from_str(cm["data"]["resource-proxy.json"].as_str().unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
}

/// A kustomization of a vCluster-style StatefulSet with the sidecar component, in a temporary
/// directory.
fn sidecar_kustomization() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().canonicalize().unwrap();
    std::fs::write(
        dir.join("statefulset.yaml"),
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: tenant-a, labels: {app: vcluster}}\n\
         spec:\n  serviceName: tenant-a\n  selector: {matchLabels: {app: vcluster}}\n  template:\n    \
         metadata: {labels: {app: vcluster}}\n    spec:\n      containers:\n      - {name: syncer, image: example/syncer:1}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources: [statefulset.yaml]\ncomponents: [{}]\n",
            test_cluster::manifests::relative_path(&dir, &deploy_dir().join("sidecar")).display()
        ),
    )
    .unwrap();
    work
}

#[tokio::test]
async fn the_sidecar_component_adds_the_proxy_to_a_control_plane_statefulset() {
    let _logs = cp().logs_on_failure();
    let client = cp().cluster("client");
    let work = sidecar_kustomization();
    let dir = work.path().canonicalize().unwrap();
    let out = kubectl(
        client,
        &[
            "apply",
            "-k",
            dir.to_str().unwrap(),
            "-n",
            "default",
            "--dry-run=server",
        ],
    )
    .await;
    assert!(
        out.contains("statefulset.apps/tenant-a created (server dry run)"),
        "{out}"
    );
    assert!(out.contains("configmap/resource-proxy-config-"), "{out}");
    // Both containers, the proxy's mounts, and the generated ConfigMap's name in the volume.
    let sts = kubectl(
        client,
        &[
            "create",
            "-k",
            dir.to_str().unwrap(),
            "-n",
            "default",
            "--dry-run=server",
            "-o",
            "json",
        ],
    )
    .await;
    // One JSON document per object.
    let items: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&sts)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}: {sts}"));
    let find = |kind: &str| {
        items
            .iter()
            .find(|i| i["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {sts}"))
    };
    let (sts, cm) = (find("StatefulSet"), find("ConfigMap"));
    let pod = &sts["spec"]["template"]["spec"];
    let mut names: Vec<&str> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["resource-proxy", "syncer"], "{pod}");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "resource-proxy-config")
        .unwrap();
    assert_eq!(volume["configMap"]["name"], cm["metadata"]["name"], "{pod}");
}

/// `resource-proxy` next to the demo binary (both built into one target directory).
fn resource_proxy_binary() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_demo"))
        .parent()
        .unwrap()
        .join("resource-proxy");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p resource-proxy` (cargo test --workspace does)",
        bin.display()
    );
    bin
}

/// The configuration the DaemonSet mounts: `config.yaml` of the ConfigMap in `configmap.yaml`,
/// written to `dir`.
fn daemonset_config(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(deploy_dir().join("configmap.yaml")).unwrap();
    let configmap: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        configmap["data"]["config.yaml"]
            .as_str()
            .expect("configmap.yaml has data config.yaml"),
    )
    .unwrap();
    path
}

#[test]
fn the_configurations_in_the_manifests_pass_check_config() {
    let work = tempfile::tempdir().unwrap();
    let daemonset = daemonset_config(work.path());
    for (file, path) in [
        ("configmap.yaml", daemonset),
        (
            "sidecar/config.yaml",
            deploy_dir().join("sidecar/config.yaml"),
        ),
        (
            "example-config.yaml",
            deploy_dir().join("example-config.yaml"),
        ),
    ] {
        let out = std::process::Command::new(resource_proxy_binary())
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "check-config {file}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("target identity: loft:vcluster:p-default:client-a"),
            "{file} is not for the client the RBAC names:\n{stdout}"
        );
    }
}

/// `kubectl auth can-i` as `user`: true for "yes".
async fn can_i(cluster: &Cluster, user: &str, args: &[&str]) -> bool {
    let out = cluster
        .kubectl()
        .args(["auth", "can-i", "--as", user])
        .args(args)
        .output()
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {}: {answer} {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

/// Every API call of the proxy in the client cluster (wiring.rs, serving.rs, caller_auth.rs,
/// handler.rs and the leader election), as `kubectl auth can-i` arguments.
const CLIENT_CALLS: &[&[&str]] = &[
    // wiring.rs: APIServices listed, applied (a create on first apply), deleted when stale.
    &["list", "apiservices.apiregistration.k8s.io"],
    &["get", "apiservices.apiregistration.k8s.io"],
    &["create", "apiservices.apiregistration.k8s.io"],
    &["patch", "apiservices.apiregistration.k8s.io/v1.example.com"],
    &[
        "delete",
        "apiservices.apiregistration.k8s.io/v1.example.com",
    ],
    // wiring.rs: the ExternalName Services in kube-system.
    &["list", "services", "-n", "kube-system"],
    &["get", "services", "-n", "kube-system"],
    &["create", "services", "-n", "kube-system"],
    &[
        "patch",
        "services/proxy-example-com-v1",
        "-n",
        "kube-system",
    ],
    &[
        "delete",
        "services/proxy-example-com-v1",
        "-n",
        "kube-system",
    ],
    // wiring.rs: the refusal check.
    &["list", "customresourcedefinitions.apiextensions.k8s.io"],
    &["get", "customresourcedefinitions.apiextensions.k8s.io"],
    // wiring.rs: the deletion protection (server-side apply).
    &[
        "create",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
    ],
    &[
        "get",
        "validatingadmissionpolicies.admissionregistration.k8s.io/vcluster-protected-apiservices",
    ],
    &[
        "patch",
        "validatingadmissionpolicies.admissionregistration.k8s.io/vcluster-protected-apiservices",
    ],
    &[
        "create",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    ],
    &[
        "patch",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io/vcluster-protected-resource-proxy",
    ],
    // wiring.rs: who the proxy is.
    &["create", "selfsubjectreviews.authentication.k8s.io"],
    // handler.rs: the namespace of a namespaced write.
    &["get", "namespaces/team-ns"],
    // reconcile/namespaces.rs: the sweep lists the client's namespaces.
    &["list", "namespaces"],
    // Leader election: the Lease kube-system/resource-proxy-client-a.
    &["create", "leases.coordination.k8s.io", "-n", "kube-system"],
    &[
        "get",
        "leases.coordination.k8s.io/resource-proxy-client-a",
        "-n",
        "kube-system",
    ],
    &[
        "update",
        "leases.coordination.k8s.io/resource-proxy-client-a",
        "-n",
        "kube-system",
    ],
    &[
        "patch",
        "leases.coordination.k8s.io/resource-proxy-client-a",
        "-n",
        "kube-system",
    ],
    // serving.rs: the shared serving certificate.
    &["create", "secrets", "-n", "kube-system"],
    &[
        "get",
        "secrets/resource-proxy-serving-client-a",
        "-n",
        "kube-system",
    ],
    &[
        "update",
        "secrets/resource-proxy-serving-client-a",
        "-n",
        "kube-system",
    ],
    // caller_auth.rs: the request-header CA, watched.
    &[
        "get",
        "configmaps/extension-apiserver-authentication",
        "-n",
        "kube-system",
    ],
    &[
        "list",
        "configmaps/extension-apiserver-authentication",
        "-n",
        "kube-system",
    ],
    &[
        "watch",
        "configmaps/extension-apiserver-authentication",
        "-n",
        "kube-system",
    ],
];

/// What the proxy's client identity must not be able to do.
const CLIENT_DENIED: &[&[&str]] = &[
    &["get", "secrets", "-n", "kube-system"],
    &["list", "secrets", "-n", "kube-system"],
    &["get", "secrets/other", "-n", "kube-system"],
    &["create", "services", "-n", "default"],
    &["delete", "namespaces/team-ns"],
    &["create", "customresourcedefinitions.apiextensions.k8s.io"],
    &[
        "update",
        "leases.coordination.k8s.io/kube-controller-manager",
        "-n",
        "kube-system",
    ],
    &[
        "delete",
        "validatingadmissionpolicies.admissionregistration.k8s.io/vcluster-protected-apiservices",
    ],
    &["get", "configmaps/other", "-n", "kube-system"],
];

#[tokio::test]
async fn the_client_rbac_allows_every_call_the_proxy_makes_and_little_else() {
    let _logs = cp().logs_on_failure();
    applied().await;
    let client = cp().cluster("client");
    let mut wrong = Vec::new();
    for user in [
        "resource-proxy",
        "system:serviceaccount:kube-system:resource-proxy",
    ] {
        for call in CLIENT_CALLS {
            if !can_i(client, user, call).await {
                wrong.push(format!("{user} cannot {}", call.join(" ")));
            }
        }
        for call in CLIENT_DENIED {
            if can_i(client, user, call).await {
                wrong.push(format!("{user} can {}", call.join(" ")));
            }
        }
    }
    assert!(wrong.is_empty(), "client RBAC:\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn the_target_rbac_allows_the_proxy_identity_its_resources_and_namespaces() {
    let _logs = cp().logs_on_failure();
    applied().await;
    let target = cp().cluster("target");
    let identity = "loft:vcluster:p-default:client-a";
    let mut wrong = Vec::new();
    let mut allowed: Vec<Vec<&str>> = Vec::new();
    for verb in [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ] {
        allowed.push(vec![verb, "widgets.example.com", "-n", "team-ns"]);
        allowed.push(vec![verb, "widgets.example.com", "--all-namespaces"]);
    }
    allowed.push(vec![
        "update",
        "widgets.example.com",
        "--subresource",
        "status",
        "-n",
        "team-ns",
    ]);
    allowed.push(vec!["get", "namespaces/team-ns"]);
    allowed.push(vec!["create", "namespaces"]);
    // The namespace sweep: record the client namespace's UID, list, delete what it mirrored.
    allowed.push(vec!["list", "namespaces"]);
    allowed.push(vec!["patch", "namespaces/team-ns"]);
    allowed.push(vec!["delete", "namespaces/team-ns"]);
    allowed.push(vec!["create", "selfsubjectreviews.authentication.k8s.io"]);
    for call in &allowed {
        if !can_i(target, identity, call).await {
            wrong.push(format!("cannot {}", call.join(" ")));
        }
    }
    for call in [
        &["get", "gadgets.other.example", "-n", "team-ns"][..],
        &["get", "secrets", "-n", "team-ns"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
    ] {
        if can_i(target, identity, call).await {
            wrong.push(format!("can {}", call.join(" ")));
        }
    }
    // Another client's identity gets nothing from this role.
    if can_i(
        target,
        "loft:vcluster:p-default:client-b",
        &["list", "widgets.example.com", "-n", "team-ns"],
    )
    .await
    {
        wrong.push("client-b can list widgets".into());
    }
    assert!(wrong.is_empty(), "target RBAC:\n{}", wrong.join("\n"));
}

/// Creates `pod` (JSON) with a server-side dry run in the client cluster: (admitted, stderr).
async fn dry_run_pod(pod: &serde_json::Value) -> (bool, String) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), pod.to_string()).unwrap();
    let out = cp()
        .cluster("client")
        .kubectl()
        .args(["create", "--dry-run=server", "-f"])
        .arg(file.path())
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A namespace enforcing `restricted` (latest): PodSecurity admission refuses violating Pods.
async fn restricted_namespace() -> &'static str {
    static NAMESPACE: OnceCell<()> = OnceCell::const_new();
    const NAME: &str = "psa-restricted";
    NAMESPACE
        .get_or_init(|| async {
            let client = cp().cluster("client");
            kubectl(client, &["create", "namespace", NAME]).await;
            kubectl(
                client,
                &[
                    "label",
                    "namespace",
                    NAME,
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest",
                ],
            )
            .await;
        })
        .await;
    NAME
}

fn pod(name: &str, namespace: &str, spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// The DaemonSet runs on the host network next to a kubeadm-style kube-apiserver, which no
/// Pod Security level above `privileged` allows; everything else about its pod is `restricted`.
#[tokio::test]
async fn the_daemonset_pod_meets_restricted_except_for_its_host_network() {
    let _logs = cp().logs_on_failure();
    applied().await;
    let ns = restricted_namespace().await;
    let ds = kubectl(
        cp().cluster("client"),
        &[
            "get",
            "daemonset",
            "resource-proxy",
            "-n",
            "kube-system",
            "-o",
            "json",
        ],
    )
    .await;
    let ds: serde_json::Value = serde_json::from_str(&ds).unwrap();
    let mut spec = ds["spec"]["template"]["spec"].clone();
    // The Priority admission's business, not Pod Security's: system-cluster-critical is kept
    // for kube-system.
    spec.as_object_mut().unwrap().remove("priorityClassName");
    spec.as_object_mut().unwrap().remove("priority");
    for c in spec["containers"].as_array().unwrap() {
        for q in ["requests", "limits"] {
            assert!(
                c["resources"][q]["cpu"].is_string() && c["resources"][q]["memory"].is_string(),
                "{}: {q}",
                c["name"]
            );
        }
    }

    let (ok, stderr) = dry_run_pod(&pod("rp-host", ns, spec.clone())).await;
    assert!(!ok, "a host-network pod was admitted under restricted");
    let violations = stderr
        .split_once("violates PodSecurity \"restricted:latest\": ")
        .unwrap_or_else(|| panic!("{stderr}"))
        .1
        .trim();
    // hostNetwork defaults each hostPort to its containerPort: the same exception.
    assert_eq!(
        violations,
        "host namespaces (hostNetwork=true), hostPort (container \"resource-proxy\" uses hostPort 9099)",
        "{stderr}"
    );

    let object = spec.as_object_mut().unwrap();
    object.remove("hostNetwork");
    object.insert("dnsPolicy".into(), "ClusterFirst".into());
    for c in spec["containers"].as_array_mut().unwrap() {
        for p in c["ports"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("hostPort");
        }
    }
    let (ok, stderr) = dry_run_pod(&pod("rp-pod-network", ns, spec)).await;
    assert!(
        ok,
        "without the host network the pod must be restricted: {stderr}"
    );
}

/// The sidecar container is `restricted` by its own securityContext, whatever the control
/// plane's pod sets.
#[tokio::test]
async fn the_sidecar_container_meets_restricted_on_its_own() {
    let _logs = cp().logs_on_failure();
    let ns = restricted_namespace().await;
    let work = sidecar_kustomization();
    let dir = work.path().canonicalize().unwrap();
    let rendered = kubectl(
        cp().cluster("client"),
        &[
            "create",
            "-k",
            dir.to_str().unwrap(),
            "-n",
            ns,
            "--dry-run=client",
            "-o",
            "json",
        ],
    )
    .await;
    let items: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&rendered)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}: {rendered}"));
    let sts = items.iter().find(|i| i["kind"] == "StatefulSet").unwrap();
    let template = &sts["spec"]["template"]["spec"];
    let proxy = template["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "resource-proxy")
        .unwrap();
    let spec = serde_json::json!({"containers": [proxy], "volumes": template["volumes"]});
    let (ok, stderr) = dry_run_pod(&pod("rp-sidecar", ns, spec.clone())).await;
    assert!(ok, "the sidecar container alone was refused: {stderr}");
    // The control plane's own container (no securityContext) is what the pod would be refused for.
    let (ok, stderr) = dry_run_pod(&pod("rp-sidecar-sts", ns, template.clone())).await;
    assert!(!ok, "the unhardened syncer was admitted");
    assert!(
        stderr.contains("container \"syncer\"") && !stderr.contains("container \"resource-proxy\""),
        "{stderr}"
    );
}
