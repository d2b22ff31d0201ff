use super::*;

#[test]
fn rfc9110_7_6_1_the_fixed_hop_by_hop_fields_are_recognised_in_any_case() {
    for name in HOP_BY_HOP {
        assert!(is_hop_by_hop(name.as_bytes()), "{name}");
        assert!(
            is_hop_by_hop(name.to_ascii_uppercase().as_bytes()),
            "{name}"
        );
    }
    for name in [
        "host",
        "content-length",
        "tee",
        "upgrades",
        "x-connection",
        "trailers",
        "",
    ] {
        assert!(!is_hop_by_hop(name.as_bytes()), "{name}");
    }
}

#[test]
fn rfc9110_7_6_1_a_proxy_must_remove_the_fields_that_connection_names() {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, x-secret"),
    );
    h.insert("x-secret", HeaderValue::from_static("1"));
    h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    h.insert(header::TE, HeaderValue::from_static("trailers, deflate"));
    h.insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
    h.insert(header::TRAILER, HeaderValue::from_static("x"));
    h.insert("x-keep", HeaderValue::from_static("1"));
    let mut without_te = h.clone();
    strip_hop_by_hop(
        &mut h,
        Keep {
            upgrade: false,
            te_trailers: true,
        },
    );
    let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["te", "x-keep"]);
    assert_eq!(h[header::TE], "trailers");
    strip_hop_by_hop(&mut without_te, Keep::default());
    let names: Vec<&str> = without_te.keys().map(HeaderName::as_str).collect();
    assert_eq!(names, ["x-keep"]);
}

#[test]
fn rfc9110_11_7_proxy_authentication_fields_are_for_the_proxy_the_client_chose() {
    let mut h = HeaderMap::new();
    h.insert(
        header::PROXY_AUTHENTICATE,
        HeaderValue::from_static("Basic"),
    );
    h.insert(
        header::PROXY_AUTHORIZATION,
        HeaderValue::from_static("Basic eA=="),
    );
    h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    strip_hop_by_hop(&mut h, Keep::default());
    let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
    assert_eq!(names, ["www-authenticate"]);
}

#[test]
fn an_upgrade_keeps_upgrade_and_says_so_in_connection() {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("Upgrade, x-drop"),
    );
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert("x-drop", HeaderValue::from_static("1"));
    strip_hop_by_hop(
        &mut h,
        Keep {
            upgrade: true,
            te_trailers: true,
        },
    );
    assert_eq!(h[header::UPGRADE], "websocket");
    assert_eq!(h[header::CONNECTION], "upgrade");
    assert!(!h.contains_key("x-drop"));
}

#[test]
fn a_message_without_hop_by_hop_fields_is_left_alone() {
    let mut h = HeaderMap::new();
    h.insert(header::HOST, HeaderValue::from_static("a"));
    h.append("x-a", HeaderValue::from_static("1"));
    h.append("x-a", HeaderValue::from_static("2"));
    let before = h.clone();
    strip_hop_by_hop(&mut h, Keep::default());
    assert_eq!(h, before);
}

#[test]
fn connection_names_are_every_listed_token_that_is_a_field_name() {
    let mut h = HeaderMap::new();
    h.append(header::CONNECTION, HeaderValue::from_static("close, X-A"));
    h.append(
        header::CONNECTION,
        HeaderValue::from_static(" ,x-b ,bad name"),
    );
    let names: Vec<String> = connection_names(&h).iter().map(|n| n.to_string()).collect();
    assert_eq!(names, ["close", "x-a", "x-b"]);
    assert!(connection_names(&HeaderMap::new()).is_empty());
}
