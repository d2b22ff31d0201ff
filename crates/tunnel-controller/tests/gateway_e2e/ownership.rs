//! Hostname ownership between tenants (issue 20, item 2), end to end: with ownership on in a
//! GatewayClassConfig, tenant B cannot publish, shadow or take over tenant A's hostnames through
//! HTTPRoutes or GRPCRoutes, exact or wildcard; each refused route says why, and nothing of it
//! reaches the tunnel's ingress document or the proxies' route table. Without ownership, routes of
//! two namespaces that collide are resolved by the specification's precedence and the losing
//! route says so.

use std::time::Duration;

use test_cluster::unique_name;

use crate::routing::{wait_hostname, wait_traffic};
use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

fn route(kind: &str, ns: &str, name: &str, gw: &str, hosts: &[&str], rule: &str) -> String {
    let hosts = hosts
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw, namespace: {gw}}}]
  hostnames: [{hosts}]
  rules:
  - {rule}
"#
    )
}

/// The route names of every proxy's loaded table.
fn loaded_routes() -> Vec<String> {
    world()
        .proxies
        .iter()
        .flat_map(|p| {
            p.state
                .document()
                .map(|d| {
                    d.routes
                        .iter()
                        .map(|r| match r {
                            tunnel_config::config::Route::Http(h) => {
                                format!("HTTPRoute {}", h.name)
                            }
                            tunnel_config::config::Route::Grpc(g) => {
                                format!("GRPCRoute {}", g.name)
                            }
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn a_tenant_cannot_publish_shadow_or_take_over_another_tenants_hostnames() {
    let w = world();
    let _shared = w.lock.read().await;
    let id = unique_name("own");
    let (infra, a, b) = (format!("{id}-infra"), format!("{id}-a"), format!("{id}-b"));
    let zone = format!("{id}.example.com");
    let a_host = format!("a.{zone}");
    let a_wild = format!("*.a.{zone}");
    let b_host = format!("b.{zone}");
    let class = id.clone();

    // A class of its own with ownership on, on the shared plane's tunnel; one Gateway open to
    // routes of all namespaces without a hostname.
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
    - namespaces: [{a}]
      hostnames: ["{a_host}", "{a_wild}"]
    - namespaces: [{b}]
      hostnames: ["*.{zone}"]
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
metadata: {{name: {a}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {b}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {infra}}}
spec:
  gatewayClassName: {class}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {{namespaces: {{from: All}}}}
"#,
        tunnel = w.tunnel.tunnel_id
    ))
    .await;
    let port_a = spawn_backend(&format!("{id}-a")).await;
    let port_b = spawn_backend(&format!("{id}-b")).await;
    apply(&service_yaml(&a, "echo", port_a)).await;
    apply(&service_yaml(&b, "echo", port_b)).await;
    let backend = "backendRefs: [{name: echo, port: 80}]";
    let all = format!("{{matches: [{{path: {{type: PathPrefix, value: /}}}}], {backend}}}");

    // B writes first: age buys no hostname. Every kind of attack on A's names.
    let attacks: Vec<(&str, &str, Vec<String>)> = vec![
        ("httproute", "steal", vec![a_host.clone()]),
        ("httproute", "takeover", vec![format!("x.a.{zone}")]),
        ("httproute", "wide", vec![format!("*.{zone}")]),
        ("httproute", "mixed", vec![b_host.clone(), a_host.clone()]),
        ("grpcroute", "grpc-steal", vec![a_host.clone()]),
        ("grpcroute", "grpc-wild", vec![format!("*.x.a.{zone}")]),
    ];
    for (kind, name, hosts) in &attacks {
        let k = if *kind == "httproute" {
            "HTTPRoute"
        } else {
            "GRPCRoute"
        };
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let rule = if *kind == "httproute" {
            all.clone()
        } else {
            format!("{{{backend}}}")
        };
        apply(&route(k, &b, name, &infra, &hosts, &rule)).await;
    }
    apply(&route("HTTPRoute", &b, "own", &infra, &[&b_host], &all)).await;
    apply(&route(
        "HTTPRoute",
        &a,
        "site",
        &infra,
        &[&a_host, &a_wild],
        &all,
    ))
    .await;

    // A's names serve A's backend, B's own name B's: the policy is not refusing everything.
    wait_traffic(&a_host, "/", 200, &format!("{id}-a /")).await;
    wait_traffic(
        &format!("x.a.{zone}"),
        "/login",
        200,
        &format!("{id}-a /login"),
    )
    .await;
    wait_traffic(&b_host, "/", 200, &format!("{id}-b /")).await;
    wait_route_condition("httproute", &a, "site", "Accepted", "True", "Accepted").await;
    wait_route_condition("httproute", &b, "own", "Accepted", "True", "Accepted").await;

    // Every attack is refused and says why, naming the hostname and A's namespace.
    for (kind, name, hosts) in &attacks {
        let m =
            wait_route_condition(kind, &b, name, "Accepted", "False", "HostnameNotPermitted").await;
        let stolen = hosts.last().unwrap();
        assert!(
            m.contains(stolen.as_str()) && m.contains(&a),
            "{kind} {name} names the hostname and A's namespace: {m}"
        );
    }
    // A Warning Event tells B too.
    eventually("a HostnameNotPermitted Event", WAIT, || async {
        let ev = kubectl(&[
            "get",
            "events",
            "-n",
            &b,
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .await;
        if ev.contains("HostnameNotPermitted") {
            Ok(())
        } else {
            Err(ev)
        }
    })
    .await;

    // The leader counts them for operators.
    eventually("the refusals counted", WAIT, || async {
        let n =
            leader_series("cftunnel_route_parents_refused{reason=\"HostnameNotPermitted\"}").await;
        if n >= attacks.len() as f64 {
            Ok(())
        } else {
            Err(format!("{n} refused, {} attacks", attacks.len()))
        }
    })
    .await;

    // Nothing of the refused routes reaches Cloudflare or a proxy.
    wait_hostname(&a_host, true).await;
    wait_hostname(&a_wild, true).await;
    wait_hostname(&b_host, true).await;
    let (hosts, _) = ingress_hostnames();
    for refused in [
        format!("x.a.{zone}"),
        format!("*.{zone}"),
        format!("*.x.a.{zone}"),
    ] {
        assert!(!hosts.contains(&refused), "{refused} published: {hosts:?}");
    }
    let loaded = loaded_routes();
    assert!(loaded.contains(&format!("HTTPRoute {b}/own")), "{loaded:?}");
    for (kind, name, _) in &attacks {
        let k = if *kind == "httproute" {
            "HTTPRoute"
        } else {
            "GRPCRoute"
        };
        assert!(
            !loaded.contains(&format!("{k} {b}/{name}")),
            "{k} {b}/{name} reached a proxy: {loaded:?}"
        );
    }
    // The Gateway's listener admits all namespaces without a hostname: advised, and the
    // config lists the Gateway for the admission policy.
    eventually("the PermissiveHostname advisory", WAIT, || async {
        let gw = get_json(&["gateway", "gw", "-n", &infra]).await;
        let conds = gw["status"]["listeners"][0]["conditions"].to_string();
        if conds.contains("PermissiveHostname") && conds.contains("hostname ownership limits") {
            Ok(())
        } else {
            Err(conds)
        }
    })
    .await;
    eventually("status.gateways of the config", WAIT, || async {
        let g = kubectl(&[
            "get",
            "gcconfig",
            &class,
            "-o",
            "jsonpath={.status.gateways}",
        ])
        .await;
        if g.contains(&format!("{infra}/gw")) {
            Ok(())
        } else {
            Err(g)
        }
    })
    .await;

    // The attacks are real: with ownership turned off, B's exact name below A's wildcard takes
    // that name's traffic from A (a more specific hostname ranks first), and A is told.
    apply(&format!(
        r#"
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {class}}}
spec:
  tunnelID: {tunnel}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api-token, namespace: {SYSTEM_NS}, key: api-token}}
"#,
        tunnel = w.tunnel.tunnel_id
    ))
    .await;
    wait_route_condition("httproute", &b, "takeover", "Accepted", "True", "Accepted").await;
    wait_traffic(&format!("x.a.{zone}"), "/", 200, &format!("{id}-b /")).await;
    let m = wait_route_condition(
        "httproute",
        &a,
        "site",
        "cf.k8s.lex.la/RouteShadowed",
        "True",
        "ShadowedByOtherNamespace",
    )
    .await;
    assert!(m.contains(&format!("{b}/takeover")), "{m}");
    let shadowed = leader_series("cftunnel_route_parents_shadowed").await;
    assert!(shadowed >= 1.0, "{shadowed} shadowed route parents");
}

/// The value of one series on the leading controller's `/metrics` (0 when absent).
async fn leader_series(series: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", leader_metrics().await))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn without_ownership_colliding_routes_follow_precedence_and_the_loser_says_so() {
    let w = world();
    let _shared = w.lock.read().await;
    let id = unique_name("shadow");
    let (a, b) = (format!("{id}-a"), format!("{id}-b"));
    let host = format!("{id}.example.com");
    let wild = format!("*.w.{id}.example.com");
    let exact = format!("x.w.{id}.example.com");
    apply(&namespace_with_gateway(&a)).await;
    apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {b}}}\n"
    ))
    .await;
    let port_a = spawn_backend(&format!("{id}-a")).await;
    let port_b = spawn_backend(&format!("{id}-b")).await;
    apply(&service_yaml(&a, "echo", port_a)).await;
    apply(&service_yaml(&b, "echo", port_b)).await;
    let all =
        "{matches: [{path: {type: PathPrefix, value: /}}], backendRefs: [{name: echo, port: 80}]}";
    apply(&route("HTTPRoute", &a, "site", &a, &[&host, &wild], all)).await;
    wait_traffic(&host, "/", 200, &format!("{id}-a /")).await;

    // B, later, with the same hostname and match: A keeps the traffic, B is told.
    apply(&route("HTTPRoute", &b, "copy", &a, &[&host], all)).await;
    let m = wait_route_condition(
        "httproute",
        &b,
        "copy",
        "cf.k8s.lex.la/RouteShadowed",
        "True",
        "ShadowedByOtherNamespace",
    )
    .await;
    assert!(m.contains(&format!("{a}/site")) && m.contains(&host), "{m}");
    wait_traffic(&host, "/", 200, &format!("{id}-a /")).await;

    // B with an exact name below A's wildcard takes it (a more specific hostname ranks first,
    // whatever the age): A is told.
    let api = "{matches: [{path: {type: PathPrefix, value: /api}}], backendRefs: [{name: echo, port: 80}]}";
    apply(&route("HTTPRoute", &b, "exact", &a, &[&exact], api)).await;
    wait_traffic(&exact, "/api", 200, &format!("{id}-b /api")).await;
    wait_traffic(&exact, "/other", 200, &format!("{id}-a /other")).await;
    let m = wait_route_condition(
        "httproute",
        &a,
        "site",
        "cf.k8s.lex.la/RouteShadowed",
        "True",
        "ShadowedByOtherNamespace",
    )
    .await;
    assert!(
        m.contains(&format!("{b}/exact")) && m.contains(&exact),
        "{m}"
    );
    // The route that wins in plain precedence carries no such condition.
    assert_eq!(
        route_condition("httproute", &b, "exact", "cf.k8s.lex.la/RouteShadowed").await,
        None
    );
}
