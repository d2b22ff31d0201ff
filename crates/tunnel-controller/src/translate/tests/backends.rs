//! Backend references: endpoints, readiness, kinds, grants, weights, protocols.

use super::*;

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
            filters: Vec::new(),
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
        // IANA service names ignore case; prefixed names compare exactly.
        (Some("HTTP"), false, Ok(BackendProtocol::Http1)),
        (Some("Kubernetes.io/H2C"), false, Err("UnsupportedProtocol")),
        (Some("GRPC"), true, Ok(BackendProtocol::Http2)),
        (Some("HTTPS"), false, Err("UnsupportedProtocol")),
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
