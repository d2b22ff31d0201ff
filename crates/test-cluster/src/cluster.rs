//! One named cluster: its PKI, one or two kube-apiservers on a private etcd prefix, an optional
//! kube-controller-manager, and ways in (kube clients, kubeconfig files, the built kubectl).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::apiserver::{ApiServer, wait_ready};
use crate::kubeconfig;
use crate::node::{NodeAgent, NodeSpec};
use crate::pki::{ADMIN_USER, CertKey, ClusterPki};
use crate::process::{ManagedProcess, free_port};
use crate::{Binaries, Error};

/// What to start for one cluster.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub name: String,
    /// A second kube-apiserver on the same etcd prefix: an HA peer with its own endpoint.
    pub ha: bool,
    /// kube-controller-manager with the garbage collector and the namespace controller (and,
    /// with a node, the deployment, replicaset, daemonset, endpointslice and serviceaccount
    /// controllers).
    pub controller_manager: bool,
    /// A node agent running this cluster's Pods as local processes.
    pub node: Option<NodeSpec>,
}

impl ClusterSpec {
    /// A single-server cluster without controllers.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ha: false,
            controller_manager: false,
            node: None,
        }
    }

    /// Adds an HA peer server.
    pub fn ha(mut self) -> Self {
        self.ha = true;
        self
    }

    /// Adds kube-controller-manager.
    pub fn controller_manager(mut self) -> Self {
        self.controller_manager = true;
        self
    }

    /// Adds a node agent (see [`NodeAgent`]) that binds and runs this cluster's Pods, and
    /// kube-controller-manager (a Pod waits for its namespace's `default` ServiceAccount).
    pub fn node(mut self, node: NodeSpec) -> Self {
        self.node = Some(node);
        self.controller_manager = true;
        self
    }
}

/// A running cluster.
pub struct Cluster {
    name: String,
    dir: PathBuf,
    pki: ClusterPki,
    bins: Binaries,
    servers: Vec<Mutex<ApiServer>>,
    controller_manager: Mutex<Option<ManagedProcess>>,
    node: Option<NodeAgent>,
}

