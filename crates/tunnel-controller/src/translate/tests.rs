use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};
use tunnel_proxy::compile;
use tunnel_proxy::config::{
    Backend, BackendProtocol, Config, Filter, GrpcRoute as DocGrpcRoute, GrpcRule,
    HttpRoute as DocHttpRoute, HttpRule, PathModifier, Route,
};

use super::*;
use crate::conditions::Verdict;

// === fixtures ===

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A Service with ports `(name, port, appProtocol)`.
fn service(ns: &str, name: &str, ports: &[(&str, i32, Option<&str>)]) -> Service {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p, app)| {
            let mut v = json!({ "port": p, "protocol": "TCP" });
            if !n.is_empty() {
                v["name"] = json!(n);
            }
            if let Some(a) = app {
                v["appProtocol"] = json!(a);
            }
            v
        })
        .collect();
    obj(json!({ "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns }, "spec": { "ports": ports } }))
}

/// An EndpointSlice of a Service with one port and endpoints `(address, ready)`.
fn slice(
    ns: &str,
    svc: &str,
    port_name: &str,
    port: i32,
    endpoints: &[(&str, Option<bool>)],
) -> EndpointSlice {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(a, ready)| match ready {
            Some(r) => json!({ "addresses": [a], "conditions": { "ready": r } }),
            None => json!({ "addresses": [a] }),
        })
        .collect();
    let family = if endpoints
        .iter()
        .any(|e| e["addresses"][0].as_str().unwrap().contains(':'))
    {
        "IPv6"
    } else {
        "IPv4"
    };
    obj(
        json!({ "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": format!("{svc}-{port}-{family}"), "namespace": ns,
                      "labels": { "kubernetes.io/service-name": svc } },
        "addressType": family,
        "ports": [{ "name": port_name, "port": port, "protocol": "TCP" }],
        "endpoints": endpoints }),
    )
}

fn grant(ns: &str, from_kind: &str, from_ns: &str, to_kind: &str) -> ReferenceGrant {
    obj(
        json!({ "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": { "name": format!("allow-{from_ns}"), "namespace": ns },
        "spec": { "from": [{ "group": "gateway.networking.k8s.io", "kind": from_kind, "namespace": from_ns }],
                  "to": [{ "group": "", "kind": to_kind }] } }),
    )
}

