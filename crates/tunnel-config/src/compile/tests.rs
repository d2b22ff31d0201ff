use http::{HeaderName, HeaderValue, Method};
use serde_json::{Value, json};

use super::*;
use crate::routing;

fn try_compile(doc: Value) -> Result<RouteTable<(), ()>, CompileError> {
    let config = parse(doc.to_string().as_bytes())?;
    compile(&config, &mut Check)
}

fn error_of(doc: Value) -> CompileError {
    try_compile(doc).expect_err("document should be refused")
}

fn route_with_rule(rule: Value) -> Value {
    json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "ns/r", "rules": [rule] }] })
}

fn backend(extra: Value) -> Value {
    let mut b = json!({ "name": "ns/svc:80", "endpoints": ["127.0.0.1:9"] });
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b
}

/// A CA and a leaf signed by it, as PEM: (ca, leaf cert, leaf key).
fn pki() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["client".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &rcgen::Issuer::new(ca_params, ca_key))
        .unwrap();
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

#[test]
fn example_document_from_the_docs_compiles() {
    let text = include_str!("../../testdata/example-config.json");
    let mut doc: Value = serde_json::from_str(text).unwrap();
    // the example's PEM blocks are abbreviated; substitute real ones
    let (ca, cert, key) = pki();
    let tls = &mut doc["routes"][0]["rules"][2]["backends"][0]["tls"];
    tls["caBundlePem"] = json!(ca);
    tls["clientCertPem"] = json!(cert);
    tls["clientKeyPem"] = json!(key);
    let table = try_compile(doc).unwrap();
    assert_eq!(table.version, 1_732_000_000_001);
    assert_eq!(table.table.rules().count(), 4);
    assert!(table.host("shop.example.com").is_some());
    assert!(table.host("grpc.example.com").is_some());
}

#[test]
fn unknown_fields_and_wrong_types_name_their_path() {
    let e = error_of(route_with_rule(
        json!({ "matches": [{ "path": { "type": "Exact", "value": "/", "bogus": 1 } }] }),
    ));
    assert_eq!(e.path, "routes[0].rules[0].matches[0].path.bogus", "{e}");
    let e = error_of(json!({ "version": -1 }));
    assert_eq!(e.path, "version", "{e}");
    let e = error_of(json!({ "version": 1, "routes": [{ "kind": "TCPRoute", "name": "x" }] }));
    assert_eq!(e.path, "routes[0].kind", "{e}");
}