impl Cluster {
    pub(crate) async fn start(
        bins: &Binaries,
        spec: &ClusterSpec,
        root: &Path,
        etcd_url: &str,
    ) -> Result<Self, Error> {
        validate_name(&spec.name)?;
        let dir = root.join(&spec.name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let pki = ClusterPki::generate(&dir.join("pki"))?;
        let prefix = format!("/kube-tenancy/{}", spec.name);
        let count = if spec.ha { 2 } else { 1 };
        // With a node, the API servers reach the cluster network through the node (its egress
        // relay listens before they start).
        let (egress, extra) = match &spec.node {
            Some(_) => {
                let (listener, flag) = egress_socket(&dir)?;
                (Some(listener), vec![flag])
            }
            None => (None, Vec::new()),
        };
        let servers = (0..count)
            .map(|i| {
                ApiServer::new(bins, &spec.name, i, &dir, &pki, etcd_url, &prefix, &extra)
                    .map(Mutex::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut cluster = Self {
            name: spec.name.clone(),
            dir,
            pki,
            bins: bins.clone(),
            servers,
            controller_manager: Mutex::new(None),
            node: None,
        };
        for i in 0..count {
            cluster.servers[i]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .start()?;
        }
        for i in 0..count {
            cluster.write_admin_kubeconfig(i)?;
            let client = cluster.client_for_server(i).await?;
            wait_ready(&cluster.servers[i], &client).await?;
        }
        if spec.controller_manager {
            cluster.start_controller_manager(spec.node.is_some())?;
        }
        if let (Some(node), Some(egress)) = (&spec.node, egress) {
            let kubeconfig = cluster.kubeconfig_yaml(0, ADMIN_USER, &cluster.pki.admin()?);
            let dir = cluster.dir.join("node");
            cluster.node = Some(NodeAgent::start(node.clone(), kubeconfig, &dir, egress).await?);
        }
        Ok(cluster)
    }

    /// Starts kube-controller-manager; with a node it also runs the controllers that turn
    /// workloads into Pods and Services into EndpointSlices.
    fn start_controller_manager(&self, with_node: bool) -> Result<(), Error> {
        let mut controllers = "garbage-collector-controller,namespace-controller".to_owned();
        if with_node {
            controllers.push_str(
                ",deployment-controller,replicaset-controller,daemonset-controller,endpointslice-controller",
            );
            // Every namespace's `default` ServiceAccount, whose token the node mounts in Pods.
            controllers.push_str(",serviceaccount-controller");
        }
        let kubeconfig = self.kubeconfig_path().display().to_string();
        let port = free_port()?;
        let args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            "--leader-elect=false".to_owned(),
            "--use-service-account-credentials=false".to_owned(),
            format!("--controllers={controllers}"),
            "--v=2".to_owned(),
        ];
        let process = ManagedProcess::spawn(
            &format!("{}/kube-controller-manager", self.name),
            &self.bins.kube_controller_manager(),
            &args,
            &self.dir.join("kube-controller-manager.log"),
        )?;
        *self
            .controller_manager
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(process);
        Ok(())
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node agent, when the cluster was started with one.
    pub fn node(&self) -> Option<&NodeAgent> {
        self.node.as_ref()
    }

    /// The cluster's directory (PKI, kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster's certificate authorities.
    pub fn pki(&self) -> &ClusterPki {
        &self.pki
    }

    /// The CA that signed the API servers' serving certificates, PEM.
    pub fn ca_pem(&self) -> String {
        self.pki.ca.cert_pem()
    }

    /// How many API servers the cluster has (2 with an HA peer).
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// URL of API server `i`.
    pub fn server_url(&self, i: usize) -> String {
        self.servers[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .url()
    }

    /// Port of API server `i`.
    pub fn server_port(&self, i: usize) -> u16 {
        self.servers[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .port()
    }

    /// The admin kubeconfig (first server), for kubectl.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.kubeconfig_path_for_server(0)
    }

    /// The admin kubeconfig pointing at server `i`.
    pub fn kubeconfig_path_for_server(&self, i: usize) -> PathBuf {
        if i == 0 {
            self.dir.join("kubeconfig")
        } else {
            self.dir.join(format!("kubeconfig-{i}"))
        }
    }

    fn write_admin_kubeconfig(&self, i: usize) -> Result<(), Error> {
        let yaml = self.kubeconfig_yaml(i, ADMIN_USER, &self.pki.admin()?);
        let path = self.kubeconfig_path_for_server(i);
        std::fs::write(&path, yaml).map_err(|e| Error::io(&path, e))
    }

    fn kubeconfig_yaml(&self, server: usize, user: &str, cred: &CertKey) -> String {
        kubeconfig::render(
            &self.name,
            &self.server_url(server),
            &self.ca_pem(),
            user,
            cred,
        )
    }

    /// An admin (`system:masters`) client of the first server.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.client_for_server(0).await
    }

    /// An admin client of server `i`.
    pub async fn client_for_server(&self, i: usize) -> Result<kube::Client, Error> {
        kubeconfig::client_from_yaml(&self.kubeconfig_yaml(i, ADMIN_USER, &self.pki.admin()?)).await
    }

    /// A client certificate of this cluster for `user` in `groups` (at most two).
    pub fn mint_client_cert(&self, user: &str, groups: &[&str]) -> Result<CertKey, Error> {
        self.pki.ca.client_cert(user, groups)
    }

    /// A client authenticating as `user` in `groups` with a freshly minted certificate.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<kube::Client, Error> {
        let cred = self.mint_client_cert(user, groups)?;
        kubeconfig::client_from_yaml(&self.kubeconfig_yaml(0, user, &cred)).await
    }

    /// Writes a kubeconfig for `user` in `groups` (for kubectl) and returns its path.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> Result<PathBuf, Error> {
        let cred = self.mint_client_cert(user, groups)?;
        let users = self.dir.join("users");
        std::fs::create_dir_all(&users).map_err(|e| Error::io(&users, e))?;
        let path = users.join(format!("{user}.kubeconfig").replace([':', '/'], "_"));
        std::fs::write(&path, self.kubeconfig_yaml(0, user, &cred))
            .map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// The built kubectl, pointed at this cluster as admin.
    pub fn kubectl(&self) -> tokio::process::Command {
        self.kubectl_with(&self.kubeconfig_path())
    }

    /// The built kubectl with another kubeconfig. Its discovery cache is the cluster's own:
    /// kubectl keys its default cache (`~/.kube/cache`) by host and port, and a port reused by a
    /// later cluster would otherwise resolve resource names from another cluster's discovery.
    pub fn kubectl_with(&self, kubeconfig: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(self.bins.kubectl());
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.dir.join("kubectl-cache").display()
            ))
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl as admin; stdout on success, an error with stderr otherwise.
    pub async fn kubectl_ok(&self, args: &[&str]) -> Result<String, Error> {
        run_kubectl(self.kubectl(), args, None).await
    }

    /// Runs kubectl as admin with `input` on stdin (e.g. `apply -f -`).
    pub async fn kubectl_stdin(&self, args: &[&str], input: &str) -> Result<String, Error> {
        run_kubectl(self.kubectl(), args, Some(input)).await
    }

    /// Runs `helm` (built by `scripts/build-helm.sh`) against this cluster as admin; its
    /// cache, configuration and data stay in the cluster's directory. Stdout on success.
    pub async fn helm_ok(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = tokio::process::Command::new(crate::helm()?);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig_path().display()))
            .kill_on_drop(true);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            cmd.env(var, self.dir.join("helm").join(dir));
        }
        let out = run(cmd, args, None, "helm").await?;
        out.map_err(|(status, stderr)| Error::Helm {
            args: args.join(" "),
            status,
            stderr,
        })
    }

    /// Stops API server `i` (its port stays reserved).
    pub fn stop_server(&self, i: usize) {
        self.servers[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop();
    }

    /// Starts API server `i` again on its port and waits until it is ready.
    pub async fn restart_server(&self, i: usize) -> Result<(), Error> {
        self.servers[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .start()?;
        let client = self.client_for_server(i).await?;
        wait_ready(&self.servers[i], &client).await
    }

    /// Whether API server `i` is running.
    pub fn server_running(&self, i: usize) -> bool {
        self.servers[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_running()
    }

    /// Pids of every running process of this cluster.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .servers
            .iter()
            .filter_map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).pid())
            .collect();
        if let Some(p) = self
            .controller_manager
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            pids.push(p.pid());
        }
        pids
    }

    /// The tails of every process log of this cluster, for a failing test.
    pub fn log_report(&self, lines: usize) -> String {
        let mut out = String::new();
        for s in &self.servers {
            let s = s.lock().unwrap_or_else(PoisonError::into_inner);
            out.push_str(&format!(
                "----- {} ({}) -----\n{}\n",
                s.name(),
                s.log_path().display(),
                s.log_tail(lines)
            ));
        }
        if let Some(p) = self
            .controller_manager
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            out.push_str(&format!(
                "----- {} ({}) -----\n{}\n",
                p.name(),
                p.log_path().display(),
                p.log_tail(lines)
            ));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The node (its Pods' processes and namespaces) before the API servers it watches.
        self.node.take();
    }
}

