//! Table tests named after the Gateway API rules they check.

use super::*;
use http::HeaderValue;

fn host(s: &str) -> HostPattern {
    HostPattern::parse(s).unwrap()
}

fn prefix(p: &str) -> HttpMatcher {
    HttpMatcher {
        path: PathMatcher::prefix(p),
        ..HttpMatcher::default()
    }
}

fn exact(p: &str) -> HttpMatcher {
    HttpMatcher {
        path: PathMatcher::Exact(p.to_owned()),
        ..HttpMatcher::default()
    }
}

fn regex(p: &str) -> HttpMatcher {
    HttpMatcher {
        path: PathMatcher::regex(p).unwrap(),
        ..HttpMatcher::default()
    }
}

fn hdr(name: &str, value: &str) -> HeaderMatcher {
    HeaderMatcher {
        name: HeaderName::from_bytes(name.as_bytes()).unwrap(),
        value: ValueMatcher::Exact(value.to_owned()),
    }
}

fn qp(name: &str, value: &str) -> QueryMatcher {
    QueryMatcher {
        name: name.to_owned(),
        value: ValueMatcher::Exact(value.to_owned()),
    }
}

fn http_route(
    hosts: &[&str],
    rules: Vec<(Vec<HttpMatcher>, &'static str)>,
) -> RouteSpec<&'static str> {
    RouteSpec {
        hostnames: hosts.iter().map(|h| host(h)).collect(),
        excluded: Vec::new(),
        rules: rules
            .into_iter()
            .map(|(ms, payload)| RuleSpec {
                matchers: Matchers::Http(ms),
                payload,
            })
            .collect(),
    }
}

fn grpc_route(
    hosts: &[&str],
    rules: Vec<(Vec<GrpcMatcher>, &'static str)>,
) -> RouteSpec<&'static str> {
    RouteSpec {
        hostnames: hosts.iter().map(|h| host(h)).collect(),
        excluded: Vec::new(),
        rules: rules
            .into_iter()
            .map(|(ms, payload)| RuleSpec {
                matchers: Matchers::Grpc(ms),
                payload,
            })
            .collect(),
    }
}

/// A request: `target` is path with optional query; headers as `name: value` strings.
struct Req {
    host: &'static str,
    target: &'static str,
    method: Method,
    headers: HeaderMap,
    grpc: bool,
}

fn req(host: &'static str, target: &'static str) -> Req {
    Req {
        host,
        target,
        method: Method::GET,
        headers: HeaderMap::new(),
        grpc: false,
    }
}

impl Req {
    fn method(mut self, m: Method) -> Self {
        self.method = m;
        self
    }
    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
        self
    }
    fn grpc(mut self) -> Self {
        self.grpc = true;
        self.method = Method::POST;
        self
    }
}

fn lookup(table: &Table<&'static str>, r: &Req) -> Option<&'static str> {
    let (path, query) = match r.target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (r.target, None),
    };
    let view = RequestView {
        host: r.host,
        path,
        query,
        method: &r.method,
        headers: &r.headers,
        grpc: r.grpc,
    };
    table.lookup(&view).map(|m| {
        assert_eq!(
            table.at(m.position),
            (m.rule, m.matched_prefix),
            "found again"
        );
        *m.rule
    })
}

/// Runs `(request, expected rule)` rows against one table.
fn check(table: &Table<&'static str>, rows: Vec<(Req, Option<&'static str>)>) {
    for (r, want) in rows {
        assert_eq!(
            lookup(table, &r),
            want,
            "{} {}{} headers={:?}",
            r.method,
            r.host,
            r.target,
            r.headers
        );
    }
}

// === hostnames ===

