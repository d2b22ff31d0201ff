//! Table tests of the CORS decision, one per sentence of the field documentation.

use super::*;

fn cors(origins: &[&str]) -> Cors {
    Cors {
        origins: origins
            .iter()
            .map(|o| OriginPattern::parse(o).unwrap())
            .collect(),
        methods: Allowed::default(),
        headers: Allowed::default(),
        expose: Allowed::default(),
        credentials: false,
        max_age: DEFAULT_MAX_AGE,
    }
}

fn req(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn get<'a>(h: &'a HeaderMap, n: &str) -> Option<&'a str> {
    h.get(n).map(|v| v.to_str().unwrap())
}

#[test]
fn origin_patterns_match_exact_default_ports_and_left_wildcards() {
    // (pattern, origin, matches)
    let rows = [
        ("https://a.example", "https://a.example", true),
        ("https://a.example", "https://A.Example", true),
        ("https://a.example", "http://a.example", false),
        ("https://a.example", "https://b.example", false),
        ("https://a.example", "https://x.a.example", false),
        // "if not included, port 80 is assumed for http ... 443 ... for https"
        ("https://a.example", "https://a.example:443", true),
        ("https://a.example:443", "https://a.example", true),
        ("http://a.example", "http://a.example:80", true),
        ("http://a.example:8080", "http://a.example:8080", true),
        ("http://a.example:8080", "http://a.example", false),
        ("https://a.example", "https://a.example:8443", false),
        // "`*` is a greedy match to the left, including any number of DNS labels"
        ("https://*.a.example", "https://x.a.example", true),
        ("https://*.a.example", "https://x.y.a.example", true),
        ("https://*.a.example", "https://a.example", false),
        ("https://*.a.example", "https://xa.example", false),
        ("https://*.a.example", "http://x.a.example", false),
        ("https://*", "https://anything.example", true),
        ("https://*", "http://anything.example", false),
        // "An origin value that includes only the `*` character" allows all origins
        ("*", "https://a.example", true),
        ("*", "http://b.example:8080", true),
        // not a serialized http(s) origin: nothing matches
        ("*", "null", false),
        ("*", "file://a", false),
        ("*", "https://a.example/path", false),
        ("*", "https://", false),
        ("https://*.a.example", "https://*.a.example", false),
        // attempts to pass for an allowed origin
        ("https://a.example", "https://a.example.evil.example", false),
        ("https://a.example", "https://a.example%2eevil", false),
        (
            "https://*.a.example",
            "https://evil.example\\.a.example",
            false,
        ),
        (
            "https://*.a.example",
            "https://evil.example#.a.example",
            false,
        ),
        (
            "https://*.a.example",
            "https://x.a.example@evil.example",
            false,
        ),
        ("https://*.a.example", "https://x.a.example.", false),
        ("*", "https://a b.example", false),
        ("http://[::1]:8080", "http://[::1]:8080", true),
        ("http://[::1]", "http://[::1]", true),
    ];
    for (pattern, origin, want) in rows {
        let p = OriginPattern::parse(pattern).unwrap();
        assert_eq!(p.matches(origin), want, "{pattern} vs {origin}");
    }
}

