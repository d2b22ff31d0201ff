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
    /// The port of the `Host` header, when it had one: stands in for the listener port.
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

    /// The `Location` value, absolute. Port rules of the specification: an explicit port wins;
    /// a redirect that changes the scheme uses that scheme's well-known port; otherwise the
    /// request's port. Port 80 with http and 443 with https are left out.
    pub fn location(&self, req: &RedirectInput<'_>) -> String {
        let scheme = self.scheme.as_deref().unwrap_or(req.scheme);
        let host = self.hostname.as_deref().unwrap_or(req.host);
        let port = match (self.port, &self.scheme) {
            (Some(p), _) => Some(p),
            (None, Some(s)) => well_known_port(s),
            (None, None) => req.port,
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
            path: None,
            status: StatusCode::FOUND,
        }
    }

    #[test]
    fn redirect_location_scheme_host_port_rules() {
        let rows: Vec<(Redirect, RedirectInput<'_>, &str)> = vec![
            // scheme change uses the scheme's well-known port, which is then omitted
            (
                redirect(Some("https"), None, None),
                input(None, "/a", None),
                "https://foo.example.com/a",
            ),
            (
                redirect(Some("https"), None, None),
                input(Some(8080), "/a", None),
                "https://foo.example.com/a",
            ),
            // no scheme, no port: the request's port is kept
            (
                redirect(None, None, None),
                input(Some(8080), "/a", None),
                "http://foo.example.com:8080/a",
            ),
            (
                redirect(None, None, None),
                input(None, "/a", Some("x=1")),
                "http://foo.example.com/a?x=1",
            ),
            // explicit port, omitted when it is the scheme's default
            (
                redirect(None, None, Some(8443)),
                input(None, "/a", None),
                "http://foo.example.com:8443/a",
            ),
            (
                redirect(None, None, Some(80)),
                input(Some(8080), "/a", None),
                "http://foo.example.com/a",
            ),
            (
                redirect(Some("https"), Some("other.example.com"), Some(443)),
                input(None, "/a", None),
                "https://other.example.com/a",
            ),
            (
                redirect(Some("https"), None, Some(8443)),
                input(None, "/a", None),
                "https://foo.example.com:8443/a",
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
