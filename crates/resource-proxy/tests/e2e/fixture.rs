//! The shared environment: clusters, the target's CRDs and RBAC, and running proxies.

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use test_cluster::{Cluster, ClusterSpec, ControlPlane, ManagedProcess};

use crate::kubectl_support::kubectl;

pub const GROUP: &str = "example.test";
pub const VERSION: &str = "v1";

pub const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.test
spec:
  group: example.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    selectableFields: [{jsonPath: .spec.color}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              color: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

fn spec() -> test_cluster::ControlPlaneBuilder {
    ControlPlane::builder()
        // Garbage collectors in the target and in tenant B prove the owner-reference handling.
        .cluster(ClusterSpec::new("target").controller_manager())
        .cluster(ClusterSpec::new("tenant-a"))
        .cluster(ClusterSpec::new("tenant-b").controller_manager())
        .cluster(ClusterSpec::new("tenant-c"))
}

/// The shared control plane (CRD and RBAC installed in the target once).
pub fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    let cp = test_cluster::shared(spec);
    static PREPARED: OnceLock<()> = OnceLock::new();
    PREPARED.get_or_init(|| {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let target = test_cluster::shared(spec).cluster("target");
                    let client = target.client().await.unwrap();
                    test_cluster::manifests::apply_crds_yaml(&client, WIDGET_CRD)
                        .await
                        .unwrap();
                })
        })
        .join()
        .unwrap();
    });
    cp
}

/// A running proxy for one tenant cluster.
pub struct Proxy {
    pub tenant: &'static Cluster,
    pub dir: tempfile::TempDir,
    pub identity: String,
    /// The listener port of the first group/version.
    pub port: u16,
    pub metrics_port: u16,
    process: Mutex<ManagedProcess>,
}

impl Proxy {
    pub fn log_tail(&self) -> String {
        self.process.lock().unwrap().log_tail(80)
    }
}

/// How one proxy is set up.
pub struct ProxySpec {
    pub cp: &'static ControlPlane,
    pub group: &'static str,
    pub tenant: &'static str,
    pub client_name: &'static str,
    pub project: &'static str,
    pub target: &'static str,
    pub access: &'static str,
    pub resources: Vec<&'static str>,
}

fn write(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
}

/// Grants the proxy identity the target's RBAC, starts the proxy for `spec` (which registers
/// itself in the tenant cluster), and waits until the tenant's `kubectl api-resources` lists the
/// group/version. The proxy's serving CA is saved for direct requests.
pub async fn start_proxy(spec: ProxySpec) -> Proxy {
    start_proxy_via(spec, None).await
}

/// [`start_proxy`] with the target's peer at `peer_port` on loopback instead of the target's
/// own port (a relay the test can cut).
pub async fn start_proxy_via(spec: ProxySpec, peer_port: Option<u16>) -> Proxy {
    let cp = spec.cp;
    let group = spec.group;
    let tenant = cp.cluster(spec.tenant);
    let target = cp.cluster(spec.target);
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let identity = format!("loft:vcluster:p-{}:{}", spec.project, spec.client_name);

    // Target side: trust, credential, RBAC for the proxy identity.
    write(&p("target-ca.crt"), &target.ca_pem());
    let cred = target.mint_client_cert(&identity, &[]).unwrap();
    write(&p("target.crt"), &cred.cert_pem);
    write(&p("target.key"), &cred.key_pem);
    grant_target_rbac(
        target,
        group,
        &identity,
        &format!("proxy-{}-{}", spec.client_name, group.replace('.', "-")),
    )
    .await;

    let base_port = test_cluster::free_port().unwrap();
    let metrics_port = test_cluster::free_port().unwrap();
    let mut entries = String::new();
    for r in &spec.resources {
        entries.push_str(&format!(
            "  '{r}.{group}/{VERSION}':\n    enabled: true\n    accessResources: {}\n    targetVirtualCluster: {{name: {}, project: {}}}\n",
            spec.access, spec.target, spec.project
        ));
    }
    let config = format!(
        "client:\n  name: {name}\n  project: {project}\n  kubeconfig: {kc}\ncustomResources:\n{entries}targets:\n  {project}/{target}:\n    peers:\n      static: [\"127.0.0.1:{port}\"]\n    tls:\n      caFile: {ca}\n      serverName: localhost\n    credential:\n      clientCertificate:\n        certFile: {crt}\n        keyFile: {key}\nlisteners:\n  basePort: {base_port}\nmetrics:\n  address: 127.0.0.1:{metrics_port}\n",
        name = spec.client_name,
        project = spec.project,
        kc = tenant
            .kubeconfig_for(
                &format!("resource-proxy-{}", spec.client_name),
                &["system:masters"]
            )
            .unwrap()
            .display(),
        target = spec.target,
        port = peer_port.unwrap_or_else(|| target.server_port(0)),
        ca = p("target-ca.crt").display(),
        crt = p("target.crt").display(),
        key = p("target.key").display(),
    );
    write(&p("config.yaml"), &config);

    let process = ManagedProcess::spawn(
        &format!("resource-proxy-{}", spec.client_name),
        Path::new(env!("CARGO_BIN_EXE_resource-proxy")),
        &[
            "--config".to_owned(),
            p("config.yaml").display().to_string(),
        ],
        &p("proxy.log"),
    )
    .unwrap();
    let proxy = Proxy {
        tenant,
        dir,
        identity,
        port: base_port,
        metrics_port,
        process: Mutex::new(process),
    };
    // The proxy registers itself (leader-elected wiring) with its own serving CA.
    wait_available(&proxy, group, spec.resources[0]).await;
    let secret = resource_proxy::config::names::serving_secret_name(spec.client_name);
    let ca_b64 = kubectl(
        tenant,
        &[
            "get",
            "secret",
            "-n",
            "kube-system",
            &secret,
            "-o",
            r"jsonpath={.data.ca\.crt}",
        ],
    )
    .await;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca_b64.trim())
        .unwrap();
    std::fs::write(proxy.dir.path().join("serving-ca.crt"), ca).unwrap();
    proxy
}

