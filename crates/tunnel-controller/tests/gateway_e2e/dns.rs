//! DNS records (issue 20, item 6), end to end against the Cloudflare double: with
//! `spec.dns.enabled` off no DNS endpoint is called; turned on, a route's hostnames get proxied
//! CNAMEs to the tunnel with ownership records (wildcards too); a hostname whose record belongs
//! to someone else is reported on the route (condition and Warning Event) and the record is
//! never changed; a hostname in no zone is reported; a failing DNS API holds back no route; a
//! route that goes takes its records along, and the foreign record stays.

use std::time::Duration;

use cloudflare_double::{DnsGrant, Fault, FaultRule, RecordRec};
use test_cluster::unique_name;

use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);
const DNS_RECORD: &str = "cf.k8s.lex.la/DNSRecord";

fn records(zone: &str) -> Vec<RecordRec> {
    world()
        .double
        .dns_records()
        .remove(zone)
        .unwrap_or_default()
}

fn find<'a>(rs: &'a [RecordRec], kind: &str, name: &str) -> Option<&'a RecordRec> {
    rs.iter().find(|r| r.kind == kind && r.name == name)
}

fn dns_calls() -> usize {
    world()
        .double
        .calls()
        .iter()
        .filter(|c| c.path.starts_with("/zones"))
        .count()
}

fn class_yaml(class: &str, tunnel: &str, dns: bool) -> String {
    format!(
        r#"
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {{name: {class}}}
spec:
  tunnelID: {tunnel}
  cloudflareCredentialsSecretRef: {{name: cloudflare-api-token, namespace: {SYSTEM_NS}, key: api-token}}
  dns: {{enabled: {dns}, ownerId: owner-{class}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec:
  controllerName: {CONTROLLER}
  parametersRef: {{group: cf.k8s.lex.la, kind: GatewayClassConfig, name: {class}}}
"#
    )
}

fn route(ns: &str, name: &str, hosts: &[&str]) -> String {
    let hosts = hosts
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{hosts}]
  rules:
  - backendRefs: [{{name: echo, port: 80}}]
"#
    )
}

