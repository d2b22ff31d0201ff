//! The resource proxy in the demo: the client cluster's users work with `widgets.demo.example`,
//! a custom resource whose CRD exists only in the target cluster.
//!
//! Set up as a deployment would be: in the client cluster, the proxy runs as its own user
//! `resource-proxy` with exactly the RBAC of `deploy/resource-proxy/client-rbac.yaml` (so the demo
//! proves those manifests suffice, and the admin is not exempt from the deletion protection); in
//! the target, the CRD and the RBAC of the proxy identity `loft:vcluster:p-demo:client-a`, whose
//! client certificate is minted from the target's CA (the harness keeps the cluster PKI in
//! `<state>/<cluster>/pki/`); a configuration file; and the `resource-proxy` binary, which
//! registers itself in the client cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use test_cluster::{ControlPlane, ManagedProcess};

use crate::sibling_binary;
use crate::steps::{Expect, On, Step};

pub const GROUP: &str = "demo.example";
pub const VERSION: &str = "v1";
/// The client's virtual-cluster name (value of `vcluster.com/owner-vcluster`).
pub const CLIENT_NAME: &str = "client-a";
/// The client's project (value of `vcluster.com/owner-project`; namespace `p-demo`).
pub const PROJECT: &str = "demo";
/// The client cluster's RBAC for the proxy's user `resource-proxy`: the deploy manifests' own.
const CLIENT_RBAC: &str = include_str!("../../../deploy/resource-proxy/client-rbac.yaml");
/// The proxy's user in the client cluster (a subject of [`CLIENT_RBAC`]).
const CLIENT_USER: &str = "resource-proxy";
/// The namespace the demo commands use.
const NAMESPACE: &str = "demo";

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example
spec:
  group: demo.example
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

/// The identity the target sees: `loft:vcluster:<client project namespace>:<client name>`.
pub fn identity() -> String {
    format!("loft:vcluster:p-{PROJECT}:{CLIENT_NAME}")
}

/// The target's RBAC for the proxy identity: the proxied group, namespaces (mirroring) and its
/// own SelfSubjectReview.
fn target_rbac() -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "resource-proxy:{PROJECT}:{CLIENT_NAME}"}}
rules:
- apiGroups: ["{GROUP}"]
  resources: ["widgets", "widgets/status"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["authentication.k8s.io"]
  resources: ["selfsubjectreviews"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "resource-proxy:{PROJECT}:{CLIENT_NAME}"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "resource-proxy:{PROJECT}:{CLIENT_NAME}"}}
subjects:
- {{kind: User, name: "{identity}", apiGroup: rbac.authorization.k8s.io}}
"#,
        identity = identity()
    )
}

fn widget(name: &str, size: u32, color: &str) -> String {
    format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\nspec:\n  size: {size}\n  color: {color}\n"
    )
}

/// The running proxy and what the demo prints about it.
pub struct ResourceProxy {
    dir: PathBuf,
    process: ManagedProcess,
    port: u16,
    metrics_port: u16,
}