/// A BackendTLSPolicy created at `created` (seconds) on Service `svc` (port `section`), CA from
/// ConfigMap `ca`, hostname `web.shop.svc`; `validation` is merged into its validation.
fn policy(
    ns: &str,
    name: &str,
    created: i64,
    svc: &str,
    section: Option<&str>,
    validation: Value,
) -> BackendTlsPolicy {
    let mut target = json!({ "group": "", "kind": "Service", "name": svc });
    if let Some(s) = section {
        target["sectionName"] = json!(s);
    }
    let mut v = json!({ "hostname": "web.shop.svc",
        "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "ca" }] });
    v.as_object_mut()
        .unwrap()
        .extend(validation.as_object().unwrap().clone());
    obj(
        json!({ "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
        "metadata": { "name": name, "namespace": ns,
                      "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z") },
        "spec": { "targetRefs": [target], "validation": v } }),
    )
}

fn config_map(ns: &str, name: &str, data: Value) -> ConfigMap {
    obj(json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": ns }, "data": data }))
}

fn tls_secret(ns: &str, name: &str, type_: &str, cert: &str, key: &str) -> Secret {
    let bytes = |s: &str| k8s_openapi::ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: obj(json!({ "name": name, "namespace": ns })),
        type_: Some(type_.to_owned()),
        data: Some(
            [
                ("tls.crt".to_owned(), bytes(cert)),
                ("tls.key".to_owned(), bytes(key)),
            ]
            .into(),
        ),
        ..Secret::default()
    }
}

/// A CA and a client certificate + key it signed.
struct Pki {
    ca: String,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client = rcgen::CertificateParams::new(vec!["gateway".to_owned()])
        .unwrap()
        .signed_by(&client_key, &rcgen::Issuer::new(ca_params, ca_key))
        .unwrap();
    Pki {
        ca: ca.pem(),
        client_cert: client.pem(),
        client_key: client_key.serialize_pem(),
    }
}

/// The cluster state an index is built from.
#[derive(Default)]
struct World {
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    grants: Vec<ReferenceGrant>,
    policies: Vec<BackendTlsPolicy>,
    config_maps: Vec<ConfigMap>,
    secrets: Vec<Secret>,
}

impl World {
    /// Namespace `shop`: Service `web` (port 80 `http`, ready 10.0.0.1 and 10.0.0.2).
    fn shop() -> Self {
        Self {
            services: vec![service("shop", "web", &[("http", 80, None)])],
            slices: vec![slice(
                "shop",
                "web",
                "http",
                8080,
                &[("10.0.0.1", Some(true)), ("10.0.0.2", None)],
            )],
            ..Self::default()
        }
    }

    fn index(&self) -> BackendIndex {
        BackendIndex::new(
            self.services.iter().cloned().map(Arc::new),
            self.slices.iter().cloned().map(Arc::new),
            self.grants.iter().cloned().map(Arc::new),
            self.policies.iter().cloned().map(Arc::new),
            self.config_maps.iter().cloned().map(Arc::new),
            self.secrets.iter().cloned().map(Arc::new),
        )
    }
}

fn http_route(ns: &str, rules: Value) -> HttpRoute {
    obj(
        json!({ "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": { "name": "r", "namespace": ns },
        "spec": { "parentRefs": [{ "name": "gw" }], "rules": rules } }),
    )
}

fn grpc_route(ns: &str, rules: Value) -> GrpcRoute {
    obj(
        json!({ "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
        "metadata": { "name": "g", "namespace": ns },
        "spec": { "parentRefs": [{ "name": "gw" }], "rules": rules } }),
    )
}

/// Translates a route of one rule with one backendRef and returns that backend.
fn one_backend(world: &World, backend_ref: Value) -> (Backend, Translated<HttpRule>) {
    let t = translate_http(world, json!([{ "backendRefs": [backend_ref] }]), None);
    (t.rules[0].backends[0].clone(), t)
}

/// Translates an HTTPRoute in `shop` and checks that its rules pass the proxy's validation
/// together, as the caller will push them.
fn translate_http(world: &World, rules: Value, cert: Option<&ClientCert>) -> Translated<HttpRule> {
    let t = super::http_route(&http_route("shop", rules), &world.index(), cert);
    assert_valid_document(Route::Http(DocHttpRoute {
        name: "shop/r".into(),
        hostnames: vec!["shop.example.com".into()],
        rules: t.rules.clone(),
    }));
    t
}

fn translate_grpc(world: &World, rules: Value) -> Translated<GrpcRule> {
    let t = super::grpc_route(&grpc_route("shop", rules), &world.index(), None);
    assert_valid_document(Route::Grpc(DocGrpcRoute {
        name: "shop/g".into(),
        hostnames: vec!["grpc.example.com".into()],
        rules: t.rules.clone(),
    }));
    t
}

fn assert_valid_document(route: Route) {
    let doc = Config {
        version: 1,
        listeners: Vec::new(),
        routes: vec![route],
    };
    if let Err(e) = compile::validate(&doc) {
        panic!("translated rules refused by the proxy: {e}\n{doc:#?}");
    }
}

fn ok_refs() -> Verdict {
    Verdict::ok("ResolvedRefs", "All references resolved")
}

// === backends ===

#[test]
fn a_service_backend_forwards_to_the_ready_endpoints_of_its_named_slice_port() {
    let mut world = World::shop();
    world.services = vec![service(
        "shop",
        "web",
        &[("http", 80, None), ("admin", 9000, None)],
    )];
    world.slices = vec![
        slice(
            "shop",
            "web",
            "http",
            8080,
            &[
                ("10.0.0.1", Some(true)),
                ("10.0.0.2", None),
                ("10.0.0.3", Some(false)),
            ],
        ),
        slice("shop", "web", "http", 8080, &[("fd00::1", Some(true))]),
        slice("shop", "web", "admin", 9090, &[("10.0.0.9", Some(true))]),
        slice("other", "web", "http", 8080, &[("10.9.9.9", Some(true))]),
    ];
    let (b, t) = one_backend(&world, json!({ "name": "web", "port": 80, "weight": 7 }));
    assert_eq!(
        b,
        Backend {
            name: "shop/web:80".into(),
            weight: 7,
            endpoints: vec![
                "10.0.0.1:8080".into(),
                "10.0.0.2:8080".into(),
                "[fd00::1]:8080".into()
            ],
            protocol: BackendProtocol::Http1,
            tls: None,
            failure_status: None,
        },
        "ready (or unknown readiness) endpoints of the port named like the Service port, in the Service's namespace only"
    );
    assert_eq!(t.resolved_refs, ok_refs());
    assert_eq!(t.services, vec![("shop".into(), "web".into())]);
    assert_eq!((t.accepted, t.partially_invalid), (None, None));
}

#[test]
fn an_unnamed_service_port_matches_the_unnamed_slice_port() {
    let mut world = World::shop();
    world.services = vec![service("shop", "web", &[("", 80, None)])];
    world.slices = vec![slice("shop", "web", "", 3000, &[("10.0.0.1", None)])];
    let (b, _) = one_backend(&world, json!({ "name": "web", "port": 80 }));
    assert_eq!(b.endpoints, vec!["10.0.0.1:3000".to_owned()]);
}

#[test]
fn a_service_without_ready_endpoints_answers_503_and_its_reference_is_fine() {
    let mut world = World::shop();
    world.slices = vec![slice(
        "shop",
        "web",
        "http",
        8080,
        &[("10.0.0.1", Some(false))],
    )];
    let (b, t) = one_backend(&world, json!({ "name": "web", "port": 80 }));
    assert_eq!(b.failure_status, Some(503));
    assert!(b.endpoints.is_empty());
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn an_external_name_service_forwards_to_its_dns_name_on_the_referenced_port() {
    let world = World {
        services: vec![obj(json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "ext", "namespace": "shop" },
            "spec": { "type": "ExternalName", "externalName": "api.partner.example.",
                      "ports": [{ "name": "http", "port": 8443 }] } }))],
        ..World::default()
    };
    let (b, t) = one_backend(&world, json!({ "name": "ext", "port": 8443 }));
    assert_eq!(b.endpoints, vec!["api.partner.example:8443".to_owned()]);
    assert_eq!(b.failure_status, None);
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn unresolvable_backend_references_fail_closed_with_their_reason() {
    let mut world = World::shop();
    world
        .services
        .push(service("shop", "dns", &[("dns", 53, None)]));
    world.services[1]
        .spec
        .as_mut()
        .unwrap()
        .ports
        .as_mut()
        .unwrap()[0]
        .protocol = Some("UDP".into());
    world
        .services
        .push(service("backend", "api", &[("http", 80, None)]));
    let rows = [
        (
            json!({ "name": "gone", "port": 80 }),
            "BackendNotFound",
            "shop/gone:80",
            "Service shop/gone not found",
        ),
        (
            json!({ "name": "web", "port": 81 }),
            "BackendNotFound",
            "shop/web:81",
            "has no port 81",
        ),
        (
            json!({ "name": "web" }),
            "UnsupportedValue",
            "shop/web:?",
            "port is required",
        ),
        (
            json!({ "group": "example.com", "kind": "Bucket", "name": "b", "port": 80 }),
            "InvalidKind",
            "shop/b:80",
            "kind example.com/Bucket is not supported",
        ),
        (
            json!({ "group": "", "kind": "ConfigMap", "name": "web", "port": 80 }),
            "InvalidKind",
            "shop/web:80",
            "kind core/ConfigMap is not supported",
        ),
        (
            json!({ "name": "api", "namespace": "backend", "port": 80 }),
            "RefNotPermitted",
            "backend/api:80",
            "no ReferenceGrant in namespace backend allows HTTPRoutes from namespace shop",
        ),
        (
            json!({ "name": "dns", "port": 53 }),
            "UnsupportedProtocol",
            "shop/dns:53",
            "is UDP",
        ),
    ];
    for (backend_ref, reason, name, why) in rows {
        let (b, t) = one_backend(&world, backend_ref.clone());
        assert_eq!(b.failure_status, Some(500), "{backend_ref}");
        assert!(b.endpoints.is_empty(), "{backend_ref}");
        assert_eq!(b.name, name);
        assert!(!t.resolved_refs.status, "{backend_ref}");
        assert_eq!(t.resolved_refs.reason, reason, "{backend_ref}");
        let m = &t.resolved_refs.message;
        assert!(
            m.starts_with(&format!("Rule 0 backendRefs[0] {name}: ")) && m.contains(why),
            "{m}"
        );
        assert!(
            m.ends_with("its share of the traffic is answered 500"),
            "{m}"
        );
        assert_eq!(
            t.accepted, None,
            "an invalid backend fails closed, the rule stays"
        );
    }
}