#[test]
fn refused_documents_name_the_offending_field() {
    let rows: Vec<(Value, &str)> = vec![
        (
            route_with_rule(
                json!({ "matches": [{ "path": { "type": "RegularExpression", "value": "/(" } }] }),
            ),
            "routes[0].rules[0].matches[0].path.value",
        ),
        (
            route_with_rule(
                json!({ "matches": [{ "path": { "type": "Exact", "value": "no-slash" } }] }),
            ),
            "routes[0].rules[0].matches[0].path.value",
        ),
        (
            route_with_rule(
                json!({ "matches": [{ "headers": [{ "name": "bad header", "value": "x" }] }] }),
            ),
            "routes[0].rules[0].matches[0].headers[0].name",
        ),
        (
            route_with_rule(
                json!({ "matches": [{ "headers": [{ "type": "RegularExpression", "name": "x", "value": "[" }] }] }),
            ),
            "routes[0].rules[0].matches[0].headers[0].value",
        ),
        (
            route_with_rule(
                json!({ "matches": [{ "queryParams": [{ "type": "RegularExpression", "name": "q", "value": "(" }] }] }),
            ),
            "routes[0].rules[0].matches[0].queryParams[0].value",
        ),
        (
            route_with_rule(json!({ "matches": [{ "method": "GE T" }] })),
            "routes[0].rules[0].matches[0].method",
        ),
        (
            route_with_rule(json!({ "backends": [backend(json!({ "weight": 1_000_001 }))] })),
            "routes[0].rules[0].backends[0].weight",
        ),
        (
            route_with_rule(json!({ "backends": [backend(json!({ "endpoints": ["nope"] }))] })),
            "routes[0].rules[0].backends[0].endpoints[0]",
        ),
        (
            route_with_rule(json!({ "backends": [backend(json!({ "failureStatus": 200 }))] })),
            "routes[0].rules[0].backends[0].failureStatus",
        ),
        (
            route_with_rule(
                json!({ "backends": [backend(json!({ "tls": { "caBundlePem": "garbage", "serverName": "a" } }))] }),
            ),
            "routes[0].rules[0].backends[0].tls",
        ),
        (
            route_with_rule(json!({ "timeouts": { "request": "10 seconds" } })),
            "routes[0].rules[0].timeouts.request",
        ),
        (
            route_with_rule(
                json!({ "filters": [{ "type": "RequestRedirect", "statusCode": 300 }] }),
            ),
            "routes[0].rules[0].filters[0].statusCode",
        ),
        (
            route_with_rule(json!({ "filters": [{ "type": "RequestRedirect", "scheme": "ftp" }] })),
            "routes[0].rules[0].filters[0].scheme",
        ),
        (
            route_with_rule(
                json!({ "filters": [{ "type": "RequestHeaderModifier", "set": [{ "name": "x", "value": "a\nb" }] }] }),
            ),
            "routes[0].rules[0].filters[0].set[0].value",
        ),
        (
            route_with_rule(json!({ "filters": [
                { "type": "RequestHeaderModifier" }, { "type": "RequestHeaderModifier" }] })),
            "routes[0].rules[0].filters[1]",
        ),
        (
            route_with_rule(
                json!({ "filters": [{ "type": "RequestMirror", "percent": 101, "backend": backend(json!({})) }] }),
            ),
            "routes[0].rules[0].filters[0].percent",
        ),
        (
            route_with_rule(json!({
                "matches": [{ "path": { "type": "Exact", "value": "/a" } }],
                "filters": [{ "type": "URLRewrite", "path": { "type": "ReplacePrefixMatch", "value": "/b" } }] })),
            "routes[0].rules[0].filters",
        ),
        (
            route_with_rule(json!({ "filters": [
                { "type": "URLRewrite", "hostname": "a.example.com" },
                { "type": "RequestRedirect", "hostname": "b.example.com" }] })),
            "routes[0].rules[0].filters",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "x", "hostnames": ["a.*.com"] }] }),
            "routes[0].hostnames[0]",
        ),
        (
            json!({ "version": 1, "listeners": [{ "name": "l", "hostname": "" }] }),
            "listeners[0].hostname",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "GRPCRoute", "name": "g", "rules": [{
                "backends": [backend(json!({}))] }] }] }),
            "routes[0].rules[0].backends[0].protocol",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "GRPCRoute", "name": "g", "rules": [{
                "matches": [{ "method": { "type": "Exact" } }] }] }] }),
            "routes[0].rules[0].matches[0].method",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "GRPCRoute", "name": "g", "rules": [{
                "filters": [{ "type": "RequestRedirect" }] }] }] }),
            "routes[0].rules[0].filters[0]",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "r",
                "hostnames": ["*.example.com"], "excludedHostnames": { "*": ["a.example.com"] } }] }),
            "routes[0].excludedHostnames[*]",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "r",
                "hostnames": ["*.example.com"], "excludedHostnames": { "*.example.com": ["a.other.com"] } }] }),
            "routes[0].excludedHostnames[*.example.com][0]",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "GRPCRoute", "name": "g",
                "excludedHostnames": { "*": ["a..com"] } }] }),
            "routes[0].excludedHostnames[*][0]",
        ),
    ];
    for (doc, path) in rows {
        let e = error_of(doc.clone());
        assert_eq!(e.path, path, "{e} for {doc}");
    }
}

#[test]
fn client_certificate_without_key_and_unparsable_key_are_refused() {
    let (ca, cert, _) = pki();
    let e = error_of(route_with_rule(
        json!({ "backends": [backend(json!({ "tls": {
        "caBundlePem": ca, "serverName": "a", "clientCertPem": cert } }))] }),
    ));
    assert!(e.message.contains("clientKeyPem"), "{e}");
    let e = error_of(route_with_rule(
        json!({ "backends": [backend(json!({ "tls": {
        "caBundlePem": ca, "serverName": "a", "clientCertPem": cert, "clientKeyPem": "nope" } }))] }),
    ));
    assert!(e.message.contains("clientKeyPem"), "{e}");
}

fn action_of(rule: Value) -> String {
    let t = try_compile(route_with_rule(rule)).unwrap();
    match &t.table.rules().next().unwrap().action {
        Action::Respond(s) => format!("respond {}", s.as_u16()),
        Action::Redirect(r) => format!("redirect {}", r.status.as_u16()),
        Action::Forward { backends, .. } => format!("forward {}", backends.len()),
    }
}

