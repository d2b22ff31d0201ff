//! Hostname ownership for multi-tenant clusters (issue 20, item 2): which namespaces may serve
//! which hostnames, from the delegations in a GatewayClassConfig's `spec.hostnameOwnership`.
//! Pure: the model asks [`Delegations::check`] about every hostname a route parent would serve.
//!
//! A delegation entry uses the Gateway API hostname syntax: `a.example` is that name only;
//! `*.a.example` is every name below `a.example` (wildcard route hostnames below it included),
//! never the apex. A namespace may serve a route hostname when
//!
//! 1. one of its entries covers the hostname, and
//! 2. no entry of another namespace that overlaps the hostname is strictly more specific than
//!    that covering entry.
//!
//! Rule 2 is DNS-style sub-delegation: with `*.example` delegated to B and `*.a.example` to A,
//! B may serve `b.example` but neither `x.a.example` (A's) nor the wildcard `*.example` (it
//! would also answer for A's names) nor `*.x.a.example`. An entry delegated to several
//! namespaces (one delegation listing them, or two delegations with the same entry) is shared
//! on purpose: each of them may serve it. A route that serves any hostname (no hostname on the
//! route nor on the listener) is never permitted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::model::rules::hostnames;

/// The delegations of one GatewayClassConfig: each entry (normalized) with the namespaces it is
/// delegated to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delegations {
    entries: BTreeMap<String, BTreeSet<String>>,
}

/// Why a namespace may not serve a hostname.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The route would serve any hostname.
    AnyHostname,
    /// No entry of the namespace covers the hostname.
    NotDelegated { hostname: String },
    /// The namespace's entries cover it, but a more specific entry of other namespaces
    /// overlaps it.
    DelegatedElsewhere {
        hostname: String,
        entry: String,
        namespaces: Vec<String>,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::AnyHostname => write!(
                f,
                "the route would serve any hostname: with hostname ownership on, name hostnames delegated to the namespace (spec.hostnames) or attach to a listener with a hostname"
            ),
            Refusal::NotDelegated { hostname } => write!(
                f,
                "hostname {hostname} is not delegated to the route's namespace"
            ),
            Refusal::DelegatedElsewhere {
                hostname,
                entry,
                namespaces,
            } if hostname == entry => write!(
                f,
                "hostname {hostname} is delegated to namespace {}",
                namespaces.join(", ")
            ),
            Refusal::DelegatedElsewhere {
                hostname,
                entry,
                namespaces,
            } => write!(
                f,
                "hostname {hostname} overlaps {entry}, delegated more specifically to namespace {}",
                namespaces.join(", ")
            ),
        }
    }
}

impl Delegations {
    /// From `(namespaces, hostnames)` pairs as the GatewayClassConfig lists them.
    pub fn new<'a>(delegations: impl IntoIterator<Item = (&'a [String], &'a [String])>) -> Self {
        let mut entries: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (namespaces, hosts) in delegations {
            for h in hosts {
                entries
                    .entry(hostnames::normalize(h))
                    .or_default()
                    .extend(namespaces.iter().cloned());
            }
        }
        Self { entries }
    }

    /// Whether `namespace` may serve every one of `served` (the hostnames a route parent
    /// serves; empty = any hostname). The first refused hostname says why.
    pub fn check_all(&self, namespace: &str, served: &[String]) -> Result<(), Refusal> {
        if served.is_empty() {
            return Err(Refusal::AnyHostname);
        }
        served.iter().try_for_each(|h| self.check(namespace, h))
    }

    /// Whether `namespace` may serve the route hostname `hostname` (exact or wildcard).
    pub fn check(&self, namespace: &str, hostname: &str) -> Result<(), Refusal> {
        let host = hostnames::normalize(hostname);
        if host == "*" || host.is_empty() {
            return Err(Refusal::AnyHostname);
        }
        // The namespace's most specific entry covering the hostname: every entry covering a
        // name lies on one chain (each covers the next), so the most specific is the one all
        // others cover.
        let covering: Vec<&String> = self
            .entries
            .iter()
            .filter(|(e, ns)| ns.contains(namespace) && covers(e, &host))
            .map(|(e, _)| e)
            .collect();
        let Some(best) = covering
            .iter()
            .copied()
            .find(|b| covering.iter().all(|e| covers(e, b)))
        else {
            return Err(Refusal::NotDelegated { hostname: host });
        };
        let deeper = self.entries.iter().find(|(e, ns)| {
            !ns.contains(namespace)
                && *e != best
                && covers(best, e)
                && (covers(e, &host) || covers(&host, e))
        });
        match deeper {
            None => Ok(()),
            Some((entry, ns)) => Err(Refusal::DelegatedElsewhere {
                hostname: host,
                entry: entry.clone(),
                namespaces: ns.iter().cloned().collect(),
            }),
        }
    }
}

/// Whether the pattern `a` covers `b`: equal, or `a` is a wildcard and `b` (exact or wildcard)
/// lies strictly below its suffix.
pub fn covers(a: &str, b: &str) -> bool {
    hostnames::matches(a, b)
}

