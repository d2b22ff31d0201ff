//! Cloudflare Access on routes (issue 20, item 5), end to end against the Cloudflare double: an
//! AccessPolicy on an HTTPRoute creates one Access application for the route's hostnames ×
//! path prefixes with the policy's rules; changing the policy or the route updates exactly that
//! application; another tenant's application is never touched and a policy cannot reach a route
//! of another namespace; an application someone else made on a destination is left alone and
//! reported; a route-level policy wins over a Gateway-level one and the older of two policies on
//! one route wins; deleting the policy or the route removes exactly what it brought.

use std::time::Duration;

use cloudflare_double::AccessAppRec;
use serde_json::{Value, json};
use test_cluster::unique_name;

use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

/// The shared class's GatewayClassConfig name: the owner ID in application names.
fn app_name(ns: &str, policy: &str) -> String {
    format!("tunnel-gateway/{CLASS}: {ns}/{policy}")
}

pub fn app(ns: &str, policy: &str) -> Option<AccessAppRec> {
    let name = app_name(ns, policy);
    world()
        .double
        .access_apps()
        .into_iter()
        .find(|a| a.name == name)
}

pub async fn wait_app(
    ns: &str,
    policy: &str,
    what: &str,
    ok: impl Fn(&AccessAppRec) -> bool,
) -> AccessAppRec {
    eventually(&format!("{ns}/{policy}: {what}"), WAIT, || async {
        match app(ns, policy) {
            Some(a) if ok(&a) => Ok(a),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

pub async fn wait_no_app(ns: &str, policy: &str) {
    eventually(
        &format!("no application of {ns}/{policy}"),
        WAIT,
        || async {
            match app(ns, policy) {
                None => Ok(()),
                Some(a) => Err(format!("{a:?}")),
            }
        },
    )
    .await
}

/// Our ancestors' condition `type_`: (ancestor kind/name, status, reason, message).
async fn policy_conditions(
    ns: &str,
    name: &str,
    type_: &str,
) -> Vec<(String, String, String, String)> {
    let p = get_json(&["accesspolicy", name, "-n", ns]).await;
    let mut out = Vec::new();
    for a in p["status"]["ancestors"].as_array().into_iter().flatten() {
        if a["controllerName"] != CONTROLLER {
            continue;
        }
        for c in a["conditions"].as_array().into_iter().flatten() {
            if c["type"] == type_ {
                out.push((
                    format!(
                        "{}/{}",
                        a["ancestorRef"]["kind"].as_str().unwrap_or_default(),
                        a["ancestorRef"]["name"].as_str().unwrap_or_default()
                    ),
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["reason"].as_str().unwrap_or_default().to_owned(),
                    c["message"].as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
    }
    out
}

/// Waits until every ancestor of ours says `type_=status/reason`; returns the messages.
async fn wait_policy(ns: &str, name: &str, type_: &str, status: &str, reason: &str) -> String {
    eventually(
        &format!("AccessPolicy {ns}/{name} {type_}={status}/{reason}"),
        WAIT,
        || async {
            let c = policy_conditions(ns, name, type_).await;
            if !c.is_empty() && c.iter().all(|(_, s, r, _)| s == status && r == reason) {
                Ok(c.into_iter().map(|c| c.3).collect::<Vec<_>>().join("; "))
            } else {
                Err(format!("{c:?}"))
            }
        },
    )
    .await
}

pub fn policy(ns: &str, name: &str, target: &str, rules: &str) -> String {
    format!(
        r#"
apiVersion: cf.k8s.lex.la/v1alpha1
kind: AccessPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{target}]
  {rules}
"#
    )
}

pub fn route_target(name: &str) -> String {
    format!("{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}")
}

fn route_with_paths(ns: &str, name: &str, hosts: &[&str], paths: &[&str]) -> String {
    let hosts = hosts
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let rules: String = paths
        .iter()
        .map(|p| {
            format!(
                "  - matches: [{{path: {{type: PathPrefix, value: \"{p}\"}}}}]\n    backendRefs: [{{name: echo, port: 80}}]\n"
            )
        })
        .collect();
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{hosts}]
  rules:
{rules}"#
    )
}

fn includes(a: &AccessAppRec) -> Vec<Value> {
    a.policies
        .iter()
        .flat_map(|p| p["include"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn access_applications_follow_policies_and_routes_and_never_touch_others() {
    let w = world();
    let _shared = w.lock.read().await;
    let id = unique_name("access");
    let (a, b) = (format!("{id}-a"), format!("{id}-b"));
    let host = format!("app.{id}.example.com");
    let other_host = format!("other.{id}.example.com");
    let shop = format!("shop.{id}.example.com");
    let foreign_host = format!("legacy.{id}.example.com");
    for ns in [&a, &b] {
        apply(&namespace_with_gateway(ns)).await;
        let port = spawn_backend(ns).await;
        apply(&service_yaml(ns, "echo", port)).await;
    }

    // Tenant a: a route with two path prefixes and a policy on it.
    apply(&route_with_paths(&a, "app", &[&host], &["/api/", "/web"])).await;
    let users = |emails: &str| {
        policy(
            &a,
            "users",
            &route_target("app"),
            &format!(
                "sessionDuration: 8h\n  rules:\n  - name: staff\n    decision: Allow\n    include: {{emails: [{emails}]}}"
            ),
        )
    };
    apply(&users("ann@example.com")).await;
    let msg = wait_policy(&a, "users", "Programmed", "True", "Programmed").await;
    assert!(msg.contains(&format!("{host}/api")), "{msg}");
    wait_policy(&a, "users", "Accepted", "True", "Accepted").await;
    let first = wait_app(&a, "users", "created", |_| true).await;
    assert_eq!(
        first.destinations,
        vec![format!("{host}/api"), format!("{host}/web")]
    );
    assert_eq!(first.session_duration, "8h");
    assert_eq!(first.policies.len(), 1);
    assert_eq!(first.policies[0]["decision"], "allow");
    assert_eq!(first.policies[0]["name"], "staff");
    assert_eq!(
        includes(&first),
        vec![json!({"email": {"email": "ann@example.com"}})]
    );
    let ancestors = policy_conditions(&a, "users", "Accepted").await;
    assert_eq!(ancestors.len(), 1);
    assert_eq!(ancestors[0].0, "Gateway/gw");

    // Tenant b: its own route and a service-token policy; and a policy naming tenant a's route,
    // which it cannot reach (targetRefs have no namespace: it names b's own, missing, route).
    apply(&http_route(&b, "shop", &shop, &b, "echo")).await;
    apply(&policy(
        &b,
        "ci",
        &route_target("shop"),
        "rules:\n  - decision: ServiceAuth\n    include: {anyValidServiceToken: true}",
    ))
    .await;
    apply(&policy(
        &b,
        "steal",
        &route_target("app"),
        "rules:\n  - decision: Bypass\n    include: {everyone: true}",
    ))
    .await;
    let ci = wait_app(&b, "ci", "created", |_| true).await;
    assert_eq!(ci.destinations, vec![shop.clone()]);
    assert_eq!(ci.policies[0]["decision"], "non_identity");
    let msg = wait_policy(&b, "steal", "Accepted", "False", "TargetNotFound").await;
    assert!(msg.contains(&format!("HTTPRoute {b}/app")), "{msg}");
    assert!(app(&b, "steal").is_none());

    // Changing tenant a's policy updates exactly its application (same ID); b's is untouched.
    apply(&users("ann@example.com, bob@example.com")).await;
    let changed = wait_app(&a, "users", "two e-mails", |x| includes(x).len() == 2).await;
    assert_eq!(changed.id, first.id);
    assert_eq!(changed.destinations, first.destinations);
    assert_eq!(app(&b, "ci"), Some(ci.clone()));

    // Changing the route (a path goes, a hostname comes) updates the destinations.
    apply(&route_with_paths(
        &a,
        "app",
        &[&host, &other_host],
        &["/api"],
    ))
    .await;
    let moved = wait_app(&a, "users", "new destinations", |x| {
        x.destinations == vec![format!("{host}/api"), format!("{other_host}/api")]
    })
    .await;
    assert_eq!(moved.id, first.id);
    assert_eq!(app(&b, "ci"), Some(ci.clone()));

    // An application someone else made on a destination: left alone, reported, the rest ours.
    let foreign = w
        .double
        .add_access_app(&w.account, "hand made", &foreign_host)
        .unwrap();
    apply(&route_with_paths(&a, "legacy", &[&foreign_host], &["/"])).await;
    apply(&policy(
        &a,
        "legacy",
        &route_target("legacy"),
        "rules:\n  - decision: Allow\n    include: {emailDomains: [example.com]}",
    ))
    .await;
    let msg = wait_policy(&a, "legacy", "Programmed", "False", "DomainOwnedElsewhere").await;
    assert!(
        msg.contains(&foreign_host) && msg.contains("hand made"),
        "{msg}"
    );
    eventually("a DomainOwnedElsewhere Event", WAIT, || async {
        let ev = kubectl(&[
            "get",
            "events",
            "-n",
            &a,
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .await;
        if ev.contains("DomainOwnedElsewhere") {
            Ok(())
        } else {
            Err(ev)
        }
    })
    .await;
    assert!(app(&a, "legacy").is_none());
    assert!(w.double.access_apps().contains(&foreign));

    // Precedence: a Gateway-level policy covers the Gateway's routes without their own policy;
    // the route-level policy keeps its route. A second policy on the same route is Conflicted.
    apply(&http_route(
        &a,
        "plain",
        &format!("plain.{id}.example.com"),
        &a,
        "echo",
    ))
    .await;
    apply(&policy(
        &a,
        "gateway-default",
        "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}",
        "rules:\n  - decision: Allow\n    include: {emailDomains: [example.org]}",
    ))
    .await;
    apply(&policy(
        &a,
        "late",
        &route_target("app"),
        "rules:\n  - decision: Bypass\n    include: {everyone: true}",
    ))
    .await;
    // The Gateway-level application covers whole hostnames; the route-level ones keep their
    // destinations (users: the /api paths, which Access ranks above the whole hostname; legacy:
    // its hostname, even though a foreign application holds it).
    let plain = format!("plain.{id}.example.com");
    let gw_app = wait_app(&a, "gateway-default", "created", |_| true).await;
    assert_eq!(
        gw_app.destinations,
        vec![host.clone(), other_host.clone(), plain.clone()]
    );
    assert!(!gw_app.destinations.contains(&foreign_host));
    assert_eq!(
        app(&a, "users").map(|x| x.destinations),
        Some(vec![format!("{host}/api"), format!("{other_host}/api")])
    );
    let msg = wait_policy(&a, "late", "Accepted", "False", "Conflicted").await;
    assert!(msg.contains(&format!("{a}/users")), "{msg}");
    assert!(app(&a, "late").is_none());

    // Deleting the route-level policy removes its application only; deleting the route takes
    // its hostnames out of the Gateway-level application.
    kubectl(&["delete", "accesspolicy", "users", "late", "-n", &a]).await;
    wait_no_app(&a, "users").await;
    assert_eq!(
        app(&a, "gateway-default").map(|x| x.id),
        Some(gw_app.id.clone())
    );
    kubectl(&["delete", "httproute", "app", "-n", &a]).await;
    let after = wait_app(
        &a,
        "gateway-default",
        "without the route's hostnames",
        |x| x.destinations == vec![plain.clone()],
    )
    .await;
    assert_eq!(after.id, gw_app.id);
    assert_eq!(app(&b, "ci"), Some(ci));
    assert!(w.double.access_apps().contains(&foreign));

    let metrics = reqwest::get(format!("http://{}/metrics", leader_metrics().await))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for op in ["created", "updated", "deleted", "refused"] {
        assert!(
            metrics.contains(&format!(
                "cftunnel_access_application_changes_total{{op=\"{op}\"}}"
            )),
            "{op}: {metrics}"
        );
    }

    // The namespaces go: their applications go with their policies.
    kubectl(&["delete", "namespace", &a, &b, "--wait=false"]).await;
    wait_no_app(&a, "gateway-default").await;
    wait_no_app(&b, "ci").await;
    assert!(w.double.access_apps().contains(&foreign));
}