#[test]
fn a_cross_namespace_backend_without_a_grant_is_refused_and_fails_closed() {
    let mut world = World::shop();
    world
        .services
        .push(service("backend", "api", &[("http", 80, None)]));
    world
        .slices
        .push(slice("backend", "api", "http", 80, &[("10.1.0.1", None)]));
    let api = json!({ "name": "api", "namespace": "backend", "port": 80 });
    let (b, t) = one_backend(&world, api.clone());
    assert_eq!(b.failure_status, Some(500));
    assert_eq!(t.resolved_refs.reason, "RefNotPermitted");

    for wrong in [
        grant("shop", "HTTPRoute", "shop", "Service"),
        grant("backend", "GRPCRoute", "shop", "Service"),
        grant("backend", "HTTPRoute", "elsewhere", "Service"),
        grant("backend", "HTTPRoute", "shop", "Secret"),
    ] {
        world.grants = vec![wrong];
        assert_eq!(one_backend(&world, api.clone()).0.failure_status, Some(500));
    }

    world.grants = vec![grant("backend", "HTTPRoute", "shop", "Service")];
    let (b, t) = one_backend(&world, api);
    assert_eq!(b.endpoints, vec!["10.1.0.1:80".to_owned()]);
    assert_eq!(b.failure_status, None);
    assert_eq!(t.resolved_refs, ok_refs());
}