async fn run_kubectl(
    cmd: tokio::process::Command,
    args: &[&str],
    input: Option<&str>,
) -> Result<String, Error> {
    run(cmd, args, input, "kubectl")
        .await?
        .map_err(|(status, stderr)| Error::Kubectl {
            args: args.join(" "),
            status,
            stderr,
        })
}

/// Runs `cmd` with `args` (and `input` on stdin): Ok(stdout) on success, Err((status, stderr))
/// when it fails; an error when it cannot be started.
async fn run(
    mut cmd: tokio::process::Command,
    args: &[&str],
    input: Option<&str>,
    tool: &str,
) -> Result<Result<String, (String, String)>, Error> {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::io(Path::new(tool), e))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(|e| Error::io(Path::new(tool), e))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| Error::io(Path::new(tool), e))?;
    Ok(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err((
            out.status.to_string(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    })
}

/// Binds the node's egress socket in `dir` and writes the egress selector configuration; returns
/// the listener and the kube-apiserver flag naming the configuration.
fn egress_socket(dir: &Path) -> Result<(std::os::unix::net::UnixListener, String), Error> {
    let socket = std::path::absolute(dir.join("egress.sock")).map_err(|e| Error::io(dir, e))?;
    // A socket path is at most 107 bytes (sun_path).
    if socket.as_os_str().len() > 107 {
        return Err(Error::io(
            &socket,
            std::io::Error::other(
                "the egress socket's path is longer than 107 bytes: use a shorter state directory",
            ),
        ));
    }
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&socket, e)),
        _ => {}
    }
    let listener =
        std::os::unix::net::UnixListener::bind(&socket).map_err(|e| Error::io(&socket, e))?;
    let config = dir.join("egress-selector.yaml");
    std::fs::write(&config, crate::node::egress::config_yaml(&socket))
        .map_err(|e| Error::io(&config, e))?;
    Ok((
        listener,
        format!("--egress-selector-config-file={}", config.display()),
    ))
}

fn validate_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::BadClusterName(name.to_owned()))
    }
}
