//! Route statuses: each parent's conditions (`Accepted`, `ResolvedRefs`, the DNS record and
//! `Published`), other controllers' entries kept, the write carrying the resourceVersion read.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::conditions::{Verdict, merge};
use crate::keys::GATEWAY_GROUP;
use crate::model::dedicated::claims;
use crate::model::rules::hostnames;
use crate::model::{Model, PROXY_CONFIG_PUSHED, ROUTE_SHADOWED, RouteOutcome, RouteParentStatus};
use crate::publish::cloudflare::dns::{self, HostVerdict};

use super::{CLOUDFLARE_SYNC_FAILED, Effects, INGRESS_RULE_LIMIT, Notice, PUBLISHED, Write};

pub(super) fn route_write(
    r: &RouteOutcome,
    model: &Model,
    effects: &Effects,
    controller_name: &str,
    now: &Time,
    notices: &mut Vec<Notice>,
) -> Option<Write> {
    let ours = |p: &RouteParentStatus| p.controller_name == controller_name;
    let mut parents: Vec<RouteParentStatus> = r
        .current_parents
        .iter()
        .filter(|p| !ours(p))
        .cloned()
        .collect();
    let reference = route_reference(r);
    let mut seen = BTreeSet::new();
    for p in &r.parents {
        if !seen.insert(&p.parent_ref) {
            continue; // the same parentRef twice: one status entry
        }
        let mut verdicts = p.verdicts.clone();
        let gw = model.gateways.get(&p.gateway);
        let served = p.hostnames.is_some();
        let mut sync_failed = false;
        if served
            && let Some(tunnel) = gw.and_then(|g| g.tunnel.as_ref())
            && let Some(err) = effects.tunnel_errors.get(tunnel)
        {
            sync_failed = true;
            verdicts[0] = Verdict::fail(
                "Accepted",
                "Pending",
                format!("the Cloudflare sync of tunnel {tunnel} failed: {err}; retrying"),
            );
        }
        if served && let Some(hosts) = effects.overflow.get(&r.id) {
            verdicts.push(Verdict::new(
                INGRESS_RULE_LIMIT,
                true,
                "IngressRuleLimitExceeded",
                format!(
                    "the tunnel's ingress document holds at most 1,000 rules; left out (newest routes first): {}",
                    hosts.join(", ")
                ),
            ));
        }
        if served
            && let Some(dns) = effects.dns.get(&p.gateway)
            && let Some(v) = dns_verdict(p, dns)
        {
            verdicts.push(v);
        }
        if served
            && let Some(partition) = gw.and_then(|g| g.partition.as_ref())
            && let Some(err) = effects.push_failing.get(partition)
        {
            verdicts.push(Verdict::fail(
                PROXY_CONFIG_PUSHED,
                "ProxyConfigPushFailed",
                format!(
                    "pushing the route table to the {partition} data plane keeps failing: {err}"
                ),
            ));
        }
        if p.attached {
            verdicts.push(published(r, p, gw, effects));
        }
        let before: Vec<Condition> = r
            .current_parents
            .iter()
            .find(|c| ours(c) && c.parent_ref == p.parent_ref)
            .map(|c| c.conditions.clone())
            .unwrap_or_default();
        let conditions = merge(&before, &verdicts, r.generation, now);
        for c in &conditions {
            let was = before.iter().find(|b| b.type_ == c.type_);
            // Published=False says what is still under way; the failures behind a lasting one
            // have Events of their own (ProxyConfigPushFailed, CloudflareSyncFailed,
            // IngressRuleLimitExceeded).
            let failing = (c.status == "False" && c.type_ != PUBLISHED)
                || c.type_ == INGRESS_RULE_LIMIT
                || c.type_ == ROUTE_SHADOWED
                || c.type_ == claims::CONDITION_TUNNEL_SHARED;
            if failing && was.is_none_or(|w| w.status != c.status || w.reason != c.reason) {
                let reason = if sync_failed && c.type_ == "Accepted" {
                    CLOUDFLARE_SYNC_FAILED.to_owned()
                } else if c.type_ == claims::CONDITION_TUNNEL_SHARED {
                    claims::EVENT_TUNNEL_SHARED.to_owned()
                } else {
                    c.reason.clone()
                };
                notices.push(Notice {
                    object: reference.clone(),
                    warning: true,
                    reason,
                    message: format!(
                        "parent {}: {}",
                        p.listener_set.as_ref().unwrap_or(&p.gateway),
                        c.message
                    ),
                });
            }
        }
        parents.push(RouteParentStatus {
            parent_ref: p.parent_ref.clone(),
            controller_name: controller_name.to_owned(),
            conditions,
        });
    }
    if parents == r.current_parents {
        return None;
    }
    Some(Write::Route {
        id: r.id.clone(),
        resource_version: r.resource_version.clone(),
        parents,
    })
}