#[test]
fn hostname_parse_accepts_dns_names_and_leading_wildcards_only() {
    assert_eq!(
        host("Foo.Example.COM"),
        HostPattern::Exact("foo.example.com".into())
    );
    assert_eq!(
        host("*.example.com"),
        HostPattern::Wildcard(".example.com".into())
    );
    for bad in [
        "",
        "foo.*.com",
        "*foo.com",
        "a..b",
        "-a.com",
        "10.0.0.1",
        "a_b.com",
        "*",
    ] {
        assert!(HostPattern::parse(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn normalize_host_strips_port_and_lowercases() {
    let rows = [
        ("Foo.Example.com:8080", Some("foo.example.com")),
        ("foo.example.com.", Some("foo.example.com")),
        ("foo.example.com", Some("foo.example.com")),
        ("[::1]:8080", Some("::1")),
        ("127.0.0.1:80", Some("127.0.0.1")),
        ("", None),
        ("foo.com:http", None),
        ("foo/bar.com", None),
        ("foo bar", None),
    ];
    for (input, want) in rows {
        assert_eq!(normalize_host(input).as_deref(), want, "{input:?}");
    }
}

#[test]
fn host_patterns_contain_the_patterns_they_cover() {
    let any = HostPattern::Any;
    let rows = [
        (&any, &host("a.example.com"), true),
        (&any, &any, true),
        (&host("*.example.com"), &any, false),
        (&host("*.example.com"), &host("*.example.com"), true),
        (&host("*.example.com"), &host("*.foo.example.com"), true),
        (&host("*.foo.example.com"), &host("*.example.com"), false),
        (&host("*.example.com"), &host("a.example.com"), true),
        (&host("*.example.com"), &host("example.com"), false),
        (&host("*.example.com"), &host("*.notexample.com"), false),
        (&host("a.example.com"), &host("a.example.com"), true),
        (&host("a.example.com"), &host("*.example.com"), false),
    ];
    for (outer, inner, want) in rows {
        assert_eq!(outer.contains(inner), want, "{outer:?} ⊇ {inner:?}");
    }
}

/// Listener isolation: a route attached through a less specific listener does not serve the
/// hosts of a more specific one, and a lookup goes on to the routes that do.
#[test]
fn excluded_hosts_are_not_served_by_the_route_that_excludes_them() {
    let mut any = http_route(&[], vec![(vec![prefix("/")], "any")]);
    any.excluded = vec![vec![host("*.example.com")]];
    let mut wild = http_route(&["*.example.com"], vec![(vec![prefix("/wild")], "wild")]);
    wild.excluded = vec![vec![host("*.foo.example.com"), host("abc.example.com")]];
    let other = http_route(&[], vec![(vec![prefix("/other")], "other")]);
    let t = Table::new(vec![], vec![any, wild, other]);
    check(
        &t,
        vec![
            (req("bar.com", "/wild"), Some("any")),
            (req("bar.example.com", "/wild"), Some("wild")),
            (req("bar.example.com", "/"), None),
            (req("bar.example.com", "/other"), Some("other")),
            (req("abc.example.com", "/wild"), None),
            (req("x.foo.example.com", "/wild"), None),
            (req("foo.example.com", "/wild"), Some("wild")),
        ],
    );
}

#[test]
fn wildcard_hostname_matches_one_or_more_labels_but_never_the_apex() {
    let t = Table::new(
        vec![],
        vec![http_route(&["*.example.com"], vec![(vec![], "wild")])],
    );
    check(
        &t,
        vec![
            (req("foo.example.com", "/"), Some("wild")),
            (req("a.b.example.com", "/"), Some("wild")),
            (req("example.com", "/"), None),
            (req("fooexample.com", "/"), None),
            (req("foo.example.org", "/"), None),
        ],
    );
}

#[test]
fn exact_hostname_takes_precedence_over_wildcard_even_with_a_shorter_path() {
    let t = Table::new(
        vec![],
        vec![
            http_route(
                &["*.example.com"],
                vec![(vec![prefix("/very/long/prefix")], "wild")],
            ),
            http_route(&["foo.example.com"], vec![(vec![prefix("/")], "exact")]),
        ],
    );
    check(
        &t,
        vec![
            (req("foo.example.com", "/very/long/prefix"), Some("exact")),
            (req("bar.example.com", "/very/long/prefix"), Some("wild")),
        ],
    );
}

#[test]
fn longer_wildcard_takes_precedence_over_shorter_wildcard() {
    let t = Table::new(
        vec![],
        vec![
            http_route(&["*.example.com"], vec![(vec![], "short")]),
            http_route(&["*.foo.example.com"], vec![(vec![], "long")]),
            http_route(&[], vec![(vec![], "any")]),
        ],
    );
    check(
        &t,
        vec![
            (req("a.foo.example.com", "/"), Some("long")),
            (req("foo.example.com", "/"), Some("short")),
            (req("other.org", "/"), Some("any")),
        ],
    );
}

#[test]
fn less_specific_hostname_serves_when_the_specific_one_has_no_matching_rule() {
    let t = Table::new(
        vec![],
        vec![
            http_route(
                &["foo.example.com"],
                vec![(vec![prefix("/api")], "exact-api")],
            ),
            http_route(&["*.example.com"], vec![(vec![], "wild")]),
        ],
    );
    check(
        &t,
        vec![
            (req("foo.example.com", "/api/x"), Some("exact-api")),
            (req("foo.example.com", "/web"), Some("wild")),
        ],
    );
}

#[test]
fn listener_hostnames_gate_every_route() {
    let t = Table::new(
        vec![host("*.example.com")],
        vec![http_route(&[], vec![(vec![], "any")])],
    );
    check(
        &t,
        vec![
            (req("a.example.com", "/"), Some("any")),
            (req("a.example.org", "/"), None),
            (req("example.com", "/"), None),
        ],
    );
}

// === path matches ===

#[test]
fn path_prefix_matches_whole_segments_only() {
    let t = Table::new(
        vec![],
        vec![http_route(&[], vec![(vec![prefix("/abc")], "abc")])],
    );
    check(
        &t,
        vec![
            (req("h", "/abc"), Some("abc")),
            (req("h", "/abc/"), Some("abc")),
            (req("h", "/abc/def"), Some("abc")),
            (req("h", "/abcd"), None),
            (req("h", "/ab"), None),
            (req("h", "/"), None),
        ],
    );
}

#[test]
fn path_prefix_trailing_slash_is_ignored() {
    let t = Table::new(
        vec![],
        vec![http_route(&[], vec![(vec![prefix("/abc/")], "abc")])],
    );
    check(
        &t,
        vec![
            (req("h", "/abc"), Some("abc")),
            (req("h", "/abc/def"), Some("abc")),
            (req("h", "/abcdef"), None),
        ],
    );
}

#[test]
fn path_prefix_slash_matches_everything() {
    let t = Table::new(
        vec![],
        vec![http_route(&[], vec![(vec![prefix("/")], "root")])],
    );
    check(
        &t,
        vec![
            (req("h", "/"), Some("root")),
            (req("h", "/anything/at/all"), Some("root")),
        ],
    );
}

#[test]
fn path_exact_matches_only_the_exact_path() {
    let t = Table::new(
        vec![],
        vec![http_route(&[], vec![(vec![exact("/abc")], "abc")])],
    );
    check(
        &t,
        vec![
            (req("h", "/abc"), Some("abc")),
            (req("h", "/abc?x=1"), Some("abc")),
            (req("h", "/abc/"), None),
            (req("h", "/ABC"), None),
        ],
    );
}

#[test]
fn path_regular_expression_must_match_the_whole_path() {
    let t = Table::new(
        vec![],
        vec![http_route(&[], vec![(vec![regex("/v[0-9]+/.*")], "re")])],
    );
    check(
        &t,
        vec![
            (req("h", "/v1/users"), Some("re")),
            (req("h", "/v12/"), Some("re")),
            (req("h", "/x/v1/users"), None),
            (req("h", "/vx/users"), None),
        ],
    );
}

// === header, query, method matches ===

#[test]
fn header_match_name_is_case_insensitive_value_is_exact() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![(
                vec![HttpMatcher {
                    headers: vec![hdr("X-Env", "canary")],
                    ..HttpMatcher::default()
                }],
                "canary",
            )],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/").header("x-env", "canary"), Some("canary")),
            (req("h", "/").header("x-env", "Canary"), None),
            (
                req("h", "/")
                    .header("x-env", "prod")
                    .header("x-env", "canary"),
                Some("canary"),
            ),
            (req("h", "/"), None),
        ],
    );
}

#[test]
fn header_match_regular_expression_is_anchored() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![(
                vec![HttpMatcher {
                    headers: vec![HeaderMatcher {
                        name: HeaderName::from_static("x-version"),
                        value: ValueMatcher::Regex(anchored("v[12]").unwrap()),
                    }],
                    ..HttpMatcher::default()
                }],
                "re",
            )],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/").header("x-version", "v1"), Some("re")),
            (req("h", "/").header("x-version", "v2"), Some("re")),
            (req("h", "/").header("x-version", "v12"), None),
        ],
    );
}

