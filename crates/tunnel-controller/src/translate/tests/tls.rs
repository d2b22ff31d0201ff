//! BackendTLSPolicy on backends, its own verdicts, and the Gateway client certificate.

use super::*;

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
            "subjectAltNames": [
                { "type": "Hostname", "hostname": "web.shop.svc.cluster.local" },
                { "type": "URI", "uri": "spiffe://cluster.local/ns/shop/sa/web" }]
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
        tls.subject_alt_uris,
        vec!["spiffe://cluster.local/ns/shop/sa/web".to_owned()]
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
