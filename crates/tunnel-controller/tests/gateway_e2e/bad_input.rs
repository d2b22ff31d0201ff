//! Bad input: each broken route, reference or policy gets the specification's condition with a
//! message a user can act on, fails closed, and never disturbs other routes or Gateways. Also the
//! other route kind (GRPCRoute) and BackendTLSPolicy status.

use std::time::Duration;

use test_cluster::unique_name;

use crate::routing::{wait_hostname, wait_traffic};
use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn broken_routes_and_references_say_why_and_leave_the_rest_serving() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("bad");
    let port = spawn_backend("bad-good").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    let good = format!("good-{ns}.example.com");
    apply(&http_route(&ns, "good", &good, &ns, "echo")).await;
    wait_traffic(&good, "/", 200, "bad-good").await;

    let route = |name: &str, rule: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{name}-{ns}.example.com"]
  rules:
  - {rule}
"#
        )
    };
    // A regular expression the data plane cannot compile: the only rule is dropped.
    apply(&route(
        "regex",
        r#"{matches: [{path: {type: RegularExpression, value: "/(unclosed"}}], backendRefs: [{name: echo, port: 80}]}"#,
    ))
    .await;
    // A filter this implementation does not know: the rule answers 500.
    apply(&route(
        "filter",
        r#"{filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Magic, name: m}}], backendRefs: [{name: echo, port: 80}]}"#,
    ))
    .await;
    // A Service that does not exist: its share answers 500.
    apply(&route(
        "missing",
        r#"{backendRefs: [{name: nope, port: 80}]}"#,
    ))
    .await;
    // A Service port that does not exist.
    apply(&route("port", r#"{backendRefs: [{name: echo, port: 81}]}"#)).await;
    // A backend kind that is not supported.
    apply(&route(
        "kind",
        r#"{backendRefs: [{group: example.com, kind: Bucket, name: b, port: 80}]}"#,
    ))
    .await;

    let m = wait_route_condition(
        "httproute",
        &ns,
        "regex",
        "Accepted",
        "False",
        "UnsupportedValue",
    )
    .await;
    assert!(
        m.contains("Rule 0") || m.contains("rule"),
        "names the rule: {m}"
    );
    wait_route_condition("httproute", &ns, "filter", "Accepted", "True", "Accepted").await;
    let m = wait_route_condition(
        "httproute",
        &ns,
        "filter",
        "PartiallyInvalid",
        "True",
        "UnsupportedValue",
    )
    .await;
    assert!(
        m.contains("ExtensionRef") || m.contains("Magic"),
        "names the filter: {m}"
    );
    let m = wait_route_condition(
        "httproute",
        &ns,
        "missing",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    assert!(m.contains("nope"), "names the Service: {m}");
    let m = wait_route_condition(
        "httproute",
        &ns,
        "port",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    assert!(m.contains("81"), "names the port: {m}");
    wait_route_condition(
        "httproute",
        &ns,
        "kind",
        "ResolvedRefs",
        "False",
        "InvalidKind",
    )
    .await;

    // Each fails closed for its own hostname; the good route is untouched.
    wait_traffic(&format!("filter-{ns}.example.com"), "/", 500, "").await;
    wait_traffic(&format!("missing-{ns}.example.com"), "/", 500, "").await;
    wait_traffic(&format!("kind-{ns}.example.com"), "/", 500, "").await;
    wait_traffic(&good, "/still", 200, "bad-good /still").await;
    assert_eq!(
        route_condition("httproute", &ns, "good", "Accepted")
            .await
            .map(|c| c.0),
        Some("True".into())
    );

    // A Gateway whose backend client certificate Secret is missing says so; its routes and the
    // other Gateways keep working.
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
  tls:
    backend:
      clientCertificateRef: {{name: no-such-secret}}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {{namespaces: {{from: All}}}}
"#
    ))
    .await;
    eventually("Gateway ResolvedRefs=False", WAIT, || async {
        let g = get_json(&["gateway", "gw", "-n", &ns]).await;
        let c = g["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "ResolvedRefs")
            .cloned()
            .unwrap_or_default();
        if c["status"] == "False"
            && c["message"]
                .as_str()
                .unwrap_or_default()
                .contains("no-such-secret")
        {
            Ok(())
        } else {
            Err(c.to_string())
        }
    })
    .await;
    wait_traffic(&good, "/after", 200, "bad-good /after").await;
    // The ingress document holds the hostnames of attached routes only: the route whose every
    // rule was dropped is not published.
    wait_hostname(&good, true).await;
    wait_hostname(&format!("regex-{ns}.example.com"), false).await;
}

#[tokio::test]
async fn a_grpc_route_is_accepted_published_and_delivered() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("grpc");
    let port = spawn_backend("grpc").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    let host = format!("{ns}.example.com");
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: rpc, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{host}"]
  rules:
  - matches: [{{method: {{service: demo.Echo, method: Say}}}}]
    backendRefs: [{{name: echo, port: 80}}]
"#
    ))
    .await;
    wait_route_condition("grpcroute", &ns, "rpc", "Accepted", "True", "Accepted").await;
    wait_route_condition(
        "grpcroute",
        &ns,
        "rpc",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    wait_hostname(&host, true).await;
    let name = format!("{ns}/rpc");
    eventually("the proxies hold the GRPCRoute", WAIT, || async {
        let doc = w.proxies[0].state.document();
        let found = doc.as_ref().is_some_and(|d| {
            d.routes.iter().any(|r| {
                matches!(r, tunnel_config::config::Route::Grpc(g) if g.name == name && g.hostnames == [host.clone()])
            })
        });
        if found { Ok(()) } else { Err("not yet".into()) }
    })
    .await;
}

#[tokio::test]
async fn a_backend_tls_policy_without_its_ca_fails_closed_and_reports_under_the_gateway() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("btls");
    let port = spawn_backend("btls-plain").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "secure", port)).await;
    let host = format!("{ns}.example.com");
    apply(&http_route(&ns, "web", &host, &ns, "secure")).await;
    wait_traffic(&host, "/", 200, "btls-plain").await;

    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: tls, namespace: {ns}}}
spec:
  targetRefs: [{{group: "", kind: Service, name: secure}}]
  validation:
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: missing-ca}}]
    hostname: secure.{ns}.svc
"#
    ))
    .await;
    // Never plaintext to a backend that asked for TLS.
    wait_traffic(&host, "/", 500, "").await;
    eventually("the policy's status under the Gateway", WAIT, || async {
        let p = get_json(&["backendtlspolicy", "tls", "-n", &ns]).await;
        let ours = p["status"]["ancestors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["controllerName"] == CONTROLLER && a["ancestorRef"]["name"] == "gw")
            .cloned();
        let resolved = ours
            .as_ref()
            .and_then(|a| {
                a["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "ResolvedRefs")
                    .cloned()
            })
            .unwrap_or_default();
        if resolved["status"] == "False"
            && resolved["message"]
                .as_str()
                .unwrap_or_default()
                .contains("missing-ca")
        {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
}
