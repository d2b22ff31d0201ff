//! Gateways and routes: acceptance, traffic, edits, cross-namespace references, deletion, and
//! other controllers' statuses.

use std::time::Duration;

use serde_json::Value;
use test_cluster::unique_name;

use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

async fn gateway_condition(ns: &str, type_: &str) -> Option<(String, String)> {
    let g = get_json(&["gateway", "gw", "-n", ns]).await;
    let c = g["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((c["status"].as_str()?.into(), c["reason"].as_str()?.into()))
}

/// Waits until every shared-plane proxy answers `host` + `path` with `status` and `body`.
pub async fn wait_traffic(host: &str, path: &str, status: u16, body: &str) {
    for p in &world().proxies {
        let addr = p.data;
        eventually(
            &format!("{host}{path} → {status} {body:?} via {addr}"),
            WAIT,
            || async move {
                match get_via(addr, host, path).await {
                    Ok((s, b)) if s == status && b.contains(body) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
}

pub async fn wait_hostname(host: &str, present: bool) {
    eventually(
        &format!(
            "{host} {} the ingress document",
            if present { "in" } else { "out of" }
        ),
        WAIT,
        || async move {
            let (hosts, _) = ingress_hostnames();
            if hosts.iter().any(|h| h == host) == present {
                Ok(())
            } else {
                Err(format!("{hosts:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_gateway_and_route_become_accepted_and_programmed_and_traffic_flows() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("flow");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("flow-a").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;

    for type_ in ["Accepted", "Programmed"] {
        eventually(&format!("Gateway {type_}"), WAIT, || async {
            match gateway_condition(&ns, type_).await {
                Some((s, _)) if s == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    wait_route_condition("httproute", &ns, "web", "Accepted", "True", "Accepted").await;
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    let gw = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        gw["status"]["addresses"][0]["value"],
        format!("{}.cfargotunnel.com", w.tunnel.tunnel_id)
    );
    eventually("attachedRoutes 1", WAIT, || async {
        let gw = get_json(&["gateway", "gw", "-n", &ns]).await;
        let l = &gw["status"]["listeners"][0];
        let kinds: Vec<&str> = l["supportedKinds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k["kind"].as_str())
            .collect();
        if l["attachedRoutes"] == 1 && kinds == ["HTTPRoute", "GRPCRoute"] {
            Ok(())
        } else {
            Err(l.to_string())
        }
    })
    .await;
    let observed = get_json(&["gateway", "gw", "-n", &ns]).await;
    for c in observed["status"]["conditions"].as_array().unwrap() {
        assert_eq!(c["observedGeneration"], observed["metadata"]["generation"]);
    }

    wait_traffic(&host, "/hello", 200, "flow-a /hello").await;
    wait_hostname(&host, true).await;
    let (status, _) = get_via(w.proxies[0].data, &format!("other-{host}"), "/")
        .await
        .unwrap();
    assert_eq!(status, 404, "a hostname no route serves is not routed");

    let metrics = reqwest::get(format!("http://{}/metrics", leader_metrics().await))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "cftunnel_ingress_rules{",
        "cftunnel_cloudflare_api_calls_total{method=\"PUT\",resource=\"tunnel_configurations\",status=\"200\"}",
        "cftunnel_sync_duration_seconds_count{",
        "cftunnel_config_pushes_total{partition=\"shared\",result=\"loaded\"}",
        "cftunnel_reconcile_total{kind=\"HTTPRoute\"}",
    ] {
        assert!(metrics.contains(series), "{series} missing from\n{metrics}");
    }

    // Rounds keep running for other tests' objects; an unchanged status is not written again
    // (once the route is published: that condition is the last to settle).
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "cf.k8s.lex.la/Published",
        "True",
        "Published",
    )
    .await;
    let rv = |o: &Value| o["metadata"]["resourceVersion"].clone();
    let route_before = rv(&get_json(&["httproute", "web", "-n", &ns]).await);
    let gateway_before = rv(&get_json(&["gateway", "gw", "-n", &ns]).await);
    apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: nudge, namespace: {ns}}}\n"
    ))
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        rv(&get_json(&["httproute", "web", "-n", &ns]).await),
        route_before
    );
    assert_eq!(
        rv(&get_json(&["gateway", "gw", "-n", &ns]).await),
        gateway_before
    );

    let class = get_json(&["gatewayclass", CLASS]).await;
    assert_eq!(class["status"]["conditions"][0]["status"], "True");
    let finalizers = class["metadata"]["finalizers"].to_string();
    assert!(
        finalizers.contains("gateway-exists-finalizer.gateway.networking.k8s.io"),
        "the class is protected while Gateways use it: {finalizers}"
    );
}

#[tokio::test]
async fn editing_a_route_changes_traffic_and_the_ingress_document_once() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("edit");
    let (h1, h2) = (
        format!("one-{ns}.example.com"),
        format!("two-{ns}.example.com"),
    );
    let (a, b) = (spawn_backend("edit-a").await, spawn_backend("edit-b").await);
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "a", a)).await;
    apply(&service_yaml(&ns, "b", b)).await;
    apply(&http_route(&ns, "web", &h1, &ns, "a")).await;
    wait_traffic(&h1, "/", 200, "edit-a").await;
    wait_hostname(&h1, true).await;
    // Let any round still in flight finish before counting writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, before) = ingress_hostnames();

    apply(&http_route(&ns, "web", &h2, &ns, "b")).await;
    wait_traffic(&h2, "/x", 200, "edit-b /x").await;
    wait_traffic(&h1, "/", 404, "").await;
    wait_hostname(&h2, true).await;
    wait_hostname(&h1, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, after) = ingress_hostnames();
    assert_eq!(after - before, 1, "one edit, one ingress write");
}

#[tokio::test]
async fn a_cross_namespace_backend_is_refused_until_a_reference_grant_allows_it() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("xns");
    let other = unique_name("xns-backend");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("xns").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {other}}}\n"
    ))
    .await;
    apply(&service_yaml(&other, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &other, "echo")).await;

    let msg = wait_route_condition(
        "httproute",
        &ns,
        "web",
        "ResolvedRefs",
        "False",
        "RefNotPermitted",
    )
    .await;
    assert!(
        msg.contains(&other),
        "the message names the refused backend: {msg}"
    );
    wait_traffic(&host, "/", 500, "").await;

    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: allow-{ns}, namespace: {other}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {ns}}}]
  to: [{{group: "", kind: Service}}]