#[tokio::test]
async fn dns_records_created_never_overwritten_when_foreign_removed_when_unused() {
    let w = world();
    let _shared = w.lock.read().await;
    let id = unique_name("dns");
    let (class, ns) = (id.clone(), id.clone());
    let zone = format!("{id}.example.com");
    let tunnel = w.tunnel.tunnel_id.clone();
    let target = format!("{tunnel}.cfargotunnel.com");
    let app = format!("app.{zone}");
    let wild = format!("*.w.{zone}");
    let taken = format!("taken.{zone}");
    let nozone = format!("x.{id}.example.org");

    w.double.add_zone(&w.account, &zone).unwrap();
    w.double
        .grant_dns(
            API_TOKEN,
            DnsGrant {
                zones: None,
                edit: true,
            },
        )
        .unwrap();
    let foreign = w
        .double
        .add_dns_record(&zone, "CNAME", &taken, "origin.other.example.net", true)
        .unwrap();

    // DNS off: the route is published and no DNS endpoint is called.
    apply(&class_yaml(&class, &tunnel, false)).await;
    apply(&format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
"#
    ))
    .await;
    let port = spawn_backend(&id).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&route(&ns, "app", &[&app, &wild])).await;
    apply(&route(&ns, "taken", &[&taken])).await;
    apply(&route(&ns, "nozone", &[&nozone])).await;
    for r in ["app", "taken", "nozone"] {
        wait_route_condition(
            "httproute",
            &ns,
            r,
            "cf.k8s.lex.la/Published",
            "True",
            "Published",
        )
        .await;
    }
    assert_eq!(dns_calls(), 0, "DNS is off: no call to /zones");
    assert_eq!(
        route_condition("httproute", &ns, "app", DNS_RECORD).await,
        None
    );
    assert_eq!(records(&zone), vec![foreign.clone()]);

    // DNS on.
    apply(&class_yaml(&class, &tunnel, true)).await;
    let msg = wait_route_condition("httproute", &ns, "app", DNS_RECORD, "True", "DNSRecord").await;
    assert!(msg.contains(&app) && msg.contains(&target), "{msg}");
    let rs = records(&zone);
    let owner = format!("tunnel-gateway/owner=owner-{class}");
    for (host, txt_name) in [
        (app.as_str(), format!("_tunnel-gateway.{app}")),
        (wild.as_str(), format!("_tunnel-gateway-wildcard.w.{zone}")),
    ] {
        let cname = find(&rs, "CNAME", host).unwrap_or_else(|| panic!("CNAME {host}: {rs:?}"));
        assert_eq!(
            (cname.content.as_str(), cname.proxied),
            (target.as_str(), true)
        );
        let txt = find(&rs, "TXT", &txt_name).unwrap_or_else(|| panic!("TXT {txt_name}: {rs:?}"));
        assert!(
            txt.content.contains("heritage=tunnel-gateway") && txt.content.contains(&owner),
            "{txt:?}"
        );
    }

    // The foreign record: reported on the route, with a Warning Event, and left as it was.
    let msg = wait_route_condition(
        "httproute",
        &ns,
        "taken",
        DNS_RECORD,
        "False",
        "RecordOwnedElsewhere",
    )
    .await;
    assert!(
        msg.contains(&taken) && msg.contains("origin.other.example.net"),
        "{msg}"
    );
    eventually("a RecordOwnedElsewhere Event", WAIT, || async {
        let ev = kubectl(&[
            "get",
            "events",
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .await;
        if ev.contains("RecordOwnedElsewhere") {
            Ok(())
        } else {
            Err(ev)
        }
    })
    .await;
    let msg = wait_route_condition("httproute", &ns, "nozone", DNS_RECORD, "False", "NoZone").await;
    assert!(msg.contains(&nozone), "{msg}");
    let rs = records(&zone);
    assert_eq!(find(&rs, "CNAME", &taken), Some(&foreign));
    assert!(
        find(&rs, "TXT", &format!("_tunnel-gateway.{taken}")).is_none(),
        "{rs:?}"
    );

    let metrics = reqwest::get(format!("http://{}/metrics", leader_metrics().await))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"cftunnel_dns_record_changes_total{outcome="created"}"#),
        "{metrics}"
    );

    // The DNS API failing (5xx through the client's retries): a new route is still published,
    // says why its record is missing, and gets it once the API is back.
    let late = format!("late.{zone}");
    w.double
        .inject(FaultRule::new("/zones*", Fault::Status(503)).times(1000));
    apply(&route(&ns, "late", &[&late])).await;
    wait_route_condition(
        "httproute",
        &ns,
        "late",
        "cf.k8s.lex.la/Published",
        "True",
        "Published",
    )
    .await;
    wait_route_condition("httproute", &ns, "late", DNS_RECORD, "False", "DNSAPIError").await;
    assert!(ingress_hostnames().0.contains(&late));
    w.double.clear_faults();
    wait_route_condition("httproute", &ns, "late", DNS_RECORD, "True", "DNSRecord").await;
    assert!(find(&records(&zone), "CNAME", &late).is_some());

    // The route goes: its records go (CNAMEs and ownership records); the foreign one stays.
    kubectl(&["delete", "httproute", "app", "late", "-n", &ns]).await;
    eventually("the routes' records deleted", WAIT, || async {
        let rs = records(&zone);
        if rs.len() == 1 {
            Ok(())
        } else {
            Err(format!("{rs:?}"))
        }
    })
    .await;
    assert_eq!(records(&zone), vec![foreign]);

    // Turned off again before the namespace goes: nothing more is touched.
    apply(&class_yaml(&class, &tunnel, false)).await;
    kubectl(&["delete", "namespace", &ns, "--wait=false"]).await;
}