#[test]
fn weights_pass_through_unset_is_one_and_zero_takes_no_traffic() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "backendRefs": [
            { "name": "web", "port": 80, "weight": 0 },
            { "name": "web", "port": 80 },
            { "name": "web", "port": 80, "weight": 1000000 },
            { "name": "gone", "port": 80, "weight": 3 }
        ] }]),
        None,
    );
    let weights: Vec<(u32, Option<u16>)> = t.rules[0]
        .backends
        .iter()
        .map(|b| (b.weight, b.failure_status))
        .collect();
    assert_eq!(
        weights,
        vec![(0, None), (1, None), (1_000_000, None), (3, Some(500))]
    );
}

#[test]
fn app_protocols_choose_the_wire_protocol_or_are_refused() {
    let rows = [
        (None, false, Ok(BackendProtocol::Http1)),
        (Some("http"), false, Ok(BackendProtocol::Http1)),
        (Some("kubernetes.io/ws"), false, Ok(BackendProtocol::Http1)),
        (Some("kubernetes.io/h2c"), false, Ok(BackendProtocol::Http2)),
        (Some("https"), false, Err("UnsupportedProtocol")),
        (Some("kubernetes.io/wss"), false, Err("UnsupportedProtocol")),
        (Some("mysql"), false, Err("UnsupportedProtocol")),
        (None, true, Ok(BackendProtocol::Http2)),
        (Some("kubernetes.io/h2c"), true, Ok(BackendProtocol::Http2)),
        (Some("grpc"), true, Ok(BackendProtocol::Http2)),
        (Some("kubernetes.io/ws"), true, Err("UnsupportedProtocol")),
        (Some("https"), true, Err("UnsupportedProtocol")),
    ];
    for (app, grpc, want) in rows {
        let mut world = World::shop();
        world.services = vec![service("shop", "web", &[("http", 80, app)])];
        let backend_ref = json!({ "name": "web", "port": 80 });
        let (backend, refs) = if grpc {
            let t = translate_grpc(&world, json!([{ "backendRefs": [backend_ref] }]));
            (t.rules[0].backends[0].clone(), t.resolved_refs)
        } else {
            let (b, t) = one_backend(&world, backend_ref);
            (b, t.resolved_refs)
        };
        match want {
            Ok(protocol) => {
                assert_eq!(backend.protocol, protocol, "{app:?} grpc={grpc}");
                assert_eq!(backend.failure_status, None, "{app:?} grpc={grpc}");
            }
            Err(reason) => {
                assert_eq!(backend.failure_status, Some(500), "{app:?} grpc={grpc}");
                assert_eq!(refs.reason, reason, "{app:?} grpc={grpc}");
            }
        }
    }
}

