//! Backend resolution: a route's backendRef (or mirror backendRef) becomes a document backend
//! with the ready endpoints of its Service, the wire protocol its `appProtocol` asks for and
//! the TLS settings of the BackendTLSPolicy that targets it. A reference that cannot be served
//! as written fails closed (the backend answers 500) and says why in the route's
//! `ResolvedRefs`; a Service without ready endpoints answers 503 and is not a reference error.
//!
//! Also the Gateway's backend client certificate (`spec.tls.backend.clientCertificateRef`).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicy;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use tunnel_config::config::{self, BackendProtocol, BackendTls};

use super::report::Report;
use super::tls_policy::{self, ClientCert, Policies};
use crate::conditions::Verdict;
use crate::translate::grants;

/// The group of routes and Gateways, the referencing side of ReferenceGrants.
pub(super) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

type Key = (String, String);

fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_owned(), name.to_owned())
}

/// Everything backend resolution reads, indexed once per sync by the caller.
pub struct BackendIndex {
    services: HashMap<Key, Arc<Service>>,
    /// By the Service they belong to (namespace, label `kubernetes.io/service-name`).
    slices: HashMap<Key, Vec<Arc<EndpointSlice>>>,
    /// By namespace: a grant only ever admits references into its own namespace.
    grants: HashMap<String, Vec<ReferenceGrant>>,
    pub(super) policies: Policies,
    secrets: HashMap<Key, Arc<Secret>>,
}

impl BackendIndex {
    pub fn new(
        services: impl IntoIterator<Item = Arc<Service>>,
        endpoint_slices: impl IntoIterator<Item = Arc<EndpointSlice>>,
        grants: impl IntoIterator<Item = Arc<ReferenceGrant>>,
        backend_tls_policies: impl IntoIterator<Item = Arc<BackendTlsPolicy>>,
        config_maps: impl IntoIterator<Item = Arc<ConfigMap>>,
        secrets: impl IntoIterator<Item = Arc<Secret>>,
    ) -> Self {
        let mut slices: HashMap<Key, Vec<Arc<EndpointSlice>>> = HashMap::new();
        for s in endpoint_slices {
            if let Some(svc) = s.labels().get(SERVICE_NAME_LABEL) {
                slices
                    .entry(key(&s.namespace().unwrap_or_default(), svc))
                    .or_default()
                    .push(s);
            }
        }
        let mut by_ns: HashMap<String, Vec<ReferenceGrant>> = HashMap::new();
        for g in grants {
            by_ns
                .entry(g.namespace().unwrap_or_default())
                .or_default()
                .push((*g).clone());
        }
        Self {
            services: services.into_iter().map(|s| (key_of(&*s), s)).collect(),
            slices,
            grants: by_ns,
            policies: Policies::new(backend_tls_policies, config_maps),
            secrets: secrets.into_iter().map(|s| (key_of(&*s), s)).collect(),
        }
    }

    fn permits(&self, from: grants::From<'_>, to: grants::To<'_>) -> bool {
        let none = Vec::new();
        grants::permits(self.grants.get(to.namespace).unwrap_or(&none), from, to)
    }
}

fn key_of<K: ResourceExt>(o: &K) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// The route asking: the referencing side of ReferenceGrants and what its backends speak.
pub(super) struct Referrer<'a> {
    /// `HTTPRoute` or `GRPCRoute`.
    pub kind: &'static str,
    pub namespace: &'a str,
    pub client_cert: Option<&'a ClientCert>,
}

impl Referrer<'_> {
    fn grpc(&self) -> bool {
        self.kind == "GRPCRoute"
    }
}

/// A backendRef of either route kind, defaults applied (core group, kind Service).
pub(super) struct Ref<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub port: Option<i32>,
}

/// A [`Ref`] from any generated backendRef type (they share field names, not a type).
macro_rules! backend_ref {
    ($r:expr) => {
        $crate::translate::backends::Ref {
            group: $r.group.as_deref().unwrap_or(""),
            kind: $r.kind.as_deref().unwrap_or("Service"),
            name: &$r.name,
            namespace: $r.namespace.as_deref(),
            port: $r.port,
        }
    };
}
pub(super) use backend_ref;

/// What a reference is for, which decides what an invalid one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A backendRef: invalid, its share of the traffic is answered 500.
    Backend,
    /// A RequestMirror backendRef: invalid, the mirror is left out.
    Mirror,
}

/// A resolved reference: the document backend, and whether the reference itself is invalid
/// (the backend then answers 500).
pub(super) struct Resolved {
    pub backend: config::Backend,
    pub invalid: bool,
}

