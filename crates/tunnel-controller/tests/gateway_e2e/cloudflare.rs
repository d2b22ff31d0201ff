//! The Cloudflare side: the ingress document lists exactly the attached hostnames, and API
//! failures (errors, rate limits) mark the tunnel's routes Pending until they pass.

use std::collections::BTreeSet;
use std::time::Duration;

use cloudflare_double::{Fault, FaultRule};
use test_cluster::unique_name;

use crate::routing::wait_hostname;
use crate::world::*;

#[tokio::test]
async fn the_ingress_document_lists_exactly_the_attached_hostnames() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("exact");
    let other = unique_name("exact-other");
    let port = spawn_backend("exact").await;
    // A Gateway that only admits routes from its own namespace.
    apply(&format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {other}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
  listeners: [{{name: http, protocol: HTTP, port: 80}}]
"#
    ))
    .await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&service_yaml(&other, "echo", port)).await;
    let inside = format!("in-{ns}.example.com");
    let outside = format!("out-{ns}.example.com");
    apply(&http_route(&ns, "web", &inside, &ns, "echo")).await;
    apply(
        &http_route(&other, "web", &outside, &other, "echo").replace(
            &format!("parentRefs: [{{name: gw, namespace: {other}}}]"),
            &format!("parentRefs: [{{name: gw, namespace: {ns}}}]"),
        ),
    )
    .await;
    wait_route_condition(
        "httproute",
        &other,
        "web",
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    wait_hostname(&inside, true).await;

    eventually(
        "document == attached hostnames",
        Duration::from_secs(30),
        || async {
            let mut attached = BTreeSet::new();
            for kind in ["httproutes", "grpcroutes"] {
                let list = get_json(&[kind, "-A"]).await;
                for r in list["items"].as_array().into_iter().flatten() {
                    let accepted =
                        r["status"]["parents"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|p| {
                                p["controllerName"] == CONTROLLER
                                    && p["conditions"]
                                        .as_array()
                                        .into_iter()
                                        .flatten()
                                        .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                            });
                    if accepted {
                        for h in r["spec"]["hostnames"].as_array().into_iter().flatten() {
                            attached.insert(h.as_str().unwrap_or_default().to_owned());
                        }
                    }
                }
            }
            let (doc, _) = ingress_hostnames();
            let doc: BTreeSet<String> = doc.into_iter().collect();
            if doc == attached && !doc.contains(&outside) {
                Ok(())
            } else {
                Err(format!("document {doc:?} vs attached {attached:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn cloudflare_errors_and_rate_limits_mark_routes_pending_and_recover() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("cferr");
    let port = spawn_backend("cferr").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(
        &ns,
        "first",
        &format!("first-{ns}.example.com"),
        &ns,
        "echo",
    ))
    .await;
    wait_route_condition("httproute", &ns, "first", "Accepted", "True", "Accepted").await;

    for (what, fault) in [
        ("server errors", Fault::Status(502)),
        (
            "rate limits",
            Fault::RateLimited {
                retry_after_secs: 1,
            },
        ),
    ] {
        w.double
            .inject(FaultRule::new("/accounts/*", fault).times(100_000));
        // A change makes the controller call the API.
        let host = format!("{}-{ns}.example.com", what.replace(' ', "-"));
        apply(&http_route(&ns, "second", &host, &ns, "echo")).await;
        let msg =
            wait_route_condition("httproute", &ns, "first", "Accepted", "False", "Pending").await;
        assert!(
            msg.contains(&w.tunnel.tunnel_id),
            "{what}: the message names the tunnel: {msg}"
        );
        wait_route_condition("httproute", &ns, "second", "Accepted", "False", "Pending").await;

        eventually(
            "a CloudflareSyncFailed Event",
            Duration::from_secs(30),
            || async {
                let ev = kubectl(&["get", "events", "-n", &ns, "-o", "json"]).await;
                if ev.contains("CloudflareSyncFailed") {
                    Ok(())
                } else {
                    Err("none yet".to_owned())
                }
            },
        )
        .await;

        w.double.clear_faults();
        wait_route_condition("httproute", &ns, "first", "Accepted", "True", "Accepted").await;
        wait_route_condition("httproute", &ns, "second", "Accepted", "True", "Accepted").await;
        wait_hostname(&host, true).await;
    }
}