impl ResourceProxy {
    /// Sets up the target, starts the proxy, and waits (up to 90 s) until the client's
    /// `kubectl api-resources` lists the group.
    pub async fn start(cp: &ControlPlane, state_dir: &Path) -> anyhow::Result<Self> {
        let client = cp.cluster("client");
        let target = cp.cluster("target");
        let dir = state_dir.join("resource-proxy");
        std::fs::create_dir_all(&dir)?;
        let p = |n: &str| dir.join(n);

        // Client: the proxy's own user with the deploy manifests' RBAC.
        test_cluster::manifests::apply_yaml(&client.client().await?, CLIENT_RBAC, "kube-system")
            .await
            .context("applying deploy/resource-proxy/client-rbac.yaml in the client")?;
        let client_kubeconfig = client.kubeconfig_for(CLIENT_USER, &[])?;

        // Target: the CRD (only there), and RBAC for the proxy identity.
        let admin = target.client().await?;
        test_cluster::manifests::apply_crds_yaml(&admin, CRD)
            .await
            .context("installing the Widget CRD in the target")?;
        test_cluster::manifests::apply_yaml(&admin, &target_rbac(), "default")
            .await
            .context("granting the proxy identity RBAC in the target")?;

        // The proxy's credential for the target, minted from the target's CA.
        let pki = state_dir.join("target").join("pki");
        let read = |n: &str| {
            std::fs::read_to_string(pki.join(n))
                .with_context(|| format!("reading {}", pki.join(n).display()))
        };
        let ca = test_cluster::pki::Authority::load(&read("ca.crt")?, &read("ca.key")?)?;
        let cred = ca.client_cert(&identity(), &[])?;
        std::fs::write(p("target-ca.crt"), ca.cert_pem())?;
        std::fs::write(p("target-client.crt"), &cred.cert_pem)?;
        std::fs::write(p("target-client.key"), &cred.key_pem)?;

        let port = test_cluster::free_port()?;
        let metrics_port = test_cluster::free_port()?;
        let config = format!(
            r#"# Written by the demo (crates/demo/src/resource_proxy.rs). Reference: docs/resource-proxy.md
client:
  name: {CLIENT_NAME}
  project: {PROJECT}
  kubeconfig: {client_kubeconfig}
customResources:
  widgets.{GROUP}/{VERSION}:
    enabled: true
    accessResources: owned
    targetVirtualCluster:
      name: target
targets:
  {PROJECT}/target:
    peers:
      static: ["127.0.0.1:{target_port}"]
    tls:
      caFile: {ca}
      serverName: localhost
    credential:
      clientCertificate:
        certFile: {crt}
        keyFile: {key}
listeners:
  basePort: {port}
metrics:
  address: 127.0.0.1:{metrics_port}
"#,
            client_kubeconfig = client_kubeconfig.display(),
            target_port = target.server_port(0),
            ca = p("target-ca.crt").display(),
            crt = p("target-client.crt").display(),
            key = p("target-client.key").display(),
        );
        std::fs::write(p("config.yaml"), config)?;
        std::fs::write(p("widget.yaml"), widget("my-widget", 1, "blue"))?;
        std::fs::write(p("their-widget.yaml"), widget("their-widget", 7, "red"))?;

        let binary = sibling_binary("resource-proxy", "resource-proxy")?;
        let process = ManagedProcess::spawn(
            "resource-proxy",
            &binary,
            &[
                "--config".to_owned(),
                p("config.yaml").display().to_string(),
            ],
            &p("resource-proxy.log"),
        )?;
        let mut proxy = Self {
            dir,
            process,
            port,
            metrics_port,
        };
        proxy.wait_available(cp).await?;
        Ok(proxy)
    }

