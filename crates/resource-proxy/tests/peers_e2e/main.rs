//! End-to-end tests of the target connection: an HA target (two kube-apiservers on one etcd
//! prefix) whose peers come from EndpointSlices in a `host` cluster, a `tenant` cluster whose
//! proxy forwards `widgets.example.test/v1` to it, and a `tenant-r` cluster served by two proxy
//! replicas (target: the `host` cluster, which also holds the CRD).
//!
//! Scenarios that stop API servers run one at a time ([`serial`]).

#[path = "../common/mod.rs"]
mod common;
mod multiplexing;
mod peers;
mod replicas;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use test_cluster::{Cluster, ClusterSpec, ControlPlane, ManagedProcess};
use tokio::sync::OnceCell;

pub const GROUP: &str = "example.test";
pub const VERSION: &str = "v1";
/// Namespace and Service of the target's API servers in the host cluster.
pub const PEER_NAMESPACE: &str = "vc-target";
pub const PEER_SERVICE: &str = "target-apiserver";
/// The peer host the EndpointSlices name (see [`cp`]).
pub const PEER_HOST: &str = "127.1";

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.test
spec:
  group: example.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn spec() -> test_cluster::ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("target").ha())
        .cluster(ClusterSpec::new("host"))
        .cluster(ClusterSpec::new("tenant"))
        .cluster(ClusterSpec::new("tenant-r"))
}

/// The shared control plane, with the CRD in `target` and `host`, and the target's peers
/// published as EndpointSlices in `host`: one per API server, port `https`. The test API servers
/// listen on 127.0.0.1, which the API server refuses in EndpointSlices (loopback), as it refuses
/// the one-label FQDN `localhost`; the FQDN `127.1` passes validation (two DNS labels) and the
/// system resolver reads it as 127.0.0.1 (inet_aton's short form).
pub async fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    static READY: OnceCell<()> = OnceCell::const_new();
    let cp = test_cluster::shared(spec);
    READY
        .get_or_init(|| async {
            let target = cp.cluster("target");
            let host = cp.cluster("host");
            for c in [target, host] {
                test_cluster::manifests::apply_crds_yaml(&c.client().await.unwrap(), WIDGET_CRD)
                    .await
                    .unwrap();
            }
            let mut yaml = format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {PEER_NAMESPACE}}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: {PEER_SERVICE}, namespace: {PEER_NAMESPACE}}}\nspec:\n  ports: [{{name: https, port: 443}}]\n"
            );
            for i in 0..target.server_count() {
                yaml.push_str(&format!(
                    "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {PEER_SERVICE}-{i}\n  namespace: {PEER_NAMESPACE}\n  labels: {{kubernetes.io/service-name: {PEER_SERVICE}}}\naddressType: FQDN\nports: [{{name: https, port: {port}, protocol: TCP}}]\nendpoints:\n- addresses: [\"127.1\"]\n  conditions: {{ready: true}}\n",
                    port = target.server_port(i)
                ));
            }
            host.kubectl_stdin(&["apply", "-f", "-"], &yaml)
                .await
                .unwrap();
        })
        .await;
    cp
}

/// One scenario at a time when API servers are stopped.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A running proxy replica.
pub struct Proxy {
    pub tenant: &'static Cluster,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub metrics_port: u16,
    process: Mutex<ManagedProcess>,
}

impl Proxy {
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("proxy.log")).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        self.process.lock().unwrap().log_tail(60)
    }

    pub fn kill(&self) {
        self.process.lock().unwrap().kill();
    }

    /// The proxy's `/metrics` text.
    pub async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port))
            .await
            .unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// The value of one series of the proxy (summed over the series matching `labels`; 0 when
    /// none does).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sample(&self.metrics().await, name, labels)
    }
}

/// Sums the samples of `name` whose labels include `labels`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How a proxy replica is set up.
pub struct ProxySpec {
    pub tenant: &'static str,
    pub client_name: &'static str,
    pub project: &'static str,
    /// The YAML of `targets.<project>/<target>.peers`, indented for its place.
    pub peers_yaml: String,
    pub target: &'static Cluster,
    pub target_name: &'static str,
    pub identity: &'static str,
}

