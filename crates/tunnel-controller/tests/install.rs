//! The install manifests under `deploy/tunnel-gateway/` against a real API server with the
//! Gateway API CRDs: the kustomization applies (server-side dry run, then for real, within the
//! namespace's restricted Pod Security level), its pieces name each other consistently, the
//! examples and the guide's manifests are accepted, and the controller's RBAC allows every call
//! the controller makes and none of what it must not do.

use std::path::{Path, PathBuf};

use serde_json::Value;
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ControlPlaneBuilder};
use tokio::sync::OnceCell;

const NAMESPACE: &str = "tunnel-gateway-system";
const ACCOUNT: &str = "system:serviceaccount:tunnel-gateway-system:tunnel-gateway-controller";

fn spec() -> ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("install"))
        .gateway_api()
        .prometheus_operator()
}

fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(spec)
}

fn cluster() -> &'static Cluster {
    cp().cluster("install")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn deploy_dir() -> PathBuf {
    repo_root().join("deploy/tunnel-gateway")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// kubectl as admin: (success, stdout, stderr).
async fn kubectl(args: &[&str], input: Option<&str>) -> (bool, String, String) {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;
    let mut child = cluster()
        .kubectl()
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input.as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn kubectl_ok(args: &[&str]) -> String {
    cluster()
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// What installing printed: the server-side dry run's stdout, then the real apply's stderr.
struct Installed {
    dry_run: String,
    apply_stderr: String,
}

/// Installs once per test binary: the project CRDs and the namespace first (a dry run cannot
/// create objects of a CRD, nor in a namespace, that it has not created), the kustomization
/// with a server-side dry run, then for real.
async fn installed() -> &'static Installed {
    static INSTALLED: OnceCell<Installed> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let admin = cluster().client().await.unwrap();
            test_cluster::manifests::apply_crds_yaml(
                &admin,
                &read(&deploy_dir().join("crds.yaml")),
            )
            .await
            .unwrap();
            test_cluster::manifests::apply_yaml(
                &admin,
                &read(&deploy_dir().join("namespace.yaml")),
                "default",
            )
            .await
            .unwrap();
            let dir = deploy_dir();
            let dir = dir.to_str().unwrap();
            let (ok, dry_run, stderr) =
                kubectl(&["apply", "-k", dir, "--dry-run=server"], None).await;
            assert!(ok, "kubectl apply -k --dry-run=server failed: {stderr}");
            let (ok, _, apply_stderr) = kubectl(&["apply", "-k", dir], None).await;
            assert!(ok, "kubectl apply -k failed: {apply_stderr}");
            Installed {
                dry_run,
                apply_stderr,
            }
        })
        .await
}

#[tokio::test]
async fn the_kustomization_applies_with_server_dry_run() {
    let _logs = cp().logs_on_failure();
    let out = &installed().await.dry_run;
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/gatewayclassconfigs.cf.k8s.lex.la",
        "customresourcedefinition.apiextensions.k8s.io/gatewayconfigs.cf.k8s.lex.la",
        "namespace/tunnel-gateway-system",
        "serviceaccount/tunnel-gateway-controller",
        "clusterrole.rbac.authorization.k8s.io/tunnel-gateway-controller",
        "clusterrolebinding.rbac.authorization.k8s.io/tunnel-gateway-controller",
        "role.rbac.authorization.k8s.io/tunnel-gateway-controller-leader-election",
        "rolebinding.rbac.authorization.k8s.io/tunnel-gateway-controller-leader-election",
        "deployment.apps/tunnel-gateway-controller",
        "deployment.apps/tunnel-proxy",
        "service/tunnel-proxy-config",
        "networkpolicy.networking.k8s.io/tunnel-proxy",
        "poddisruptionbudget.policy/tunnel-proxy",
        "poddisruptionbudget.policy/tunnel-gateway-controller",
        "gatewayclass.gateway.networking.k8s.io/cloudflare-tunnel",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{object} ")))
            .unwrap_or_else(|| panic!("no {object} in the dry run:\n{out}"));
        assert!(line.ends_with("(server dry run)"), "{line}");
    }
    // The GatewayClass is cluster-scoped although kustomize gave it the namespace.
    let class = kubectl_ok(&["get", "gatewayclass", "cloudflare-tunnel", "-o", "json"]).await;
    let class: Value = serde_json::from_str(&class).unwrap();
    assert!(class["metadata"].get("namespace").is_none(), "{class}");
}