#[test]
fn rule_actions_follow_the_specification() {
    // no backends and no redirect: 500
    assert_eq!(action_of(json!({})), "respond 500");
    // all weights zero: 500
    assert_eq!(
        action_of(json!({ "backends": [backend(json!({ "weight": 0 }))] })),
        "respond 500"
    );
    // rule-level failure status wins over everything
    assert_eq!(
        action_of(json!({ "failureStatus": 503, "backends": [backend(json!({}))] })),
        "respond 503"
    );
    assert_eq!(
        action_of(json!({ "filters": [{ "type": "RequestRedirect" }] })),
        "redirect 302"
    );
    assert_eq!(
        action_of(json!({ "backends": [backend(json!({})), backend(json!({}))] })),
        "forward 2"
    );
}

#[test]
fn backend_without_endpoints_fails_closed_with_503() {
    let t = try_compile(route_with_rule(json!({ "backends": [
        backend(json!({ "endpoints": [] })), backend(json!({ "failureStatus": 500 }))] })))
    .unwrap();
    let Action::Forward { backends, .. } = &t.table.rules().next().unwrap().action else {
        panic!("expected forward");
    };
    assert!(matches!(backends[0].target, Target::Fail(s) if s == 503));
    assert!(matches!(backends[1].target, Target::Fail(s) if s == 500));
}

#[test]
fn gateway_api_durations() {
    let rows = [
        ("10s", Some(Duration::from_secs(10))),
        ("1m30s", Some(Duration::from_secs(90))),
        ("500ms", Some(Duration::from_millis(500))),
        ("1h2m3s4ms", Some(Duration::from_millis(3_723_004))),
        ("0s", Some(Duration::ZERO)),
        ("", None),
        ("10", None),
        ("s", None),
        ("1.5s", None),
        ("123456s", None),
        ("1h1h1h1h1h", None),
        ("-1s", None),
    ];
    for (s, want) in rows {
        assert_eq!(parse_duration(s), want, "{s:?}");
    }
}

#[test]
fn the_response_timeout_is_the_smaller_of_the_rule_timeouts() {
    let rows = [
        (json!({}), None),
        (json!({ "request": "10s" }), Some(10)),
        (json!({ "backendRequest": "2s" }), Some(2)),
        (json!({ "request": "10s", "backendRequest": "2s" }), Some(2)),
        (json!({ "request": "3s", "backendRequest": "20s" }), Some(3)),
    ];
    for (timeouts, want) in rows {
        let rule = json!({ "backends": [backend(json!({}))], "timeouts": timeouts });
        let t = try_compile(route_with_rule(rule)).unwrap();
        let got = t.table.rules().next().unwrap().response_timeout();
        assert_eq!(got, want.map(Duration::from_secs), "{timeouts}");
    }
}

#[test]
fn validate_refuses_exactly_what_compile_refuses_and_names_the_same_path() {
    let good = route_with_rule(json!({ "backends": [backend(json!({}))] }));
    let bad = route_with_rule(
        json!({ "matches": [{ "path": { "type": "RegularExpression", "value": "/(" } }] }),
    );
    let parsed = |doc: &Value| parse(doc.to_string().as_bytes()).unwrap();
    assert_eq!(validate(&parsed(&good)), Ok(()));
    assert_eq!(validate(&parsed(&bad)), Err(error_of(bad)));
}

