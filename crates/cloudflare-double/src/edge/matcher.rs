//! Which tunnel and which ingress rule a request meets: the pure part of the edge.
//!
//! Cloudflare picks the tunnel by DNS (a proxied `CNAME <host> → <tunnel>.cfargotunnel.com`), and
//! cloudflared then walks that tunnel's ingress rules in order (`ingress/ingress.go`
//! `FindMatchingRule`, `ingress/rule.go` `Matches`/`matchHost`):
//! - a rule matches when its hostname matches and its `path` regex (unanchored, on the URL path
//!   without the query) finds a match; no hostname (or `*`) matches every host, no path every path;
//! - `*.example.com` matches any host ending in `.example.com` (one or more labels, never the
//!   apex); otherwise the hostname must be equal;
//! - the request's port is ignored; when no rule matches, the last rule (the catch-all) answers.
//!
//! The double has no DNS, so [`select_tunnel`] stands in for it: a tunnel *claims* a host when one
//! of its rules with a hostname matches it (what the controller would publish as DNS records). An
//! exact claim beats a wildcard one and a longer wildcard a shorter one (DNS's closest encloser);
//! a tie goes to the first tunnel in the order given.

use regex::Regex;
use serde_json::Value;

/// One compiled ingress rule.
#[derive(Debug, Clone)]
pub struct IngressRule {
    /// Lower-case hostname pattern; `None` for a catch-all (absent, empty or `*`).
    pub hostname: Option<String>,
    /// The `path` regular expression.
    pub path: Option<Regex>,
    /// The `service` string as written (`http://localhost:8080`, `http_status:404`, ...).
    pub service: String,
}

/// A tunnel's ingress rules, compiled from its configuration document.
#[derive(Debug, Clone, Default)]
pub struct Ingress {
    /// The rules in document order.
    pub rules: Vec<IngressRule>,
}

/// How a tunnel claims a host, ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claim {
    /// Through a `*.suffix` rule; the number is the suffix length (longer is more specific).
    Wildcard(usize),
    /// Through a rule naming the host itself.
    Exact,
}

/// Why a document could not be compiled (the API validates on PUT, but
/// `set_configuration` stores anything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ingress document unusable: {0}")]
pub struct IngressError(String);

impl Ingress {
    /// Compiles the `config` document of a tunnel (`{"ingress": [{hostname, path, service}]}`).
    pub fn from_config(config: &Value) -> Result<Ingress, IngressError> {
        let rules = config
            .get("ingress")
            .and_then(Value::as_array)
            .ok_or_else(|| IngressError("no ingress array".into()))?;
        if rules.is_empty() {
            return Err(IngressError("no ingress rules".into()));
        }
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let text = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or_default();
                let hostname = match text("hostname") {
                    "" | "*" => None,
                    h => Some(normalize_host(h)),
                };
                let path = match text("path") {
                    "" => None,
                    p => Some(
                        Regex::new(p)
                            .map_err(|e| IngressError(format!("rule #{}: path: {e}", i + 1)))?,
                    ),
                };
                Ok(IngressRule {
                    hostname,
                    path,
                    service: text("service").to_string(),
                })
            })
            .collect::<Result<Vec<_>, IngressError>>()?;
        Ok(Ingress { rules })
    }

    /// The strongest claim of any rule with a hostname on `host` (already normalized).
    pub fn claims(&self, host: &str) -> Option<Claim> {
        self.rules
            .iter()
            .filter_map(|r| host_claim(r.hostname.as_deref()?, host))
            .max()
    }

    /// The first rule matching `host` (normalized) and `path`, else the last rule.
    pub fn find(&self, host: &str, path: &str) -> &IngressRule {
        self.rules
            .iter()
            .find(|r| {
                r.hostname
                    .as_deref()
                    .is_none_or(|h| host_claim(h, host).is_some())
                    && r.path.as_ref().is_none_or(|p| p.is_match(path))
            })
            .or(self.rules.last())
            .expect("an ingress has at least one rule")
    }
}

/// Lower-case, without a port or a trailing dot.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let without_port = match host.rsplit_once(':') {
        // An IPv6 literal without a port (`[::1]`) has its last colon inside the brackets.
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => host,
    };
    without_port.trim_end_matches('.').to_ascii_lowercase()
}

fn host_claim(rule: &str, host: &str) -> Option<Claim> {
    if rule == host {
        return Some(Claim::Exact);
    }
    let suffix = rule.strip_prefix('*')?;
    (suffix.starts_with('.') && host.ends_with(suffix)).then_some(Claim::Wildcard(suffix.len()))
}