/// The opt-in monitoring component (deploy/tunnel-gateway/monitoring) composed with the install
/// as the guide says, against the Prometheus Operator CRDs: the API server accepts its
/// PodMonitors, PrometheusRule, dashboard ConfigMap and NetworkPolicy, and the controller gets
/// the monitoring namespace for the dedicated planes' NetworkPolicies.
#[tokio::test]
async fn the_monitoring_component_applies_with_the_prometheus_operator_crds() {
    let _logs = cp().logs_on_failure();
    installed().await;
    let dir = deploy_dir();
    let work =
        test_cluster::manifests::kustomization_with(&[&dir], &[&dir.join("monitoring")]).unwrap();
    let path = work.path().to_str().unwrap();
    let (ok, out, stderr) = kubectl(&["apply", "-k", path, "--dry-run=server"], None).await;
    assert!(ok, "kubectl apply -k --dry-run=server failed: {stderr}");
    for object in [
        "podmonitor.monitoring.coreos.com/tunnel-gateway-controller created",
        "podmonitor.monitoring.coreos.com/tunnel-proxy created",
        "prometheusrule.monitoring.coreos.com/tunnel-gateway created",
        "configmap/tunnel-gateway-dashboard created",
        "networkpolicy.networking.k8s.io/tunnel-proxy-metrics created",
        "deployment.apps/tunnel-gateway-controller configured",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(object) && l.ends_with("(server dry run)")),
            "no {object} in the dry run:\n{out}"
        );
    }
    // What the server would store: the dashboard for the Grafana sidecar, the controller's flag.
    let (ok, json, stderr) = kubectl(
        &["apply", "-k", path, "--dry-run=server", "-o", "json"],
        None,
    )
    .await;
    assert!(ok, "{stderr}");
    let list: Value = serde_json::from_str(&json).unwrap();
    let items = list["items"].as_array().unwrap();
    let cm = items
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "tunnel-gateway-dashboard")
        .unwrap();
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value =
        serde_json::from_str(cm["data"]["tunnel-gateway.json"].as_str().unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
    let controller = find(items, "Deployment", "tunnel-gateway-controller");
    let env = &controller["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "CF_MONITORING_NAMESPACE_LABELS"
                && e["value"] == "kubernetes.io/metadata.name=monitoring"),
        "{env}"
    );
}

/// A Pod made of `template`'s spec, created with a server-side dry run in the install
/// namespace: (admitted, kubectl's stderr).
async fn dry_run_pod(name: &str, template: &Value) -> (bool, String) {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    });
    let (ok, _, stderr) = kubectl(
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod.to_string()),
    )
    .await;
    (ok, stderr)
}