/// Whether a request with `headers` and `query` matches the one rule of a document whose match
/// is `m`.
fn matches_request(m: Value, headers: &[(&str, &str)], query: Option<&str>) -> bool {
    let t = try_compile(route_with_rule(
        json!({ "matches": [m], "backends": [backend(json!({}))] }),
    ))
    .unwrap();
    let mut h = http::HeaderMap::new();
    for (n, v) in headers {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let view = routing::RequestView {
        host: "a.example.com",
        path: "/",
        query,
        method: &Method::GET,
        headers: &h,
        grpc: false,
    };
    t.table.lookup(&view).is_some()
}

#[test]
fn only_the_first_entry_with_an_equivalent_header_name_is_considered() {
    let m = json!({ "headers": [
        { "name": "x-flavor", "value": "mint" },
        { "name": "X-Flavor", "value": "lime" },
        { "name": "X-FLAVOR", "type": "RegularExpression", "value": "(" },
    ] });
    // (request headers, matches)
    let rows: [(&[(&str, &str)], bool); 5] = [
        // "only the first entry with an equivalent name MUST be considered for a match"
        (&[("x-flavor", "mint")], true),
        (&[("X-Flavor", "mint")], true),
        // "Subsequent entries with an equivalent header name MUST be ignored"
        (&[("x-flavor", "lime")], false),
        (&[("x-flavor", "lime"), ("x-flavor", "mint")], true),
        (&[], false),
    ];
    for (headers, want) in rows {
        assert_eq!(
            matches_request(m.clone(), headers, None),
            want,
            "{headers:?}"
        );
    }
}

#[test]
fn only_the_first_entry_with_an_equivalent_query_param_name_is_considered() {
    let m = json!({ "queryParams": [
        { "name": "flavor", "value": "mint" },
        { "name": "flavor", "value": "lime" },
        { "name": "flavor", "type": "RegularExpression", "value": "(" },
        // query parameter names are case-sensitive: a different name, also required
        { "name": "Flavor", "value": "lime" },
    ] });
    // (query, matches)
    let rows = [
        // "only the first entry with an equivalent name MUST be considered for a match"
        (Some("flavor=mint&Flavor=lime"), true),
        // "Subsequent entries with an equivalent query param name MUST be ignored"
        (Some("flavor=lime&Flavor=lime"), false),
        (Some("flavor=mint"), false),
        (None, false),
    ];
    for (query, want) in rows {
        assert_eq!(matches_request(m.clone(), &[], query), want, "{query:?}");
    }
}

#[test]
fn ignored_duplicate_names_do_not_count_for_precedence() {
    // One header match given twice ranks like one header match: the rule listed first wins
    // the tie, not the one with the longer (duplicated) list.
    let doc = json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "ns/r", "rules": [
        { "name": "one", "matches": [{ "headers": [{ "name": "a", "value": "1" }] }],
          "backends": [backend(json!({ "name": "one" }))] },
        { "name": "twice", "matches": [{ "headers": [{ "name": "a", "value": "1" }, { "name": "A", "value": "1" }] }],
          "backends": [backend(json!({ "name": "twice" }))] },
    ] }] });
    let t = try_compile(doc).unwrap();
    let mut h = http::HeaderMap::new();
    h.insert("a", HeaderValue::from_static("1"));
    let view = routing::RequestView {
        host: "a.example.com",
        path: "/",
        query: None,
        method: &Method::GET,
        headers: &h,
        grpc: false,
    };
    let m = t.table.lookup(&view).unwrap();
    let Action::Forward { backends, .. } = &m.rule.action else {
        panic!("expected forward");
    };
    assert_eq!(&*backends[0].name, "one");
}

#[test]
fn backend_filters_follow_the_rules_for_that_backend_only() {
    let t = try_compile(route_with_rule(json!({
        "filters": [
            { "type": "RequestHeaderModifier", "set": [{ "name": "x-rule", "value": "r" }, { "name": "x-both", "value": "rule" }] },
            { "type": "URLRewrite", "hostname": "rule.example.com" },
        ],
        "backends": [
            backend(json!({ "name": "plain" })),
            backend(json!({ "name": "filtered", "filters": [
                { "type": "RequestHeaderModifier", "set": [{ "name": "x-both", "value": "backend" }] },
                { "type": "ResponseHeaderModifier", "add": [{ "name": "x-from", "value": "filtered" }] },
                { "type": "URLRewrite", "path": { "type": "ReplaceFullPath", "value": "/b" } },
                { "type": "RequestMirror", "backend": backend(json!({ "name": "mirror" })) },
            ] })),
        ],
    })))
    .unwrap();
    let rule = t.table.rules().next().unwrap();
    let Action::Forward { backends, .. } = &rule.action else {
        panic!("expected forward");
    };
    // A backend without filters: the rule as it is.
    assert!(std::ptr::eq(backends[0].rule(rule), rule));
    // With filters: the rule's first, then the backend's.
    let b = backends[1].rule(rule);
    let mut h = http::HeaderMap::new();
    b.request_headers.as_ref().unwrap().apply(&mut h);
    assert_eq!(h["x-rule"], "r");
    assert_eq!(h["x-both"], "backend");
    assert!(rule.response_headers.is_none());
    let mut h = http::HeaderMap::new();
    b.response_headers.as_ref().unwrap().apply(&mut h);
    assert_eq!(h["x-from"], "filtered");
    let rewrite = b.rewrite.as_ref().unwrap();
    assert_eq!(rewrite.hostname.as_ref().unwrap(), "rule.example.com");
    assert_eq!(rewrite.path, Some(PathRewrite::Full("/b".into())));
    assert_eq!(b.mirrors.len(), 1);
    assert!(rule.mirrors.is_empty());
}

