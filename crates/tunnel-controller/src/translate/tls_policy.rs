//! BackendTLSPolicy: which policy applies to a Service port, the TLS settings it gives a
//! backend, and the policy's own `Accepted` and `ResolvedRefs` verdicts.
//!
//! A policy naming the port (`sectionName`) applies before one for the whole Service; among
//! policies for the same target and section the oldest wins, then the first by
//! `{namespace}/{name}`, and the others are `Conflicted`. A policy the proxy cannot honour
//! (`wellKnownCACertificates`, a CA reference that does not resolve to a usable certificate)
//! makes the backends it targets fail closed: never plaintext. `subjectAltNames` of both types
//! are honoured: Hostname as DNS names, URI (e.g. SPIFFE IDs) compared exactly.
//!
//! Certificates are checked by the proxy's own compiler ([`tunnel_config::compile::validate`]),
//! so what the controller accepts is exactly what the proxy accepts.

use std::collections::HashMap;
use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::{
    BackendTlsPolicy, BackendTlsPolicyValidationSubjectAltNamesType as SanType,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use tunnel_config::compile;
use tunnel_config::config::{
    Backend, BackendProtocol, BackendTls, Config, HttpRoute, HttpRule, Route, Timeouts,
};

use crate::conditions::Verdict;

type Key = (String, String);

/// The policies targeting one Service, with the `sectionName` they target, in precedence order.
type Targeting = Vec<(Option<String>, Arc<BackendTlsPolicy>)>;

/// The policies by the Service they target, and the ConfigMaps their CA references name.
pub(super) struct Policies {
    by_service: HashMap<Key, Targeting>,
    config_maps: HashMap<Key, Arc<ConfigMap>>,
}

impl Policies {
    pub fn new(
        policies: impl IntoIterator<Item = Arc<BackendTlsPolicy>>,
        config_maps: impl IntoIterator<Item = Arc<ConfigMap>>,
    ) -> Self {
        let mut all: Vec<Arc<BackendTlsPolicy>> = policies.into_iter().collect();
        all.sort_by_cached_key(|p| {
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (created.is_none(), created, full_name(p))
        });
        let mut by_service: HashMap<Key, Targeting> = HashMap::new();
        for p in all {
            let ns = p.namespace().unwrap_or_default();
            for t in p.spec.target_refs.iter().filter(|t| targets_service(t)) {
                by_service
                    .entry((ns.clone(), t.name.clone()))
                    .or_default()
                    .push((section(t), p.clone()));
            }
        }
        Self {
            by_service,
            config_maps: config_maps
                .into_iter()
                .map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), c))
                .collect(),
        }
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|c| &**c)
    }

    /// The policy for a port of a Service: one naming the port, else one for the whole Service.
    pub fn for_port(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Option<&BackendTlsPolicy> {
        let list = self
            .by_service
            .get(&(namespace.to_owned(), service.to_owned()))?;
        let port_name = port_name.filter(|n| !n.is_empty());
        list.iter()
            .find(|(s, _)| s.is_some() && s.as_deref() == port_name)
            .or_else(|| list.iter().find(|(s, _)| s.is_none()))
            .map(|(_, p)| &**p)
    }

    /// A policy that takes precedence over `policy` on one of its targets.
    fn overriding(&self, policy: &BackendTlsPolicy) -> Option<&BackendTlsPolicy> {
        let ns = policy.namespace().unwrap_or_default();
        let me = full_name(policy);
        policy
            .spec
            .target_refs
            .iter()
            .filter(|t| targets_service(t))
            .find_map(|t| {
                let winner = self
                    .by_service
                    .get(&(ns.clone(), t.name.clone()))?
                    .iter()
                    .find(|(s, _)| *s == section(t))?;
                (full_name(&winner.1) != me).then_some(&*winner.1)
            })
    }
}

fn targets_service(
    t: &gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicyTargetRefs,
) -> bool {
    t.group.is_empty() && t.kind == "Service"
}