/// The namespace enforces `restricted` (latest), and the API server's PodSecurity admission
/// admits a Pod made of every workload template of the kustomization, and refuses one made of
/// the controller's template with a single field loosened. (Deployments themselves are only
/// warned about; Pods are what enforcement refuses, and with no node here none is created.)
#[tokio::test]
async fn every_pod_template_is_admitted_by_restricted_pod_security_enforcement() {
    let _logs = cp().logs_on_failure();
    let stderr = &installed().await.apply_stderr;
    assert!(!stderr.contains("PodSecurity"), "{stderr}");
    let ns: Value =
        serde_json::from_str(&kubectl_ok(&["get", "namespace", NAMESPACE, "-o", "json"]).await)
            .unwrap();
    let labels = &ns["metadata"]["labels"];
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce"], "restricted",
        "{labels}"
    );
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce-version"], "latest",
        "{labels}"
    );

    let objects = rendered().await;
    let workloads: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("Deployment" | "DaemonSet" | "StatefulSet")
            )
        })
        .collect();
    assert_eq!(workloads.len(), 2, "the controller and the shared plane");
    for w in &workloads {
        let name = w["metadata"]["name"].as_str().unwrap();
        let template = &w["spec"]["template"];
        let (ok, stderr) = dry_run_pod(&format!("{name}-psa"), template).await;
        assert!(ok, "a Pod of {name}'s template was refused: {stderr}");
        let inits = template["spec"]["initContainers"].as_array().into_iter();
        let apps = template["spec"]["containers"].as_array().into_iter();
        for c in inits.chain(apps).flatten() {
            let r = &c["resources"];
            for q in ["requests", "limits"] {
                assert!(
                    r[q]["cpu"].is_string() && r[q]["memory"].is_string(),
                    "{name}/{}: {q}",
                    c["name"]
                );
            }
        }
    }

    // Each single loosening is refused, naming the check it fails.
    let controller = find(&objects, "Deployment", "tunnel-gateway-controller");
    // (privileged with allowPrivilegeEscalation false is invalid before admission is asked.)
    for (field, value, check) in [
        (
            "privileged",
            serde_json::json!(true),
            "privileged (container",
        ),
        (
            "allowPrivilegeEscalation",
            serde_json::json!(true),
            "allowPrivilegeEscalation != false",
        ),
        (
            "capabilities",
            serde_json::json!({"add": ["NET_ADMIN"], "drop": ["ALL"]}),
            "unrestricted capabilities",
        ),
        ("runAsUser", serde_json::json!(0), "runAsUser=0"),
        (
            "seccompProfile",
            serde_json::json!({"type": "Unconfined"}),
            "seccompProfile",
        ),
    ] {
        let mut template = controller["spec"]["template"].clone();
        let sc = &mut template["spec"]["containers"][0]["securityContext"];
        sc[field] = value;
        if field == "privileged" {
            sc["allowPrivilegeEscalation"] = true.into();
        }
        let (ok, stderr) = dry_run_pod("loosened", &template).await;
        assert!(!ok, "{field} loosened was admitted");
        assert!(
            stderr.contains("violates PodSecurity \"restricted:latest\"") && stderr.contains(check),
            "{field}: {stderr}"
        );
    }
}

/// Every object `kubectl kustomize` renders.
async fn rendered() -> Vec<Value> {
    let yaml = kubectl_ok(&["kustomize", deploy_dir().to_str().unwrap()]).await;
    serde_saphyr::from_multiple(&yaml).unwrap()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the kustomization"))
}

/// The container `name` of the Deployment's Pods, an init container or not.
fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    let pod = &deployment["spec"]["template"]["spec"];
    let inits = pod["initContainers"].as_array().into_iter().flatten();
    inits
        .chain(pod["containers"].as_array().into_iter().flatten())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no env {name} in {}", container["name"]))
}

/// Whether every key/value of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn port_number(container: &Value, name: &str) -> u64 {
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no port {name} on {}", container["name"]))
}

fn seconds(duration: &Value) -> u64 {
    duration
        .as_str()
        .and_then(|d| d.strip_suffix('s'))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("{duration} is not whole seconds"))
}

