//! HTTPRoute rules: matches, filters, dropped and failed-closed rules, mirrors.

use super::*;

#[test]
fn matches_filters_timeouts_and_the_rule_name_map_to_the_document() {
    let mut world = World::shop();
    world
        .services
        .push(service("shop", "shadow", &[("http", 80, None)]));
    world
        .slices
        .push(slice("shop", "shadow", "http", 80, &[("10.0.3.7", None)]));
    let t = translate_http(
        &world,
        json!([{
            "name": "api",
            "matches": [
                { "path": { "type": "PathPrefix", "value": "/api" },
                  "headers": [{ "name": "x-canary", "value": "1" },
                              { "type": "RegularExpression", "name": "x-v", "value": "[0-9]+" }],
                  "queryParams": [{ "name": "q", "value": "a" }],
                  "method": "POST" },
                { "path": { "type": "Exact", "value": "/exact" } },
                { "path": { "type": "RegularExpression", "value": "/re/[a-z]+" } }
            ],
            "filters": [
                { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{ "name": "x-env", "value": "canary" }], "add": [{ "name": "x-a", "value": "1" }], "remove": ["x-debug"] } },
                { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                    "add": [{ "name": "x-served-by", "value": "canary" }] } },
                { "type": "URLRewrite", "urlRewrite": { "hostname": "internal.shop",
                    "path": { "type": "ReplaceFullPath", "replaceFullPath": "/v2" } } },
                { "type": "RequestMirror", "requestMirror": {
                    "backendRef": { "name": "shadow", "port": 80 }, "percent": 10 } },
                { "type": "RequestMirror", "requestMirror": {
                    "backendRef": { "name": "shadow", "port": 80 }, "fraction": { "numerator": 1, "denominator": 4 } } }
            ],
            "backendRefs": [{ "name": "web", "port": 80 }],
            "timeouts": { "request": "10s", "backendRequest": "2s" }
        }, {
            "matches": [{ "path": { "type": "PathPrefix", "value": "/old" } }],
            "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                "scheme": "https", "hostname": "new.example.com", "port": 8443, "statusCode": 301,
                "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/new" } } }]
        }]),
        None,
    );
    let expected: Vec<HttpRule> = serde_json::from_value(json!([{
        "name": "api",
        "matches": [
            { "path": { "type": "PathPrefix", "value": "/api" },
              "headers": [{ "type": "Exact", "name": "x-canary", "value": "1" },
                          { "type": "RegularExpression", "name": "x-v", "value": "[0-9]+" }],
              "queryParams": [{ "type": "Exact", "name": "q", "value": "a" }],
              "method": "POST" },
            { "path": { "type": "Exact", "value": "/exact" } },
            { "path": { "type": "RegularExpression", "value": "/re/[a-z]+" } }
        ],
        "filters": [
            { "type": "RequestHeaderModifier", "set": [{ "name": "x-env", "value": "canary" }],
              "add": [{ "name": "x-a", "value": "1" }], "remove": ["x-debug"] },
            { "type": "ResponseHeaderModifier", "add": [{ "name": "x-served-by", "value": "canary" }] },
            { "type": "URLRewrite", "hostname": "internal.shop", "path": { "type": "ReplaceFullPath", "value": "/v2" } },
            { "type": "RequestMirror", "percent": 10,
              "backend": { "name": "shop/shadow:80", "weight": 1, "endpoints": ["10.0.3.7:80"] } },
            { "type": "RequestMirror", "percent": 25,
              "backend": { "name": "shop/shadow:80", "weight": 1, "endpoints": ["10.0.3.7:80"] } }
        ],
        "backends": [{ "name": "shop/web:80", "weight": 1, "endpoints": ["10.0.0.1:8080", "10.0.0.2:8080"] }],
        "timeouts": { "request": "10s", "backendRequest": "2s" }
    }, {
        "matches": [{ "path": { "type": "PathPrefix", "value": "/old" } }],
        "filters": [{ "type": "RequestRedirect", "scheme": "https", "hostname": "new.example.com",
                      "port": 8443, "statusCode": 301,
                      "path": { "type": "ReplacePrefixMatch", "value": "/new" } }]
    }]))
    .unwrap();
    assert_eq!(t.rules, expected);
    assert_eq!(t.resolved_refs, ok_refs());
    assert_eq!(
        t.services,
        vec![
            ("shop".into(), "shadow".into()),
            ("shop".into(), "web".into())
        ],
        "backends and mirrors, once each, sorted"
    );
    assert_eq!((t.accepted, t.partially_invalid), (None, None));
}