impl BackendIndex {
    /// Resolves `r`, found at `at` (e.g. `Rule 0 backendRefs[1]`), into a backend with
    /// `weight`. Every Service referenced is recorded in `report`, every problem too.
    pub(super) fn resolve(
        &self,
        from: &Referrer<'_>,
        at: &str,
        r: &Ref<'_>,
        weight: u32,
        role: Role,
        report: &mut Report,
    ) -> Resolved {
        let namespace = r.namespace.unwrap_or(from.namespace);
        let port = r.port.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let name = format!("{namespace}/{}:{port}", r.name);
        let mut backend = config::Backend {
            name,
            weight,
            endpoints: Vec::new(),
            protocol: BackendProtocol::Http1,
            tls: None,
            failure_status: None,
            filters: Vec::new(),
        };
        match self.target(from, namespace, r, report) {
            Ok(t) => {
                backend.failure_status = t.endpoints.is_empty().then_some(503);
                backend.endpoints = t.endpoints;
                backend.protocol = t.protocol;
                backend.tls = t.tls;
                Resolved {
                    backend,
                    invalid: false,
                }
            }
            Err((reason, why)) => {
                let consequence = match role {
                    Role::Backend => "its share of the traffic is answered 500",
                    Role::Mirror => "the mirror is left out",
                };
                report.ref_problem(
                    reason,
                    format!("{at} {}: {why}; {consequence}", backend.name),
                );
                backend.failure_status = Some(500);
                Resolved {
                    backend,
                    invalid: true,
                }
            }
        }
    }