#[tokio::test]
async fn the_controller_deployment_runs_as_the_interface_expects() {
    let objects = rendered().await;
    let deployment = find(&objects, "Deployment", "tunnel-gateway-controller");
    assert_eq!(deployment["metadata"]["namespace"], NAMESPACE);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "tunnel-gateway-controller");
    let c = container(deployment, "controller");
    assert_eq!(
        c["image"],
        "ghcr.io/kube-tenancy/tunnel-gateway-controller:0.1.0"
    );
    for (var, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(env(c, var)["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    assert_eq!(
        env(c, "CF_PROXY_IMAGE")["value"],
        "ghcr.io/kube-tenancy/tunnel-proxy:0.1.0"
    );
    let connector = env(c, "CF_CONNECTOR_IMAGE")["value"].as_str().unwrap();
    assert!(
        connector.starts_with("cloudflare/cloudflared:20"),
        "{connector}"
    );
    // --admin-addr defaults to 0.0.0.0:8080: both probes there.
    assert_eq!(port_number(c, "admin"), 8080);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "admin");
    assert!(c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object());
    assert_hardened(pod, c);
    // The ClusterRoleBinding and the RoleBinding bind exactly this account.
    for (kind, name) in [
        ("ClusterRoleBinding", "tunnel-gateway-controller"),
        ("RoleBinding", "tunnel-gateway-controller-leader-election"),
    ] {
        let subjects = &find(&objects, kind, name)["subjects"];
        assert_eq!(
            subjects,
            &serde_json::json!([{"kind": "ServiceAccount", "name": "tunnel-gateway-controller", "namespace": NAMESPACE}]),
            "{kind} {name}"
        );
    }
}

fn assert_hardened(pod: &Value, c: &Value) {
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{}", c["name"]);
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{}", c["name"]);
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{}",
        c["name"]
    );
}

