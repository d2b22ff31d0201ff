//! The Helm charts without a cluster: `helm lint`, `helm template` with the default values and
//! with others (what a value changes in the objects), values refused by `values.schema.json`
//! with the field named (a misspelt key, a wrong type, a setting the `restricted` Pod Security
//! Standard forbids), and `deploy/` is exactly what the charts render (the drift check).
//! Installing them into real clusters: `tests/install.rs` here (the resource proxy) and the
//! tunnel controller's `on_node` tests (the tunnel gateway, `helm.rs`).

use charts::{Chart, RESOURCE_PROXY, TUNNEL_GATEWAY, find, lint, pod_templates, template};
use serde_json::Value;

/// Values other than the defaults for each chart: every group of settings changed.
const TUNNEL_GATEWAY_VALUES: &str = r#"
commonLabels: {team: edge}
image: {tag: "0.2.0"}
replicaCount: 3
controller:
  controllerName: example.com/tunnels
  cloudflareApiUrl: http://cloudflare.example:8787/client/v4
  extraEnv: [{name: RUST_LOG, value: debug}]
resources: {requests: {cpu: 200m, memory: 256Mi}, limits: {cpu: "2", memory: 1Gi}}
gatewayClass: {name: tunnels}
gatewayClassConfig:
  create: true
  name: tunnels
  tunnelID: 6ff42ae2-765d-4adf-8112-31c55c1551ef
  accountId: 0123456789abcdef0123456789abcdef
  maxDataPlanesPerNamespace: 2
  hostnameOwnership:
    delegations: [{namespaces: [team-a], hostnames: ["*.a.example.com"]}]
  dns: {enabled: true, ownerId: cluster-1}
hostnameOwnershipPolicy: {enabled: true}
proxy:
  replicas: 4
  image: {repository: registry.example/tunnel-proxy, tag: "0.2.0"}
  tunnelTokenSecretRef: {name: my-tunnel, key: token}
  podDisruptionBudget: {enabled: false}
connector: {image: {tag: 2026.1.0}}
networkPolicy: {enabled: false}
monitoring:
  prometheusNamespaceLabels: {kubernetes.io/metadata.name: observability}
  labels: {release: prom}
podMonitor: {enabled: true, interval: 15s}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
"#;

const RESOURCE_PROXY_VALUES: &str = r#"
image: {repository: registry.example/resource-proxy, tag: "0.2.0"}
logFormat: text
config:
  client: {name: tenant-b, project: blue, inCluster: true}
  customResources:
    gadgets.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}
  targets:
    blue/target:
      peers: {static: ["10.0.0.20:6443"]}
      tls: {caFile: /etc/resource-proxy/target/ca.crt}
      credential: {tokenFile: /etc/resource-proxy/target/token}
  metrics: {address: 0.0.0.0:9199}
targetSecretName: tenant-b-target
podMonitor: {enabled: true}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
"#;

fn objects(chart: Chart, values: &str) -> Vec<Value> {
    template(chart, values).unwrap_or_else(|e| panic!("{}: {e}", chart.name))
}

fn get<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(objects, kind, name).unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod[*k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == name))
}