#[test]
fn refused_backend_filters_name_their_path() {
    let rows = [
        (
            json!({ "backends": [backend(json!({ "filters": [{ "type": "RequestRedirect" }] }))] }),
            "routes[0].rules[0].backends[0].filters",
        ),
        (
            json!({ "matches": [{ "path": { "type": "Exact", "value": "/a" } }],
                "backends": [backend(json!({ "filters": [
                    { "type": "URLRewrite", "path": { "type": "ReplacePrefixMatch", "value": "/b" } }] }))] }),
            "routes[0].rules[0].backends[0].filters",
        ),
        (
            json!({ "backends": [backend(json!({ "filters": [
                { "type": "RequestHeaderModifier", "set": [{ "name": "bad name", "value": "x" }] }] }))] }),
            "routes[0].rules[0].backends[0].filters[0].set[0].name",
        ),
        (
            json!({ "backends": [backend(json!({ "filters": [
                { "type": "ResponseHeaderModifier" }, { "type": "ResponseHeaderModifier" }] }))] }),
            "routes[0].rules[0].backends[0].filters[1]",
        ),
        (
            json!({ "filters": [{ "type": "RequestMirror", "backend": backend(json!({
                "filters": [{ "type": "RequestHeaderModifier" }] })) }] }),
            "routes[0].rules[0].filters[0].backend.filters",
        ),
    ];
    for (rule, path) in rows {
        assert_eq!(error_of(route_with_rule(rule.clone())).path, path, "{rule}");
    }
}

#[test]
fn a_cors_filter_compiles_with_its_wildcards_set_apart() {
    let t = try_compile(route_with_rule(json!({
        "filters": [{ "type": "CORS", "allowOrigins": ["https://a.example", "https://*.b.example"],
            "allowMethods": ["GET", "*"], "allowHeaders": ["X-One"], "exposeHeaders": ["*"],
            "allowCredentials": true, "maxAge": 60 }],
        "backends": [backend(json!({ "filters": [{ "type": "ResponseHeaderModifier",
            "set": [{ "name": "x", "value": "1" }] }] }))],
    })))
    .unwrap();
    let rule = t.table.rules().next().unwrap();
    let c = rule.cors.as_deref().unwrap();
    assert_eq!(c.origins.len(), 2);
    assert!(c.methods.any);
    assert_eq!(c.methods.named, [Method::GET]);
    assert_eq!(c.headers.named, [HeaderName::from_static("x-one")]);
    assert!(c.expose.any && c.expose.named.is_empty());
    assert!(c.credentials);
    assert_eq!(c.max_age, 60);
    // A backend with filters of its own keeps the rule's CORS.
    let Action::Forward { backends, .. } = &rule.action else {
        panic!("not forwarded")
    };
    assert_eq!(backends[0].rule(rule).cors.as_deref(), Some(c));
    // maxAge left out is 5 seconds.
    let t = try_compile(route_with_rule(
        json!({ "filters": [{ "type": "CORS", "allowOrigins": ["*"] }] }),
    ))
    .unwrap();
    assert_eq!(
        t.table
            .rules()
            .next()
            .unwrap()
            .cors
            .as_ref()
            .unwrap()
            .max_age,
        5
    );
}

#[test]
fn a_bad_cors_filter_names_its_field() {
    let cors = |extra: Value| {
        let mut f = json!({ "type": "CORS" });
        f.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        route_with_rule(json!({ "filters": [f] }))
    };
    let rows: Vec<(Value, &str)> = vec![
        (
            cors(json!({ "allowOrigins": ["*", "https://a.*.example"] })),
            "routes[0].rules[0].filters[0].allowOrigins[1]",
        ),
        (
            cors(json!({ "allowOrigins": ["a.example"] })),
            "routes[0].rules[0].filters[0].allowOrigins[0]",
        ),
        (
            cors(json!({ "allowMethods": ["GE T"] })),
            "routes[0].rules[0].filters[0].allowMethods[0]",
        ),
        (
            cors(json!({ "allowHeaders": ["ok", "bad header"] })),
            "routes[0].rules[0].filters[0].allowHeaders[1]",
        ),
        (
            cors(json!({ "exposeHeaders": ["bad:"] })),
            "routes[0].rules[0].filters[0].exposeHeaders[0]",
        ),
        (
            cors(json!({ "maxAge": -1 })),
            "routes[0].rules[0].filters[0].maxAge",
        ),
        (
            route_with_rule(json!({ "filters": [{ "type": "CORS" }, { "type": "CORS" }] })),
            "routes[0].rules[0].filters[1]",
        ),
        (
            route_with_rule(
                json!({ "backends": [backend(json!({ "filters": [{ "type": "CORS" }] }))] }),
            ),
            "routes[0].rules[0].backends[0].filters",
        ),
        (
            json!({ "version": 1, "routes": [{ "kind": "GRPCRoute", "name": "ns/g",
                "rules": [{ "filters": [{ "type": "CORS" }] }] }] }),
            "routes[0].rules[0].filters[0]",
        ),
    ];
    for (doc, path) in rows {
        assert_eq!(error_of(doc.clone()).path, path, "{doc}");
    }
}
