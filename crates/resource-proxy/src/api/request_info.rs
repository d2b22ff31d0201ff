//! Classifies a request to a group/version listener (RP-5), following the Kubernetes
//! `RequestInfoFactory` rules (`k8s.io/apiserver/pkg/endpoints/request`).
//!
//! A listener serves one group/version. [`classify`] maps method, raw path and raw query to a
//! [`Route`]: aggregated discovery (`/apis`), the group and group/version discovery documents,
//! the OpenAPI documents, a resource request inside the group/version ([`RequestInfo`]), or
//! [`Route::Outside`], which the HTTP layer answers with 404.
//!
//! Path safety: the raw path is split on `/` first and each segment is percent-decoded once.
//! A path whose segments include `.` or `..` (written plainly or encoded, e.g. `%2e%2e`), an
//! encoded `/` or `\`, a `%` left after decoding (double encoding), control characters, invalid
//! UTF-8 or an empty segment is `Outside`, so no spelling of a path can reach another
//! group/version through the target. Requests are forwarded with [`RequestInfo::forward_path`],
//! rebuilt from the decoded segments, never with the raw path.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Kubernetes API verb of a resource request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    /// GET/HEAD with a name.
    Get,
    /// GET/HEAD without a name.
    List,
    /// GET/HEAD with `watch` set (or the legacy `/watch/` prefix).
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE with a name.
    Delete,
    /// DELETE without a name.
    DeleteCollection,
    /// Any other method (the API server has no verb for it); answer 405.
    Unsupported(String),
}

impl Verb {
    /// The Kubernetes spelling (`deletecollection`, ...); unsupported methods lower-cased.
    pub fn as_str(&self) -> &str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Unsupported(method) => method,
        }
    }

    /// Verbs whose body is written to the target (and so gets the owner labels).
    pub fn writes_body(&self) -> bool {
        matches!(self, Verb::Create | Verb::Update | Verb::Patch)
    }
}

/// A resource request inside the listener's group/version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The verb.
    pub verb: Verb,
    /// Namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// Resource plural.
    pub resource: String,
    /// Object name (from the path, or for list/watch from a `metadata.name` field selector).
    pub name: Option<String>,
    /// Subresource (`status`, `scale`).
    pub subresource: Option<String>,
    /// `dryRun` is set: the target persists nothing.
    pub dry_run: bool,
    /// The path sent to the target: `/apis/<group>/<version>/...` rebuilt from the decoded
    /// segments, each percent-encoded again where needed.
    path: String,
    /// Length of the prefix of `path` that names the object, without the subresource.
    object_path_len: usize,
}

impl RequestInfo {
    /// Path to send to the target (see the module doc).
    pub fn forward_path(&self) -> &str {
        &self.path
    }

    /// The forward path of the object itself: without the subresource, if any.
    pub fn object_path(&self) -> &str {
        &self.path[..self.object_path_len]
    }

    /// True for a request naming one object: get, update, patch, delete, and their
    /// subresources (the requests `owned` mode checks by reading the object first).
    pub fn is_named_object_request(&self) -> bool {
        self.name.is_some()
            && matches!(
                self.verb,
                Verb::Get | Verb::Update | Verb::Patch | Verb::Delete
            )
    }
}

/// What a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /apis`: aggregated discovery, answered for the own group/version only.
    DiscoveryRoot,
    /// `GET /apis/<group>`: the APIGroup of the own group.
    DiscoveryGroup,
    /// `GET /apis/<group>/<version>`: the APIResourceList (forwarded, with local fallback).
    DiscoveryGroupVersion,
    /// `GET /openapi/v2` (answered 404).
    OpenApiV2,
    /// `GET /openapi/v3`: the root listing, filtered to the own group/version.
    OpenApiV3Root,
    /// `GET /openapi/v3/apis/<group>/<version>`.
    OpenApiV3GroupVersion,
    /// A resource request of the own group/version.
    Resource(RequestInfo),
    /// Anything else: 404.
    Outside,
}

/// Characters left as they are when re-encoding a segment: RFC 3986 unreserved ones.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Splits and decodes a raw path; `None` when any segment is unsafe (see the module doc).
/// Segments without escapes are borrowed from the raw path.
fn decode_segments(raw_path: &str) -> Option<Vec<Cow<'_, str>>> {
    let rest = raw_path.strip_prefix('/')?;
    if rest.is_empty() {
        return Some(Vec::new());
    }
    // Kubernetes trims one trailing slash (`/apis/g/v/widgets/`); anything else empty is unsafe.
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.split('/')
        .map(|raw| {
            let decoded = percent_decode_str(raw).decode_utf8().ok()?;
            let unsafe_segment = decoded.is_empty()
                || decoded == "."
                || decoded == ".."
                || decoded
                    .chars()
                    .any(|c| matches!(c, '/' | '\\' | '%') || c.is_control());
            (!unsafe_segment).then_some(decoded)
        })
        .collect()
}