#[test]
fn query_param_match_is_exact_on_the_decoded_first_value() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![(
                vec![HttpMatcher {
                    query: vec![qp("env", "a b")],
                    ..HttpMatcher::default()
                }],
                "q",
            )],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/?env=a%20b"), Some("q")),
            (req("h", "/?x=1&env=a+b"), Some("q")),
            (req("h", "/?env=other&env=a%20b"), None),
            (req("h", "/?ENV=a%20b"), None),
            (req("h", "/"), None),
        ],
    );
}

#[test]
fn method_match_is_exact() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![(
                vec![HttpMatcher {
                    method: Some(Method::POST),
                    ..HttpMatcher::default()
                }],
                "post",
            )],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/").method(Method::POST), Some("post")),
            (req("h", "/").method(Method::GET), None),
        ],
    );
}

#[test]
fn all_conditions_of_one_match_must_hold_and_any_match_of_a_rule_suffices() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![(
                vec![
                    HttpMatcher {
                        path: PathMatcher::prefix("/a"),
                        headers: vec![hdr("x", "1")],
                        query: vec![],
                        method: Some(Method::GET),
                    },
                    exact("/b"),
                ],
                "r",
            )],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/a").header("x", "1"), Some("r")),
            (req("h", "/a"), None),
            (req("h", "/a").header("x", "1").method(Method::PUT), None),
            (req("h", "/b"), Some("r")),
        ],
    );
}

