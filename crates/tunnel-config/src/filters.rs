//! HTTPRoute filters as data, with pure `apply` functions (no I/O).
//!
//! RequestMirror's percentage roll is also here; sending the copy is the proxy's job.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

/// RequestHeaderModifier / ResponseHeaderModifier. Names are case-insensitive (they are
/// parsed into [`HeaderName`], which is lower-case). Applied in the order set, add, remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderModifier {
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub add: Vec<(HeaderName, HeaderValue)>,
    pub remove: Vec<HeaderName>,
}

impl HeaderModifier {
    /// One modifier that does what `self` and then `next` do (a rule's modifier followed by a
    /// backend's), so a request or response is still changed in one pass.
    pub fn then(&self, next: &HeaderModifier) -> HeaderModifier {
        let mut names: Vec<&HeaderName> = Vec::new();
        let all = self
            .set
            .iter()
            .chain(&self.add)
            .chain(&next.set)
            .chain(&next.add);
        for n in all.map(|(n, _)| n).chain(&self.remove).chain(&next.remove) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let values = |pairs: &[(HeaderName, HeaderValue)], n: &HeaderName| -> Vec<HeaderValue> {
            pairs
                .iter()
                .filter(|(m, _)| m == n)
                .map(|(_, v)| v.clone())
                .collect()
        };
        let mut out = HeaderModifier::default();
        for n in names {
            let (next_set, next_add) = (values(&next.set, n), values(&next.add, n));
            let (own_set, own_add) = (values(&self.set, n), values(&self.add, n));
            let pairs = |vs: Vec<HeaderValue>| vs.into_iter().map(|v| (n.clone(), v));
            if next.remove.contains(n) {
                out.remove.push(n.clone());
            } else if !next_set.is_empty() {
                out.set.extend(pairs(next_set));
                out.add.extend(pairs(next_add));
            } else if self.remove.contains(n) {
                // Removed first, then only `next`'s additions remain.
                let mut adds = next_add.into_iter();
                match adds.next() {
                    Some(first) => {
                        out.set.push((n.clone(), first));
                        out.add.extend(pairs(adds.collect()));
                    }
                    None => out.remove.push(n.clone()),
                }
            } else {
                out.set.extend(pairs(own_set));
                out.add.extend(pairs(own_add));
                out.add.extend(pairs(next_add));
            }
        }
        out
    }

    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
        for name in &self.remove {
            headers.remove(name);
        }
    }
}

/// ReplaceFullPath / ReplacePrefixMatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRewrite {
    Full(String),
    Prefix(String),
}

impl PathRewrite {
    /// The new path. `matched_prefix` is the PathPrefix that matched, without trailing `/`
    /// (see [`crate::routing::RouteMatch::matched_prefix`]); the compiler guarantees one exists
    /// for `Prefix` rewrites, and without it the path is left unchanged.
    pub fn apply(&self, path: &str, matched_prefix: Option<&str>) -> String {
        match self {
            Self::Full(p) => p.clone(),
            Self::Prefix(replacement) => match matched_prefix {
                Some(prefix) => replace_prefix(path, prefix, replacement),
                None => path.to_owned(),
            },
        }
    }
}

/// Gateway API prefix replacement. The matched prefix is segment-aligned, so the rest of the
/// path is empty or starts with `/`; the replacement's trailing `/` is dropped so that no
/// `//` appears, and an empty result becomes `/`.
pub fn replace_prefix(path: &str, matched_prefix: &str, replacement: &str) -> String {
    let prefix = matched_prefix.trim_end_matches('/');
    let rest = path.strip_prefix(prefix).unwrap_or(path);
    let mut out = String::with_capacity(replacement.len() + rest.len());
    out.push_str(replacement.trim_end_matches('/'));
    out.push_str(rest);
    if out.is_empty() {
        out.push('/');
    }
    if !out.starts_with('/') {
        out.insert(0, '/');
    }
    out
}

/// URLRewrite: hostname (sent as the upstream `Host`) and path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlRewrite {
    pub hostname: Option<HeaderValue>,
    pub path: Option<PathRewrite>,
}