// === BackendTLSPolicy and the client certificate ===

/// `shop/web` port 443 `https` (appProtocol https), ready 10.0.0.5:8443, CA ConfigMap `ca`.
fn tls_world(pki: &Pki) -> World {
    World {
        services: vec![service("shop", "web", &[("https", 443, Some("https"))])],
        slices: vec![slice("shop", "web", "https", 8443, &[("10.0.0.5", None)])],
        config_maps: vec![config_map("shop", "ca", json!({ "ca.crt": pki.ca }))],
        ..World::default()
    }
}

#[test]
fn a_backend_tls_policy_gives_the_backend_its_ca_server_name_sans_and_the_client_cert() {
    let pki = pki();
    let mut world = tls_world(&pki);
    world
        .config_maps
        .push(config_map("shop", "ca2", json!({ "ca.crt": pki.ca })));
    world.policies = vec![policy(
        "shop",
        "p",
        1,
        "web",
        None,
        json!({
            "caCertificateRefs": [
                { "group": "", "kind": "ConfigMap", "name": "ca" },
                { "group": "", "kind": "ConfigMap", "name": "ca2" }],
            "subjectAltNames": [{ "type": "Hostname", "hostname": "web.shop.svc.cluster.local" }]
        }),
    )];
    let cert = ClientCert {
        cert_pem: pki.client_cert.clone(),
        key_pem: pki.client_key.clone(),
    };
    let t = translate_http(
        &world,
        json!([{ "backendRefs": [{ "name": "web", "port": 443 }] }]),
        Some(&cert),
    );
    let b = &t.rules[0].backends[0];
    let tls = b.tls.as_ref().expect("TLS from the policy");
    assert_eq!(b.failure_status, None);
    assert_eq!(b.protocol, BackendProtocol::Http1);
    assert_eq!(
        tls.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(),
        2,
        "both CA references, concatenated"
    );
    assert_eq!(tls.server_name, "web.shop.svc");
    assert_eq!(
        tls.subject_alt_names,
        vec!["web.shop.svc.cluster.local".to_owned()]
    );
    assert_eq!(
        tls.client_cert_pem.as_deref(),
        Some(pki.client_cert.as_str())
    );
    assert_eq!(tls.client_key_pem.as_deref(), Some(pki.client_key.as_str()));
    assert_eq!(t.resolved_refs, ok_refs());
    assert_eq!(
        backend_tls_policy_verdicts(&world.policies[0], &world.index()),
        vec![
            Verdict::ok("Accepted", "Policy accepted"),
            Verdict::ok("ResolvedRefs", "All CA certificate references resolved"),
        ]
    );
}

