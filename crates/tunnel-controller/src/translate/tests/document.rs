//! Translated routes together form a document the proxy accepts.

use super::*;

#[test]
fn the_rules_of_many_routes_together_form_a_document_the_proxy_accepts() {
    let pki = pki();
    let mut world = tls_world(&pki);
    world
        .services
        .push(service("shop", "plain", &[("http", 80, None)]));
    world.services.push(service(
        "shop",
        "h2c",
        &[("h2", 81, Some("kubernetes.io/h2c"))],
    ));
    world
        .slices
        .push(slice("shop", "plain", "http", 80, &[("10.0.0.7", None)]));
    world.policies = vec![policy("shop", "p", 1, "web", None, json!({}))];
    let cert = ClientCert {
        cert_pem: pki.client_cert.clone(),
        key_pem: pki.client_key.clone(),
    };
    let idx = world.index();
    let http = crate::translate::http_route(
        &http_route(
            "shop",
            json!([
                { "backendRefs": [{ "name": "web", "port": 443 }, { "name": "plain", "port": 80 },
                                   { "name": "h2c", "port": 81 }, { "name": "gone", "port": 1 }] },
                { "matches": [{ "path": { "type": "RegularExpression", "value": "[" } }] },
                { "filters": [{ "type": "CORS", "cors": {} }] },
                { "filters": [{ "type": "RequestMirror", "requestMirror": { "backendRef": { "name": "web", "port": 443 } } }],
                  "backendRefs": [{ "name": "plain", "port": 80, "filters": [{ "type": "RequestHeaderModifier", "requestHeaderModifier": {} }] }] }
            ]),
        ),
        &idx,
        Some(&cert),
    );
    let grpc = crate::translate::grpc_route(
        &grpc_route(
            "shop",
            json!([{ "backendRefs": [{ "name": "web", "port": 443 }, { "name": "plain", "port": 80 }] }]),
        ),
        &idx,
        Some(&cert),
    );
    let doc = Config {
        version: 7,
        listeners: Vec::new(),
        routes: vec![
            Route::Http(DocHttpRoute {
                name: "shop/r".into(),
                hostnames: vec!["shop.example.com".into()],
                excluded_hostnames: Default::default(),
                rules: http.rules.clone(),
            }),
            Route::Grpc(DocGrpcRoute {
                name: "shop/g".into(),
                hostnames: vec!["grpc.example.com".into()],
                excluded_hostnames: Default::default(),
                rules: grpc.rules.clone(),
            }),
        ],
    };
    assert_eq!(compile::validate(&doc), Ok(()));
    assert_eq!(http.rules.len(), 3, "only the bad regex is dropped");
    assert!(http.rules[0].backends[0].tls.is_some());
    assert_eq!(grpc.rules[0].backends[0].protocol, BackendProtocol::Http2);
    assert!(
        grpc.rules[0].backends[0].tls.is_some(),
        "TLS with ALPN h2 for gRPC"
    );
}

#[test]
fn a_client_certificate_is_redacted_in_debug_output() {
    let c = ClientCert {
        cert_pem: "CERT".into(),
        key_pem: "SECRET KEY".into(),
    };
    assert!(!format!("{c:?}").contains("SECRET KEY"));
}

#[test]
fn path_modifiers_keep_their_kind() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "filters": [{ "type": "URLRewrite", "urlRewrite": {
            "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2" } } }],
            "backendRefs": [{ "name": "web", "port": 80 }] }]),
        None,
    );
    assert_eq!(
        t.rules[0].filters,
        vec![Filter::UrlRewrite(tunnel_config::config::UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch("/v2".into())),
        })]
    );
}
