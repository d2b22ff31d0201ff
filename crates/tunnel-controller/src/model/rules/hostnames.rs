//! Gateway API hostname matching between a listener and a route (the HTTPRoute and GRPCRoute
//! `hostnames` rules): which hostnames a route serves through a listener, or none (the route
//! does not attach there: `NoMatchingListenerHostname`).
//!
//! A wildcard `*.example.com` matches one or more labels before the suffix, never the apex
//! `example.com`. Comparison is case-insensitive.
//!
//! Listener isolation ([`isolate`]): a request is matched only against the routes of the most
//! specific listener of a Gateway that matches its host, so what a route serves through a
//! listener leaves out the hostnames of the Gateway's narrower listeners on the same port.
//! Hostname patterns (exact, `*.suffix`, any) either nest or are disjoint, which keeps these
//! sets exact as "patterns, each minus some patterns inside it".

use std::collections::{BTreeMap, BTreeSet};

/// What a route serves: hostname pattern (`*` for any host) → the patterns inside it that it
/// does not serve (they belong to a narrower listener).
pub type Served = BTreeMap<String, BTreeSet<String>>;

/// The key of [`Served`] for any host.
pub const ANY: &str = "*";

/// The hostnames a route serves through a listener. `listener` is the listener's hostname
/// (`None` = any); `route` the route's hostnames (empty = any).
///
/// - `Some(vec![])` means "any hostname" (neither side restricts).
/// - `None` means no intersection: the route does not attach to this listener.
pub fn intersect(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    let listener = listener.map(normalize).filter(|l| !l.is_empty());
    let route: Vec<String> = route.iter().map(|h| normalize(h)).collect();
    match (listener, route.is_empty()) {
        (None, true) => Some(Vec::new()),
        (None, false) => Some(dedup(route)),
        (Some(l), true) => Some(vec![l]),
        (Some(l), false) => {
            let out: Vec<String> = route.iter().filter_map(|r| pair(&l, r)).collect();
            (!out.is_empty()).then(|| dedup(out))
        }
    }
}

/// The intersection of one listener hostname and one route hostname: the more specific of the
/// two when one covers the other.
fn pair(listener: &str, route: &str) -> Option<String> {
    match (wildcard_suffix(listener), wildcard_suffix(route)) {
        (None, None) => (listener == route).then(|| route.to_owned()),
        (Some(_), None) => matches(listener, route).then(|| route.to_owned()),
        (None, Some(_)) => matches(route, listener).then(|| listener.to_owned()),
        (Some(ls), Some(rs)) => {
            if rs == ls || rs.ends_with(&format!(".{ls}")) {
                Some(route.to_owned())
            } else if ls.ends_with(&format!(".{rs}")) {
                Some(listener.to_owned())
            } else {
                None
            }
        }
    }
}

/// Whether the wildcard `pattern` (`*.suffix`) matches the exact `host`: one or more labels
/// before the suffix, never the suffix itself.
pub fn matches(pattern: &str, host: &str) -> bool {
    match wildcard_suffix(pattern) {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|head| head.strip_suffix('.'))
            .is_some_and(|head| !head.is_empty()),
        None => pattern == host,
    }
}

/// Whether every host `inner` matches, `outer` matches too (`None` or `*` = any host; both
/// normalised).
pub fn covers(outer: Option<&str>, inner: &str) -> bool {
    match outer.filter(|o| *o != ANY) {
        None => true,
        Some(_) if inner == ANY => false,
        Some(o) => match (wildcard_suffix(o), wildcard_suffix(inner)) {
            (Some(os), Some(is)) => is == os || is.ends_with(&format!(".{os}")),
            (None, Some(_)) => false,
            (_, None) => matches(o, inner),
        },
    }
}

/// The hostnames of `listeners` (`None` = any) strictly narrower than `listener`'s: the
/// Gateway's listeners that take a request matching both.
pub fn narrower<'a>(
    listener: Option<&str>,
    listeners: impl IntoIterator<Item = Option<&'a str>>,
) -> Vec<String> {
    let own = listener.map(normalize);
    listeners
        .into_iter()
        .flatten()
        .map(normalize)
        .filter(|h| Some(h) != own.as_ref() && covers(own.as_deref(), h))
        .collect()
}