#[test]
fn origin_patterns_that_are_not_origins_are_refused() {
    for bad in [
        "",
        "a.example",
        "ftp://a.example",
        "https://a.*.example",
        "https://a*.example",
        "https://*a.example",
        "https://*.",
        "https://a.example/",
        "https://a.example:0",
        "https://a.example:70000",
        "https://a.example:x",
        "https://user@a.example",
    ] {
        assert!(OriginPattern::parse(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn preflight_is_options_with_origin_and_request_method() {
    let o = ("origin", "https://a.example");
    let m = ("access-control-request-method", "PUT");
    assert!(is_preflight(&Method::OPTIONS, &req(&[o, m])));
    assert!(!is_preflight(&Method::OPTIONS, &req(&[o])));
    assert!(!is_preflight(&Method::OPTIONS, &req(&[m])));
    assert!(!is_preflight(&Method::GET, &req(&[o, m])));
}

#[test]
fn a_preflight_from_an_allowed_origin_gets_the_configured_lists() {
    let mut c = cors(&["https://a.example", "https://*.b.example"]);
    c.methods.named = vec![Method::GET, Method::PUT, Method::DELETE];
    c.headers.named = vec![
        HeaderName::from_static("x-one"),
        HeaderName::from_static("x-two"),
    ];
    c.expose.named = vec![
        HeaderName::from_static("x-three"),
        HeaderName::from_static("x-four"),
    ];
    c.max_age = 600;
    let (status, h) = c.preflight(&req(&[
        ("origin", "https://x.b.example"),
        ("access-control-request-method", "PUT"),
        ("access-control-request-headers", "x-one"),
    ]));
    assert!(status == StatusCode::NO_CONTENT || status == StatusCode::OK);
    assert_eq!(
        get(&h, "access-control-allow-origin"),
        Some("https://x.b.example")
    );
    assert_eq!(
        get(&h, "access-control-allow-methods"),
        Some("GET, PUT, DELETE")
    );
    assert_eq!(
        get(&h, "access-control-allow-headers"),
        Some("x-one, x-two")
    );
    assert_eq!(get(&h, "access-control-max-age"), Some("600"));
    // Browsers read it on actual responses only; the conformance suite expects it here too.
    assert_eq!(
        get(&h, "access-control-expose-headers"),
        Some("x-three, x-four")
    );
    assert_eq!(get(&h, "access-control-allow-credentials"), None);
    assert!(get(&h, "vary").unwrap().contains("Origin"));
}

#[test]
fn max_age_defaults_to_five_seconds() {
    let c = cors(&["*"]);
    let (_, h) = c.preflight(&req(&[
        ("origin", "https://a.example"),
        ("access-control-request-method", "GET"),
    ]));
    assert_eq!(get(&h, "access-control-max-age"), Some("5"));
}

#[test]
fn a_preflight_from_another_origin_gets_an_ok_status_and_no_cors_headers() {
    let mut c = cors(&["https://a.example"]);
    c.methods.any = true;
    c.credentials = true;
    for origin in ["https://evil.example", "https://a.example.evil", "null"] {
        let (status, h) = c.preflight(&req(&[
            ("origin", origin),
            ("access-control-request-method", "GET"),
        ]));
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(
            h.keys().all(|k| !k.as_str().starts_with("access-control-")),
            "{origin}: {h:?}"
        );
    }
    // Two Origin headers are not an origin.
    let (_, h) = c.preflight(&req(&[
        ("origin", "https://a.example"),
        ("origin", "https://a.example"),
        ("access-control-request-method", "GET"),
    ]));
    assert_eq!(get(&h, "access-control-allow-origin"), None);
}

#[test]
fn with_credentials_no_header_is_a_wildcard() {
    // "When also the AllowCredentials field is true and AllowOrigins field specified with the
    // `*` wildcard, the gateway must return a single origin"; the same for methods and headers,
    // and the Expose-Headers "can only use `*` wildcard as value when the request is not
    // credentialed".
    let mut c = cors(&["*"]);
    c.credentials = true;
    c.methods.any = true;
    c.headers.any = true;
    c.expose = Allowed {
        any: true,
        named: vec![HeaderName::from_static("x-total")],
    };
    let (_, h) = c.preflight(&req(&[
        ("origin", "https://a.example"),
        ("access-control-request-method", "PATCH"),
        ("access-control-request-headers", "x-a, content-type"),
    ]));
    assert_eq!(
        get(&h, "access-control-allow-origin"),
        Some("https://a.example")
    );
    assert_eq!(get(&h, "access-control-allow-methods"), Some("PATCH"));
    assert_eq!(
        get(&h, "access-control-allow-headers"),
        Some("x-a, content-type")
    );
    assert_eq!(get(&h, "access-control-allow-credentials"), Some("true"));
    assert_eq!(get(&h, "access-control-expose-headers"), Some("x-total"));
    // "If the header Access-Control-Request-Headers is not included in the request, the gateway
    // will omit the Access-Control-Allow-Headers response header".
    let (_, h) = c.preflight(&req(&[
        ("origin", "https://a.example"),
        ("access-control-request-method", "PATCH"),
    ]));
    assert_eq!(get(&h, "access-control-allow-headers"), None);
    let mut resp = HeaderMap::new();
    c.actual(&req(&[("origin", "https://a.example")]))
        .apply(&mut resp);
    assert_eq!(
        get(&resp, "access-control-allow-origin"),
        Some("https://a.example")
    );
    assert_eq!(get(&resp, "access-control-expose-headers"), Some("x-total"));
    assert_eq!(get(&resp, "access-control-allow-credentials"), Some("true"));
}

#[test]
fn an_actual_request_gains_origin_expose_and_vary() {
    let mut c = cors(&["https://a.example"]);
    c.expose.named = vec![
        HeaderName::from_static("x-a"),
        HeaderName::from_static("x-b"),
    ];
    let mut resp = req(&[
        ("vary", "Accept-Encoding"),
        ("access-control-allow-origin", "https://backend.example"),
    ]);
    c.actual(&req(&[("origin", "https://a.example")]))
        .apply(&mut resp);
    assert_eq!(
        get(&resp, "access-control-allow-origin"),
        Some("https://a.example")
    );
    assert_eq!(
        get(&resp, "access-control-expose-headers"),
        Some("x-a, x-b")
    );
    let vary: Vec<_> = resp.get_all("vary").iter().collect();
    assert_eq!(vary, ["Accept-Encoding", "Origin"]);

    // Expose `*` without credentials is sent as `*`.
    c.expose.any = true;
    let mut resp = HeaderMap::new();
    c.actual(&req(&[("origin", "https://a.example")]))
        .apply(&mut resp);
    assert_eq!(get(&resp, "access-control-expose-headers"), Some("*"));
}

#[test]
fn an_actual_request_from_another_origin_or_none_gains_only_vary() {
    let mut c = cors(&["https://*.a.example"]);
    c.credentials = true;
    c.expose.named = vec![HeaderName::from_static("x-a")];
    for h in [req(&[("origin", "https://evil.example")]), req(&[])] {
        let mut resp = HeaderMap::new();
        c.actual(&h).apply(&mut resp);
        assert_eq!(resp.len(), 1, "{resp:?}");
        assert_eq!(get(&resp, "vary"), Some("Origin"));
    }
}