async fn grant_target_rbac(target: &Cluster, group: &str, identity: &str, name: &str) {
    let client = target.client().await.unwrap();
    let yaml = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {name}}}
rules:
- apiGroups: ["{group}"]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["authentication.k8s.io"]
  resources: ["selfsubjectreviews"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}
subjects:
- {{kind: User, name: "{identity}", apiGroup: rbac.authorization.k8s.io}}
"#
    );
    test_cluster::manifests::apply_yaml(&client, &yaml, "default")
        .await
        .unwrap();
}

async fn wait_available(proxy: &Proxy, group: &str, resource: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = proxy
            .tenant
            .kubectl_ok(&["api-resources", "--api-group", group, "-o", "name"])
            .await
            .unwrap_or_default();
        // A wildcard entry is available once the group lists anything.
        let listed = if resource == "*" {
            out.lines().any(|l| l.ends_with(&format!(".{group}")))
        } else {
            out.contains(&format!("{resource}.{group}"))
        };
        if listed {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let status = proxy
                .tenant
                .kubectl_ok(&[
                    "get",
                    "apiservice",
                    &format!("{VERSION}.{GROUP}"),
                    "-o",
                    "yaml",
                ])
                .await
                .unwrap_or_default();
            panic!(
                "the proxy did not become available\n{status}\n--- proxy log ---\n{}",
                proxy.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

pub fn widget(name: &str, extra_labels: &str) -> String {
    format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Widget\nmetadata:\n  name: {name}\n  labels: {{{extra_labels}}}\nspec:\n  size: 1\n"
    )
}

/// The labels of an object in the target, as JSON.
pub async fn target_labels(ns: &str, name: &str) -> serde_json::Value {
    let out = kubectl(
        cp().cluster("target"),
        &["get", "widget", name, "-n", ns, "-o", "json"],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["metadata"]["labels"].clone()
}

/// Shared proxies of the shared control plane, started on first use.
pub mod proxies {
    use tokio::sync::OnceCell;

    use super::*;

    static A: OnceCell<Proxy> = OnceCell::const_new();
    static B: OnceCell<Proxy> = OnceCell::const_new();
    static C: OnceCell<Proxy> = OnceCell::const_new();

    /// Tenant A (`alpha`, project `team-a`), owned mode.
    pub async fn a() -> &'static Proxy {
        A.get_or_init(|| owned("tenant-a", "alpha", "team-a")).await
    }

    /// Tenant B (`beta`, project `team-b`), owned mode, same group/version and target as A.
    pub async fn b() -> &'static Proxy {
        B.get_or_init(|| owned("tenant-b", "beta", "team-b")).await
    }

    /// Tenant C (`gamma`, project `team-c`), `all` mode.
    pub async fn c() -> &'static Proxy {
        C.get_or_init(|| async {
            start_proxy(ProxySpec {
                cp: cp(),
                group: GROUP,
                tenant: "tenant-c",
                client_name: "gamma",
                project: "team-c",
                target: "target",
                access: "all",
                resources: vec!["widgets"],
            })
            .await
        })
        .await
    }

    async fn owned(tenant: &'static str, name: &'static str, project: &'static str) -> Proxy {
        start_proxy(ProxySpec {
            cp: cp(),
            group: GROUP,
            tenant,
            client_name: name,
            project,
            target: "target",
            access: "owned",
            resources: vec!["widgets"],
        })
        .await
    }
}

/// A request sent straight to a proxy listener (not through the aggregator), over TLS that
/// trusts the proxy's serving CA, with an optional client certificate and extra headers.
pub async fn direct_request(
    proxy: &Proxy,
    method: &str,
    path: &str,
    client_cert: Option<&test_cluster::pki::CertKey>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String) {
    use http_body_util::BodyExt;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

    let ca = std::fs::read(proxy.dir.path().join("serving-ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match client_cert {
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let mut sender = crate::common::connect_http1(
        std::net::SocketAddr::from(([127, 0, 0, 1], proxy.port)),
        std::sync::Arc::new(config),
    )
    .await;
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(
            req.body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A namespaced CRD `<plural>.<group>/v1` of kind `kind`.
pub fn crd(group: &str, plural: &str, kind: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: {plural}, kind: {kind}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}