    async fn wait_available(&mut self, cp: &ControlPlane) -> anyhow::Result<()> {
        let client = cp.cluster("client");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = self.process.exited() {
                bail!(
                    "resource-proxy exited ({status}); last log lines:\n{}",
                    self.log_tail(40)
                );
            }
            let out = client
                .kubectl_ok(&["api-resources", "--api-group", GROUP, "-o", "name"])
                .await
                .unwrap_or_default();
            if out.contains(&format!("widgets.{GROUP}")) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                let api_service = client
                    .kubectl_ok(&[
                        "get",
                        "apiservice",
                        &format!("{VERSION}.{GROUP}"),
                        "-o",
                        "yaml",
                    ])
                    .await
                    .unwrap_or_else(|e| e.to_string());
                bail!(
                    "the client's kubectl api-resources did not list {GROUP} within 90 s\n{api_service}\n--- resource-proxy log ---\n{}",
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.exited()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// What runs, where its files are.
    pub fn describe(&self) -> String {
        let p = |n: &str| self.dir.join(n).display().to_string();
        format!(
            "Resource proxy: client cluster \"client\" -> target cluster \"target\"\n\
             \x20 group/version  {GROUP}/{VERSION} (CRD widgets.{GROUP} exists only in the target)\n\
             \x20 client         name {CLIENT_NAME}, project {PROJECT}; user {CLIENT_USER} in the client (deploy/resource-proxy/client-rbac.yaml), {identity} in the target\n\
             \x20 listener       127.0.0.1:{port} (APIService {VERSION}.{GROUP} -> Service kube-system/proxy-{group_dashes}-{VERSION})\n\
             \x20 metrics        http://127.0.0.1:{metrics}/metrics  (/healthz, /readyz)\n\
             \x20 config         {config}\n\
             \x20 log            {log}\n",
            identity = identity(),
            port = self.port,
            group_dashes = GROUP.replace('.', "-"),
            metrics = self.metrics_port,
            config = p("config.yaml"),
            log = p("resource-proxy.log"),
        )
    }

    /// The commands to try, in order; `--check` runs them.
    pub fn steps(&self) -> Vec<Step> {
        let file = |n: &str| self.dir.join(n).display().to_string();
        let widget = file("widget.yaml");
        let theirs = file("their-widget.yaml");
        let api_service = format!("{VERSION}.{GROUP}");
        let owner_vcluster = format!("vcluster.com/owner-vcluster={CLIENT_NAME}");
        let owner_project = format!("vcluster.com/owner-project={PROJECT}");
        vec![
            Step::new(
                "The CRD exists only in the target ...",
                On::Target,
                &["get", "crd", &format!("widgets.{GROUP}")],
                Expect::Contains(vec![format!("widgets.{GROUP}")]),
            ),
            Step::new(
                "... the client has none ...",
                On::Client,
                &["get", "crd", &format!("widgets.{GROUP}")],
                Expect::FailsWith("not found".into()),
            ),
            Step::new(
                "... yet serves the group, through an APIService backed by the proxy",
                On::Client,
                &["api-resources", "--api-group", GROUP],
                Expect::Contains(vec!["widgets".into(), "Widget".into()]),
            ),
            Step::new(
                "The APIService is Available",
                On::Client,
                &["get", "apiservice", &api_service],
                Expect::Contains(vec!["True".into()]),
            ),
            Step::new(
                "Create a namespace and a widget in the client",
                On::Client,
                &["create", "namespace", NAMESPACE],
                Expect::Success,
            ),
            Step::new(
                "(the proxy creates the namespace in the target too)",
                On::Client,
                &["apply", "-f", &widget],
                Expect::Contains(vec!["widget.demo.example/my-widget".into()]),
            ),
            Step::new(
                "List it in the client",
                On::Client,
                &["get", "widgets", "-n", NAMESPACE],
                Expect::Contains(vec!["my-widget".into()]),
            ),
            Step::new(
                "It lives in the target, with the owner labels",
                On::Target,
                &["get", "widgets", "-n", NAMESPACE, "--show-labels"],
                Expect::Contains(vec![
                    "my-widget".into(),
                    owner_project.clone(),
                    owner_vcluster.clone(),
                ]),
            ),
            Step::new(
                "Change it through the client ...",
                On::Client,
                &[
                    "patch",
                    "widget",
                    "my-widget",
                    "-n",
                    NAMESPACE,
                    "--type",
                    "merge",
                    "-p",
                    r#"{"spec":{"size":3}}"#,
                ],
                Expect::Contains(vec!["patched".into()]),
            ),
            Step::new(
                "... and see the change in the target",
                On::Target,
                &[
                    "get",
                    "widget",
                    "my-widget",
                    "-n",
                    NAMESPACE,
                    "-o",
                    "jsonpath={.spec.size}",
                ],
                Expect::Contains(vec!["3".into()]),
            ),
            Step::new(
                "A widget created directly in the target (no owner labels) ...",
                On::Target,
                &["apply", "-f", &theirs],
                Expect::Success,
            ),
            Step::new(
                "... is not the client's: it does not see it (owned mode)",
                On::Client,
                &["get", "widgets", "-n", NAMESPACE],
                Expect::Lacks("their-widget".into()),
            ),
            Step::new(
                "... not even by name",
                On::Client,
                &["get", "widget", "their-widget", "-n", NAMESPACE],
                Expect::FailsWith("not found".into()),
            ),
            Step::new(
                "Watch the client's widgets (create, patch or delete some in another shell)",
                On::Client,
                &["get", "widgets", "-n", NAMESPACE, "-w"],
                Expect::WatchShows("my-widget".into()),
            ),
            Step::new(
                "The wiring is protected: deleting the APIService is denied",
                On::Client,
                &["delete", "apiservice", &api_service],
                Expect::FailsWith("deletion of vCluster-protected resources is denied".into()),
            ),
            Step::new(
                "Delete the widget through the client ...",
                On::Client,
                &["delete", "widget", "my-widget", "-n", NAMESPACE],
                Expect::Contains(vec!["deleted".into()]),
            ),
            Step::new(
                "... it is gone from the target; the target's own widget stays",
                On::Target,
                &["get", "widgets", "-n", NAMESPACE],
                Expect::Lacks("my-widget".into()),
            ),
        ]
    }
}
