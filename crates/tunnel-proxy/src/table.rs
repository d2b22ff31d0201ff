//! The route table this proxy serves: [`tunnel_config::compile`] building pooled upstream
//! clients ([`crate::upstream`]) for backends and metrics handles ([`crate::metrics`]) for
//! hostnames.

use std::sync::Arc;

use tunnel_config::backend::UpstreamError;
use tunnel_config::compile::{self, CompileError};
use tunnel_config::config::{BackendProtocol, BackendTls, Config};

use crate::metrics::{HostMetrics, Metrics};
use crate::upstream::{ClientCache, Upstream};

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

/// Compiles a document. `clients` supplies (and keeps) pooled clients; the returned
/// [`ClientCache`] holds those this table uses, for [`ClientCache::retain_used`] once the
/// table is live.
pub fn compile(
    config: &Config,
    metrics: &Metrics,
    clients: &mut ClientCache,
) -> Result<(RouteTable, ClientCache), CompileError> {
    let mut build = Build {
        metrics,
        clients,
        used: ClientCache::default(),
    };
    let table = compile::compile(config, &mut build)?;
    Ok((table, build.used))
}

struct Build<'a> {
    metrics: &'a Metrics,
    clients: &'a mut ClientCache,
    used: ClientCache,
}

impl compile::Build for Build<'_> {
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
        Arc::new(self.metrics.host(label))
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use serde_json::{Value, json};
    use tunnel_config::compile::{parse, validate};

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

    fn serving_compile(config: &Config) -> Result<(RouteTable, ClientCache), CompileError> {
        compile(
            config,
            &Metrics::new(&mut Registry::default()),
            &mut ClientCache::default(),
        )
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