fn kinds_and_names(objects: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn both_charts_pass_helm_lint_with_default_and_other_values() {
    for (chart, values) in [
        (TUNNEL_GATEWAY, ""),
        (TUNNEL_GATEWAY, TUNNEL_GATEWAY_VALUES),
        (RESOURCE_PROXY, ""),
        (RESOURCE_PROXY, RESOURCE_PROXY_VALUES),
    ] {
        let report = lint(chart, values).unwrap_or_else(|e| panic!("{}: {e}", chart.name));
        assert!(report.contains("0 chart(s) failed"), "{report}");
    }
}

#[test]
fn deploy_is_what_the_charts_render() {
    let helm = test_cluster::helm().unwrap();
    let out = std::process::Command::new("bash")
        .arg(test_cluster::repo_root().join("scripts/render-deploy.sh"))
        .arg("--check")
        .env("HELM", helm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_tunnel_gateway_defaults_render_the_install_and_nothing_opt_in() {
    let objects = objects(TUNNEL_GATEWAY, "");
    assert_eq!(
        kinds_and_names(&objects),
        [
            "ClusterRole/tunnel-gateway-controller",
            "ClusterRoleBinding/tunnel-gateway-controller",
            "CustomResourceDefinition/accesspolicies.cf.k8s.lex.la",
            "CustomResourceDefinition/gatewayclassconfigs.cf.k8s.lex.la",
            "CustomResourceDefinition/gatewayconfigs.cf.k8s.lex.la",
            "Deployment/tunnel-gateway-controller",
            "Deployment/tunnel-proxy",
            "GatewayClass/cloudflare-tunnel",
            "NetworkPolicy/tunnel-proxy",
            "PodDisruptionBudget/tunnel-gateway-controller",
            "PodDisruptionBudget/tunnel-proxy",
            "Role/tunnel-gateway-controller-leader-election",
            "RoleBinding/tunnel-gateway-controller-leader-election",
            "Service/tunnel-proxy-config",
            "ServiceAccount/tunnel-gateway-controller",
        ]
    );
    for o in &objects {
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "tunnel-gateway-system", "{o}");
        }
    }
    let controller = &get(&objects, "Deployment", "tunnel-gateway-controller")["spec"];
    assert_eq!(controller["replicas"], 2);
    let c = container(&controller["template"]["spec"], "controller");
    assert_eq!(
        c["image"],
        "ghcr.io/kube-tenancy/tunnel-gateway-controller:0.1.0"
    );
    // The controller's defaults: no API URL, controller name or monitoring namespace set.
    for name in [
        "CF_API_URL",
        "CF_CONTROLLER_NAME",
        "CF_MONITORING_NAMESPACE_LABELS",
    ] {
        assert!(env(c, name).is_none(), "{name} set by default");
    }
}

#[test]
fn tunnel_gateway_values_reach_the_objects() {
    let objects = objects(TUNNEL_GATEWAY, TUNNEL_GATEWAY_VALUES);
    for o in objects
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
    {
        assert_eq!(o["metadata"]["labels"]["team"], "edge", "{o}");
    }
    let controller = &get(&objects, "Deployment", "tunnel-gateway-controller")["spec"];
    assert_eq!(controller["replicas"], 3);
    let c = container(&controller["template"]["spec"], "controller");
    assert_eq!(
        c["image"],
        "ghcr.io/kube-tenancy/tunnel-gateway-controller:0.2.0"
    );
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    let value = |name: &str| env(c, name).map(|e| e["value"].clone());
    assert_eq!(
        value("CF_CONTROLLER_NAME"),
        Some("example.com/tunnels".into())
    );
    assert_eq!(
        value("CF_API_URL"),
        Some("http://cloudflare.example:8787/client/v4".into())
    );
    assert_eq!(value("RUST_LOG"), Some("debug".into()));
    // The dedicated planes get the chart's images.
    assert_eq!(
        value("CF_PROXY_IMAGE"),
        Some("registry.example/tunnel-proxy:0.2.0".into())
    );
    assert_eq!(
        value("CF_CONNECTOR_IMAGE"),
        Some("cloudflare/cloudflared:2026.1.0".into())
    );
    assert_eq!(
        value("CF_MONITORING_NAMESPACE_LABELS"),
        Some("kubernetes.io/metadata.name=observability".into())
    );

    let class = get(&objects, "GatewayClass", "tunnels");
    assert_eq!(class["spec"]["controllerName"], "example.com/tunnels");
    assert_eq!(class["spec"]["parametersRef"]["name"], "tunnels");
    let config = &get(&objects, "GatewayClassConfig", "tunnels")["spec"];
    assert_eq!(config["tunnelID"], "6ff42ae2-765d-4adf-8112-31c55c1551ef");
    assert_eq!(config["maxDataPlanesPerNamespace"], 2);
    assert_eq!(
        config["cloudflareCredentialsSecretRef"],
        serde_json::json!({"name": "cloudflare-api-token", "namespace": "tunnel-gateway-system", "key": "api-token"})
    );
    assert_eq!(
        config["hostnameOwnership"]["delegations"][0]["namespaces"][0],
        "team-a"
    );
    assert_eq!(
        config["dns"],
        serde_json::json!({"enabled": true, "ownerId": "cluster-1"})
    );
    let binding = get(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "tunnel-gateway-hostname-ownership",
    );
    assert_eq!(binding["spec"]["paramRef"]["name"], "tunnels");
    get(
        &objects,
        "ValidatingAdmissionPolicy",
        "tunnel-gateway-hostname-ownership",
    );

    let plane = &get(&objects, "Deployment", "tunnel-proxy")["spec"];
    assert_eq!(plane["replicas"], 4);
    let pod = &plane["template"]["spec"];
    assert_eq!(
        container(pod, "proxy")["image"],
        "registry.example/tunnel-proxy:0.2.0"
    );
    assert_eq!(
        container(pod, "cloudflared")["image"],
        "cloudflare/cloudflared:2026.1.0"
    );
    assert_eq!(
        env(container(pod, "cloudflared"), "TUNNEL_TOKEN").unwrap()["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "my-tunnel", "key": "token"})
    );
    // Switched off: the plane's NetworkPolicy and PodDisruptionBudget.
    assert!(find(&objects, "NetworkPolicy", "tunnel-proxy").is_none());
    assert!(find(&objects, "PodDisruptionBudget", "tunnel-proxy").is_none());

    // Monitoring: the monitors and the rule carry the Prometheus's selector label; Prometheus's
    // namespace is admitted to the shared plane's metrics port; the dashboard is the chart's JSON.
    for (kind, name) in [
        ("PodMonitor", "tunnel-gateway-controller"),
        ("PodMonitor", "tunnel-proxy"),
        ("PrometheusRule", "tunnel-gateway"),
    ] {
        assert_eq!(
            get(&objects, kind, name)["metadata"]["labels"]["release"],
            "prom"
        );
    }
    assert_eq!(
        get(&objects, "PodMonitor", "tunnel-proxy")["spec"]["podMetricsEndpoints"][0]["interval"],
        "15s"
    );
    let metrics_policy = get(&objects, "NetworkPolicy", "tunnel-proxy-metrics");
    assert_eq!(
        metrics_policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"],
        serde_json::json!({"kubernetes.io/metadata.name": "observability"})
    );
    let dashboard = get(&objects, "ConfigMap", "tunnel-gateway-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(TUNNEL_GATEWAY.dir().join("dashboards/tunnel-gateway.json"))
            .unwrap(),
    )
    .unwrap();
    let rendered: Value =
        serde_json::from_str(dashboard["data"]["tunnel-gateway.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, shipped);
    // Prometheus's own templates in the alerts survive Helm's.
    let rule = get(&objects, "PrometheusRule", "tunnel-gateway").to_string();
    assert!(rule.contains("{{ $labels.hostname }}"), "{rule}");
}

/// `proxy.configApiTls.enabled` (default true) against its documented opt-out: the controller
/// pushes in plain HTTP and the shared plane takes them on the admin port, with the Service and
/// the NetworkPolicy following; on, the plane mounts the controller's Secret and 8443 is the
/// only port the controller is admitted to.
#[test]
fn the_config_api_runs_over_mutual_tls_unless_opted_out() {
    for enabled in [None, Some(true), Some(false)] {
        let values = enabled.map_or(String::new(), |e| {
            format!("proxy: {{configApiTls: {{enabled: {e}}}}}")
        });
        let tls = enabled != Some(false);
        let objects = objects(TUNNEL_GATEWAY, &values);
        let controller = &get(&objects, "Deployment", "tunnel-gateway-controller")["spec"];
        let c = container(&controller["template"]["spec"], "controller");
        assert_eq!(
            env(c, "CF_CONFIG_API_TLS").map(|e| e["value"].clone()),
            (!tls).then(|| "false".into()),
            "{values}"
        );
        let pod = &get(&objects, "Deployment", "tunnel-proxy")["spec"]["template"]["spec"];
        let proxy = container(pod, "proxy");
        let ports: Vec<(String, u64)> = proxy["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["containerPort"].as_u64().unwrap(),
                )
            })
            .collect();
        let service = &get(&objects, "Service", "tunnel-proxy-config")["spec"]["ports"];
        let policy = &get(&objects, "NetworkPolicy", "tunnel-proxy")["spec"]["ingress"];
        if tls {
            assert!(ports.contains(&("config-api".into(), 8443)), "{ports:?}");
            assert_eq!(
                env(proxy, "PROXY_CONFIG_TLS_DIR").unwrap()["value"],
                proxy["volumeMounts"][0]["mountPath"]
            );
            assert_eq!(
                pod["volumes"][0]["secret"]["secretName"],
                "tunnel-proxy-config-tls"
            );
            assert_eq!(
                service[0],
                serde_json::json!({"name": "config-api", "port": 8443, "targetPort": "config-api", "protocol": "TCP"})
            );
            assert_eq!(
                policy[0]["ports"],
                serde_json::json!([{"protocol": "TCP", "port": 8443}])
            );
        } else {
            assert!(!ports.iter().any(|(_, p)| *p == 8443), "{ports:?}");
            assert!(env(proxy, "PROXY_CONFIG_TLS_DIR").is_none());
            assert!(proxy.get("volumeMounts").is_none() && pod.get("volumes").is_none());
            assert_eq!(
                service[0],
                serde_json::json!({"name": "config-api", "port": 8081, "targetPort": "admin", "protocol": "TCP"})
            );
            assert_eq!(
                policy[0]["ports"],
                serde_json::json!([{"protocol": "TCP", "port": 8081}])
            );
        }
        assert!(ports.contains(&("admin".into(), 8081)), "{ports:?}");
        assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], "admin");
    }
}