/// Whether two hostname patterns share a name: one covers the other (overlapping wildcards
/// included: `*.example` and `*.a.example`).
pub fn overlaps(a: &str, b: &str) -> bool {
    covers(a, b) || covers(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// A owns `a.example` and `*.a.example`; B owns `*.example`; C and D share `shared.example`.
    fn tenants() -> Delegations {
        let a = (s(&["team-a"]), s(&["A.example.", "*.a.example"]));
        let b = (s(&["team-b"]), s(&["*.example"]));
        let cd = (s(&["team-c", "team-d"]), s(&["shared.example"]));
        let list = [a, b, cd];
        Delegations::new(list.iter().map(|(n, h)| (n.as_slice(), h.as_slice())))
    }

    #[test]
    fn covering_follows_gateway_api_wildcards() {
        let table = [
            ("*.a.example", "x.a.example", true),
            ("*.a.example", "x.y.a.example", true),
            ("*.a.example", "a.example", false),
            ("*.a.example", "*.a.example", true),
            ("*.a.example", "*.x.a.example", true),
            ("*.x.a.example", "*.a.example", false),
            ("a.example", "a.example", true),
            ("a.example", "x.a.example", false),
            ("a.example", "*.a.example", false),
            ("*.a.example", "xa.example", false),
            ("*.example", "*.a.example", true),
        ];
        for (a, b, want) in table {
            assert_eq!(covers(a, b), want, "covers({a}, {b})");
        }
        assert!(overlaps("*.a.example", "*.example"));
        assert!(overlaps("x.a.example", "*.a.example"));
        assert!(!overlaps("*.a.example", "*.b.example"));
        assert!(!overlaps("a.example", "*.a.example"));
    }

    #[test]
    fn every_rule_in_one_table() {
        let d = tenants();
        let ok = Ok(());
        let not = |h: &str| {
            Err(Refusal::NotDelegated {
                hostname: h.to_owned(),
            })
        };
        let elsewhere = |h: &str, e: &str, ns: &[&str]| {
            Err(Refusal::DelegatedElsewhere {
                hostname: h.to_owned(),
                entry: e.to_owned(),
                namespaces: s(ns),
            })
        };
        let table = [
            // A: its exact apex and everything below it.
            ("team-a", "a.example", ok.clone()),
            ("team-a", "x.a.example", ok.clone()),
            ("team-a", "*.a.example", ok.clone()),
            ("team-a", "*.x.a.example", ok.clone()),
            ("team-a", "X.A.Example.", ok.clone()),
            ("team-a", "b.example", not("b.example")),
            ("team-a", "*.example", not("*.example")),
            // B: its suffix, minus what is delegated more specifically to A.
            ("team-b", "b.example", ok.clone()),
            ("team-b", "x.y.example", ok.clone()),
            ("team-b", "*.b.example", ok.clone()),
            (
                "team-b",
                "x.a.example",
                elsewhere("x.a.example", "*.a.example", &["team-a"]),
            ),
            (
                "team-b",
                "a.example",
                elsewhere("a.example", "a.example", &["team-a"]),
            ),
            (
                "team-b",
                "*.a.example",
                elsewhere("*.a.example", "*.a.example", &["team-a"]),
            ),
            (
                "team-b",
                "*.x.a.example",
                elsewhere("*.x.a.example", "*.a.example", &["team-a"]),
            ),
            // B's wildcard would also answer for A's names: an overlapping wildcard.
            (
                "team-b",
                "*.example",
                elsewhere("*.example", "*.a.example", &["team-a"]),
            ),
            ("team-b", "example", not("example")),
            // A shared entry: each of its namespaces may serve it, B (less specific) may not.
            ("team-c", "shared.example", ok.clone()),
            ("team-d", "shared.example", ok.clone()),
            (
                "team-b",
                "shared.example",
                elsewhere("shared.example", "shared.example", &["team-c", "team-d"]),
            ),
            ("team-c", "x.shared.example", not("x.shared.example")),
            // A namespace without delegations may serve nothing.
            ("team-z", "z.example", not("z.example")),
            ("team-a", "*", Err(Refusal::AnyHostname)),
        ];
        for (ns, host, want) in table {
            assert_eq!(d.check(ns, host), want, "{ns} serving {host}");
        }
    }

    #[test]
    fn a_parent_is_refused_for_its_first_refused_hostname_or_for_serving_any() {
        let d = tenants();
        assert_eq!(
            d.check_all("team-a", &s(&["a.example", "x.a.example"])),
            Ok(())
        );
        assert_eq!(
            d.check_all("team-a", &s(&["a.example", "b.example"])),
            Err(Refusal::NotDelegated {
                hostname: "b.example".into()
            })
        );
        assert_eq!(d.check_all("team-a", &[]), Err(Refusal::AnyHostname));
    }

    #[test]
    fn the_same_entry_in_two_delegations_is_shared_and_an_empty_policy_permits_nothing() {
        let one = (s(&["team-a"]), s(&["*.a.example"]));
        let two = (s(&["team-b"]), s(&["*.a.example"]));
        let list = [one, two];
        let d = Delegations::new(list.iter().map(|(n, h)| (n.as_slice(), h.as_slice())));
        assert_eq!(d.check("team-a", "x.a.example"), Ok(()));
        assert_eq!(d.check("team-b", "x.a.example"), Ok(()));
        assert_eq!(
            Delegations::default().check("team-a", "a.example"),
            Err(Refusal::NotDelegated {
                hostname: "a.example".into()
            })
        );
    }
}