fn section(
    t: &gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicyTargetRefs,
) -> Option<String> {
    t.section_name.clone().filter(|s| !s.is_empty())
}

fn full_name(p: &BackendTlsPolicy) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// The Gateway's backend client certificate, sent to backends a BackendTLSPolicy targets.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What a usable policy contributes to a backend's TLS settings.
pub(super) struct Settings {
    pub ca_bundle_pem: String,
    pub server_name: String,
    pub subject_alt_names: Vec<String>,
    pub subject_alt_uris: Vec<String>,
}

/// The TLS settings of a policy, or why the proxy cannot honour it.
pub(super) fn settings(policy: &BackendTlsPolicy, policies: &Policies) -> Result<Settings, String> {
    let v = &policy.spec.validation;
    if let Some(why) = unsupported(policy) {
        return Err(why);
    }
    let refs = ca_refs(policy, policies);
    if refs.is_empty() {
        return Err("validation.caCertificateRefs is empty".to_owned());
    }
    let mut pems = Vec::with_capacity(refs.len());
    let mut problems = Vec::new();
    for r in refs {
        match r {
            Ok(pem) => pems.push(pem),
            Err((_, why)) => problems.push(why),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(Settings {
        ca_bundle_pem: pems
            .iter()
            .map(|p| p.trim_end())
            .collect::<Vec<_>>()
            .join("\n"),
        server_name: v.hostname.clone(),
        subject_alt_names: v
            .subject_alt_names
            .iter()
            .flatten()
            .filter(|s| s.r#type == SanType::Hostname)
            .filter_map(|s| s.hostname.clone())
            .collect(),
        subject_alt_uris: v
            .subject_alt_names
            .iter()
            .flatten()
            .filter(|s| s.r#type == SanType::Uri)
            .filter_map(|s| s.uri.clone())
            .collect(),
    })
}

/// The parts of a policy this implementation does not support (`Accepted=False/Invalid`).
fn unsupported(policy: &BackendTlsPolicy) -> Option<String> {
    let v = &policy.spec.validation;
    if let Some(wk) = v
        .well_known_ca_certificates
        .as_deref()
        .filter(|w| !w.is_empty())
    {
        return Some(format!(
            "validation.wellKnownCACertificates `{wk}` is not supported: reference a ConfigMap with the CA bundle in `ca.crt` instead"
        ));
    }
    None
}

/// Each CA reference: its PEM, or the reason (`InvalidKind` / `InvalidCACertificateRef`) and
/// what is wrong.
fn ca_refs(
    policy: &BackendTlsPolicy,
    policies: &Policies,
) -> Vec<Result<String, (&'static str, String)>> {
    let ns = policy.namespace().unwrap_or_default();
    policy
        .spec
        .validation
        .ca_certificate_refs
        .iter()
        .flatten()
        .map(|r| {
            if !r.group.is_empty() || r.kind != "ConfigMap" {
                let group = if r.group.is_empty() { "core" } else { &r.group };
                return Err((
                    "InvalidKind",
                    format!(
                        "caCertificateRef {}: kind {group}/{} is not supported, use a ConfigMap",
                        r.name, r.kind
                    ),
                ));
            }
            let invalid = |why: &str| {
                Err((
                    "InvalidCACertificateRef",
                    format!("caCertificateRef ConfigMap {ns}/{}: {why}", r.name),
                ))
            };
            let Some(cm) = policies.config_map(&ns, &r.name) else {
                return invalid("not found");
            };
            let Some(pem) = cm.data.as_ref().and_then(|d| d.get("ca.crt")) else {
                return invalid("has no key `ca.crt`");
            };
            let probe = BackendTls {
                ca_bundle_pem: pem.clone(),
                server_name: "ca.check.invalid".to_owned(),
                subject_alt_names: Vec::new(),
                subject_alt_uris: Vec::new(),
                client_cert_pem: None,
                client_key_pem: None,
            };
            match check(&probe, BackendProtocol::Http1) {
                Ok(()) => Ok(pem.clone()),
                Err(why) => invalid(&format!("`ca.crt` is not usable ({why})")),
            }
        })
        .collect()
}

/// The proxy's verdict on TLS settings (CA bundle, names, client certificate and key).
pub(super) fn check(tls: &BackendTls, protocol: BackendProtocol) -> Result<(), String> {
    let doc = Config {
        version: 1,
        listeners: Vec::new(),
        routes: vec![Route::Http(HttpRoute {
            name: "tls-check".to_owned(),
            hostnames: Vec::new(),
            excluded_hostnames: Default::default(),
            rules: vec![HttpRule {
                name: None,
                matches: Vec::new(),
                filters: Vec::new(),
                // The proxy checks TLS settings only for a backend it would connect to.
                backends: vec![Backend {
                    name: "tls-check".to_owned(),
                    weight: 1,
                    endpoints: vec!["127.0.0.1:1".to_owned()],
                    protocol,
                    tls: Some(tls.clone()),
                    failure_status: None,
                    filters: Vec::new(),
                }],
                timeouts: Timeouts::default(),
                failure_status: None,
            }],
        })],
    };
    compile::validate(&doc).map_err(|e| e.message)
}

/// Whether the certificate and key of a client certificate are usable by the proxy. The
/// certificate stands in as the CA bundle: only the parsing of the pair matters here.
pub(super) fn check_client_cert(cert: &ClientCert) -> Result<(), String> {
    let probe = BackendTls {
        ca_bundle_pem: cert.cert_pem.clone(),
        server_name: "client-cert.check.invalid".to_owned(),
        subject_alt_names: Vec::new(),
        subject_alt_uris: Vec::new(),
        client_cert_pem: Some(cert.cert_pem.clone()),
        client_key_pem: Some(cert.key_pem.clone()),
    };
    check(&probe, BackendProtocol::Http1).map_err(|why| {
        why.replacen("caBundlePem:", "tls.crt:", 1)
            .replacen("clientCertPem:", "tls.crt:", 1)
            .replacen("clientKeyPem:", "tls.key:", 1)
    })
}

/// A BackendTLSPolicy's own `Accepted` and `ResolvedRefs` verdicts. `Accepted` is `False`
/// with `Invalid` (unsupported fields), `NoValidCACertificate` (no CA reference usable) or
/// `Conflicted` (another policy takes precedence on a target); `ResolvedRefs` is `False` with
/// `InvalidKind` or `InvalidCACertificateRef` when a CA reference does not resolve. The caller
/// writes them under each ancestor Gateway.
pub(super) fn verdicts(policy: &BackendTlsPolicy, policies: &Policies) -> Vec<Verdict> {
    let refs = ca_refs(policy, policies);
    let problems: Vec<&(&str, String)> = refs.iter().filter_map(|r| r.as_ref().err()).collect();
    let resolved_refs = if problems.is_empty() {
        Verdict::ok("ResolvedRefs", "All CA certificate references resolved")
    } else {
        let reason = if problems.iter().any(|(r, _)| *r == "InvalidKind") {
            "InvalidKind"
        } else {
            "InvalidCACertificateRef"
        };
        Verdict::fail(
            "ResolvedRefs",
            reason,
            format!(
                "{}; backends this policy targets answer 500 until every reference resolves",
                problems
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
    };
    let accepted = if let Some(why) = unsupported(policy) {
        Verdict::fail(
            "Accepted",
            "Invalid",
            format!("{why}; backends this policy targets answer 500"),
        )
    } else if refs.iter().all(Result::is_err) {
        Verdict::fail(
            "Accepted",
            "NoValidCACertificate",
            "No CA certificate reference is usable; backends this policy targets answer 500",
        )
    } else if let Some(winner) = policies.overriding(policy) {
        Verdict::fail(
            "Accepted",
            "Conflicted",
            format!(
                "BackendTLSPolicy {} targets the same Service port and takes precedence (older, or first by namespace/name)",
                full_name(winner)
            ),
        )
    } else {
        Verdict::ok("Accepted", "Policy accepted")
    };
    vec![accepted, resolved_refs]
}