#[test]
fn resource_proxy_values_reach_the_objects() {
    let defaults = objects(RESOURCE_PROXY, "");
    assert_eq!(
        kinds_and_names(&defaults),
        [
            "ClusterRole/resource-proxy",
            "ClusterRoleBinding/resource-proxy",
            "ConfigMap/resource-proxy-config",
            "DaemonSet/resource-proxy",
            "Role/resource-proxy",
            "RoleBinding/resource-proxy",
            "RoleBinding/resource-proxy:extension-apiserver-authentication-reader",
            "ServiceAccount/resource-proxy",
        ]
    );
    let objects = objects(RESOURCE_PROXY, RESOURCE_PROXY_VALUES);
    let config: Value = serde_saphyr::from_str(
        get(&objects, "ConfigMap", "resource-proxy-config")["data"]["config.yaml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(config["client"]["name"], "tenant-b");
    assert!(config["customResources"]["gadgets.example.com/v1"]["enabled"] == true);
    // The client's name is in the names the Role grants.
    let role = get(&objects, "Role", "resource-proxy").to_string();
    for name in ["resource-proxy-tenant-b", "resource-proxy-serving-tenant-b"] {
        assert!(role.contains(&format!("\"{name}\"")), "{role}");
    }
    assert!(!role.contains("client-a"), "{role}");
    let ds = get(&objects, "DaemonSet", "resource-proxy");
    let pod = &ds["spec"]["template"]["spec"];
    let c = container(pod, "resource-proxy");
    assert_eq!(c["image"], "registry.example/resource-proxy:0.2.0");
    assert!(c["args"].to_string().contains("\"text\""), "{}", c["args"]);
    // The probes follow the metrics address.
    assert_eq!(c["ports"][0]["containerPort"], 9199);
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 9199);
    let secret = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "target")
        .unwrap();
    assert_eq!(secret["secret"]["secretName"], "tenant-b-target");
    // Another configuration rolls the proxies.
    let checksum = |ds: &Value| {
        ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(
        checksum(ds),
        checksum(get(&defaults, "DaemonSet", "resource-proxy"))
    );
    for (kind, name) in [
        ("PodMonitor", "resource-proxy"),
        ("PrometheusRule", "resource-proxy"),
        ("ConfigMap", "resource-proxy-dashboard"),
    ] {
        get(&objects, kind, name);
    }
}

#[test]
fn the_resource_proxy_chart_refuses_another_namespace() {
    let err = template(RESOURCE_PROXY.in_namespace("proxies"), "").unwrap_err();
    assert!(
        err.to_string()
            .contains("install the resource proxy into kube-system"),
        "{err}"
    );
}

/// Every Pod template of both charts, with the default values, sets what the `restricted` Pod
/// Security Standard requires in its own securityContexts (the API server's admission of these
/// Pods is proven on real clusters: the on_node tests, demo's manifests test).
#[test]
fn every_pod_template_sets_the_restricted_security_context() {
    for chart in [TUNNEL_GATEWAY, RESOURCE_PROXY] {
        let objects = objects(chart, "");
        let pods = pod_templates(&objects);
        assert!(!pods.is_empty());
        for (what, pod) in pods {
            let sc = &pod["securityContext"];
            assert_eq!(sc["runAsNonRoot"], true, "{what}");
            assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
            for c in ["initContainers", "containers"]
                .iter()
                .filter_map(|k| pod[*k].as_array())
                .flatten()
            {
                let csc = &c["securityContext"];
                assert_eq!(
                    csc["allowPrivilegeEscalation"], false,
                    "{what} {}",
                    c["name"]
                );
                assert_eq!(csc["readOnlyRootFilesystem"], true, "{what} {}", c["name"]);
                assert_eq!(
                    csc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{what} {}",
                    c["name"]
                );
                assert!(
                    c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object(),
                    "{what} {}",
                    c["name"]
                );
            }
        }
    }
}

/// Values a user could mean but the charts must not take: each refused by the schema (or the
/// template) with a message naming the field.
#[test]
fn bad_values_are_refused_with_the_field_named() {
    let cases: &[(Chart, &str, &str)] = &[
        // Misspelt or unknown keys (this chart scrapes with PodMonitors only).
        (
            TUNNEL_GATEWAY,
            "replicas: 2",
            "additional properties 'replicas' not allowed",
        ),
        (
            TUNNEL_GATEWAY,
            "serviceMonitor: {enabled: true}",
            "additional properties 'serviceMonitor' not allowed",
        ),
        (
            TUNNEL_GATEWAY,
            "proxy: {replica: 2}",
            "additional properties 'replica' not allowed",
        ),
        // Types and formats.
        (TUNNEL_GATEWAY, "replicaCount: two", "/replicaCount"),
        (TUNNEL_GATEWAY, "proxy: {replicas: -1}", "/proxy/replicas"),
        (
            TUNNEL_GATEWAY,
            "controller: {logFormat: xml}",
            "/controller/logFormat",
        ),
        (
            TUNNEL_GATEWAY,
            "image: {pullPolicy: Sometimes}",
            "/image/pullPolicy",
        ),
        (
            TUNNEL_GATEWAY,
            "image: {repository: ''}",
            "/image/repository",
        ),
        (
            TUNNEL_GATEWAY,
            "podMonitor: {interval: soon}",
            "/podMonitor/interval",
        ),
        (
            TUNNEL_GATEWAY,
            "gatewayClassConfig: {create: true}",
            "/gatewayClassConfig/tunnelID",
        ),
        (
            TUNNEL_GATEWAY,
            "gatewayClassConfig: {tunnelID: not-a-uuid}",
            "/gatewayClassConfig/tunnelID",
        ),
        (
            TUNNEL_GATEWAY,
            "gatewayClassConfig: {maxDataPlanesPerNamespace: 0}",
            "/gatewayClassConfig/maxDataPlanesPerNamespace",
        ),
        (
            TUNNEL_GATEWAY,
            "gatewayClassConfig: {dns: {enable: true}}",
            "/gatewayClassConfig/dns",
        ),
        (
            TUNNEL_GATEWAY,
            "monitoring: {prometheusNamespaceLabels: {team: 5}}",
            "/monitoring/prometheusNamespaceLabels/team",
        ),
        // Requests and limits are required.
        (
            TUNNEL_GATEWAY,
            "resources: {limits: null}",
            "/resources': missing property 'limits'",
        ),
        (
            TUNNEL_GATEWAY,
            "connector: {resources: {requests: {memory: null}}}",
            "/connector/resources/requests",
        ),
        // What the restricted Pod Security Standard forbids.
        (
            TUNNEL_GATEWAY,
            "podSecurityContext: {runAsNonRoot: false}",
            "/podSecurityContext/runAsNonRoot",
        ),
        (
            TUNNEL_GATEWAY,
            "podSecurityContext: {runAsUser: 0}",
            "/podSecurityContext/runAsUser",
        ),
        (
            TUNNEL_GATEWAY,
            "podSecurityContext: {seccompProfile: {type: Unconfined}}",
            "/podSecurityContext/seccompProfile/type",
        ),
        (
            TUNNEL_GATEWAY,
            "podSecurityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}",
            "additional properties 'sysctls' not allowed",
        ),
        (
            TUNNEL_GATEWAY,
            "securityContext: null",
            "missing property 'securityContext'",
        ),
        (
            TUNNEL_GATEWAY,
            "securityContext: {privileged: true}",
            "/securityContext/privileged",
        ),
        (
            TUNNEL_GATEWAY,
            "securityContext: {allowPrivilegeEscalation: true}",
            "/securityContext/allowPrivilegeEscalation",
        ),
        (
            TUNNEL_GATEWAY,
            "proxy: {securityContext: {capabilities: {drop: [NET_RAW]}}}",
            "/proxy/securityContext/capabilities/drop",
        ),
        (
            TUNNEL_GATEWAY,
            "proxy: {securityContext: {capabilities: {drop: [ALL], add: [NET_ADMIN]}}}",
            "/proxy/securityContext/capabilities/add",
        ),
        (
            TUNNEL_GATEWAY,
            "proxy: {podSecurityContext: null}",
            "/proxy': missing property 'podSecurityContext'",
        ),
        (
            RESOURCE_PROXY,
            "podSecurityContext: {runAsNonRoot: false}",
            "/podSecurityContext/runAsNonRoot",
        ),
        (
            RESOURCE_PROXY,
            "securityContext: {readOnlyRootFilesystem: 'yes'}",
            "/securityContext/readOnlyRootFilesystem",
        ),
        (
            RESOURCE_PROXY,
            "securityContext: {privileged: true}",
            "/securityContext/privileged",
        ),
        (
            RESOURCE_PROXY,
            "hostPID: true",
            "additional properties 'hostPID' not allowed",
        ),
        (
            RESOURCE_PROXY,
            "config: {client: {name: Client_A}}",
            "/config/client/name",
        ),
        (
            RESOURCE_PROXY,
            "config: {targets: null}",
            "/config': missing property 'targets'",
        ),
        (
            RESOURCE_PROXY,
            "config: {metrics: {address: anywhere}}",
            "/config/metrics/address",
        ),
    ];
    let mut wrong = Vec::new();
    for (chart, values, field) in cases {
        match template(*chart, values) {
            Ok(_) => wrong.push(format!("{}: `{values}` was accepted", chart.name)),
            Err(e) => {
                let message = e.to_string();
                if !message.contains(field) {
                    wrong.push(format!(
                        "{}: `{values}` refused without naming {field}: {message}",
                        chart.name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