/// RequestRedirect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<u16>,
    /// The port of the Gateway listener the route is attached to; `None` when the document
    /// does not say (the request's `Host` port stands in).
    pub listener_port: Option<u16>,
    pub path: Option<PathRewrite>,
    pub status: StatusCode,
}

/// The parts of the request a redirect needs.
#[derive(Debug, Clone, Copy)]
pub struct RedirectInput<'a> {
    /// `http` or `https` as the client saw it.
    pub scheme: &'a str,
    /// Normalised host, no port.
    pub host: &'a str,
    /// The port of the `Host` header, when it had one: stands in for the listener port when
    /// the document does not carry it.
    pub port: Option<u16>,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub matched_prefix: Option<&'a str>,
}

impl Redirect {
    /// The status codes the Gateway API allows.
    pub fn valid_status(code: u16) -> bool {
        matches!(code, 301 | 302 | 303 | 307 | 308)
    }

    /// The `Location` value, absolute, by the rules of the `HTTPRequestRedirectFilter` field
    /// documentation (Gateway API v1.5.1):
    ///
    /// - scheme: "When empty, the scheme of the request is used".
    /// - hostname: "When empty, the hostname in the `Host` header of the request is used".
    /// - port: an explicit `port` is used. "If no port is specified ... If redirect scheme is
    ///   not-empty, the redirect port MUST be the well-known port associated with the redirect
    ///   scheme ... If the redirect scheme does not have a well-known port, the listener port of
    ///   the Gateway SHOULD be used. If redirect scheme is empty, the redirect port MUST be the
    ///   Gateway Listener port."
    /// - "Implementations SHOULD NOT add the port number in the 'Location' header" for HTTP
    ///   with port 80 and HTTPS with port 443.
    ///
    /// Tunnel listeners are HTTP listeners; Cloudflare's edge serves their hostnames over
    /// HTTPS on port 443 as well. A request that reached the edge over HTTPS
    /// (`X-Forwarded-Proto: https`) came through the edge's port 443, not the HTTP listener's
    /// port, so with neither scheme nor port set its redirect port is 443 (and left out).
    pub fn location(&self, req: &RedirectInput<'_>) -> String {
        let scheme = self.scheme.as_deref().unwrap_or(req.scheme);
        let host = self.hostname.as_deref().unwrap_or(req.host);
        let listener_port = self.listener_port.or(req.port);
        let port = match (self.port, &self.scheme) {
            (Some(p), _) => Some(p),
            (None, Some(s)) => well_known_port(s).or(listener_port),
            (None, None) if req.scheme == "https" => well_known_port(req.scheme),
            (None, None) => listener_port,
        };
        let path = match &self.path {
            Some(rewrite) => rewrite.apply(req.path, req.matched_prefix),
            None => req.path.to_owned(),
        };
        let mut out = format!("{scheme}://");
        if host.contains(':') {
            out.push('[');
            out.push_str(host);
            out.push(']');
        } else {
            out.push_str(host);
        }
        if let Some(port) = port
            && well_known_port(scheme) != Some(port)
        {
            out.push(':');
            out.push_str(&port.to_string());
        }
        out.push_str(&path);
        if let Some(q) = req.query {
            out.push('?');
            out.push_str(q);
        }
        out
    }
}