    fn target(
        &self,
        from: &Referrer<'_>,
        namespace: &str,
        r: &Ref<'_>,
        report: &mut Report,
    ) -> Result<Target, (&'static str, String)> {
        if !r.group.is_empty() || r.kind != "Service" {
            let group = if r.group.is_empty() { "core" } else { r.group };
            return Err((
                "InvalidKind",
                format!(
                    "kind {group}/{} is not supported, reference a core Service",
                    r.kind
                ),
            ));
        }
        report.service(namespace, r.name);
        let from_ref = grants::From {
            group: GATEWAY_GROUP,
            kind: from.kind,
            namespace: from.namespace,
        };
        let to = grants::To {
            group: "",
            kind: "Service",
            namespace,
            name: r.name,
        };
        if !self.permits(from_ref, to) {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant in namespace {namespace} allows {}s from namespace {} to reference Service {} (create one there, or use a Service of namespace {})",
                    from.kind, from.namespace, r.name, from.namespace
                ),
            ));
        }
        let Some(port) = r.port else {
            return Err((
                "UnsupportedValue",
                "port is required for a Service backend (set the Service port)".to_owned(),
            ));
        };
        let Some(svc) = self.services.get(&key(namespace, r.name)) else {
            return Err((
                "BackendNotFound",
                format!(
                    "Service {namespace}/{} not found (create it, or fix the reference)",
                    r.name
                ),
            ));
        };
        let no_spec = ServiceSpec::default();
        let spec = svc.spec.as_ref().unwrap_or(&no_spec);
        let Some(sp) = spec.ports.iter().flatten().find(|p| p.port == port) else {
            return Err((
                "BackendNotFound",
                format!(
                    "Service {namespace}/{} has no port {port} (its ports: {})",
                    r.name,
                    spec.ports
                        .iter()
                        .flatten()
                        .map(|p| p.port.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if sp.protocol.as_deref().is_some_and(|p| p != "TCP") {
            return Err((
                "UnsupportedProtocol",
                format!(
                    "port {port} is {}, routes need a TCP port",
                    sp.protocol.as_deref().unwrap_or_default()
                ),
            ));
        }
        let app = sp.app_protocol.as_deref();
        let Some((protocol, tls_required)) = wire(app, from.grpc()) else {
            return Err((
                "UnsupportedProtocol",
                format!(
                    "appProtocol `{}` of port {port} cannot carry {}s (supported: {})",
                    app.unwrap_or_default(),
                    from.kind,
                    if from.grpc() {
                        "none, `grpc`, `kubernetes.io/h2c`, `https` with a BackendTLSPolicy"
                    } else {
                        "none, `http`, `kubernetes.io/h2c`, `kubernetes.io/ws`, `https` and `kubernetes.io/wss` with a BackendTLSPolicy"
                    }
                ),
            ));
        };
        let tls = match self
            .policies
            .for_port(namespace, r.name, sp.name.as_deref())
        {
            Some(policy) => Some(self.tls(policy, protocol, from.client_cert)?),
            None if tls_required => {
                return Err((
                    "UnsupportedProtocol",
                    format!(
                        "appProtocol `{}` of port {port} needs TLS and no BackendTLSPolicy targets the Service (add one; never plaintext)",
                        app.unwrap_or_default()
                    ),
                ));
            }
            None => None,
        };
        let endpoints = if spec.type_.as_deref() == Some("ExternalName") {
            match spec.external_name.as_deref().filter(|n| !n.is_empty()) {
                Some(host) => vec![format!("{}:{port}", host.trim_end_matches('.'))],
                None => {
                    return Err((
                        "BackendNotFound",
                        format!(
                            "ExternalName Service {namespace}/{} has no externalName (set it)",
                            r.name
                        ),
                    ));
                }
            }
        } else {
            self.ready_endpoints(namespace, r.name, sp)
        };
        Ok(Target {
            endpoints,
            protocol,
            tls,
        })
    }

    /// The TLS settings of `policy` for one backend, checked by the proxy's compiler: a policy
    /// or client certificate the proxy would refuse makes the backend fail closed.
    fn tls(
        &self,
        policy: &BackendTlsPolicy,
        protocol: BackendProtocol,
        client_cert: Option<&ClientCert>,
    ) -> Result<BackendTls, (&'static str, String)> {
        let unusable = |why: String| {
            (
                "UnsupportedValue",
                format!(
                    "BackendTLSPolicy {}/{} cannot be used: {why} (never plaintext)",
                    policy.namespace().unwrap_or_default(),
                    policy.name_any()
                ),
            )
        };
        let settings = tls_policy::settings(policy, &self.policies).map_err(unusable)?;
        let tls = BackendTls {
            ca_bundle_pem: settings.ca_bundle_pem,
            server_name: settings.server_name,
            subject_alt_names: settings.subject_alt_names,
            subject_alt_uris: settings.subject_alt_uris,
            client_cert_pem: client_cert.map(|c| c.cert_pem.clone()),
            client_key_pem: client_cert.map(|c| c.key_pem.clone()),
        };
        tls_policy::check(&tls, protocol).map_err(unusable)?;
        Ok(tls)
    }

    /// `ip:port` (`[v6]:port`) of the ready endpoints of the slices of a Service port, sorted.
    fn ready_endpoints(&self, namespace: &str, service: &str, sp: &ServicePort) -> Vec<String> {
        let port_name = sp.name.as_deref().unwrap_or("");
        let mut out = BTreeSet::new();
        for slice in self
            .slices
            .get(&key(namespace, service))
            .into_iter()
            .flatten()
        {
            let Some(port) = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                .and_then(|p| p.port)
            else {
                continue;
            };
            for ep in slice.endpoints.iter().flatten() {
                // The EndpointSlice API: an unknown (unset) readiness means ready.
                let ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
                // Only the first address has defined semantics.
                if let (true, Some(addr)) = (ready, ep.addresses.first()) {
                    out.insert(match addr.parse::<IpAddr>() {
                        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
                        _ => format!("{addr}:{port}"),
                    });
                }
            }
        }
        out.into_iter().collect()
    }
}

/// What a resolvable reference forwards to.
struct Target {
    endpoints: Vec<String>,
    protocol: BackendProtocol,
    tls: Option<BackendTls>,
}

/// The wire protocol a Service port's `appProtocol` asks for, and whether it needs TLS (which
/// only a BackendTLSPolicy provides); `None` when this route kind cannot speak it. gRPC
/// defaults to HTTP/2. Unprefixed values are IANA service names, which compare
/// case-insensitively (RFC 6335, section 5.1): `HTTPS` is `https`.
fn wire(app_protocol: Option<&str>, grpc: bool) -> Option<(BackendProtocol, bool)> {
    use BackendProtocol::{Http1, Http2};
    let folded = app_protocol
        .filter(|p| !p.contains('/'))
        .map(str::to_ascii_lowercase);
    let app_protocol = folded.as_deref().or(app_protocol);
    match (app_protocol, grpc) {
        (None | Some("http" | "kubernetes.io/ws"), false) => Some((Http1, false)),
        (Some("https" | "kubernetes.io/wss"), false) => Some((Http1, true)),
        (None | Some("grpc" | "kubernetes.io/h2c"), true) | (Some("kubernetes.io/h2c"), false) => {
            Some((Http2, false))
        }
        (Some("https"), true) => Some((Http2, true)),
        _ => None,
    }
}

/// The Gateway's backend client certificate (`spec.tls.backend.clientCertificateRef`, a
/// `kubernetes.io/tls` Secret; another namespace needs a ReferenceGrant from the Gateway to the
/// Secret) and the Gateway's `ResolvedRefs` verdict: `True`/`ResolvedRefs`, or `False` with
/// `InvalidClientCertificateRef` or `RefNotPermitted`. No certificate when none is set (or the
/// reference is invalid).
pub fn gateway_client_cert(gateway: &Gateway, idx: &BackendIndex) -> (Option<ClientCert>, Verdict) {
    let Some(r) = gateway
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.backend.as_ref())
        .and_then(|b| b.client_certificate_ref.as_ref())
    else {
        return (None, Verdict::ok("ResolvedRefs", "All references resolved"));
    };
    let reference = SecretRef {
        group: r.group.as_deref(),
        kind: r.kind.as_deref(),
        namespace: r.namespace.as_deref(),
        name: &r.name,
    };
    match gateway_tls_secret(
        gateway,
        "spec.tls.backend.clientCertificateRef",
        reference,
        "InvalidClientCertificateRef",
        idx,
    ) {
        Ok(cert) => (
            Some(cert),
            Verdict::ok("ResolvedRefs", "All references resolved"),
        ),
        Err(verdict) => (None, verdict),
    }
}

/// A Gateway's reference to a certificate Secret (a listener's `certificateRefs` entry, the
/// backend client certificate).
#[derive(Debug, Clone, Copy)]
pub struct SecretRef<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

/// The certificate and key of a `kubernetes.io/tls` Secret a Gateway references at `field` (in
/// another namespace only with a ReferenceGrant from the Gateway to the Secret), or the
/// `ResolvedRefs=False` verdict: `invalid_reason` (unsupported kind, missing Secret, not valid
/// PEM) or `RefNotPermitted`.
pub fn gateway_tls_secret(
    gateway: &Gateway,
    field: &str,
    r: SecretRef<'_>,
    invalid_reason: &str,
    idx: &BackendIndex,
) -> Result<ClientCert, Verdict> {
    let gw_ns = gateway.namespace().unwrap_or_default();
    tls_secret("Gateway", &gw_ns, field, r, invalid_reason, idx)
}

/// [`gateway_tls_secret`] for a referrer of kind `referrer_kind` (`Gateway`, `ListenerSet`) in
/// `referrer_ns`: the ReferenceGrant must allow that kind.
pub fn tls_secret(
    referrer_kind: &str,
    referrer_ns: &str,
    field: &str,
    r: SecretRef<'_>,
    invalid_reason: &str,
    idx: &BackendIndex,
) -> Result<ClientCert, Verdict> {
    let gw_ns = referrer_ns;
    let namespace = r.namespace.unwrap_or(gw_ns);
    let at = format!("{field} {namespace}/{}", r.name);
    let invalid = |why: &str| {
        Verdict::fail(
            "ResolvedRefs",
            invalid_reason.to_owned(),
            format!("{at}: {why}"),
        )
    };
    let group = r.group.unwrap_or("");
    let kind = r.kind.unwrap_or("Secret");
    if !group.is_empty() || kind != "Secret" {
        return Err(invalid(&format!(
            "kind {}/{kind} is not supported; reference a kubernetes.io/tls Secret",
            if group.is_empty() { "core" } else { group }
        )));
    }
    let from = grants::From {
        group: GATEWAY_GROUP,
        kind: referrer_kind,
        namespace: gw_ns,
    };
    let to = grants::To {
        group: "",
        kind: "Secret",
        namespace,
        name: r.name,
    };
    if !idx.permits(from, to) {
        return Err(Verdict::fail(
            "ResolvedRefs",
            "RefNotPermitted",
            format!(
                "{at}: no ReferenceGrant in namespace {namespace} allows {referrer_kind}s from namespace {gw_ns} to reference Secret {}",
                r.name
            ),
        ));
    }
    let Some(secret) = idx.secrets.get(&key(namespace, r.name)) else {
        return Err(invalid("Secret not found"));
    };
    if secret.type_.as_deref() != Some("kubernetes.io/tls") {
        return Err(invalid("the Secret is not of type kubernetes.io/tls"));
    }
    let data = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
    };
    let (Some(cert_pem), Some(key_pem)) = (data("tls.crt"), data("tls.key")) else {
        return Err(invalid(
            "the Secret needs non-empty PEM keys tls.crt and tls.key",
        ));
    };
    let cert = ClientCert { cert_pem, key_pem };
    tls_policy::check_client_cert(&cert).map_err(|why| invalid(&why))?;
    Ok(cert)
}