/// What a route serves through a listener: `hosts` is its intersection with the listener's
/// hostname (empty = any, see [`intersect`]), `narrower` the hostnames of the Gateway's
/// listeners on the same port that are more specific than it ([`narrower`]). A pattern a
/// narrower listener covers is left out; the narrower hostnames inside a pattern are excluded
/// from it. Empty when nothing is left.
pub fn isolate(hosts: &[String], narrower: &[String]) -> Served {
    let any = [ANY.to_owned()];
    let hosts = if hosts.is_empty() { &any[..] } else { hosts };
    hosts
        .iter()
        .filter(|h| !narrower.iter().any(|n| covers(Some(n), h)))
        .map(|h| {
            let inside = narrower.iter().filter(|n| covers(Some(h), n)).cloned();
            (h.clone(), outermost(inside))
        })
        .collect()
}

/// Adds `more` to `served`: a pattern served twice excludes only what both exclude.
pub fn merge(served: &mut Served, more: Served) {
    for (host, excluded) in more {
        match served.get_mut(&host) {
            None => {
                served.insert(host, excluded);
            }
            Some(mine) => {
                // Nested or disjoint: the common part of two nested patterns is the inner one.
                let common = mine.iter().flat_map(|a| {
                    excluded.iter().filter_map(move |b| {
                        if covers(Some(a), b) {
                            Some(b.clone())
                        } else if covers(Some(b), a) {
                            Some(a.clone())
                        } else {
                            None
                        }
                    })
                });
                *mine = outermost(common);
            }
        }
    }
}

/// The patterns no other one of them covers.
fn outermost(patterns: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    let all: BTreeSet<String> = patterns.into_iter().collect();
    all.iter()
        .filter(|p| !all.iter().any(|o| o != *p && covers(Some(o), p)))
        .cloned()
        .collect()
}

fn wildcard_suffix(h: &str) -> Option<&str> {
    h.strip_prefix("*.")
}