#[test]
fn a_rule_the_proxy_would_refuse_is_dropped_without_disturbing_the_other_rules() {
    let world = World::shop();
    let web = json!([{ "name": "web", "port": 80 }]);
    let rows = [
        (
            json!({ "matches": [{ "path": { "type": "RegularExpression", "value": "/(" } }], "backendRefs": web }),
            "Dropped Rule 1: matches[0].path.value: ",
        ),
        (
            json!({ "matches": [{ "headers": [{ "type": "RegularExpression", "name": "x", "value": "[" }] }], "backendRefs": web }),
            "Dropped Rule 1: matches[0].headers[0].value: ",
        ),
        (
            json!({ "matches": [{ "path": { "type": "Exact", "value": "/a" } }],
                    "filters": [{ "type": "URLRewrite", "urlRewrite": { "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/b" } } }],
                    "backendRefs": web }),
            "Dropped Rule 1: filters: ReplacePrefixMatch requires every match of the rule to be a PathPrefix match",
        ),
        (
            json!({ "filters": [
                { "type": "URLRewrite", "urlRewrite": { "hostname": "a.example.com" } },
                { "type": "RequestRedirect", "requestRedirect": { "hostname": "b.example.com" } }] }),
            "Dropped Rule 1: filters: RequestRedirect and URLRewrite cannot be used together",
        ),
        (
            json!({ "backendRefs": web, "timeouts": { "request": "ten seconds" } }),
            "Dropped Rule 1: timeouts.request: ",
        ),
        (
            json!({ "filters": [{ "type": "RequestRedirect", "requestRedirect": { "port": 70000 } }] }),
            "Dropped Rule 1: filters[0].port: must be between 1 and 65535",
        ),
    ];
    for (bad, message) in rows {
        let t = translate_http(
            &world,
            json!([
                { "matches": [{ "path": { "value": "/a" } }], "backendRefs": web },
                bad,
                { "matches": [{ "path": { "value": "/c" } }], "backendRefs": web }
            ]),
            None,
        );
        let paths: Vec<&str> = t
            .rules
            .iter()
            .map(|r| r.matches[0].path.as_ref().unwrap().value.as_str())
            .collect();
        assert_eq!(paths, ["/a", "/c"], "{bad}");
        assert_eq!(t.accepted, None, "{bad}");
        let p = t.partially_invalid.expect("PartiallyInvalid");
        assert_eq!(
            (p.type_.as_str(), p.status, p.reason.as_str()),
            ("PartiallyInvalid", true, "UnsupportedValue")
        );
        assert!(p.message.starts_with(message), "{}", p.message);
    }
}

#[test]
fn a_route_whose_every_rule_is_dropped_is_not_accepted() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "matches": [{ "path": { "type": "RegularExpression", "value": "(" } }],
                 "backendRefs": [{ "name": "web", "port": 80 }] }]),
        None,
    );
    assert!(t.rules.is_empty());
    let a = t.accepted.expect("Accepted=False");
    assert_eq!(
        (a.type_.as_str(), a.status, a.reason.as_str()),
        ("Accepted", false, "UnsupportedValue")
    );
    assert!(
        a.message.contains("Dropped Rule 0: matches[0].path.value"),
        "{}",
        a.message
    );
    assert_eq!(t.partially_invalid, None);
}

