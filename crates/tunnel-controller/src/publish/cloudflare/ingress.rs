//! The ingress document of one Cloudflare Tunnel (TG-3), computed without I/O: every hostname of
//! the routes attached to the tunnel's Gateways points at the proxy beside the connector
//! (`http://localhost:8080`), then the catch-all: `http_status:404`, or the proxy too when a
//! route serves any host (given as `*`), so that every name the operator's DNS sends to the
//! tunnel reaches the proxy's routing (Cloudflare refuses `*` as a rule's hostname). At most
//! 1,000 rules; the hostnames beyond are returned so their routes can say why.
//!
//! The controller owns the document's rules (foreign rules are replaced); settings outside the
//! rules (`originRequest`, `warp-routing`, anything unknown) are kept as they are.

use std::collections::BTreeSet;

use cloudflare_api::{IngressRule, TunnelConfig};

use crate::model::rules::hostnames::normalize;

/// Where cloudflared sends every hostname: the proxy in the same pod.
pub const PROXY_SERVICE: &str = "http://localhost:8080";
/// The most rules one tunnel configuration may hold (the catch-all included).
pub const MAX_RULES: usize = 1000;

/// The document to write, if it differs from the current one, and the hostnames that did not fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `None` when the current document is already right (no write).
    pub write: Option<TunnelConfig>,
    /// Hostnames left out by the rule cap, in the order they were given.
    pub overflow: Vec<String>,
}

/// Plans the document for `hostnames`, given in priority order (the routes that keep their rules
/// when the cap is reached come first: oldest route first). Hostnames are compared
/// case-insensitively; `*` and empty hostnames (a route serving any host) get no rule of their
/// own: they make the catch-all send to the proxy.
pub fn plan(current: &TunnelConfig, hostnames: &[String]) -> Plan {
    let mut kept: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut overflow = Vec::new();
    let mut any_host = false;
    for h in hostnames {
        let h = normalize(h);
        if h.is_empty() || h == "*" {
            any_host = true;
            continue;
        }
        if !seen.insert(h.clone()) {
            continue;
        }
        if kept.len() < MAX_RULES - 1 {
            kept.push(h);
        } else {
            overflow.push(h);
        }
    }
    kept.sort_by(|a, b| rule_order(a).cmp(&rule_order(b)));
    let mut ingress: Vec<IngressRule> = kept
        .into_iter()
        .map(|h| IngressRule::new(h, PROXY_SERVICE))
        .collect();
    ingress.push(if any_host {
        IngressRule {
            service: PROXY_SERVICE.to_owned(),
            ..IngressRule::catch_all()
        }
    } else {
        IngressRule::catch_all()
    });
    let desired = TunnelConfig {
        ingress,
        extra: current.extra.clone(),
    };
    Plan {
        write: (desired != *current).then_some(desired),
        overflow,
    }
}

/// Cloudflare matches rules in order, first match wins: exact hostnames before wildcards, and a
/// longer wildcard (more specific) before a shorter one; otherwise alphabetical, so the document
/// is stable.
fn rule_order(h: &str) -> (bool, std::cmp::Reverse<usize>, &str) {
    let wildcard = h.starts_with("*.");
    (
        wildcard,
        std::cmp::Reverse(if wildcard { h.len() } else { 0 }),
        h,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hosts(h: &[&str]) -> Vec<String> {
        h.iter().map(|s| s.to_string()).collect()
    }

    fn rules(doc: &TunnelConfig) -> Vec<(Option<&str>, &str)> {
        doc.ingress
            .iter()
            .map(|r| (r.hostname.as_deref(), r.service.as_str()))
            .collect()
    }

    #[test]
    fn each_hostname_points_at_the_proxy_and_the_catch_all_comes_last() {
        let plan = plan(
            &TunnelConfig::default(),
            &hosts(&["b.example.com", "A.example.com.", "b.example.com"]),
        );
        assert_eq!(
            rules(plan.write.as_ref().unwrap()),
            [
                (Some("a.example.com"), PROXY_SERVICE),
                (Some("b.example.com"), PROXY_SERVICE),
                (None, "http_status:404"),
            ]
        );
        assert!(plan.overflow.is_empty());
    }

    #[test]
    fn exact_hostnames_precede_wildcards_and_longer_wildcards_precede_shorter() {
        let plan = plan(
            &TunnelConfig::default(),
            &hosts(&["*.example.com", "*.api.example.com", "z.example.com", "*"]),
        );
        assert_eq!(
            rules(plan.write.as_ref().unwrap())
                .iter()
                .map(|r| r.0)
                .collect::<Vec<_>>(),
            [
                Some("z.example.com"),
                Some("*.api.example.com"),
                Some("*.example.com"),
                None
            ]
        );
    }

    #[test]
    fn an_unchanged_document_is_not_written() {
        let first = plan(&TunnelConfig::default(), &hosts(&["a.example.com"]))
            .write
            .unwrap();
        assert_eq!(plan(&first, &hosts(&["A.EXAMPLE.COM"])).write, None);
        assert!(
            plan(&first, &hosts(&["a.example.com", "b.example.com"]))
                .write
                .is_some()
        );
    }

    #[test]
    fn foreign_rules_are_replaced_and_settings_outside_the_rules_are_kept() {
        let current: TunnelConfig = serde_json::from_value(json!({
            "ingress": [
                {"hostname": "manual.example.com", "service": "http://somewhere:80"},
                {"service": "http_status:404"}
            ],
            "warp-routing": {"enabled": true},
            "originRequest": {"connectTimeout": 10}
        }))
        .unwrap();
        let doc = plan(&current, &hosts(&["a.example.com"])).write.unwrap();
        assert_eq!(
            rules(&doc),
            [
                (Some("a.example.com"), PROXY_SERVICE),
                (None, "http_status:404")
            ]
        );
        assert_eq!(doc.extra["warp-routing"], json!({"enabled": true}));
        assert_eq!(doc.extra["originRequest"], json!({"connectTimeout": 10}));
    }

    #[test]
    fn no_hostnames_leave_only_the_catch_all() {
        let doc = plan(&TunnelConfig::default(), &[]).write.unwrap();
        assert_eq!(rules(&doc), [(None, "http_status:404")]);
    }

    #[test]
    fn a_route_serving_any_host_sends_the_catch_all_to_the_proxy() {
        for any in ["*", "", " * "] {
            let doc = plan(&TunnelConfig::default(), &hosts(&["a.example.com", any]))
                .write
                .unwrap();
            assert_eq!(
                rules(&doc),
                [
                    (Some("a.example.com"), PROXY_SERVICE),
                    (None, PROXY_SERVICE)
                ],
                "{any:?}"
            );
        }
        // The route gone: the catch-all is the edge's 404 again.
        let doc = plan(&TunnelConfig::default(), &hosts(&["*"]))
            .write
            .unwrap();
        let back = plan(&doc, &hosts(&["a.example.com"])).write.unwrap();
        assert_eq!(
            rules(&back),
            [
                (Some("a.example.com"), PROXY_SERVICE),
                (None, "http_status:404")
            ]
        );
    }

    #[test]
    fn beyond_one_thousand_rules_the_newest_hostnames_are_left_out() {
        let many: Vec<String> = (0..1005).map(|i| format!("h{i:04}.example.com")).collect();
        let plan = plan(&TunnelConfig::default(), &many);
        let doc = plan.write.unwrap();
        assert_eq!(doc.ingress.len(), MAX_RULES);
        assert!(doc.ingress.last().unwrap().is_catch_all());
        assert_eq!(
            plan.overflow,
            many[999..].to_vec(),
            "the last given (newest) do not fit"
        );
    }
}