#[test]
fn a_policy_on_an_h2c_port_speaks_http2_over_tls_and_without_a_client_cert_sends_none() {
    let pki = pki();
    let mut world = tls_world(&pki);
    world.services = vec![service(
        "shop",
        "web",
        &[("https", 443, Some("kubernetes.io/h2c"))],
    )];
    world.policies = vec![policy("shop", "p", 1, "web", None, json!({}))];
    let (b, _) = one_backend(&world, json!({ "name": "web", "port": 443 }));
    assert_eq!(b.protocol, BackendProtocol::Http2);
    let tls = b.tls.unwrap();
    assert_eq!((tls.client_cert_pem, tls.client_key_pem), (None, None));
}

#[test]
fn a_policy_naming_the_port_wins_over_one_for_the_whole_service_and_the_oldest_wins_a_conflict() {
    let pki = pki();
    let mut world = tls_world(&pki);
    world.services = vec![service(
        "shop",
        "web",
        &[
            ("https", 443, Some("https")),
            ("admin", 9443, Some("https")),
        ],
    )];
    world
        .slices
        .push(slice("shop", "web", "admin", 9443, &[("10.0.0.6", None)]));
    let host = |h: &str| json!({ "hostname": h });
    world.policies = vec![
        policy("shop", "newer-whole", 5, "web", None, host("newer.svc")),
        policy("shop", "port", 9, "web", Some("https"), host("port.svc")),
        policy("shop", "older-whole", 2, "web", None, host("older.svc")),
        // Same age: the first by namespace/name wins.
        policy("shop", "b-port", 9, "web", Some("https"), host("b.svc")),
    ];
    let idx = world.index();
    let server_name = |port: i32| {
        let (b, _) = one_backend(&world, json!({ "name": "web", "port": port }));
        b.tls.unwrap().server_name
    };
    assert_eq!(
        server_name(443),
        "b.svc",
        "the port's own policies: same age, b-port < port"
    );
    assert_eq!(
        server_name(9443),
        "older.svc",
        "the whole Service: the oldest policy"
    );

    let accepted = |name: &str| {
        let p = world
            .policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name));
        backend_tls_policy_verdicts(p.unwrap(), &idx).remove(0)
    };
    assert_eq!(
        accepted("older-whole"),
        Verdict::ok("Accepted", "Policy accepted")
    );
    assert_eq!(
        accepted("b-port"),
        Verdict::ok("Accepted", "Policy accepted")
    );
    for loser in ["newer-whole", "port"] {
        let v = accepted(loser);
        assert_eq!(
            (v.status, v.reason.as_str()),
            (false, "Conflicted"),
            "{loser}"
        );
    }
    assert!(accepted("newer-whole").message.contains("shop/older-whole"));
}

#[test]
fn a_policy_the_proxy_cannot_honour_fails_the_backend_closed_never_plaintext() {
    let pki = pki();
    let ca_ref = |kind: &str, name: &str| json!({ "caCertificateRefs": [{ "group": "", "kind": kind, "name": name }] });
    let rows = [
        (
            ca_ref("ConfigMap", "missing"),
            "ConfigMap shop/missing: not found",
        ),
        (ca_ref("ConfigMap", "no-key"), "has no key `ca.crt`"),
        (ca_ref("ConfigMap", "garbage"), "`ca.crt` is not usable"),
        (ca_ref("Secret", "ca"), "kind core/Secret is not supported"),
        (
            json!({ "caCertificateRefs": [], "wellKnownCACertificates": "System" }),
            "wellKnownCACertificates `System` is not supported",
        ),
        (
            json!({ "subjectAltNames": [{ "type": "URI", "uri": "spiffe://cluster/ns/shop/sa/web" }] }),
            "URI subjectAltNames are not supported",
        ),
        (
            json!({ "caCertificateRefs": [
                { "group": "", "kind": "ConfigMap", "name": "ca" },
                { "group": "", "kind": "ConfigMap", "name": "missing" }] }),
            "ConfigMap shop/missing: not found",
        ),
    ];
    for (validation, why) in rows {
        let mut world = tls_world(&pki);
        world
            .config_maps
            .push(config_map("shop", "no-key", json!({ "tls.crt": pki.ca })));
        world.config_maps.push(config_map(
            "shop",
            "garbage",
            json!({ "ca.crt": "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n" }),
        ));
        world.policies = vec![policy("shop", "p", 1, "web", None, validation.clone())];
        let (b, t) = one_backend(&world, json!({ "name": "web", "port": 443 }));
        assert_eq!(b.failure_status, Some(500), "{validation}");
        assert_eq!(b.tls, None, "{validation}");
        assert!(b.endpoints.is_empty(), "{validation}");
        assert_eq!(t.resolved_refs.reason, "UnsupportedValue", "{validation}");
        let m = &t.resolved_refs.message;
        assert!(
            m.contains("BackendTLSPolicy shop/p cannot be used") && m.contains(why),
            "{m}"
        );
    }
}