// === precedence across rules ===

#[test]
fn precedence_exact_path_over_any_prefix() {
    let t = Table::new(
        vec![],
        vec![
            http_route(&[], vec![(vec![prefix("/foo/bar")], "prefix")]),
            http_route(&[], vec![(vec![exact("/foo")], "exact")]),
        ],
    );
    check(
        &t,
        vec![
            (req("h", "/foo"), Some("exact")),
            (req("h", "/foo/bar"), Some("prefix")),
        ],
    );
}

#[test]
fn precedence_regular_expression_between_exact_and_prefix() {
    let t = Table::new(
        vec![],
        vec![
            http_route(&[], vec![(vec![prefix("/foo")], "prefix")]),
            http_route(&[], vec![(vec![regex("/foo/.*")], "regex")]),
            http_route(&[], vec![(vec![exact("/foo/x")], "exact")]),
        ],
    );
    check(
        &t,
        vec![
            (req("h", "/foo/x"), Some("exact")),
            (req("h", "/foo/y"), Some("regex")),
            (req("h", "/foo"), Some("prefix")),
        ],
    );
}

#[test]
fn precedence_longest_prefix_wins() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![
                (vec![prefix("/")], "root"),
                (vec![prefix("/a")], "a"),
                (vec![prefix("/a/b")], "ab"),
            ],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/a/b/c"), Some("ab")),
            (req("h", "/a/c"), Some("a")),
            (req("h", "/c"), Some("root")),
        ],
    );
}

#[test]
fn precedence_method_match_over_none_at_equal_path() {
    let t = Table::new(
        vec![],
        vec![
            http_route(&[], vec![(vec![prefix("/")], "plain")]),
            http_route(
                &[],
                vec![(
                    vec![HttpMatcher {
                        method: Some(Method::DELETE),
                        ..HttpMatcher::default()
                    }],
                    "delete",
                )],
            ),
        ],
    );
    check(
        &t,
        vec![
            (req("h", "/").method(Method::DELETE), Some("delete")),
            (req("h", "/").method(Method::GET), Some("plain")),
        ],
    );
}

#[test]
fn precedence_path_before_method() {
    let t = Table::new(
        vec![],
        vec![
            http_route(
                &[],
                vec![(
                    vec![HttpMatcher {
                        method: Some(Method::GET),
                        ..HttpMatcher::default()
                    }],
                    "method",
                )],
            ),
            http_route(&[], vec![(vec![prefix("/x")], "longer-path")]),
        ],
    );
    check(&t, vec![(req("h", "/x"), Some("longer-path"))]);
}