/// The tunnel serving `host` (normalized): the strongest claim, the first on a tie.
pub fn select_tunnel<'a, T>(
    tunnels: impl IntoIterator<Item = (T, &'a Ingress)>,
    host: &str,
) -> Option<(T, &'a Ingress)> {
    let mut best: Option<(Claim, T, &Ingress)> = None;
    for (id, ingress) in tunnels {
        if let Some(claim) = ingress.claims(host)
            && best.as_ref().is_none_or(|(b, _, _)| claim > *b)
        {
            best = Some((claim, id, ingress));
        }
    }
    best.map(|(_, id, ingress)| (id, ingress))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ingress(rules: Value) -> Ingress {
        Ingress::from_config(&json!({ "ingress": rules })).unwrap()
    }

    #[test]
    fn rule_order_wildcards_paths_and_catch_all() {
        let ing = ingress(json!([
            {"hostname": "api.example.com", "path": "^/v1/", "service": "http://v1"},
            {"hostname": "api.example.com", "service": "http://api"},
            {"hostname": "*.example.com", "path": "\\.png$", "service": "http://img"},
            {"hostname": "*.example.com", "service": "http://wild"},
            {"hostname": "Exact.Example.ORG", "service": "http://org"},
            {"service": "http_status:404"}
        ]));
        let cases = [
            // host, path, service
            ("api.example.com", "/v1/users", "http://v1"),
            ("api.example.com", "/v2/users", "http://api"),
            // The path regex is unanchored unless it says otherwise.
            ("api.example.com", "/x/v1/", "http://api"),
            ("api.example.com", "/pics/a.png", "http://api"),
            ("www.example.com", "/pics/a.png", "http://img"),
            ("www.example.com", "/a.png/b", "http://wild"),
            // One or more labels under the wildcard, never the apex.
            ("a.b.example.com", "/", "http://wild"),
            ("example.com", "/", "http_status:404"),
            ("badexample.com", "/", "http_status:404"),
            ("exact.example.org", "/", "http://org"),
            ("sub.exact.example.org", "/", "http_status:404"),
            ("other.test", "/v1/", "http_status:404"),
        ];
        for (host, path, service) in cases {
            assert_eq!(ing.find(host, path).service, service, "{host}{path}");
        }
    }

    #[test]
    fn first_match_wins_even_when_a_later_rule_is_more_specific() {
        let ing = ingress(json!([
            {"hostname": "*.example.com", "service": "http://wild"},
            {"hostname": "app.example.com", "service": "http://app"},
            {"service": "http_status:503"}
        ]));
        assert_eq!(ing.find("app.example.com", "/").service, "http://wild");
    }

    #[test]
    fn host_normalization() {
        for (raw, want) in [
            ("App.Example.com", "app.example.com"),
            ("app.example.com:8443", "app.example.com"),
            ("app.example.com.", "app.example.com"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
        ] {
            assert_eq!(normalize_host(raw), want, "{raw}");
        }
    }

    #[test]
    fn tunnel_selection_by_claim_strength_then_order() {
        let wild = ingress(
            json!([{"hostname": "*.example.com", "service": "http://w"}, {"service": "http_status:404"}]),
        );
        let deeper = ingress(
            json!([{"hostname": "*.a.example.com", "service": "http://d"}, {"service": "http_status:404"}]),
        );
        let exact = ingress(
            json!([{"hostname": "x.a.example.com", "path": "^/only$", "service": "http://e"}, {"service": "http_status:404"}]),
        );
        let catch_all_only = ingress(json!([{"service": "http://everything"}]));
        let all = [
            ("wild", &wild),
            ("deeper", &deeper),
            ("exact", &exact),
            ("catch", &catch_all_only),
        ];
        let pick = |host: &str| select_tunnel(all.iter().copied(), host).map(|(id, _)| id);
        // The exact claim wins even though its only rule's path will not match: DNS decides the
        // tunnel, and that tunnel's catch-all answers.
        assert_eq!(pick("x.a.example.com"), Some("exact"));
        assert_eq!(
            exact.find("x.a.example.com", "/other").service,
            "http_status:404"
        );
        assert_eq!(pick("y.a.example.com"), Some("deeper"));
        assert_eq!(pick("b.example.com"), Some("wild"));
        // A catch-all claims nothing: no DNS record would point at it.
        assert_eq!(pick("example.com"), None);
        assert_eq!(pick("elsewhere.test"), None);
        // A tie goes to the first tunnel.
        let twin = ingress(
            json!([{"hostname": "*.example.com", "service": "http://t"}, {"service": "http_status:404"}]),
        );
        let tie = [("first", &wild), ("second", &twin)];
        assert_eq!(
            select_tunnel(tie, "q.example.com").map(|(id, _)| id),
            Some("first")
        );
    }

    #[test]
    fn unusable_documents_are_refused() {
        assert!(Ingress::from_config(&json!({})).is_err());
        assert!(Ingress::from_config(&json!({"ingress": []})).is_err());
        let bad = Ingress::from_config(&json!({"ingress": [{"path": "(", "service": "x"}]}));
        assert!(bad.unwrap_err().to_string().contains("rule #1"));
    }
}
