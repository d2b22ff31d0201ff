//! The route table this proxy serves and the routes it is assembled from. Each route of the
//! loaded document is compiled once ([`Compiler::route`], [`tunnel_config::compile`]), with
//! pooled upstream clients ([`crate::upstream`]) for its backends and metrics handles
//! ([`crate::metrics`]) for its hostnames, and kept as a [`LoadedRoute`] while it is loaded: a
//! table is [`assemble`]d from those, so a delta compiles only the routes it brings.

use std::sync::Arc;

use tunnel_config::backend::UpstreamError;
use tunnel_config::compile::{self, CompileError, CompiledRoute};
use tunnel_config::config::{BackendProtocol, BackendTls, Route};
use tunnel_config::routing::{HostMap, HostPattern};

use crate::metrics::{HostMetrics, Metrics};
use crate::upstream::{ClientCache, ClientKey, Upstream};

/// The compiled, immutable route table of the proxy.
pub type RouteTable = compile::RouteTable<Upstream, Arc<HostMetrics>>;
/// One compiled rule.
pub type Rule = compile::Rule<Upstream>;
/// What a rule does with a matched request.
pub type Action = compile::Action<Upstream>;
/// A backend of a rule.
pub type Backend = compile::Backend<Upstream>;
/// Where a backend's share of the traffic goes.
pub type Target = compile::Target<Upstream>;
/// A RequestMirror of a rule.
pub type Mirror = compile::Mirror<Upstream>;

/// A route of the loaded document beside what it compiled to.
#[derive(Debug)]
pub struct LoadedRoute {
    pub route: Route,
    compiled: CompiledRoute<Upstream, Arc<HostMetrics>>,
    /// The clients its backends use, counted in the [`ClientCache`] while the route is live.
    clients: Vec<ClientKey>,
}

impl LoadedRoute {
    pub fn clients(&self) -> &[ClientKey] {
        &self.clients
    }
}

/// The table of version `version`: `routes` (in document order) behind the listeners' `gate`
/// ([`compile::compile_listeners`]). It shares the routes' compiled rules, so it is the table a
/// compilation of the whole document would make, at the cost of sorting its buckets.
pub fn assemble(version: u64, gate: Arc<[HostPattern]>, routes: &[Arc<LoadedRoute>]) -> RouteTable {
    compile::RouteTable::assemble(version, gate, routes.iter().map(|r| &r.compiled))
}

/// Compiles routes for a table that replaces `previous`: upstream clients come from (and are
/// made in) `clients`, host metrics handles are `previous`'s for the labels it has.
pub struct Compiler<'a> {
    metrics: &'a Metrics,
    clients: &'a mut ClientCache,
    previous: Option<&'a RouteTable>,
    /// Handles made by this compilation, for labels `previous` does not have.
    made: HostMap<Arc<HostMetrics>>,
    /// The clients of the route being compiled.
    used: Vec<ClientKey>,
}

impl<'a> Compiler<'a> {
    pub fn new(
        metrics: &'a Metrics,
        clients: &'a mut ClientCache,
        previous: Option<&'a RouteTable>,
    ) -> Self {
        Self {
            metrics,
            clients,
            previous,
            made: HostMap::default(),
            used: Vec::new(),
        }
    }

    /// Compiles `route`, the route at `index` of the document (errors name it by that index).
    pub fn route(&mut self, index: usize, route: Route) -> Result<Arc<LoadedRoute>, CompileError> {
        self.used.clear();
        let compiled = compile::compile_route(index, &route, self)?;
        Ok(Arc::new(LoadedRoute {
            route,
            compiled,
            clients: std::mem::take(&mut self.used),
        }))
    }
}

impl compile::Build for Compiler<'_> {
    type Upstream = Upstream;
    type Host = Arc<HostMetrics>;

    fn upstream(
        &mut self,
        endpoints: &[String],
        protocol: BackendProtocol,
        tls: Option<&BackendTls>,
    ) -> Result<Upstream, UpstreamError> {
        Upstream::new(self.clients, &mut self.used, endpoints, protocol, tls)
    }

    fn host(&mut self, label: &str) -> Arc<HostMetrics> {
        if let Some(h) = self.previous.and_then(|t| t.host(label)) {
            return h.clone();
        }
        if let Some(h) = self.made.get(label) {
            return h.clone();
        }
        let h = Arc::new(self.metrics.host(label));
        self.made.insert(label.to_owned(), h.clone());
        h
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use serde_json::{Value, json};
    use tunnel_config::compile::{parse, validate};
    use tunnel_config::config::Config;

    use super::*;

    fn document(backends: Value) -> Config {
        let doc = json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "ns/r",
            "rules": [{ "backends": backends }] }] });
        parse(doc.to_string().as_bytes()).unwrap()
    }

    fn backend(extra: Value) -> Value {
        let mut b = json!({ "name": "ns/svc:80", "endpoints": ["127.0.0.1:9"] });
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    }

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    /// Compiles every route as a push does.
    fn serving_compile(config: &Config) -> Result<Vec<Arc<LoadedRoute>>, CompileError> {
        let metrics = Metrics::new(&mut Registry::default());
        let mut clients = ClientCache::default();
        let mut compiler = Compiler::new(&metrics, &mut clients, None);
        (config.routes.iter().enumerate())
            .map(|(i, route)| compiler.route(i, route.clone()))
            .collect()
    }

    #[test]
    fn validate_refuses_the_backends_a_serving_compilation_refuses() {
        let ca = ca_pem();
        for backends in [
            json!([backend(json!({ "endpoints": ["127.0.0.1:9", "nope"] }))]),
            json!([backend(
                json!({ "tls": { "caBundlePem": "nope", "serverName": "a" } })
            )]),
            json!([backend(
                json!({ "tls": { "caBundlePem": ca, "serverName": "a b" } })
            )]),
            json!([backend(json!({ "tls": {
                "caBundlePem": ca, "serverName": "a", "clientKeyPem": "nope" } }))]),
        ] {
            let config = document(backends);
            let served = serving_compile(&config).map(|_| ());
            assert!(served.is_err(), "{config:?}");
            assert_eq!(validate(&config), served);
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn validate_inside_a_runtime_leaves_no_background_task_behind() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = document(json!([
            backend(json!({})),
            backend(json!({ "tls": { "caBundlePem": ca_pem(), "serverName": "web.shop.svc" } })),
        ]));
        let before = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        validate(&config).unwrap();
        assert_eq!(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            before,
            "a validation-only compilation must not spawn idle-connection reapers"
        );
        // A serving compilation does spawn one, so the assertion above can fail.
        let _kept = serving_compile(&config).unwrap();
        assert!(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
                > before
        );
    }
}