#[test]
fn precedence_most_header_matches_then_most_query_matches() {
    let one_header = HttpMatcher {
        headers: vec![hdr("a", "1")],
        ..HttpMatcher::default()
    };
    let two_headers = HttpMatcher {
        headers: vec![hdr("a", "1"), hdr("b", "1")],
        ..HttpMatcher::default()
    };
    let two_headers_one_query = HttpMatcher {
        headers: vec![hdr("a", "1"), hdr("b", "1")],
        query: vec![qp("q", "1")],
        ..HttpMatcher::default()
    };
    let method_only = HttpMatcher {
        method: Some(Method::GET),
        ..HttpMatcher::default()
    };
    let t = Table::new(
        vec![],
        vec![
            http_route(&[], vec![(vec![one_header], "one")]),
            http_route(&[], vec![(vec![two_headers], "two")]),
            http_route(&[], vec![(vec![two_headers_one_query], "two+q")]),
            http_route(&[], vec![(vec![method_only], "method")]),
        ],
    );
    check(
        &t,
        vec![
            // method outranks header count
            (
                req("h", "/?q=1").header("a", "1").header("b", "1"),
                Some("method"),
            ),
            (
                req("h", "/?q=1")
                    .method(Method::PUT)
                    .header("a", "1")
                    .header("b", "1"),
                Some("two+q"),
            ),
            (
                req("h", "/")
                    .method(Method::PUT)
                    .header("a", "1")
                    .header("b", "1"),
                Some("two"),
            ),
            (
                req("h", "/").method(Method::PUT).header("a", "1"),
                Some("one"),
            ),
        ],
    );
}

#[test]
fn tie_across_routes_goes_to_the_route_listed_first_oldest() {
    let t = Table::new(
        vec![],
        vec![
            http_route(&["foo.example.com"], vec![(vec![prefix("/")], "older")]),
            http_route(&["foo.example.com"], vec![(vec![prefix("/")], "newer")]),
        ],
    );
    check(&t, vec![(req("foo.example.com", "/"), Some("older"))]);
}

#[test]
fn tie_within_a_route_goes_to_the_first_matching_rule() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &[],
            vec![
                (vec![prefix("/a")], "first"),
                (vec![prefix("/a")], "second"),
            ],
        )],
    );
    check(&t, vec![(req("h", "/a"), Some("first"))]);
}

#[test]
fn matched_prefix_is_reported_for_rewrites() {
    let t = Table::new(
        vec![],
        vec![http_route(
            &["*.example.com"],
            vec![(vec![exact("/e"), prefix("/p/")], "r")],
        )],
    );
    let headers = HeaderMap::new();
    let view = |path| RequestView {
        host: "a.example.com",
        path,
        query: None,
        method: &Method::GET,
        headers: &headers,
        grpc: false,
    };
    let m = t.lookup(&view("/p/x")).unwrap();
    assert_eq!(m.matched_prefix, Some("/p"));
    assert_eq!(m.hostname, "*.example.com");
    assert_eq!(t.at(m.position), (&"r", Some("/p")));
    assert_eq!(t.lookup(&view("/e")).unwrap().matched_prefix, None);
}

// === GRPCRoute ===

fn svc(kind: ValueMatchKind, v: &str) -> Option<ValueMatcher> {
    Some(match kind {
        ValueMatchKind::Exact => ValueMatcher::Exact(v.into()),
        ValueMatchKind::Regex => ValueMatcher::Regex(anchored(v).unwrap()),
    })
}

#[derive(Clone, Copy)]
enum ValueMatchKind {
    Exact,
    Regex,
}

#[test]
fn grpc_service_and_method_matching() {
    use ValueMatchKind::*;
    let t = Table::new(
        vec![],
        vec![grpc_route(
            &["grpc.example.com"],
            vec![
                (
                    vec![GrpcMatcher {
                        service: svc(Exact, "echo.Echo"),
                        method: svc(Exact, "Unary"),
                        headers: vec![],
                    }],
                    "svc+method",
                ),
                (
                    vec![GrpcMatcher {
                        service: svc(Exact, "echo.Echo"),
                        ..GrpcMatcher::default()
                    }],
                    "svc",
                ),
                (
                    vec![GrpcMatcher {
                        method: svc(Exact, "Health"),
                        ..GrpcMatcher::default()
                    }],
                    "method",
                ),
                (
                    vec![GrpcMatcher {
                        service: svc(Regex, r"admin\..*"),
                        ..GrpcMatcher::default()
                    }],
                    "regex",
                ),
            ],
        )],
    );
    check(
        &t,
        vec![
            (
                req("grpc.example.com", "/echo.Echo/Unary").grpc(),
                Some("svc+method"),
            ),
            (
                req("grpc.example.com", "/echo.Echo/Stream").grpc(),
                Some("svc"),
            ),
            (
                req("grpc.example.com", "/other.Svc/Health").grpc(),
                Some("method"),
            ),
            (
                req("grpc.example.com", "/admin.Users/List").grpc(),
                Some("regex"),
            ),
            (req("grpc.example.com", "/nope.Svc/List").grpc(), None),
            (req("grpc.example.com", "/echo.Echo").grpc(), None),
            (req("grpc.example.com", "/echo.Echo/Unary/x").grpc(), None),
            // a GRPCRoute never serves a non-gRPC request
            (req("grpc.example.com", "/echo.Echo/Unary"), None),
        ],
    );
}