/// First value of a query parameter, decoded as `application/x-www-form-urlencoded`.
fn query_value(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// `watch` as the API server converts it: any first value but `0` or `false`
/// (case-insensitive) means true, including an empty one.
fn watch_requested(query: &str) -> bool {
    query_value(query, "watch").is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The name a `metadata.name=<x>` (or `==`) field selector requires, as
/// `fields.Selector.RequiresExactMatch` finds it, if it is a valid path segment name.
fn field_selector_name(selector: &str) -> Option<String> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in selector.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    let mut found = None;
    for term in terms.into_iter().filter(|t| !t.is_empty()) {
        // The first operator occurrence splits the term; `!=` and `==` win over `=`.
        let (lhs, op, rhs) = term.char_indices().find_map(|(i, _)| {
            let rest = &term[i..];
            ["!=", "==", "="]
                .into_iter()
                .find(|op| rest.starts_with(op))
                .map(|op| (&term[..i], op, &rest[op.len()..]))
        })?;
        // An invalid term or escape fails the whole selector, and then no name is taken.
        let value = unescape_field_value(rhs)?;
        if lhs == "metadata.name" && op != "!=" && found.is_none() {
            found = Some(value);
        }
    }
    found.filter(|n| n != "." && n != ".." && !n.contains(['/', '%']))
}

fn unescape_field_value(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return None;
            }
            out.push(c);
            escaped = false;
        } else {
            match c {
                '\\' => escaped = true,
                ',' | '=' => return None,
                _ => out.push(c),
            }
        }
    }
    (!escaped).then_some(out)
}

