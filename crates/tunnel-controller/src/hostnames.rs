//! Gateway API hostname matching between a listener and a route (the HTTPRoute and GRPCRoute
//! `hostnames` rules): which hostnames a route serves through a listener, or none (the route
//! does not attach there: `NoMatchingListenerHostname`).
//!
//! A wildcard `*.example.com` matches one or more labels before the suffix, never the apex
//! `example.com`. Comparison is case-insensitive.

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

fn wildcard_suffix(h: &str) -> Option<&str> {
    h.strip_prefix("*.")
}

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

    #[test]
    fn wildcards_match_one_or_more_labels() {
        assert!(matches("*.example.com", "a.example.com"));
        assert!(matches("*.example.com", "a.b.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(!matches("*.example.com", "aexample.com"));
        assert!(matches("a.example.com", "a.example.com"));
    }
}