#[test]
fn grpc_precedence_service_chars_then_method_chars_then_headers() {
    use ValueMatchKind::*;
    let t = Table::new(
        vec![],
        vec![grpc_route(
            &[],
            vec![
                (
                    vec![GrpcMatcher {
                        method: svc(Exact, "Get"),
                        headers: vec![hdr("a", "1"), hdr("b", "1")],
                        ..GrpcMatcher::default()
                    }],
                    "method+2h",
                ),
                (
                    vec![GrpcMatcher {
                        service: svc(Regex, ".*"),
                        method: svc(Exact, "Get"),
                        headers: vec![],
                    }],
                    "regex-svc+method",
                ),
                (
                    vec![GrpcMatcher {
                        service: svc(Exact, "a.B"),
                        ..GrpcMatcher::default()
                    }],
                    "svc",
                ),
                (
                    vec![GrpcMatcher {
                        service: svc(Exact, "a.B"),
                        headers: vec![hdr("a", "1")],
                        ..GrpcMatcher::default()
                    }],
                    "svc+h",
                ),
            ],
        )],
    );
    check(
        &t,
        vec![
            (req("h", "/a.B/Get").grpc().header("a", "1"), Some("svc+h")),
            (req("h", "/a.B/Get").grpc(), Some("svc")),
            (
                req("h", "/x.Y/Get")
                    .grpc()
                    .header("a", "1")
                    .header("b", "1"),
                Some("regex-svc+method"),
            ),
        ],
    );
}

#[test]
fn grpc_request_falls_back_to_http_routes_in_the_same_hostname() {
    use ValueMatchKind::*;
    let t = Table::new(
        vec![],
        vec![
            http_route(&["h.example.com"], vec![(vec![], "http")]),
            grpc_route(
                &["h.example.com"],
                vec![(
                    vec![GrpcMatcher {
                        service: svc(Exact, "a.B"),
                        ..GrpcMatcher::default()
                    }],
                    "grpc",
                )],
            ),
        ],
    );
    check(
        &t,
        vec![
            (req("h.example.com", "/a.B/M").grpc(), Some("grpc")),
            (req("h.example.com", "/c.D/M").grpc(), Some("http")),
            (req("h.example.com", "/a.B/M"), Some("http")),
        ],
    );
}

// === weights ===

#[test]
fn weighted_choice_maps_rolls_onto_cumulative_weights() {
    let w = WeightedChoice::new([1, 0, 3]).unwrap();
    assert_eq!(w.total(), 4);
    let picks: Vec<usize> = (0..4).map(|r| w.pick(r)).collect();
    assert_eq!(picks, vec![0, 2, 2, 2]);
    assert!(WeightedChoice::new([0, 0]).is_none());
    assert!(WeightedChoice::new([]).is_none());
}

#[test]
fn weighted_choice_distribution_within_tolerance() {
    use rand::{RngExt, SeedableRng, rngs::StdRng};
    let weights = [10u32, 30, 60, 0];
    let w = WeightedChoice::new(weights).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let n = 100_000;
    let mut counts = [0usize; 4];
    for _ in 0..n {
        counts[w.pick(rng.random_range(0..w.total()))] += 1;
    }
    assert_eq!(counts[3], 0, "a zero weight never takes traffic");
    for (i, weight) in weights.iter().enumerate().take(3) {
        let share = counts[i] as f64 / n as f64;
        let want = f64::from(*weight) / 100.0;
        assert!(
            (share - want).abs() < 0.01,
            "backend {i}: share {share}, want {want}"
        );
    }
}