/// Classifies a request to the listener of `group`/`version`.
///
/// `raw_path` is the path as received (percent-encoded, without query); `raw_query` is the
/// query without `?`.
pub fn classify(
    group: &str,
    version: &str,
    method: &str,
    raw_path: &str,
    raw_query: Option<&str>,
) -> Route {
    let Some(segments) = decode_segments(raw_path) else {
        return Route::Outside;
    };
    let query = raw_query.unwrap_or("");
    let parts: Vec<&str> = segments.iter().map(|s| s.as_ref()).collect();
    let read = matches!(method, "GET" | "HEAD");
    match parts.as_slice() {
        ["apis"] if read => return Route::DiscoveryRoot,
        ["apis", g] if read && *g == group => return Route::DiscoveryGroup,
        ["apis", g, v] if read && *g == group && *v == version => {
            return Route::DiscoveryGroupVersion;
        }
        ["openapi", "v2"] if read => return Route::OpenApiV2,
        ["openapi", "v3"] if read => return Route::OpenApiV3Root,
        ["openapi", "v3", "apis", g, v] if read && *g == group && *v == version => {
            return Route::OpenApiV3GroupVersion;
        }
        ["apis", g, v, _, ..] if *g == group && *v == version => {}
        _ => return Route::Outside,
    }
    let rest = &parts[3..];

    let (mut verb, rest) = match rest {
        // `proxy` is a special verb with no meaning for custom resources.
        ["proxy", ..] => return Route::Outside,
        ["watch"] => return Route::Outside,
        // The legacy watch prefix only serves reads.
        ["watch", rest @ ..] if read => (Some(Verb::Watch), rest),
        ["watch", rest @ ..] => (Some(Verb::Unsupported(method.to_ascii_lowercase())), rest),
        _ => (None, rest),
    };
    if verb.is_none() {
        verb = Some(match method {
            "POST" => Verb::Create,
            "GET" | "HEAD" => Verb::Get,
            "PUT" => Verb::Update,
            "PATCH" => Verb::Patch,
            "DELETE" => Verb::Delete,
            other => Verb::Unsupported(other.to_ascii_lowercase()),
        });
    }
    let mut verb = verb.unwrap_or(Verb::Get);

    // `/namespaces/<ns>/<resource>/...`; `namespaces/<ns>[/status|/finalize]` is the namespace
    // object itself, as in Kubernetes.
    let (namespace, resource_parts) = match rest {
        ["namespaces", ns, next, ..] if !matches!(*next, "status" | "finalize") => {
            (Some((*ns).to_owned()), &rest[2..])
        }
        ["namespaces", ns, ..] => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let resource = resource_parts[0].to_owned();
    let mut name = resource_parts.get(1).map(|s| (*s).to_owned());
    let subresource = resource_parts.get(2).map(|s| (*s).to_owned());

    if name.is_none() && verb == Verb::Get {
        verb = if watch_requested(query) {
            Verb::Watch
        } else {
            Verb::List
        };
        name = query_value(query, "fieldSelector").and_then(|s| field_selector_name(&s));
    }
    if name.is_none() && verb == Verb::Delete {
        verb = Verb::DeleteCollection;
    }

    // The object's own path ends with the name segment (`<resource>/<name>`).
    let name_index = parts.len() - resource_parts.len() + 1;
    let mut path = String::with_capacity(raw_path.len() + 8);
    let mut object_path_len = None;
    for (i, segment) in parts.iter().enumerate() {
        path.push('/');
        // Encoded straight into the path: no String per segment.
        path.extend(utf8_percent_encode(segment, SEGMENT));
        if i == name_index {
            object_path_len = Some(path.len());
        }
    }
    let object_path_len = object_path_len.unwrap_or(path.len());

    Route::Resource(RequestInfo {
        verb,
        namespace,
        resource,
        name,
        subresource,
        dry_run: query_value(query, "dryRun").is_some_and(|v| !v.is_empty()),
        path,
        object_path_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "example.com";
    const V: &str = "v1";

    fn route(method: &str, path: &str, query: Option<&str>) -> Route {
        classify(G, V, method, path, query)
    }

    fn info(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
        match route(method, path, query) {
            Route::Resource(info) => info,
            other => panic!("{method} {path}: expected a resource request, got {other:?}"),
        }
    }

    #[test]
    fn discovery_and_openapi_paths() {
        let cases = [
            ("/apis", Route::DiscoveryRoot),
            ("/apis/", Route::DiscoveryRoot),
            ("/apis/example.com", Route::DiscoveryGroup),
            ("/apis/example.com/v1", Route::DiscoveryGroupVersion),
            ("/apis/example.com/v1/", Route::DiscoveryGroupVersion),
            ("/openapi/v2", Route::OpenApiV2),
            ("/openapi/v3", Route::OpenApiV3Root),
            (
                "/openapi/v3/apis/example.com/v1",
                Route::OpenApiV3GroupVersion,
            ),
        ];
        for (path, want) in cases {
            assert_eq!(route("GET", path, None), want, "{path}");
            assert_eq!(route("HEAD", path, None), want, "HEAD {path}");
        }
    }

    #[test]
    fn paths_of_other_groups_versions_and_apis_are_outside() {
        for path in [
            "/",
            "",
            "apis/example.com/v1/widgets",
            "/api",
            "/api/v1/pods",
            "/api/v1/namespaces/default/pods",
            "/apis/other.com",
            "/apis/other.com/v1/widgets",
            "/apis/example.com/v2",
            "/apis/example.com/v2/widgets",
            "/apis/apps/v1/deployments",
            "/openapi/v3/apis/apps/v1",
            "/openapi/v3/api/v1",
            "/openapi/v3/apis/example.com/v2",
            "/healthz",
            "/version",
            "/metrics",
            "/apis/example.com/v1/proxy/namespaces/ns/widgets/w1",
            "/apis/example.com/v1/watch",
        ] {
            assert_eq!(route("GET", path, None), Route::Outside, "{path}");
        }
    }

    #[test]
    fn discovery_paths_only_answer_reads() {
        for path in [
            "/apis",
            "/apis/example.com",
            "/apis/example.com/v1",
            "/openapi/v3",
        ] {
            assert_eq!(route("POST", path, None), Route::Outside, "{path}");
        }
    }

    #[test]
    fn dot_segments_and_encoded_separators_never_leave_the_group_version() {
        for path in [
            "/apis/example.com/v1/../../apps/v1/deployments",
            "/apis/example.com/v1/widgets/../../../apps/v1/deployments",
            "/apis/example.com/v1/./widgets",
            "/apis/example.com/v1/%2e%2e/%2e%2e/apps/v1/deployments",
            "/apis/example.com/v1/%2E%2E/x",
            "/apis/example.com/v1/.%2e/x",
            "/apis/example.com/v1/%2e/widgets",
            "/apis/example.com/v1/widgets%2F..%2F..%2Fapps",
            "/apis/example.com/v1/widgets%2fw1",
            "/apis/example.com%2Fv1/widgets",
            "/apis/example.com/v1/widgets/%252e%252e",
            "/apis/example.com/v1/widgets/a%5Cb",
            "/apis/example.com/v1/widgets\\..\\..",
            "/apis/example.com/v1//widgets",
            "//apis/example.com/v1/widgets",
            "/apis/example.com/v1/widgets//",
            "/apis/example.com/v1/widgets/%ff",
            "/apis/example.com/v1/widgets/a%00b",
            "/apis/example.com/v1/widgets/a%0ab",
            "/apis/example.com/v1/widgets/%",
            "/openapi/v3/apis/example.com/v1/../../apps/v1",
            "/openapi/v3/apis/%2e%2e/apps/v1",
        ] {
            for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
                assert_eq!(route(method, path, None), Route::Outside, "{method} {path}");
            }
        }
    }

    #[test]
    fn harmless_encoding_is_decoded_and_forwarded_canonically() {
        let i = info(
            "GET",
            "/apis/%65xample.com/v1/namespaces/n%73/widgets/w%31",
            None,
        );
        assert_eq!(i.namespace.as_deref(), Some("ns"));
        assert_eq!(i.name.as_deref(), Some("w1"));
        assert_eq!(
            i.forward_path(),
            "/apis/example.com/v1/namespaces/ns/widgets/w1"
        );
        let i = info("GET", "/apis/example.com/v1/widgets/a%20b:c", None);
        assert_eq!(i.forward_path(), "/apis/example.com/v1/widgets/a%20b%3Ac");
    }

    #[test]
    fn verbs_follow_the_method_and_the_name() {
        let ns = "/apis/example.com/v1/namespaces/ns/widgets";
        let named = "/apis/example.com/v1/namespaces/ns/widgets/w1";
        let cases = [
            ("GET", named, Verb::Get),
            ("HEAD", named, Verb::Get),
            ("GET", ns, Verb::List),
            ("POST", ns, Verb::Create),
            ("POST", named, Verb::Create),
            ("PUT", named, Verb::Update),
            ("PATCH", named, Verb::Patch),
            ("DELETE", named, Verb::Delete),
            ("DELETE", ns, Verb::DeleteCollection),
            ("OPTIONS", named, Verb::Unsupported("options".into())),
        ];
        for (method, path, want) in cases {
            assert_eq!(info(method, path, None).verb, want, "{method} {path}");
        }
    }

    #[test]
    fn watch_query_follows_the_api_server_conversion() {
        let path = "/apis/example.com/v1/widgets";
        let cases = [
            ("watch=true", Verb::Watch),
            ("watch=1", Verb::Watch),
            ("watch=True", Verb::Watch),
            ("watch=", Verb::Watch),
            ("watch", Verb::Watch),
            ("watch=yes", Verb::Watch),
            ("watch=false", Verb::List),
            ("watch=FALSE", Verb::List),
            ("watch=0", Verb::List),
            ("watch=0&watch=1", Verb::List),
            ("limit=5", Verb::List),
            ("watchx=true", Verb::List),
        ];
        for (query, want) in cases {
            assert_eq!(info("GET", path, Some(query)).verb, want, "{query}");
        }
    }

    #[test]
    fn watch_on_a_named_get_stays_a_get() {
        // Kubernetes only turns a nameless GET into list/watch.
        let i = info("GET", "/apis/example.com/v1/widgets/w1", Some("watch=true"));
        assert_eq!(i.verb, Verb::Get);
    }

    #[test]
    fn legacy_watch_prefix() {
        let i = info(
            "GET",
            "/apis/example.com/v1/watch/namespaces/ns/widgets",
            None,
        );
        assert_eq!(i.verb, Verb::Watch);
        assert_eq!(i.namespace.as_deref(), Some("ns"));
        assert_eq!(i.resource, "widgets");
        assert_eq!(i.name, None);
        assert_eq!(
            i.forward_path(),
            "/apis/example.com/v1/watch/namespaces/ns/widgets"
        );
        let i = info("GET", "/apis/example.com/v1/watch/widgets/w1", None);
        assert_eq!((i.verb, i.name.as_deref()), (Verb::Watch, Some("w1")));
        let i = info("DELETE", "/apis/example.com/v1/watch/widgets", None);
        assert_eq!(i.verb, Verb::Unsupported("delete".into()));
    }

    #[test]
    fn namespace_resource_name_and_subresource() {
        let i = info(
            "PUT",
            "/apis/example.com/v1/namespaces/ns/widgets/w1/status",
            None,
        );
        assert_eq!(
            (
                i.namespace.as_deref(),
                i.resource.as_str(),
                i.name.as_deref(),
                i.subresource.as_deref()
            ),
            (Some("ns"), "widgets", Some("w1"), Some("status"))
        );
        assert!(i.is_named_object_request());
        let i = info("GET", "/apis/example.com/v1/clusterwidgets/c1/scale", None);
        assert_eq!(i.namespace, None);
        assert_eq!(i.subresource.as_deref(), Some("scale"));
        let i = info("GET", "/apis/example.com/v1/widgets", None);
        assert_eq!((&i.namespace, &i.name), (&None, &None));
        assert!(!i.is_named_object_request());
    }

    #[test]
    fn the_object_path_drops_the_subresource_however_it_is_spelled() {
        let cases = [
            (
                "/apis/example.com/v1/namespaces/ns/widgets/w1/status",
                "/apis/example.com/v1/namespaces/ns/widgets/w1",
            ),
            // The subresource is longer encoded than decoded.
            (
                "/apis/example.com/v1/namespaces/ns/widgets/w1/a%20b%3Ac",
                "/apis/example.com/v1/namespaces/ns/widgets/w1",
            ),
            (
                "/apis/example.com/v1/widgets/a%20b/scale",
                "/apis/example.com/v1/widgets/a%20b",
            ),
            (
                "/apis/example.com/v1/namespaces/ns/widgets/w1",
                "/apis/example.com/v1/namespaces/ns/widgets/w1",
            ),
            (
                "/apis/example.com/v1/namespaces/ns/widgets",
                "/apis/example.com/v1/namespaces/ns/widgets",
            ),
        ];
        for (path, object) in cases {
            assert_eq!(info("PUT", path, None).object_path(), object, "{path}");
        }
    }

    #[test]
    fn namespaces_paths_follow_kubernetes() {
        let i = info("GET", "/apis/example.com/v1/namespaces/ns", None);
        assert_eq!(
            (
                i.resource.as_str(),
                i.name.as_deref(),
                i.namespace.as_deref()
            ),
            ("namespaces", Some("ns"), Some("ns"))
        );
        let i = info("PUT", "/apis/example.com/v1/namespaces/ns/status", None);
        assert_eq!(
            (i.resource.as_str(), i.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let i = info("GET", "/apis/example.com/v1/namespaces", None);
        assert_eq!((i.resource.as_str(), i.verb), ("namespaces", Verb::List));
    }

    #[test]
    fn metadata_name_field_selector_names_a_list() {
        let path = "/apis/example.com/v1/namespaces/ns/widgets";
        let name = |q: &str| info("GET", path, Some(q)).name;
        assert_eq!(name("fieldSelector=metadata.name%3Dw1"), Some("w1".into()));
        assert_eq!(
            name("fieldSelector=metadata.name%3D%3Dw1"),
            Some("w1".into())
        );
        assert_eq!(
            name("fieldSelector=status.phase%3Dx,metadata.name%3Dw1"),
            Some("w1".into())
        );
        assert_eq!(name("fieldSelector=metadata.name!%3Dw1"), None);
        assert_eq!(
            name("fieldSelector=metadata.name%3Da%5C,b"),
            Some("a,b".into())
        );
        assert_eq!(name("fieldSelector=metadata.name%3Da/b"), None);
        assert_eq!(name("fieldSelector=metadata.name%3D.."), None);
        assert_eq!(name("fieldSelector=metadata.name%3Da%5Cx"), None);
        assert_eq!(name("fieldSelector=bogus"), None);
        let i = info(
            "GET",
            path,
            Some("fieldSelector=metadata.name%3Dw1&watch=1"),
        );
        assert_eq!(i.verb, Verb::Watch);
    }

    #[test]
    fn dry_run_is_detected() {
        let path = "/apis/example.com/v1/namespaces/ns/widgets";
        assert!(info("POST", path, Some("dryRun=All")).dry_run);
        assert!(!info("POST", path, Some("dryRun=")).dry_run);
        assert!(!info("POST", path, None).dry_run);
    }

    #[test]
    fn writes_body_is_true_for_create_update_patch_only() {
        assert!(Verb::Create.writes_body());
        assert!(Verb::Update.writes_body());
        assert!(Verb::Patch.writes_body());
        assert!(!Verb::Delete.writes_body());
        assert!(!Verb::DeleteCollection.writes_body());
        assert!(!Verb::List.writes_body());
        assert_eq!(Verb::DeleteCollection.as_str(), "deletecollection");
    }
}