/// The `cf.k8s.lex.la/DNSRecord` condition of a route parent whose tunnel has DNS records on:
/// False with the first problem's reason (a record owned elsewhere, no zone, a failing API)
/// naming every hostname concerned; True once each of its hostnames has our CNAME. `None`
/// when it serves no hostname with a DNS verdict yet.
fn dns_verdict(
    p: &crate::model::ParentOutcome,
    dns: &BTreeMap<String, HostVerdict>,
) -> Option<Verdict> {
    let hosts: BTreeSet<String> = p
        .hostnames
        .iter()
        .flatten()
        .map(|h| hostnames::normalize(h))
        .filter(|h| dns.contains_key(h))
        .collect();
    if hosts.is_empty() {
        return None;
    }
    let (mut elsewhere, mut no_zone, mut failed, mut ready) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for h in &hosts {
        match &dns[h] {
            HostVerdict::OwnedElsewhere(why) => elsewhere.push(format!("{h}: {why}")),
            HostVerdict::NoZone => no_zone.push(h.clone()),
            HostVerdict::Failed(why) => failed.push(format!("{h}: {why}")),
            HostVerdict::Ready { tunnel } => ready.push(format!("{h} → {}", dns::target(tunnel))),
        }
    }
    Some(if !elsewhere.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::OWNED_ELSEWHERE,
            format!(
                "not written, the name holds a record this controller did not create: {}",
                elsewhere.join("; ")
            ),
        )
    } else if !no_zone.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::NO_ZONE,
            format!(
                "no zone the Cloudflare API token can see holds {}",
                no_zone.join(", ")
            ),
        )
    } else if !failed.is_empty() {
        Verdict::fail(
            dns::DNS_RECORD,
            dns::DNS_API_ERROR,
            format!("the DNS API failed, retrying: {}", failed.join("; ")),
        )
    } else {
        Verdict::ok(
            dns::DNS_RECORD,
            format!("proxied CNAME records: {}", ready.join(", ")),
        )
    })
}

/// Whether an attached route parent is live: the Gateway's partition has loaded this round's
/// document (which holds the route) and its tunnel's ingress document lists every hostname the
/// route serves through it. Both come from this round's I/O, so it is never True before both
/// are done; every round that leaves one undone is retried, so it turns True once they are. A
/// parent attached only through listeners that are not served is never live.
fn published(
    r: &RouteOutcome,
    p: &crate::model::ParentOutcome,
    gw: Option<&crate::model::GatewayOutcome>,
    effects: &Effects,
) -> Verdict {
    if p.isolated {
        return Verdict::fail(
            PUBLISHED,
            "HostnamesIsolated",
            "nothing is served: each hostname the route has through its listeners belongs to a more specific listener of the Gateway (listener isolation)",
        );
    }
    if p.hostnames.is_none() {
        return Verdict::fail(
            PUBLISHED,
            "ListenerNotProgrammed",
            "nothing is served: the listeners the route attached through are not programmed (see the Gateway's listener conditions)",
        );
    }
    let partition = gw.and_then(|g| g.partition.as_ref());
    let tunnel = gw.and_then(|g| g.tunnel.as_ref());
    let overflow = effects.overflow.get(&r.id);
    let listed = tunnel.and_then(|t| effects.ingress.get(t));
    // A route serving any host needs the catch-all pointed at the proxy (listed as `*`).
    let any_host = p.hostnames.as_ref().is_some_and(Vec::is_empty);
    let hostnames = p
        .hostnames
        .iter()
        .flatten()
        .map(|h| hostnames::normalize(h))
        .filter(|h| !h.is_empty() && h != "*")
        .chain(any_host.then(|| "*".to_owned()));
    let (mut left_out, mut missing) = (Vec::new(), Vec::new());
    for h in hostnames {
        if overflow.is_some_and(|o| o.iter().any(|x| hostnames::normalize(x) == h)) {
            left_out.push(h);
        } else if !listed.is_some_and(|l| l.contains(&h)) {
            missing.push(h);
        }
    }
    let mut waiting = Vec::new();
    if !partition.is_some_and(|k| effects.loaded.contains(k)) {
        waiting.push(match partition {
            Some(k) => format!("the {k} data plane has not loaded the route yet"),
            None => "no data plane serves the Gateway yet".to_owned(),
        });
    }
    if !missing.is_empty() {
        waiting.push(format!(
            "the ingress document of tunnel {} does not list {} yet",
            tunnel.map_or("?", String::as_str),
            missing.join(", ")
        ));
    }
    if !left_out.is_empty() {
        waiting.push(format!(
            "{} did not fit the tunnel's ingress document (see {INGRESS_RULE_LIMIT})",
            left_out.join(", ")
        ));
        return Verdict::fail(PUBLISHED, "IngressRuleLimitExceeded", waiting.join("; "));
    }
    if waiting.is_empty() {
        Verdict::ok(
            PUBLISHED,
            "the data plane serves the route and the tunnel's ingress document lists its hostnames",
        )
    } else {
        Verdict::fail(PUBLISHED, "Pending", waiting.join("; "))
    }
}

fn route_reference(r: &RouteOutcome) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!("{GATEWAY_GROUP}/v1")),
        kind: Some(r.id.kind.as_str().to_owned()),
        namespace: Some(r.id.key.namespace.clone()),
        name: Some(r.id.key.name.clone()),
        ..Default::default()
    }
}
