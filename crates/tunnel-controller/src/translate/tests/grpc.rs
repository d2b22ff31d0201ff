//! GRPCRoute rules.

use super::*;

#[test]
fn grpc_method_and_header_matches_map_to_the_document_and_backends_speak_http2() {
    let mut world = World::shop();
    world.services = vec![service("shop", "cart", &[("grpc", 9090, None)])];
    world.slices = vec![slice("shop", "cart", "grpc", 9090, &[("10.0.4.2", None)])];
    let t = translate_grpc(
        &world,
        json!([{
            "name": "cart",
            "matches": [
                { "method": { "service": "shop.Cart", "method": "Add" } },
                { "method": { "type": "RegularExpression", "service": "shop\\..*" },
                  "headers": [{ "name": "x-tenant", "value": "a" }] },
                { "method": { "method": "Get" } }
            ],
            "filters": [
                { "type": "RequestHeaderModifier", "requestHeaderModifier": { "set": [{ "name": "x-a", "value": "1" }] } },
                { "type": "RequestMirror", "requestMirror": { "backendRef": { "name": "cart", "port": 9090 }, "percent": 5 } }
            ],
            "backendRefs": [{ "name": "cart", "port": 9090, "weight": 3 }]
        }]),
    );
    let expected: Vec<GrpcRule> = serde_json::from_value(json!([{
        "name": "cart",
        "matches": [
            { "method": { "type": "Exact", "service": "shop.Cart", "method": "Add" } },
            { "method": { "type": "RegularExpression", "service": "shop\\..*" },
              "headers": [{ "type": "Exact", "name": "x-tenant", "value": "a" }] },
            { "method": { "type": "Exact", "method": "Get" } }
        ],
        "filters": [
            { "type": "RequestHeaderModifier", "set": [{ "name": "x-a", "value": "1" }] },
            { "type": "RequestMirror", "percent": 5, "backend": {
                "name": "shop/cart:9090", "endpoints": ["10.0.4.2:9090"], "protocol": "http2" } }
        ],
        "backends": [{ "name": "shop/cart:9090", "weight": 3, "endpoints": ["10.0.4.2:9090"], "protocol": "http2" }]
    }]))
    .unwrap();
    assert_eq!(t.rules, expected);
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn grpc_rules_fail_closed_on_extension_refs_and_drop_on_bad_regexes() {
    let world = World::shop();
    let t = translate_grpc(
        &world,
        json!([
            { "matches": [{ "method": { "type": "RegularExpression", "service": "(" } }],
              "backendRefs": [{ "name": "web", "port": 80 }] },
            { "filters": [{ "type": "ExtensionRef", "extensionRef": { "group": "example.com", "kind": "RateLimit", "name": "rl" } }],
              "backendRefs": [{ "name": "web", "port": 80 }] },
            { "backendRefs": [{ "name": "web", "port": 80 }] }
        ]),
    );
    assert_eq!(t.rules.len(), 2);
    assert_eq!(t.rules[0].failure_status, Some(500));
    assert_eq!(t.rules[1].failure_status, None);
    assert_eq!(t.rules[1].backends[0].protocol, BackendProtocol::Http2);
    assert_eq!(t.resolved_refs.reason, "InvalidKind");
    let p = t.partially_invalid.unwrap();
    assert!(
        p.message
            .starts_with("Dropped Rule 0: matches[0].method.service: "),
        "{}",
        p.message
    );
    assert!(
        p.message
            .contains("Dropped Rule 1 (it answers 500 instead): filters[0]: ExtensionRef"),
        "{}",
        p.message
    );
}

#[test]
fn a_grpc_route_needs_a_grant_for_grpc_routes_to_reach_another_namespace() {
    let mut world = World::default();
    world
        .services
        .push(service("backend", "cart", &[("grpc", 9090, None)]));
    world.slices.push(slice(
        "backend",
        "cart",
        "grpc",
        9090,
        &[("10.2.0.1", None)],
    ));
    let rules =
        json!([{ "backendRefs": [{ "name": "cart", "namespace": "backend", "port": 9090 }] }]);

    world.grants = vec![grant("backend", "HTTPRoute", "shop", "Service")];
    let t = translate_grpc(&world, rules.clone());
    assert_eq!(t.rules[0].backends[0].failure_status, Some(500));
    assert_eq!(t.resolved_refs.reason, "RefNotPermitted");
    assert!(
        t.resolved_refs
            .message
            .contains("allows GRPCRoutes from namespace shop"),
        "{}",
        t.resolved_refs.message
    );

    world.grants = vec![grant("backend", "GRPCRoute", "shop", "Service")];
    let t = translate_grpc(&world, rules);
    assert_eq!(
        t.rules[0].backends[0].endpoints,
        vec!["10.2.0.1:9090".to_owned()]
    );
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn grpc_backend_ref_filters_go_with_their_backend_and_duplicate_header_names_are_dropped() {
    let mut world = World::shop();
    world.services = vec![service("shop", "cart", &[("grpc", 9090, None)])];
    world.slices = vec![slice("shop", "cart", "grpc", 9090, &[("10.0.4.2", None)])];
    let t = translate_grpc(
        &world,
        json!([{
            "matches": [{ "headers": [{ "name": "x-t", "value": "a" }, { "name": "X-T", "value": "b" }] }],
            "backendRefs": [{ "name": "cart", "port": 9090, "filters": [
                { "type": "ResponseHeaderModifier", "responseHeaderModifier": { "set": [{ "name": "x-b", "value": "1" }] } }
            ] }]
        }]),
    );
    let expected: Vec<GrpcRule> = serde_json::from_value(json!([{
        "matches": [{ "headers": [{ "type": "Exact", "name": "x-t", "value": "a" }] }],
        "backends": [{ "name": "shop/cart:9090", "endpoints": ["10.0.4.2:9090"], "protocol": "http2",
            "filters": [{ "type": "ResponseHeaderModifier", "set": [{ "name": "x-b", "value": "1" }] }] }]
    }]))
    .unwrap();
    assert_eq!(t.rules, expected);
    assert_eq!(t.resolved_refs, ok_refs());
}