fn well_known_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// RequestMirror percentage: `roll` is uniform in `0..100`.
pub fn mirror_selected(percent: u32, roll: u32) -> bool {
    roll < percent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_modifier_set_add_remove_case_insensitive() {
        let m = HeaderModifier {
            set: vec![(
                HeaderName::from_bytes(b"X-Set").unwrap(),
                HeaderValue::from_static("new"),
            )],
            add: vec![(
                HeaderName::from_bytes(b"X-Add").unwrap(),
                HeaderValue::from_static("two"),
            )],
            remove: vec![HeaderName::from_bytes(b"X-REMOVE").unwrap()],
        };
        let mut h = HeaderMap::new();
        h.append("x-set", HeaderValue::from_static("old1"));
        h.append("x-set", HeaderValue::from_static("old2"));
        h.append("x-add", HeaderValue::from_static("one"));
        h.append("x-remove", HeaderValue::from_static("gone"));
        h.append("x-keep", HeaderValue::from_static("kept"));
        m.apply(&mut h);
        let all =
            |n: &str| -> Vec<&str> { h.get_all(n).iter().map(|v| v.to_str().unwrap()).collect() };
        assert_eq!(all("x-set"), ["new"]);
        assert_eq!(all("x-add"), ["one", "two"]);
        assert!(all("x-remove").is_empty());
        assert_eq!(all("x-keep"), ["kept"]);
    }

    #[test]
    fn header_modifier_add_creates_missing_header() {
        let m = HeaderModifier {
            add: vec![(
                HeaderName::from_static("x-a"),
                HeaderValue::from_static("1"),
            )],
            ..HeaderModifier::default()
        };
        let mut h = HeaderMap::new();
        m.apply(&mut h);
        assert_eq!(h["x-a"], "1");
    }

    #[test]
    fn a_chained_modifier_does_what_the_first_then_the_second_does() {
        let n = |s: &str| HeaderName::from_bytes(s.as_bytes()).unwrap();
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        let m = |set: &[(&str, &str)], add: &[(&str, &str)], remove: &[&str]| HeaderModifier {
            set: set.iter().map(|(a, b)| (n(a), v(b))).collect(),
            add: add.iter().map(|(a, b)| (n(a), v(b))).collect(),
            remove: remove.iter().map(|a| n(a)).collect(),
        };
        let modifiers = [
            m(&[], &[], &[]),
            m(&[("x", "s1")], &[], &[]),
            m(&[], &[("x", "a1")], &[]),
            m(&[], &[], &["x"]),
            m(&[("x", "s1")], &[("x", "a1")], &[]),
            m(&[("x", "s1")], &[("x", "a1"), ("y", "a2")], &["x"]),
            m(&[("y", "s2")], &[("x", "a2"), ("x", "a3")], &["z"]),
            m(&[], &[("x", "a4")], &["y"]),
        ];
        let requests: [&[(&str, &str)]; 4] = [
            &[],
            &[("x", "r1")],
            &[("x", "r1"), ("x", "r2"), ("y", "r3")],
            &[("z", "r4"), ("y", "r5")],
        ];
        let seen = |h: &HeaderMap| -> Vec<(String, Vec<String>)> {
            let mut keys: Vec<&HeaderName> = h.keys().collect();
            keys.sort_by_key(|k| k.as_str());
            keys.iter()
                .map(|k| {
                    let vals = h.get_all(*k).iter().map(|x| x.to_str().unwrap().to_owned());
                    (k.as_str().to_owned(), vals.collect())
                })
                .collect()
        };
        for first in &modifiers {
            for second in &modifiers {
                for req in requests {
                    let mut h = HeaderMap::new();
                    for (a, b) in req {
                        h.append(n(a), v(b));
                    }
                    let mut one_by_one = h.clone();
                    first.apply(&mut one_by_one);
                    second.apply(&mut one_by_one);
                    let mut chained = h.clone();
                    first.then(second).apply(&mut chained);
                    assert_eq!(
                        seen(&chained),
                        seen(&one_by_one),
                        "{first:?} then {second:?} on {req:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn replace_prefix_match_edge_cases_from_the_specification() {
        // (path, matched prefix, replacement, expected)
        let rows = [
            ("/foo/bar", "/foo", "/xyz", "/xyz/bar"),
            ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"),
            ("/foo/bar", "/foo/", "/xyz", "/xyz/bar"),
            ("/foo/bar", "/foo/", "/xyz/", "/xyz/bar"),
            ("/foo", "/foo", "/xyz", "/xyz"),
            ("/foo/", "/foo", "/xyz", "/xyz/"),
            ("/foo/bar", "/foo", "", "/bar"),
            ("/foo/", "/foo", "", "/"),
            ("/foo", "/foo", "", "/"),
            ("/foo/", "/foo", "/", "/"),
            ("/foo", "/foo", "/", "/"),
            ("/foo/bar", "", "/xyz", "/xyz/foo/bar"),
            ("/", "", "/xyz", "/xyz/"),
            ("/", "", "/", "/"),
            ("/foo/bar/baz", "/foo/bar", "/a/b", "/a/b/baz"),
        ];
        for (path, prefix, replacement, want) in rows {
            assert_eq!(
                replace_prefix(path, prefix, replacement),
                want,
                "path={path} prefix={prefix} replacement={replacement}"
            );
        }
    }

    #[test]
    fn rewrite_full_path_ignores_the_request_path() {
        let r = PathRewrite::Full("/new".into());
        assert_eq!(r.apply("/old/deep", Some("/old")), "/new");
        assert_eq!(r.apply("/", None), "/new");
    }

    fn input<'a>(port: Option<u16>, path: &'a str, query: Option<&'a str>) -> RedirectInput<'a> {
        RedirectInput {
            scheme: "http",
            host: "foo.example.com",
            port,
            path,
            query,
            matched_prefix: Some("/old"),
        }
    }

    fn redirect(scheme: Option<&str>, hostname: Option<&str>, port: Option<u16>) -> Redirect {
        Redirect {
            scheme: scheme.map(str::to_owned),
            hostname: hostname.map(str::to_owned),
            port,
            listener_port: None,
            path: None,
            status: StatusCode::FOUND,
        }
    }

    /// One row: the filter's scheme and port, the listener port, the request's scheme and
    /// `Host` port, the expected `Location`.
    type Row = (
        Option<&'static str>,
        Option<u16>,
        Option<u16>,
        &'static str,
        Option<u16>,
        &'static str,
    );

    fn check_rows(sentence: &str, rows: &[Row]) {
        for &(scheme, port, listener, req_scheme, host_port, want) in rows {
            let mut r = redirect(scheme, None, port);
            r.listener_port = listener;
            let mut i = input(host_port, "/keep", None);
            i.scheme = req_scheme;
            assert_eq!(
                r.location(&i),
                want,
                "{sentence}: scheme={scheme:?} port={port:?} listener={listener:?} request={req_scheme}, Host port {host_port:?}"
            );
        }
    }

    #[test]
    fn redirect_port_when_a_port_is_specified_it_is_used() {
        check_rows(
            "Port is the port to be used in the value of the `Location` header",
            &[
                (
                    None,
                    Some(8443),
                    Some(80),
                    "http",
                    None,
                    "http://foo.example.com:8443/keep",
                ),
                (
                    Some("https"),
                    Some(8443),
                    Some(80),
                    "http",
                    None,
                    "https://foo.example.com:8443/keep",
                ),
                (
                    Some("http"),
                    Some(8080),
                    Some(8081),
                    "https",
                    Some(9),
                    "http://foo.example.com:8080/keep",
                ),
            ],
        );
    }

    #[test]
    fn redirect_port_if_redirect_scheme_is_not_empty_it_must_be_the_schemes_well_known_port() {
        check_rows(
            "If redirect scheme is not-empty, the redirect port MUST be the well-known port associated with the redirect scheme",
            &[
                (
                    Some("https"),
                    None,
                    Some(80),
                    "http",
                    None,
                    "https://foo.example.com/keep",
                ),
                (
                    Some("https"),
                    None,
                    Some(8080),
                    "http",
                    Some(8080),
                    "https://foo.example.com/keep",
                ),
                (
                    Some("http"),
                    None,
                    Some(8080),
                    "https",
                    None,
                    "http://foo.example.com/keep",
                ),
                (
                    Some("http"),
                    None,
                    None,
                    "http",
                    Some(443),
                    "http://foo.example.com/keep",
                ),
            ],
        );
    }

    #[test]
    fn redirect_port_if_redirect_scheme_is_empty_it_must_be_the_gateway_listener_port() {
        check_rows(
            "If redirect scheme is empty, the redirect port MUST be the Gateway Listener port",
            &[
                // the listener port, not the port of the request's Host (issue 15)
                (
                    None,
                    None,
                    Some(80),
                    "http",
                    Some(8080),
                    "http://foo.example.com/keep",
                ),
                (
                    None,
                    None,
                    Some(8080),
                    "http",
                    None,
                    "http://foo.example.com:8080/keep",
                ),
                (
                    None,
                    None,
                    Some(8080),
                    "http",
                    Some(9090),
                    "http://foo.example.com:8080/keep",
                ),
                // a document without the listener port: the Host's port stands in
                (
                    None,
                    None,
                    None,
                    "http",
                    Some(8080),
                    "http://foo.example.com:8080/keep",
                ),
                (
                    None,
                    None,
                    None,
                    "http",
                    None,
                    "http://foo.example.com/keep",
                ),
                // HTTPS reached Cloudflare's edge on 443, not the HTTP listener's port
                (
                    None,
                    None,
                    Some(8080),
                    "https",
                    None,
                    "https://foo.example.com/keep",
                ),
            ],
        );
    }

    #[test]
    fn redirect_port_is_not_added_for_http_with_port_80_nor_https_with_port_443() {
        check_rows(
            "Implementations SHOULD NOT add the port number in the 'Location' header: HTTP and port 80; HTTPS and port 443",
            &[
                (
                    None,
                    Some(80),
                    Some(8080),
                    "http",
                    None,
                    "http://foo.example.com/keep",
                ),
                (
                    Some("https"),
                    Some(443),
                    None,
                    "http",
                    None,
                    "https://foo.example.com/keep",
                ),
                (
                    None,
                    None,
                    Some(80),
                    "http",
                    None,
                    "http://foo.example.com/keep",
                ),
                // the other pairings keep their port
                (
                    None,
                    Some(443),
                    None,
                    "http",
                    None,
                    "http://foo.example.com:443/keep",
                ),
                (
                    Some("https"),
                    Some(80),
                    None,
                    "http",
                    None,
                    "https://foo.example.com:80/keep",
                ),
                (
                    None,
                    None,
                    Some(443),
                    "http",
                    None,
                    "http://foo.example.com:443/keep",
                ),
            ],
        );
    }

    #[test]
    fn redirect_scheme_and_hostname_when_empty_are_the_requests() {
        // "When empty, the scheme of the request is used."
        // "When empty, the hostname in the `Host` header of the request is used."
        let rows: Vec<(Redirect, RedirectInput<'_>, &str)> = vec![
            (
                redirect(None, None, None),
                input(None, "/a", Some("x=1")),
                "http://foo.example.com/a?x=1",
            ),
            (
                redirect(Some("https"), Some("other.example.com"), None),
                input(None, "/a", None),
                "https://other.example.com/a",
            ),
            (
                redirect(Some("http"), Some("h"), None),
                input(Some(443), "/", None),
                "http://h/",
            ),
        ];
        for (r, i, want) in rows {
            assert_eq!(r.location(&i), want, "{r:?}");
        }
    }

    #[test]
    fn redirect_location_path_rewrites() {
        let mut r = redirect(None, None, None);
        r.path = Some(PathRewrite::Full("/new".into()));
        assert_eq!(
            r.location(&input(None, "/old/x", Some("q=1"))),
            "http://foo.example.com/new?q=1"
        );
        r.path = Some(PathRewrite::Prefix("/new".into()));
        assert_eq!(
            r.location(&input(None, "/old/x", None)),
            "http://foo.example.com/new/x"
        );
        r.path = Some(PathRewrite::Prefix("/".into()));
        assert_eq!(
            r.location(&input(None, "/old", None)),
            "http://foo.example.com/"
        );
    }

    #[test]
    fn redirect_status_codes() {
        for code in [301, 302, 303, 307, 308] {
            assert!(Redirect::valid_status(code), "{code}");
        }
        for code in [200, 300, 304, 305, 306, 309, 404] {
            assert!(!Redirect::valid_status(code), "{code}");
        }
    }

    #[test]
    fn mirror_percentage() {
        assert!((0..100).all(|r| !mirror_selected(0, r)));
        assert!((0..100).all(|r| mirror_selected(100, r)));
        assert_eq!((0..100).filter(|&r| mirror_selected(25, r)).count(), 25);
    }
}
