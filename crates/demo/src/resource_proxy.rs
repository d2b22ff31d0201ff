//! The resource proxy in the demo: the client cluster's users work with `widgets.example.com`,
//! a custom resource whose CRD exists only in the target cluster.
//!
//! Installed as deployed, on the client cluster's node ([`resource_proxy_fixtures::install`],
//! which the resource proxy's `on_node` test shares): the target gets
//! `deploy/resource-proxy/target` (the proxy identity's RBAC, the owner-label policy) and the
//! CRD; the client gets the Secret with a credential minted from the target's CA and `kubectl
//! apply -k` of `deploy/resource-proxy` with the target's peer in `config.yaml`. The DaemonSet's
//! Pod runs the built `resource-proxy` binary on the node's network (`hostNetwork`), as the
//! ServiceAccount `kube-system/resource-proxy` with exactly the RBAC of `client-rbac.yaml`, and
//! registers itself in the client cluster; the client's kube-apiserver reaches it through the
//! aggregation layer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use resource_proxy_fixtures::{
    APISERVICE, CLIENT_NAME, GROUP, IDENTITY, LISTENER_PORT, METRICS_PORT, NS, TARGET_PEER,
};
use test_cluster::ControlPlane;
use test_cluster::netns::{GATEWAY, World};

use crate::steps::{Expect, On, Step};

/// The client's project (value of `vcluster.com/owner-project`), as `config.yaml` says.
const PROJECT: &str = "default";
/// The namespace the demo commands use.
const NAMESPACE: &str = "demo";

fn widget(name: &str, size: u32, color: &str) -> String {
    format!(
        "apiVersion: {GROUP}/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\nspec:\n  size: {size}\n  color: {color}\n"
    )
}

/// The install and what the demo prints about it.
pub struct ResourceProxy {
    dir: PathBuf,
    install: resource_proxy_fixtures::Install,
}

impl ResourceProxy {
    /// Installs the proxy on the client's node (whose namespace is `world`) for the target and
    /// waits until its Pod is Ready and its APIService Available.
    pub async fn start(
        cp: &ControlPlane,
        world: &Arc<World>,
        state_dir: &Path,
    ) -> anyhow::Result<Self> {
        let dir = state_dir.join("resource-proxy");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("widget.yaml"), widget("my-widget", 1, "blue"))?;
        std::fs::write(
            dir.join("their-widget.yaml"),
            widget("their-widget", 7, "red"),
        )?;
        let install =
            resource_proxy_fixtures::install(cp.cluster("client"), cp.cluster("target"), world)
                .await
                .context("installing deploy/resource-proxy on the client's node")?;
        Ok(Self { dir, install })
    }

    /// What runs, where its files are.
    pub fn describe(&self) -> String {
        format!(
            "Resource proxy: client cluster \"client\" -> target cluster \"target\"\n\
             \x20 group/version  {GROUP}/v1 (CRD widgets.{GROUP} exists only in the target)\n\
             \x20 install        kubectl apply -k deploy/resource-proxy (the target peer edited in configmap.yaml): DaemonSet {NS}/resource-proxy on the node, hostNetwork\n\
             \x20 client         name {CLIENT_NAME}, project {PROJECT}; ServiceAccount {NS}/resource-proxy in the client (client-rbac.yaml), {IDENTITY} in the target\n\
             \x20 listener       127.0.0.1:{LISTENER_PORT} on the node (APIService {APISERVICE} -> ExternalName Service localhost)\n\
             \x20 target peer    {TARGET_PEER} in the node's network (relayed to the target's API server)\n\
             \x20 metrics        http://{GATEWAY}:{METRICS_PORT}/metrics in the node's network (/healthz, /readyz)\n\
             \x20 overlay        {overlay}\n",
            overlay = self.install.overlay().display(),
        )
    }

    /// The commands to try, in order; `--check` runs them.
    pub fn steps(&self) -> Vec<Step> {
        let file = |n: &str| self.dir.join(n).display().to_string();
        let widget = file("widget.yaml");
        let theirs = file("their-widget.yaml");
        let api_service = APISERVICE;
        let owner_vcluster = format!("vcluster.com/owner-vcluster={CLIENT_NAME}");
        let owner_project = format!("vcluster.com/owner-project={PROJECT}");
        vec![
            Step::new(
                "The proxy runs as the DaemonSet's Pod on the node, with the node's address",
                On::Client,
                &[
                    "get",
                    "pods",
                    "-n",
                    NS,
                    "-l",
                    resource_proxy_fixtures::SELECTOR,
                    "-o",
                    "wide",
                ],
                Expect::Contains(vec![
                    "Running".into(),
                    "kt-node".into(),
                    GATEWAY.to_string(),
                ]),
            ),
            Step::new(
                "Its log (kubectl logs through the node): it serves the group/version",
                On::Client,
                &["logs", "-n", NS, "daemonset/resource-proxy"],
                Expect::Contains(vec!["serving".into(), format!("{GROUP}/v1")]),
            ),
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
                &["get", "apiservice", api_service],
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
                Expect::Contains(vec![format!("widget.{GROUP}/my-widget")]),
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
                &["delete", "apiservice", api_service],
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