#[tokio::test]
async fn the_shared_plane_pieces_fit_together() {
    let objects = rendered().await;
    let deployment = find(&objects, "Deployment", "tunnel-proxy");
    let pod = &deployment["spec"]["template"]["spec"];
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let proxy = container(deployment, "proxy");
    let cloudflared = container(deployment, "cloudflared");
    assert_eq!(proxy["image"], "ghcr.io/kube-tenancy/tunnel-proxy:0.1.0");
    assert_hardened(pod, proxy);
    assert_hardened(pod, cloudflared);

    // Traffic only through the connector: the data-plane port is on loopback.
    assert_eq!(env(proxy, "TUNNEL_PROXY_LISTEN")["value"], "127.0.0.1:8080");
    assert_eq!(port_number(proxy, "http"), 8080);
    assert_eq!(port_number(proxy, "admin"), 8081);
    assert_eq!(proxy["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(proxy["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(proxy["livenessProbe"]["httpGet"]["port"], "admin");

    // The config API over mutual TLS, on by default: the proxy serves it on 8443 from the
    // Secret the controller writes (--shared-plane-tls-secret, whose default the controller
    // keeps), and the controller pushes over TLS (no CF_CONFIG_API_TLS=false).
    assert_eq!(port_number(proxy, "config-api"), 8443);
    assert_eq!(
        env(proxy, "TUNNEL_PROXY_CONFIG_LISTEN")["value"],
        format!("0.0.0.0:{}", port_number(proxy, "config-api"))
    );
    let tls_dir = env(proxy, "PROXY_CONFIG_TLS_DIR")["value"]
        .as_str()
        .unwrap();
    let mount = proxy["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == tls_dir)
        .unwrap_or_else(|| panic!("nothing mounted at {tls_dir}"));
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        volume["secret"],
        serde_json::json!({"secretName": "tunnel-proxy-config-tls"})
    );
    let controller_env = container(
        find(&objects, "Deployment", "tunnel-gateway-controller"),
        "controller",
    )["env"]
        .as_array()
        .unwrap();
    assert!(
        controller_env
            .iter()
            .all(|e| e["name"] != "CF_CONFIG_API_TLS" && e["name"] != "CF_SHARED_PLANE_TLS_SECRET"),
        "{controller_env:?}"
    );

    // The config-API token is the Secret the controller creates (--shared-plane-auth-secret).
    assert_eq!(
        env(proxy, "PROXY_AUTH_TOKEN")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "tunnel-proxy-auth", "key": "auth-token"})
    );
    // The proxy is a native sidecar and the connector the main container: the kubelet starts
    // the connector once the proxy's startup probe passes (/readyz: a config is loaded), and
    // stops it before the proxy.
    assert_eq!(pod["initContainers"].as_array().unwrap().len(), 1, "{pod}");
    assert_eq!(pod["initContainers"][0]["name"], "proxy");
    assert_eq!(proxy["restartPolicy"], "Always");
    let names: Vec<&Value> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(names, ["cloudflared"]);
    let startup = &proxy["startupProbe"];
    assert_eq!(startup["httpGet"]["path"], "/readyz");
    assert_eq!(startup["httpGet"]["port"], "admin");
    assert_eq!(startup["periodSeconds"], 1);
    let patience =
        startup["periodSeconds"].as_u64().unwrap() * startup["failureThreshold"].as_u64().unwrap();
    assert!(patience >= 24 * 3600, "{patience} s before a restart");

    // Only the connector holds the connector token; the proxy, without it, does not wait for
    // the connector (that would never start), which reports its own readiness.
    assert_eq!(
        env(cloudflared, "TUNNEL_TOKEN")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "cloudflare-tunnel-token", "key": "tunnel-token"})
    );
    for name in ["TUNNEL_TOKEN", "TUNNEL_PROXY_CONNECTOR_READY_URL"] {
        assert!(
            proxy["env"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["name"] != name),
            "{name} on the proxy"
        );
    }
    let image = cloudflared["image"].as_str().unwrap();
    let tag = image.strip_prefix("cloudflare/cloudflared:").unwrap();
    assert!(tag.starts_with("20") && tag != "latest", "{image}");
    let args: Vec<&str> = cloudflared["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..2], ["tunnel", "--no-autoupdate"], "{args:?}");
    assert_eq!(args.last(), Some(&"run"), "{args:?}");
    let arg = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
    assert_eq!(
        arg("--metrics"),
        format!("0.0.0.0:{}", port_number(cloudflared, "metrics"))
    );
    assert_eq!(cloudflared["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(cloudflared["readinessProbe"]["httpGet"]["port"], "metrics");

    // The pod outlives the connector's drain, then the proxy's grace period and drain timeout.
    let drain = seconds(&Value::from(arg("--grace-period")))
        + seconds(&env(proxy, "PROXY_GRACE_PERIOD")["value"])
        + seconds(&env(proxy, "PROXY_DRAIN_TIMEOUT")["value"]);
    let termination = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(termination > drain, "{termination} s <= {drain} s");

    // The config Service (--shared-plane-service) lists every proxy pod, ready or not.
    let service = find(&objects, "Service", "tunnel-proxy-config");
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    assert!(selects(&service["spec"]["selector"], labels));
    assert_eq!(
        service["spec"]["ports"],
        serde_json::json!([{"name": "config-api", "port": 8443, "targetPort": "config-api", "protocol": "TCP"}])
    );

    // Only the controller's pods, by labels and namespace, reach 8443; nothing else is allowed.
    let controller = find(&objects, "Deployment", "tunnel-gateway-controller");
    let policy = find(&objects, "NetworkPolicy", "tunnel-proxy");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        labels
    ));
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    assert_eq!(
        ingress[0]["ports"],
        serde_json::json!([{"protocol": "TCP", "port": 8443}])
    );
    let from = ingress[0]["from"].as_array().unwrap();
    assert_eq!(from.len(), 1, "one peer holding both selectors: {from:?}");
    assert!(selects(
        &from[0]["podSelector"]["matchLabels"],
        &controller["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"],
        serde_json::json!({"kubernetes.io/metadata.name": controller["metadata"]["namespace"]})
    );

    let class = find(&objects, "GatewayClass", "cloudflare-tunnel");
    assert_eq!(
        class["spec"]["controllerName"],
        "cf.k8s.lex.la/tunnel-controller"
    );
    assert_eq!(
        class["spec"]["parametersRef"],
        serde_json::json!({"group": "cf.k8s.lex.la", "kind": "GatewayClassConfig", "name": "cloudflare-tunnel"})
    );
}

/// The YAML blocks of the guide, each a complete manifest (fences may be indented in a list).
fn guide_manifests() -> Vec<String> {
    let guide = read(&repo_root().join("docs/tunnel-gateway.md"));
    let mut blocks = Vec::new();
    // The block so far and its fence's indentation.
    let mut current: Option<(String, usize)> = None;
    for line in guide.lines() {
        let indent = line.len() - line.trim_start().len();
        match (&mut current, line.trim()) {
            (None, "```yaml") => current = Some((String::new(), indent)),
            (Some((block, _)), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some((block, fence)), _) => {
                block.push_str(line.get(*fence..).unwrap_or_default());
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[tokio::test]
async fn the_examples_and_the_guide_manifests_are_accepted() {
    let _logs = cp().logs_on_failure();
    installed().await;
    let admin = cluster().client().await.unwrap();
    let examples = deploy_dir().join("examples");
    let mut manifests: Vec<(String, String)> =
        ["secrets.yaml", "gatewayclassconfig.yaml", "routes.yaml"]
            .iter()
            .map(|f| (format!("examples/{f}"), read(&examples.join(f))))
            .collect();
    let guide = guide_manifests();
    assert!(
        guide.len() >= 4,
        "the guide shows {} manifests",
        guide.len()
    );
    manifests.extend(
        guide
            .into_iter()
            .enumerate()
            .map(|(i, m)| (format!("docs/tunnel-gateway.md yaml block {}", i + 1), m)),
    );
    for (name, yaml) in manifests {
        let applied = test_cluster::manifests::apply_yaml(&admin, &yaml, "default")
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}\n{yaml}"));
        assert!(!applied.is_empty(), "{name} holds no object");
    }
    // What the examples made: the class parameters and the cross-namespace route.
    let config = kubectl_ok(&[
        "get",
        "gcconfig",
        "cloudflare-tunnel",
        "-o",
        "jsonpath={.spec.tunnelID}",
    ])
    .await;
    assert_eq!(config, "6ff42ae2-765d-4adf-8112-31c55c1551ef");
    let backend = kubectl_ok(&[
        "get",
        "httproute",
        "storefront",
        "-n",
        "shop",
        "-o",
        "jsonpath={.spec.rules[0].backendRefs[0].namespace}",
    ])
    .await;
    assert_eq!(backend, "catalog");
}

/// `kubectl auth can-i` as the controller's ServiceAccount: true for "yes".
async fn can_i(args: &[&str]) -> bool {
    let mut full = vec!["auth", "can-i", "--as", ACCOUNT];
    full.extend_from_slice(args);
    let (_, out, err) = kubectl(&full, None).await;
    let answer = out.trim();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {}: {answer} {err}",
        args.join(" ")
    );
    answer == "yes"
}

const GATEWAY_API: &[&str] = &[
    "gatewayclasses.gateway.networking.k8s.io",
    "gateways.gateway.networking.k8s.io",
    "listenersets.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
    "grpcroutes.gateway.networking.k8s.io",
    "referencegrants.gateway.networking.k8s.io",
    "backendtlspolicies.gateway.networking.k8s.io",
];

const WATCHED_CORE: &[&str] = &[
    "services",
    "endpointslices.discovery.k8s.io",
    "secrets",
    "configmaps",
    "namespaces",
    "gatewayclassconfigs.cf.k8s.lex.la",
    "gatewayconfigs.cf.k8s.lex.la",
];

const STATUS_WRITTEN: &[&str] = &[
    "gatewayclasses.gateway.networking.k8s.io",
    "gateways.gateway.networking.k8s.io",
    "listenersets.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
    "grpcroutes.gateway.networking.k8s.io",
    "backendtlspolicies.gateway.networking.k8s.io",
    "gatewayclassconfigs.cf.k8s.lex.la",
];

const DEDICATED_PLANE: &[&str] = &[
    "deployments.apps",
    "services",
    "networkpolicies.networking.k8s.io",
    "horizontalpodautoscalers.autoscaling",
    "poddisruptionbudgets.policy",
];

/// Every API call of the controller, as `kubectl auth can-i` arguments.
fn controller_calls() -> Vec<Vec<String>> {
    let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut calls = Vec::new();
    // Watched cluster-wide.
    for resource in GATEWAY_API.iter().chain(WATCHED_CORE) {
        for verb in ["get", "list", "watch"] {
            calls.push(owned(&[verb, resource, "--all-namespaces"]));
        }
    }
    // Status of the objects it reconciles, in any namespace.
    for resource in STATUS_WRITTEN {
        calls.push(owned(&[
            "patch",
            resource,
            "--subresource=status",
            "-n",
            "team-a",
        ]));
    }
    // The GatewayClass finalizer.
    calls.push(owned(&[
        "patch",
        "gatewayclasses.gateway.networking.k8s.io/cloudflare-tunnel",
    ]));
    // Events on Gateways and routes.
    calls.push(owned(&["create", "events.events.k8s.io", "-n", "team-a"]));
    calls.push(owned(&["patch", "events.events.k8s.io", "-n", "team-a"]));
    // The shared plane's auth Secret and a dedicated plane's.
    calls.push(owned(&["create", "secrets", "-n", NAMESPACE]));
    calls.push(owned(&["create", "secrets", "-n", "team-a"]));
    // The config API's CA Secret and the planes' TLS Secrets, renewed in place.
    calls.push(owned(&["update", "secrets", "-n", NAMESPACE]));
    calls.push(owned(&["update", "secrets", "-n", "team-a"]));
    // Dedicated planes in Gateway namespaces.
    for resource in DEDICATED_PLANE {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            calls.push(owned(&[verb, resource, "-n", "team-a"]));
        }
    }
    // Leader election in its own namespace.
    calls.push(owned(&[
        "create",
        "leases.coordination.k8s.io",
        "-n",
        NAMESPACE,
    ]));
    for verb in ["get", "update", "patch"] {
        calls.push(owned(&[
            verb,
            "leases.coordination.k8s.io/tunnel-gateway-controller",
            "-n",
            NAMESPACE,
        ]));
    }
    calls
}

#[tokio::test]
async fn the_controller_account_can_make_every_call_of_the_controller() {
    let _logs = cp().logs_on_failure();
    installed().await;
    let mut refused = Vec::new();
    for call in controller_calls() {
        let args: Vec<&str> = call.iter().map(String::as_str).collect();
        if !can_i(&args).await {
            refused.push(call.join(" "));
        }
    }
    assert!(
        refused.is_empty(),
        "refused to the controller: {refused:#?}"
    );
}

/// What the controller's account must not do.
const DENIED: &[&[&str]] = &[
    // Secrets: created, read and (the config API's certificates) updated; never patched or
    // removed.
    &["patch", "secrets/tunnel-proxy-auth", "-n", NAMESPACE],
    &["delete", "secrets/tunnel-proxy-auth", "-n", NAMESPACE],
    &["patch", "secrets", "-n", "team-a"],
    &["delete", "secrets", "-n", "team-a"],
    &["deletecollection", "secrets", "-n", "team-a"],
    // No pods, no exec, no logs, no tokens.
    &["get", "pods", "--all-namespaces"],
    &["list", "pods", "--all-namespaces"],
    &["create", "pods", "-n", "team-a"],
    &["create", "pods", "--subresource=exec", "-n", NAMESPACE],
    &["get", "pods", "--subresource=log", "-n", NAMESPACE],
    &[
        "create",
        "serviceaccounts",
        "--subresource=token",
        "-n",
        NAMESPACE,
    ],
    // Leases only its own, only in its namespace.
    &[
        "update",
        "leases.coordination.k8s.io/tunnel-gateway-controller",
        "-n",
        "kube-system",
    ],
    &["create", "leases.coordination.k8s.io", "-n", "kube-system"],
    &[
        "update",
        "leases.coordination.k8s.io/kube-scheduler",
        "-n",
        NAMESPACE,
    ],
    &[
        "delete",
        "leases.coordination.k8s.io/tunnel-gateway-controller",
        "-n",
        NAMESPACE,
    ],
    // CRDs.
    &["create", "customresourcedefinitions.apiextensions.k8s.io"],
    &[
        "update",
        "customresourcedefinitions.apiextensions.k8s.io/gatewayclassconfigs.cf.k8s.lex.la",
    ],
    &[
        "patch",
        "customresourcedefinitions.apiextensions.k8s.io/gatewayclassconfigs.cf.k8s.lex.la",
    ],
    &[
        "delete",
        "customresourcedefinitions.apiextensions.k8s.io/gatewayclassconfigs.cf.k8s.lex.la",
    ],
    // RBAC.
    &[
        "create",
        "rolebindings.rbac.authorization.k8s.io",
        "-n",
        NAMESPACE,
    ],
    &[
        "update",
        "rolebindings.rbac.authorization.k8s.io/tunnel-gateway-controller-leader-election",
        "-n",
        NAMESPACE,
    ],
    &[
        "patch",
        "rolebindings.rbac.authorization.k8s.io/tunnel-gateway-controller-leader-election",
        "-n",
        NAMESPACE,
    ],
    &[
        "delete",
        "rolebindings.rbac.authorization.k8s.io/tunnel-gateway-controller-leader-election",
        "-n",
        NAMESPACE,
    ],
    &[
        "create",
        "rolebindings.rbac.authorization.k8s.io",
        "-n",
        "team-a",
    ],
    &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
    &[
        "escalate",
        "clusterroles.rbac.authorization.k8s.io/tunnel-gateway-controller",
    ],
    &[
        "bind",
        "clusterroles.rbac.authorization.k8s.io/cluster-admin",
    ],
    &["impersonate", "users"],
    // The users' own objects: only their status.
    &[
        "update",
        "gateways.gateway.networking.k8s.io",
        "-n",
        "team-a",
    ],
    &[
        "delete",
        "gateways.gateway.networking.k8s.io",
        "-n",
        "team-a",
    ],
    &[
        "create",
        "httproutes.gateway.networking.k8s.io",
        "-n",
        "team-a",
    ],
    &[
        "patch",
        "httproutes.gateway.networking.k8s.io",
        "-n",
        "team-a",
    ],
    &["patch", "gatewayconfigs.cf.k8s.lex.la", "-n", "team-a"],
    &[
        "delete",
        "gatewayclassconfigs.cf.k8s.lex.la/cloudflare-tunnel",
    ],
    &["patch", "configmaps", "-n", "team-a"],
    &["delete", "namespaces/team-a"],
    &["get", "nodes"],
];

#[tokio::test]
async fn the_controller_account_cannot_do_more() {
    let _logs = cp().logs_on_failure();
    installed().await;
    let mut allowed = Vec::new();
    for args in DENIED {
        if can_i(args).await {
            allowed.push(args.join(" "));
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed to the controller: {allowed:#?}"
    );

    // No wildcard anywhere in its roles.
    for (kind, namespace, name) in [
        ("clusterrole", None, "tunnel-gateway-controller"),
        (
            "role",
            Some(NAMESPACE),
            "tunnel-gateway-controller-leader-election",
        ),
    ] {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        let role: Value = serde_json::from_str(&kubectl_ok(&args).await).unwrap();
        let rules = role["rules"].as_array().unwrap();
        assert!(!rules.is_empty(), "{kind} {name} has no rules");
        for rule in rules {
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "{kind} {name}: {rule}"
            );
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                for value in rule[field].as_array().into_iter().flatten() {
                    assert!(
                        !value.as_str().unwrap().contains('*'),
                        "{kind} {name} has a wildcard in {field}: {rule}"
                    );
                }
            }
        }
    }
}