"#
    ))
    .await;
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    wait_traffic(&host, "/", 200, "xns /").await;
}

#[tokio::test]
async fn deleting_a_route_removes_its_hostname() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("del");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("del").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;
    wait_hostname(&host, true).await;
    wait_traffic(&host, "/", 200, "del").await;

    kubectl(&["delete", "httproute", "web", "-n", &ns]).await;
    wait_hostname(&host, false).await;
    wait_traffic(&host, "/", 404, "").await;
}

#[tokio::test]
async fn other_controllers_parent_statuses_are_preserved() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("foreign");
    let port = spawn_backend("foreign").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    let route = |host: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}, {{name: elsewhere}}]
  hostnames: ["{host}"]
  rules: [{{backendRefs: [{{name: echo, port: 80}}]}}]
"#
        )
    };
    apply(&route(&format!("a-{ns}.example.com"))).await;
    wait_route_condition("httproute", &ns, "web", "Accepted", "True", "Accepted").await;
    let foreign = serde_json::json!({"status": {"parents": [
        {"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "elsewhere", "namespace": ns},
         "controllerName": "example.com/other-controller",
         "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs",
                         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}
    ]}});
    // What a careless writer would do: replace the list with its own entry.
    kubectl(&[
        "patch",
        "httproute",
        "web",
        "-n",
        &ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &foreign.to_string(),
    ])
    .await;
    // Our entry comes back, theirs stays.
    wait_route_condition("httproute", &ns, "web", "Accepted", "True", "Accepted").await;
    apply(&route(&format!("b-{ns}.example.com"))).await;
    eventually("our entry at generation 2, theirs kept", WAIT, || async {
        let r = get_json(&["httproute", "web", "-n", &ns]).await;
        let parents = r["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let theirs = parents
            .iter()
            .any(|p| p["controllerName"] == "example.com/other-controller");
        let ours_gen = parents
            .iter()
            .find(|p| p["controllerName"] == CONTROLLER)
            .map(|p| p["conditions"][0]["observedGeneration"].clone())
            .unwrap_or(Value::Null);
        if theirs && ours_gen == 2 {
            Ok(())
        } else {
            Err(format!("{parents:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_second_replica_takes_over_when_the_leader_dies() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("failover");
    let port = spawn_backend("failover").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(
        &ns,
        "before",
        &format!("before-{ns}.example.com"),
        &ns,
        "echo",
    ))
    .await;
    wait_route_condition("httproute", &ns, "before", "Accepted", "True", "Accepted").await;
    // An Access application made by this leader, whose policy is deleted while no replica
    // leads: the next leader, which never saw it, removes it.
    apply(&crate::access::policy(
        &ns,
        "gone",
        &crate::access::route_target("before"),
        "rules:\n  - decision: Allow\n    include: {everyone: true}",
    ))
    .await;
    crate::access::wait_app(&ns, "gone", "created", |_| true).await;

    // Only the leader acts: the other replica has made no sync round.
    let leader = lease_holder().await;
    let followers: Vec<(String, std::net::SocketAddr)> = w
        .replicas
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.identity != leader)
        .map(|r| (r.identity.clone(), r.metrics))
        .collect();
    assert!(!followers.is_empty());
    for (identity, addr) in followers {
        let text = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !text.contains("cftunnel_sync_duration_seconds_count"),
            "the follower {identity} ran a round:\n{text}"
        );
    }
    // The leader dies without releasing its Lease.
    {
        let mut replicas = w.replicas.lock().unwrap();
        let at = replicas.iter().position(|r| r.identity == leader).unwrap();
        replicas[at].process.kill();
        replicas.remove(at);
    }
    kubectl(&["-n", &ns, "delete", "accesspolicy", "gone"]).await;
    apply(&http_route(
        &ns,
        "after",
        &format!("after-{ns}.example.com"),
        &ns,
        "echo",
    ))
    .await;
    wait_route_condition("httproute", &ns, "after", "Accepted", "True", "Accepted").await;
    wait_traffic(&format!("after-{ns}.example.com"), "/", 200, "failover").await;
    assert_ne!(
        lease_holder().await,
        leader,
        "the Lease moved to the survivor"
    );
    crate::access::wait_no_app(&ns, "gone").await;
}
