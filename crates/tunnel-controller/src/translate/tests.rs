//! Table tests of the translation with constructed objects; the fixtures live here, the
//! tests by topic in the submodules. Every translated route is also checked by the proxy's
//! compiler as a whole document ([`translate_http`], [`translate_grpc`]).

use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};
use tunnel_config::compile;
use tunnel_config::config::{
    Backend, BackendProtocol, Config, Filter, GrpcRoute as DocGrpcRoute, GrpcRule,
    HttpRoute as DocHttpRoute, HttpRule, PathModifier, Route,
};

use super::*;
use crate::conditions::Verdict;

mod backends;
mod document;
mod grpc;
mod rules;
mod tls;

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
        excluded_hostnames: Default::default(),
        rules: t.rules.clone(),
    }));
    t
}

fn translate_grpc(world: &World, rules: Value) -> Translated<GrpcRule> {
    let t = super::grpc_route(&grpc_route("shop", rules), &world.index(), None);
    assert_valid_document(Route::Grpc(DocGrpcRoute {
        name: "shop/g".into(),
        hostnames: vec!["grpc.example.com".into()],
        excluded_hostnames: Default::default(),
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

/// `shop/web` port 443 `https` (appProtocol https), ready 10.0.0.5:8443, CA ConfigMap `ca`.
fn tls_world(pki: &Pki) -> World {
    World {
        services: vec![service("shop", "web", &[("https", 443, Some("https"))])],
        slices: vec![slice("shop", "web", "https", 8443, &[("10.0.0.5", None)])],
        config_maps: vec![config_map("shop", "ca", json!({ "ca.crt": pki.ca }))],
        ..World::default()
    }
}