#[test]
fn backend_tls_policy_verdicts_name_the_broken_parts() {
    let pki = pki();
    let mut world = tls_world(&pki);
    world.config_maps.push(config_map(
        "shop",
        "garbage",
        json!({ "ca.crt": "not a certificate" }),
    ));
    let refs = |r: Value| json!({ "caCertificateRefs": r });
    let cm = |name: &str| json!({ "group": "", "kind": "ConfigMap", "name": name });
    let rows = [
        (
            refs(json!([cm("missing")])),
            ("NoValidCACertificate", false),
            (
                "InvalidCACertificateRef",
                "ConfigMap shop/missing: not found",
            ),
        ),
        (
            refs(json!([cm("garbage")])),
            ("NoValidCACertificate", false),
            ("InvalidCACertificateRef", "`ca.crt` is not usable"),
        ),
        (
            refs(json!([{ "group": "", "kind": "Secret", "name": "ca" }])),
            ("NoValidCACertificate", false),
            ("InvalidKind", "kind core/Secret is not supported"),
        ),
        (
            refs(json!([cm("ca"), cm("missing")])),
            ("Accepted", true),
            (
                "InvalidCACertificateRef",
                "ConfigMap shop/missing: not found",
            ),
        ),
        (
            json!({ "caCertificateRefs": [], "wellKnownCACertificates": "System" }),
            ("Invalid", false),
            ("ResolvedRefs", ""),
        ),
        (
            json!({ "subjectAltNames": [{ "type": "URI", "uri": "spiffe://x/y" }] }),
            ("Invalid", false),
            ("ResolvedRefs", ""),
        ),
    ];
    for (validation, (accepted, accepted_status), (resolved, why)) in rows {
        world.policies = vec![policy("shop", "p", 1, "web", None, validation.clone())];
        let v = backend_tls_policy_verdicts(&world.policies[0], &world.index());
        assert_eq!(v[0].type_, "Accepted");
        assert_eq!(
            (v[0].reason.as_str(), v[0].status),
            (accepted, accepted_status),
            "{validation}"
        );
        assert_eq!(v[1].type_, "ResolvedRefs");
        assert_eq!(v[1].reason, resolved, "{validation}");
        assert_eq!(v[1].status, resolved == "ResolvedRefs", "{validation}");
        assert!(v[1].message.contains(why), "{}", v[1].message);
    }
}