/// Starts a proxy replica (granting its identity the target's RBAC).
pub async fn start_proxy(spec: &ProxySpec) -> Proxy {
    let cp = cp().await;
    let tenant = cp.cluster(spec.tenant);
    let target = spec.target;
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let user = format!("loft:vcluster:p-{}:{}", spec.project, spec.client_name);
    std::fs::write(p("target-ca.crt"), target.ca_pem()).unwrap();
    let cred = target.mint_client_cert(&user, &[]).unwrap();
    std::fs::write(p("target.crt"), &cred.cert_pem).unwrap();
    std::fs::write(p("target.key"), &cred.key_pem).unwrap();
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: proxy-{name}}}
rules:
- {{apiGroups: ["{GROUP}"], resources: ["*"], verbs: ["*"]}}
- {{apiGroups: [""], resources: ["namespaces"], verbs: ["get", "list", "create", "patch", "delete"]}}
- {{apiGroups: ["authentication.k8s.io"], resources: ["selfsubjectreviews"], verbs: ["create"]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: proxy-{name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-{name}}}
subjects:
- {{kind: User, name: "{user}", apiGroup: rbac.authorization.k8s.io}}
"#,
        name = spec.client_name
    );
    target
        .kubectl_stdin(&["apply", "-f", "-"], &rbac)
        .await
        .unwrap();

    let port = test_cluster::free_port().unwrap();
    let metrics_port = test_cluster::free_port().unwrap();
    let config = format!(
        "client:\n  name: {name}\n  project: {project}\n  kubeconfig: {kc}\ncustomResources:\n  widgets.{GROUP}/{VERSION}:\n    enabled: true\n    accessResources: owned\n    targetVirtualCluster: {{name: {target_name}, project: {project}}}\ntargets:\n  {project}/{target_name}:\n    peers:\n{peers}    tls:\n      caFile: {ca}\n      serverName: localhost\n    credential:\n      clientCertificate:\n        certFile: {crt}\n        keyFile: {key}\nlisteners:\n  basePort: {port}\nmetrics:\n  address: 127.0.0.1:{metrics_port}\n",
        name = spec.client_name,
        project = spec.project,
        kc = tenant
            .kubeconfig_for(
                &format!("resource-proxy-{}", spec.client_name),
                &["system:masters"]
            )
            .unwrap()
            .display(),
        target_name = spec.target_name,
        peers = spec.peers_yaml,
        ca = p("target-ca.crt").display(),
        crt = p("target.crt").display(),
        key = p("target.key").display(),
    );
    std::fs::write(p("config.yaml"), &config).unwrap();
    let process = ManagedProcess::spawn(
        &format!("resource-proxy-{}-{}", spec.client_name, spec.identity),
        Path::new(env!("CARGO_BIN_EXE_resource-proxy")),
        &[
            "--config".to_owned(),
            p("config.yaml").display().to_string(),
            "--identity".to_owned(),
            spec.identity.to_owned(),
        ],
        &p("proxy.log"),
    )
    .unwrap();
    let proxy = Proxy {
        tenant,
        dir,
        port,
        metrics_port,
        process: Mutex::new(process),
    };
    // Ready: listeners up (every replica serves, leader or not).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
            && tokio::net::TcpStream::connect(("127.0.0.1", metrics_port))
                .await
                .is_ok()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy did not start\n{}",
            proxy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy
}

/// Waits until the tenant's discovery lists the widgets (the APIService is wired and Available).
pub async fn wait_available(tenant: &Cluster, what: &str) {
    wait_until(what, Duration::from_secs(60), || async {
        tenant
            .kubectl_ok(&["api-resources", "--api-group", GROUP, "-o", "name"])
            .await
            .unwrap_or_default()
            .contains("widgets.example.test")
    })
    .await;
}

/// Waits until LISTs through `proxy` succeed four times in a row (every peer's watch cache for
/// a just-established CRD answers 429 `storage is (re)initializing` for a moment).
pub async fn wait_serving(proxy: &Proxy) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut ok = 0;
    while ok < 4 {
        let a = direct(
            proxy,
            "GET",
            "/apis/example.test/v1/namespaces/default/widgets",
            "",
        )
        .await;
        ok = if a.code == 200 { ok + 1 } else { 0 };
        assert!(
            tokio::time::Instant::now() < deadline,
            "LISTs through the proxy did not succeed in 60 s: {a:?}"
        );
        if a.code != 200 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Polls `f` every 250 ms until it is true; panics after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// An answer of a request sent straight to a proxy listener.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    pub retry_after: Option<String>,
    pub body: String,
    pub elapsed: Duration,
}

/// Sends a request straight to the proxy's listener as the tenant's aggregator (front-proxy
/// client certificate, `X-Remote-User: admin`), trusting the proxy's serving CA from the
/// tenant's Secret.
pub async fn direct(proxy: &Proxy, method: &str, path: &str, body: &str) -> Answer {
    use http_body_util::BodyExt;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

    let cert = proxy.tenant.pki().front_proxy_client().unwrap();
    let config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AcceptAny))
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut sender = crate::common::connect_http1(
        std::net::SocketAddr::from(([127, 0, 0, 1], proxy.port)),
        std::sync::Arc::new(config),
    )
    .await;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("x-remote-user", "admin")
        .header("x-remote-group", "system:masters")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(90), sender.send_request(req))
        .await
        .expect("the proxy answers within 90 s")
        .unwrap();
    let code = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        code,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// The proxy's serving certificate is not what these tests are about (the e2e suite checks
/// it); the listener is on 127.0.0.1.
#[derive(Debug)]
struct AcceptAny;

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `apiserver_request_total` for LISTs of widgets on API server `i` of `cluster`: which peer
/// served the proxied requests.
pub async fn widget_lists_served(cluster: &Cluster, i: usize) -> f64 {
    let client = cluster.client_for_server(i).await.unwrap();
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    sample(
        &text,
        "apiserver_request_total",
        &[("group", GROUP), ("resource", "widgets"), ("verb", "LIST")],
    )
}