/// A hostname as compared and as a tunnel's ingress rules spell it: lower-case, without a
/// trailing dot.
pub fn normalize(h: &str) -> String {
    h.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    v.retain(|h| seen.insert(h.clone()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(h: &[&str]) -> Vec<String> {
        h.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn without_restrictions_on_either_side_any_hostname_matches() {
        assert_eq!(intersect(None, &[]), Some(vec![]));
    }

    #[test]
    fn a_listener_without_hostname_takes_the_routes_hostnames() {
        assert_eq!(
            intersect(None, &r(&["A.example.com", "a.example.com."])),
            Some(r(&["a.example.com"]))
        );
    }

    #[test]
    fn a_route_without_hostnames_takes_the_listeners_hostname() {
        assert_eq!(
            intersect(Some("*.example.com"), &[]),
            Some(r(&["*.example.com"]))
        );
    }

    #[test]
    fn exact_hostnames_must_be_equal() {
        assert_eq!(
            intersect(
                Some("a.example.com"),
                &r(&["a.example.com", "b.example.com"])
            ),
            Some(r(&["a.example.com"]))
        );
        assert_eq!(
            intersect(Some("a.example.com"), &r(&["b.example.com"])),
            None
        );
    }

    #[test]
    fn a_listener_wildcard_admits_route_hostnames_below_it_but_not_its_apex() {
        assert_eq!(
            intersect(
                Some("*.example.com"),
                &r(&[
                    "a.example.com",
                    "x.y.example.com",
                    "example.com",
                    "a.other.com"
                ])
            ),
            Some(r(&["a.example.com", "x.y.example.com"]))
        );
    }

    #[test]
    fn a_route_wildcard_covering_the_listener_hostname_yields_the_listener_hostname() {
        assert_eq!(
            intersect(Some("a.example.com"), &r(&["*.example.com"])),
            Some(r(&["a.example.com"]))
        );
        assert_eq!(
            intersect(Some("example.com"), &r(&["*.example.com"])),
            None,
            "never the apex"
        );
    }

    #[test]
    fn of_two_wildcards_the_more_specific_one_is_served() {
        assert_eq!(
            intersect(Some("*.example.com"), &r(&["*.api.example.com"])),
            Some(r(&["*.api.example.com"]))
        );
        assert_eq!(
            intersect(Some("*.api.example.com"), &r(&["*.example.com"])),
            Some(r(&["*.api.example.com"]))
        );
        assert_eq!(
            intersect(Some("*.example.com"), &r(&["*.example.com"])),
            Some(r(&["*.example.com"]))
        );
        assert_eq!(
            intersect(Some("*.example.com"), &r(&["*.example.org"])),
            None
        );
        assert_eq!(
            intersect(Some("*.ample.com"), &r(&["*.example.com"])),
            None,
            "label boundaries, not string suffixes"
        );
    }

    fn served(rows: &[(&str, &[&str])]) -> Served {
        rows.iter()
            .map(|(h, ex)| (h.to_string(), ex.iter().map(|e| e.to_string()).collect()))
            .collect()
    }

    #[test]
    fn covers_follows_label_boundaries() {
        let rows = [
            (None, "*.example.com", true),
            (Some("*"), "a.example.com", true),
            (Some("*.example.com"), "*", false),
            (Some("*.example.com"), "*.example.com", true),
            (Some("*.example.com"), "*.foo.example.com", true),
            (Some("*.foo.example.com"), "*.example.com", false),
            (Some("*.example.com"), "abc.foo.example.com", true),
            (Some("*.example.com"), "example.com", false),
            (Some("*.ample.com"), "*.example.com", false),
            (Some("a.example.com"), "*.example.com", false),
            (Some("a.example.com"), "a.example.com", true),
        ];
        for (outer, inner, want) in rows {
            assert_eq!(covers(outer, inner), want, "{outer:?} ⊇ {inner}");
        }
    }

    #[test]
    fn narrower_listeners_are_the_more_specific_ones_inside_the_listeners_hostname() {
        let all = [
            None,
            Some("*.example.com"),
            Some("*.Foo.example.com"),
            Some("abc.foo.example.com"),
            Some("other.org"),
        ];
        assert_eq!(
            narrower(None, all),
            r(&[
                "*.example.com",
                "*.foo.example.com",
                "abc.foo.example.com",
                "other.org"
            ])
        );
        assert_eq!(
            narrower(Some("*.example.com"), all),
            r(&["*.foo.example.com", "abc.foo.example.com"])
        );
        assert_eq!(
            narrower(Some("abc.foo.example.com"), all),
            Vec::<String>::new()
        );
    }

    /// The conformance test's Gateway: listeners without hostname, `*.example.com`,
    /// `*.foo.example.com` and `abc.foo.example.com`, and routes with the hostnames of all four.
    #[test]
    fn isolation_leaves_each_host_to_the_most_specific_listener() {
        let route = r(&[
            "bar.com",
            "*.example.com",
            "*.foo.example.com",
            "abc.foo.example.com",
        ]);
        let narrow = |l: Option<&str>| {
            narrower(
                l,
                [
                    None,
                    Some("*.example.com"),
                    Some("*.foo.example.com"),
                    Some("abc.foo.example.com"),
                ],
            )
        };
        let through =
            |l: Option<&str>, hosts: &[String]| isolate(&intersect(l, hosts).unwrap(), &narrow(l));
        let rows: Vec<(Option<&str>, Served, Served)> = vec![
            (
                None,
                served(&[("*", &["*.example.com"])]),
                served(&[("bar.com", &[])]),
            ),
            (
                Some("*.example.com"),
                served(&[("*.example.com", &["*.foo.example.com"])]),
                served(&[("*.example.com", &["*.foo.example.com"])]),
            ),
            (
                Some("*.foo.example.com"),
                served(&[("*.foo.example.com", &["abc.foo.example.com"])]),
                served(&[("*.foo.example.com", &["abc.foo.example.com"])]),
            ),
            (
                Some("abc.foo.example.com"),
                served(&[("abc.foo.example.com", &[])]),
                served(&[("abc.foo.example.com", &[])]),
            ),
        ];
        for (listener, without_hostnames, with_hostnames) in rows {
            assert_eq!(through(listener, &[]), without_hostnames, "{listener:?}");
            assert_eq!(through(listener, &route), with_hostnames, "{listener:?}");
        }
        assert!(
            through(None, &r(&["a.example.com"])).is_empty(),
            "a host of a narrower listener only: nothing served"
        );
    }

    #[test]
    fn merging_keeps_what_either_serves() {
        let mut s = served(&[("*", &["*.example.com"]), ("*.org", &["a.org", "b.org"])]);
        merge(
            &mut s,
            served(&[
                ("*", &["abc.foo.example.com", "other.net"]),
                ("*.org", &["c.org"]),
                ("x.net", &[]),
            ]),
        );
        assert_eq!(
            s,
            served(&[
                ("*", &["abc.foo.example.com"]),
                ("*.org", &[]),
                ("x.net", &[]),
            ])
        );
    }

    #[test]
    fn wildcards_match_one_or_more_labels() {
        assert!(matches("*.example.com", "a.example.com"));
        assert!(matches("*.example.com", "a.b.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(!matches("*.example.com", "aexample.com"));
        assert!(matches("a.example.com", "a.example.com"));
    }
}