#[test]
fn an_unsupported_filter_makes_its_rule_fail_closed_and_says_so() {
    let world = World::shop();
    let rows = [
        (
            json!({ "type": "ExtensionRef", "extensionRef": { "group": "example.com", "kind": "Auth", "name": "sso" } }),
            Some("InvalidKind"),
            "ExtensionRef example.com/Auth sso is not supported",
        ),
        (
            json!({ "type": "CORS" }),
            None,
            "type Cors without its configuration",
        ),
        (
            json!({ "type": "RequestHeaderModifier" }),
            None,
            "type RequestHeaderModifier without its configuration",
        ),
    ];
    for (f, ref_reason, why) in rows {
        let t = translate_http(
            &world,
            json!([
                { "matches": [{ "path": { "value": "/open" } }], "backendRefs": [{ "name": "web", "port": 80 }] },
                { "matches": [{ "path": { "value": "/guarded" } }],
                  "filters": [{ "type": "ResponseHeaderModifier", "responseHeaderModifier": { "remove": ["x"] } }, f.clone()],
                  "backendRefs": [{ "name": "web", "port": 80 }] }
            ]),
            None,
        );
        assert_eq!(
            t.rules.len(),
            2,
            "the rule stays, so precedence stays right"
        );
        let guarded = &t.rules[1];
        assert_eq!(guarded.failure_status, Some(500), "{f}");
        assert!(
            guarded.filters.is_empty() && guarded.backends.is_empty(),
            "{f}"
        );
        assert_eq!(guarded.matches[0].path.as_ref().unwrap().value, "/guarded");
        assert_eq!(t.rules[0].failure_status, None);
        let p = t.partially_invalid.expect("PartiallyInvalid");
        assert!(
            p.message
                .starts_with("Dropped Rule 1 (it answers 500 instead): filters[1]: ")
                && p.message.contains(why),
            "{}",
            p.message
        );
        match ref_reason {
            Some(reason) => {
                assert_eq!(t.resolved_refs.reason, reason);
                assert!(
                    t.resolved_refs.message.contains(why),
                    "{}",
                    t.resolved_refs.message
                );
            }
            None => assert_eq!(t.resolved_refs, ok_refs()),
        }
        assert_eq!(t.accepted, None);
    }
}

#[test]
fn a_cors_filter_maps_to_the_document_and_a_bad_one_drops_its_rule() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{
            "matches": [{ "path": { "value": "/api" } }],
            "filters": [{ "type": "CORS", "cors": {
                "allowOrigins": ["https://app.example", "https://*.tenant.example"],
                "allowMethods": ["GET", "PUT"], "allowHeaders": ["X-Token"],
                "exposeHeaders": ["*"], "allowCredentials": true, "maxAge": 300 } }],
            "backendRefs": [{ "name": "web", "port": 80 }]
        }, {
            "matches": [{ "path": { "value": "/min" } }],
            "filters": [{ "type": "CORS", "cors": { "allowOrigins": ["*"] } }],
            "backendRefs": [{ "name": "web", "port": 80 }]
        }]),
        None,
    );
    let expected: Vec<Filter> = serde_json::from_value(json!([{ "type": "CORS",
        "allowOrigins": ["https://app.example", "https://*.tenant.example"],
        "allowMethods": ["GET", "PUT"], "allowHeaders": ["X-Token"],
        "exposeHeaders": ["*"], "allowCredentials": true, "maxAge": 300 }]))
    .unwrap();
    assert_eq!(t.rules[0].filters, expected);
    let expected: Vec<Filter> =
        serde_json::from_value(json!([{ "type": "CORS", "allowOrigins": ["*"] }])).unwrap();
    assert_eq!(t.rules[1].filters, expected);
    assert_eq!((t.accepted, t.partially_invalid), (None, None));

    // An origin the proxy cannot compile (the CRD's pattern lets a five-digit port over 65535
    // through) costs only its rule, which is reported.
    let t = translate_http(
        &world,
        json!([
            { "matches": [{ "path": { "value": "/ok" } }], "backendRefs": [{ "name": "web", "port": 80 }] },
            { "matches": [{ "path": { "value": "/bad" } }],
              "filters": [{ "type": "CORS", "cors": { "allowOrigins": ["https://a.example:99999"] } }],
              "backendRefs": [{ "name": "web", "port": 80 }] }
        ]),
        None,
    );
    let p = t.partially_invalid.expect("PartiallyInvalid");
    assert!(p.message.contains("allowOrigins[0]"), "{}", p.message);
}