fn gateway(tls_ref: Option<Value>) -> Gateway {
    let mut spec = json!({ "gatewayClassName": "cloudflare-tunnel",
        "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] });
    if let Some(r) = tls_ref {
        spec["tls"] = json!({ "backend": { "clientCertificateRef": r } });
    }
    obj(
        json!({ "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": { "name": "gw", "namespace": "edge" }, "spec": spec }),
    )
}

#[test]
fn the_gateway_client_certificate_resolves_from_a_tls_secret_and_cross_namespace_needs_a_grant() {
    let pki = pki();
    let mut world = World {
        secrets: vec![
            tls_secret(
                "edge",
                "client",
                "kubernetes.io/tls",
                &pki.client_cert,
                &pki.client_key,
            ),
            tls_secret(
                "certs",
                "client",
                "kubernetes.io/tls",
                &pki.client_cert,
                &pki.client_key,
            ),
            tls_secret(
                "edge",
                "opaque",
                "Opaque",
                &pki.client_cert,
                &pki.client_key,
            ),
            tls_secret(
                "edge",
                "garbage",
                "kubernetes.io/tls",
                "not pem",
                &pki.client_key,
            ),
            tls_secret(
                "edge",
                "badkey",
                "kubernetes.io/tls",
                &pki.client_cert,
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            ),
        ],
        ..World::default()
    };
    let expected = ClientCert {
        cert_pem: pki.client_cert.clone(),
        key_pem: pki.client_key.clone(),
    };

    let (cert, v) = gateway_client_cert(&gateway(None), &world.index());
    assert_eq!(
        (cert, v),
        (None, ok_refs()),
        "no reference, nothing to resolve"
    );

    let (cert, v) =
        gateway_client_cert(&gateway(Some(json!({ "name": "client" }))), &world.index());
    assert_eq!((cert.as_ref(), v), (Some(&expected), ok_refs()));

    let cross = json!({ "name": "client", "namespace": "certs" });
    let (cert, v) = gateway_client_cert(&gateway(Some(cross.clone())), &world.index());
    assert_eq!(cert, None);
    assert_eq!((v.status, v.reason.as_str()), (false, "RefNotPermitted"));
    assert!(v.message.contains("namespace certs"), "{}", v.message);
    world.grants = vec![grant("certs", "Gateway", "edge", "Secret")];
    let (cert, v) = gateway_client_cert(&gateway(Some(cross)), &world.index());
    assert_eq!((cert.as_ref(), v), (Some(&expected), ok_refs()));

    let rows = [
        (json!({ "name": "nope" }), "Secret not found"),
        (json!({ "name": "opaque" }), "not of type kubernetes.io/tls"),
        (json!({ "name": "garbage" }), "tls.crt:"),
        (json!({ "name": "badkey" }), "tls.key:"),
        (
            json!({ "group": "", "kind": "ConfigMap", "name": "client" }),
            "kind core/ConfigMap is not supported",
        ),
    ];
    for (r, why) in rows {
        let (cert, v) = gateway_client_cert(&gateway(Some(r.clone())), &world.index());
        assert_eq!(cert, None, "{r}");
        assert_eq!(
            (v.status, v.reason.as_str()),
            (false, "InvalidClientCertificateRef"),
            "{r}"
        );
        assert!(v.message.contains(why), "{r}: {}", v.message);
    }
}

// === rules, filters, validation ===

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
            json!({ "type": "CORS", "cors": { "allowOrigins": ["https://a.example"] } }),
            None,
            "CORS is not supported",
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
fn filters_on_a_backend_ref_fail_that_backend_closed() {
    let world = World::shop();
    let t = translate_http(
        &world,
        json!([{ "backendRefs": [
            { "name": "web", "port": 80, "weight": 1 },
            { "name": "web", "port": 80, "weight": 1, "filters": [
                { "type": "RequestHeaderModifier", "requestHeaderModifier": { "remove": ["x"] } }] }
        ] }]),
        None,
    );
    let b = &t.rules[0].backends;
    assert_eq!(
        (b[0].failure_status, b[1].failure_status),
        (None, Some(500))
    );
    assert!(b[1].endpoints.is_empty());
    assert_eq!(t.resolved_refs.reason, "UnsupportedValue");
    assert!(
        t.resolved_refs.message.starts_with(
            "Rule 0 backendRefs[1] shop/web:80: filters on a backendRef are not supported"
        ),
        "{}",
        t.resolved_refs.message
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
            "Rule 0 filters[0] RequestMirror shop/gone:80: Service shop/gone not found; the mirror is left out"
        ),
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

// === GRPCRoute ===

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

// === the whole document ===

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
    let http = super::http_route(
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
    let grpc = super::grpc_route(
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
                rules: http.rules.clone(),
            }),
            Route::Grpc(DocGrpcRoute {
                name: "shop/g".into(),
                hostnames: vec!["grpc.example.com".into()],
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
        vec![Filter::UrlRewrite(tunnel_proxy::config::UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch("/v2".into())),
        })]
    );
}
