//! ListenerSets (issue 20, item 3), end to end: a tenant adds listeners to a shared Gateway with
//! a ListenerSet in its own namespace, its routes attach to the ListenerSet and serve traffic
//! through the proxy, and the hostname reaches the tunnel's ingress document. The attacks: a
//! namespace the Gateway's `allowedListeners` does not admit adds nothing, and with hostname
//! ownership on a tenant's ListenerSet cannot claim another tenant's hostname (even when it is
//! the older one); each refusal says why.

use std::time::Duration;

use serde_json::Value;
use test_cluster::unique_name;

use crate::routing::{wait_hostname, wait_traffic};
use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

fn listener_set(ns: &str, name: &str, gw_ns: &str, listener: &str, host: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRef: {{name: gw, namespace: {gw_ns}}}
  listeners:
  - {{name: {listener}, protocol: HTTP, port: 80, hostname: "{host}"}}
"#
    )
}

fn route_to_set(ns: &str, name: &str, set: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{group: gateway.networking.k8s.io, kind: ListenerSet, name: {set}{section}}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}]
    backendRefs: [{{name: echo, port: 80}}]
"#
    )
}

fn condition(status: &Value, type_: &str) -> Option<(String, String, String)> {
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Waits for a ListenerSet's condition; returns its message.
async fn wait_set_condition(
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(
        &format!("ListenerSet {ns}/{name} {type_}={status}/{reason}"),
        WAIT,
        || async {
            let ls = get_json(&["listenerset", name, "-n", ns]).await;
            match condition(&ls["status"], type_) {
                Some((s, r, m)) if s == status && r == reason => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Waits for a ListenerSet listener's condition; returns its message.
async fn wait_listener_condition(
    ns: &str,
    name: &str,
    listener: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(
        &format!("ListenerSet {ns}/{name} listener {listener} {type_}={status}/{reason}"),
        WAIT,
        || async {
            let ls = get_json(&["listenerset", name, "-n", ns]).await;
            let l = ls["status"]["listeners"]
                .as_array()
                .and_then(|ls| ls.iter().find(|l| l["name"] == listener).cloned())
                .unwrap_or_default();
            match condition(&l, type_) {
                Some((s, r, m)) if s == status && r == reason => Ok(m),
                other => Err(format!("{other:?} in {l}")),
            }
        },
    )
    .await
}

#[tokio::test]
async fn tenants_add_listeners_only_where_admitted_and_only_for_their_hostnames() {
    let w = world();
    let _shared = w.lock.read().await;
    let id = unique_name("lset");
    let (infra, a, b, c) = (
        format!("{id}-infra"),
        format!("{id}-a"),
        format!("{id}-b"),
        format!("{id}-c"),
    );
    let zone = format!("{id}.example.com");
    let (gw_host, a_host, b_host, c_host) = (
        format!("gw.{zone}"),
        format!("shop.a.{zone}"),
        format!("b.{zone}"),
        format!("c.{zone}"),
    );
    let class = id.clone();

    // A class of its own with ownership on, on the shared plane's tunnel; the Gateway admits
    // ListenerSets from namespaces labelled for it (a and b), not from c.
    apply(&format!(
        r#"
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {class}}}
spec:
  tunnelID: {tunnel}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api-token, namespace: {SYSTEM_NS}, key: api-token}}
  hostnameOwnership:
    delegations:
    - namespaces: [{infra}]
      hostnames: ["{gw_host}"]
    - namespaces: [{a}]
      hostnames: ["a.{zone}", "*.a.{zone}"]
    - namespaces: [{b}]
      hostnames: ["{b_host}"]
    - namespaces: [{c}]
      hostnames: ["{c_host}"]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec:
  controllerName: {CONTROLLER}
  parametersRef: {{group: cf.k8s.lex.la, kind: GatewayClassConfig, name: {class}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {infra}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {a}, labels: {{{id}-listeners: allowed}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {b}, labels: {{{id}-listeners: allowed}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {c}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {infra}}}
spec:
  gatewayClassName: {class}
  allowedListeners:
    namespaces:
      from: Selector
      selector: {{matchLabels: {{{id}-listeners: allowed}}}}
  listeners:
  - {{name: http, protocol: HTTP, port: 80, hostname: "{gw_host}"}}
"#,
        tunnel = w.tunnel.tunnel_id
    ))
    .await;
    for ns in [&a, &b, &c] {
        let port = spawn_backend(ns).await;
        apply(&service_yaml(ns, "echo", port)).await;
    }

    // The attackers write first: age buys neither a hostname nor a place on the Gateway.
    // b claims a's hostname with a ListenerSet of its own, and attaches a route to it.
    apply(&listener_set(&b, "squat", &infra, "steal", &a_host)).await;
    apply(&route_to_set(&b, "steal", "squat", None)).await;
    // c is not admitted by allowedListeners at all.
    apply(&listener_set(&c, "intrude", &infra, "http", &c_host)).await;
    apply(&route_to_set(&c, "intrude", "intrude", None)).await;
    // a, later, with its own hostname; its route names the listener.
    apply(&listener_set(&a, "shop", &infra, "shop", &a_host)).await;
    apply(&route_to_set(&a, "shop", "shop", Some("shop"))).await;

    // a's listener serves a's route through the proxy, and its hostname is published.
    wait_traffic(&a_host, "/cart", 200, &format!("{a} /cart")).await;
    wait_hostname(&a_host, true).await;
    wait_set_condition(&a, "shop", "Accepted", "True", "Accepted").await;
    wait_set_condition(&a, "shop", "Programmed", "True", "Programmed").await;
    wait_route_condition("httproute", &a, "shop", "Accepted", "True", "Accepted").await;
    wait_route_condition(
        "httproute",
        &a,
        "shop",
        "cf.k8s.lex.la/Published",
        "True",
        "Published",
    )
    .await;
    eventually("a's listener counts its route", WAIT, || async {
        let ls = get_json(&["listenerset", "shop", "-n", &a]).await;
        match ls["status"]["listeners"][0]["attachedRoutes"].as_i64() {
            Some(1) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // b's claim on a's hostname is refused and says why; it took nothing from a.
    let m = wait_listener_condition(
        &b,
        "squat",
        "steal",
        "Accepted",
        "False",
        "HostnameNotPermitted",
    )
    .await;
    assert!(
        m.contains(&a_host) && m.contains(&b),
        "the refusal names the hostname and b's namespace: {m}"
    );
    wait_listener_condition(&a, "shop", "shop", "Conflicted", "False", "NoConflicts").await;
    wait_set_condition(&b, "squat", "Accepted", "False", "ListenersNotValid").await;
    let m = wait_route_condition("httproute", &b, "steal", "Accepted", "False", "Pending").await;
    assert!(m.contains(&format!("ListenerSet {b}/squat")), "{m}");

    // c's ListenerSet is not admitted, says why, and its hostname goes nowhere.
    let m = wait_set_condition(&c, "intrude", "Accepted", "False", "NotAllowed").await;
    assert!(
        m.contains(&format!("Gateway {infra}/gw")) && m.contains(&c),
        "{m}"
    );
    wait_set_condition(&c, "intrude", "Programmed", "False", "NotAllowed").await;
    wait_route_condition("httproute", &c, "intrude", "Accepted", "False", "Pending").await;
    eventually("the Gateway counts a's ListenerSet only", WAIT, || async {
        let gw = get_json(&["gateway", "gw", "-n", &infra]).await;
        match gw["status"]["attachedListenerSets"].as_i64() {
            Some(1) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (hosts, _) = ingress_hostnames();
    assert!(!hosts.contains(&c_host), "{c_host} published: {hosts:?}");
    wait_traffic(&a_host, "/", 200, &format!("{a} /")).await;
    for p in &w.proxies {
        let got = get_via(p.data, &c_host, "/").await;
        assert!(
            got.as_ref()
                .is_ok_and(|(_, b)| !b.contains(&format!("{c} /"))),
            "{c_host} is not served: {got:?}"
        );
    }

    // The refusals are real: once c's namespace is admitted, its listener serves.
    kubectl(&["label", "namespace", &c, &format!("{id}-listeners=allowed")]).await;
    wait_set_condition(&c, "intrude", "Accepted", "True", "Accepted").await;
    wait_traffic(&c_host, "/", 200, &format!("{c} /")).await;
    wait_hostname(&c_host, true).await;
}