#[test]
fn filters_on_a_backend_ref_go_with_that_backend() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "backendRefs": [
            { "name": "web", "port": 80, "weight": 1 },
            { "name": "web", "port": 80, "weight": 1, "filters": [
                { "type": "RequestHeaderModifier", "requestHeaderModifier": { "remove": ["x"] } },
                { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                    "add": [{ "name": "x-b", "value": "1" }] } },
                { "type": "URLRewrite", "urlRewrite": { "hostname": "b.internal" } }] }
        ] }]),
        None,
    );
    let b = &t.rules[0].backends;
    assert_eq!((b[0].failure_status, b[1].failure_status), (None, None));
    assert!(b[0].filters.is_empty());
    let expected: Vec<Filter> = serde_json::from_value(json!([
        { "type": "RequestHeaderModifier", "remove": ["x"] },
        { "type": "ResponseHeaderModifier", "add": [{ "name": "x-b", "value": "1" }] },
        { "type": "URLRewrite", "hostname": "b.internal" },
    ]))
    .unwrap();
    assert_eq!(b[1].filters, expected);
    assert!(t.rules[0].filters.is_empty());
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn unsupported_filters_on_a_backend_ref_fail_that_backend_closed() {
    let world = World::shop();
    let rows = [
        (
            json!({ "type": "RequestRedirect", "requestRedirect": { "scheme": "https" } }),
            "RequestRedirect is not valid on a backendRef",
        ),
        (
            json!({ "type": "ExtensionRef", "extensionRef": { "group": "x.io", "kind": "K", "name": "n" } }),
            "ExtensionRef x.io/K n is not supported",
        ),
        (
            json!({ "type": "CORS", "cors": { "allowOrigins": ["*"] } }),
            "CORS is not valid on a backendRef",
        ),
    ];
    for (filter, why) in rows {
        let t = translate_http(
            &world,
            json!([{ "backendRefs": [
                { "name": "web", "port": 80, "weight": 1 },
                { "name": "web", "port": 80, "weight": 1, "filters": [filter] }
            ] }]),
            None,
        );
        let b = &t.rules[0].backends;
        assert_eq!(
            (b[0].failure_status, b[1].failure_status),
            (None, Some(500))
        );
        assert!(b[1].endpoints.is_empty() && b[1].filters.is_empty());
        assert!(
            t.resolved_refs
                .message
                .contains("Rule 0 backendRefs[1] shop/web:80: filters[0]: "),
            "{}",
            t.resolved_refs.message
        );
        assert!(
            t.resolved_refs.message.contains(why),
            "{}",
            t.resolved_refs.message
        );
    }
}

#[test]
fn only_the_first_header_and_query_param_of_each_name_reach_the_document() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "matches": [{
            "headers": [{ "name": "x-flavor", "value": "mint" }, { "name": "X-Flavor", "value": "lime" }],
            "queryParams": [{ "name": "q", "value": "1" }, { "name": "q", "value": "2" }, { "name": "Q", "value": "3" }]
        }], "backendRefs": [{ "name": "web", "port": 80 }] }]),
        None,
    );
    let m = &t.rules[0].matches[0];
    let names = |v: &[tunnel_config::config::ValueMatch]| -> Vec<(String, String)> {
        v.iter()
            .map(|m| (m.name.clone(), m.value.clone()))
            .collect()
    };
    assert_eq!(names(&m.headers), [("x-flavor".into(), "mint".into())]);
    assert_eq!(
        names(&m.query_params),
        [("q".into(), "1".into()), ("Q".into(), "3".into())]
    );
}

#[test]
fn a_mirror_with_an_invalid_reference_is_left_out_and_reported() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{
            "filters": [
                { "type": "RequestMirror", "requestMirror": { "backendRef": { "name": "gone", "port": 80 } } },
                { "type": "RequestMirror", "requestMirror": { "backendRef": { "name": "web", "port": 80 } } }
            ],
            "backendRefs": [{ "name": "web", "port": 80 }]
        }]),
        None,
    );
    let mirrors: Vec<&str> = t.rules[0]
        .filters
        .iter()
        .map(|f| match f {
            Filter::RequestMirror(m) => m.backend.name.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(mirrors, ["shop/web:80"]);
    assert_eq!(t.resolved_refs.reason, "BackendNotFound");
    assert!(
        t.resolved_refs.message.starts_with(
            "Rule 0 filters[0] RequestMirror shop/gone:80: Service shop/gone not found"
        ),
        "{}",
        t.resolved_refs.message
    );
    assert!(
        t.resolved_refs
            .message
            .ends_with("; the mirror is left out"),
        "{}",
        t.resolved_refs.message
    );
    assert_eq!(
        t.services,
        vec![
            ("shop".into(), "gone".into()),
            ("shop".into(), "web".into())
        ],
        "a missing Service is still watched for"
    );
}

#[test]
fn several_problems_are_all_named_and_the_first_gives_the_reason() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "backendRefs": [
            { "name": "api", "namespace": "backend", "port": 80 },
            { "name": "gone", "port": 80 }
        ] }]),
        None,
    );
    assert_eq!(t.resolved_refs.reason, "RefNotPermitted");
    assert!(t.resolved_refs.message.contains("backend/api:80"));
    assert!(t.resolved_refs.message.contains("shop/gone:80"));
}
