//! A whole control plane: one etcd and named clusters on it, started together and stopped
//! together; plus the per-test-binary shared instance and the guard that prints process logs
//! when a test fails.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use futures::future::try_join_all;

use crate::cluster::{Cluster, ClusterSpec};
use crate::etcd::Etcd;
use crate::{Binaries, Error};

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct ControlPlaneBuilder {
    clusters: Vec<ClusterSpec>,
    state_dir: Option<PathBuf>,
    gateway_api: bool,
    prometheus_operator: bool,
}

impl ControlPlaneBuilder {
    /// Adds a cluster.
    pub fn cluster(mut self, spec: ClusterSpec) -> Self {
        self.clusters.push(spec);
        self
    }

    /// Keeps state (PKI, kubeconfigs, logs, etcd data) in `dir` instead of a temporary directory.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Installs the Gateway API CRDs (standard channel) on every cluster.
    pub fn gateway_api(mut self) -> Self {
        self.gateway_api = true;
        self
    }

    /// Installs the Prometheus Operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) on
    /// every cluster.
    pub fn prometheus_operator(mut self) -> Self {
        self.prometheus_operator = true;
        self
    }

    /// Starts etcd, then every cluster (in parallel), and waits until all are ready.
    pub async fn start(self) -> Result<ControlPlane, Error> {
        crate::install_crypto_provider();
        let mut names: Vec<&str> = self.clusters.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::BadClusterName(format!("{} (named twice)", w[0])));
        }
        let bins = Binaries::locate()?;
        let state = match self.state_dir {
            Some(dir) => StateDir::Kept(dir),
            None => StateDir::temporary()?,
        };
        let root = state.path().to_owned();
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        let etcd = Etcd::start(&bins, &root).await?;
        let clusters = try_join_all(
            self.clusters
                .iter()
                .map(|spec| Cluster::start(&bins, spec, &root, etcd.client_url())),
        )
        .await?;
        let cp = ControlPlane {
            clusters: clusters.into_iter().map(Arc::new).collect(),
            etcd,
            state,
        };
        if self.gateway_api {
            for c in &cp.clusters {
                crate::gateway_api::install_crds(&c.client().await?).await?;
            }
        }
        if self.prometheus_operator {
            for c in &cp.clusters {
                crate::prometheus_operator::install_crds(&c.client().await?).await?;
            }
        }
        Ok(cp)
    }
}

/// Where tests keep control-plane state.
fn tests_root() -> PathBuf {
    std::env::temp_dir().join("kube-tenancy-tests")
}

/// Removes the state left by test processes that have exited. A shared control plane is never
/// dropped, nor is one a test leaks to get a `'static` borrow, so their state directories would
/// stay behind: both are named after their process (`shared-<pid>`, `cp-<pid>-<random>`) and
/// removed by the first control plane of a later process, once that process is gone.
fn prune_dead_state() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(entries) = std::fs::read_dir(tests_root()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("shared-")
                .or_else(|| {
                    name.strip_prefix("cp-")
                        .and_then(|rest| rest.split('-').next())
                })
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
}

enum StateDir {
    Kept(PathBuf),
    Temporary(tempfile::TempDir),
}

impl StateDir {
    fn temporary() -> Result<Self, Error> {
        let root = tests_root();
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        prune_dead_state();
        tempfile::Builder::new()
            .prefix(&format!("cp-{}-", std::process::id()))
            .tempdir_in(&root)
            .map(StateDir::Temporary)
            .map_err(|e| Error::io(&root, e))
    }

    fn path(&self) -> &Path {
        match self {
            StateDir::Kept(p) => p,
            StateDir::Temporary(t) => t.path(),
        }
    }
}

/// A running control plane. Dropping it stops every process it started.
pub struct ControlPlane {
    // Field order is drop order: API servers before the etcd they use.
    clusters: Vec<Arc<Cluster>>,
    etcd: Etcd,
    state: StateDir,
}

impl ControlPlane {
    /// A builder.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// The cluster named `name`.
    ///
    /// # Panics
    /// When no such cluster was started (a test bug).
    pub fn cluster(&self, name: &str) -> &Arc<Cluster> {
        self.clusters
            .iter()
            .find(|c| c.name() == name)
            .unwrap_or_else(|| panic!("no cluster named {name:?} in this control plane"))
    }

    /// Every cluster, in the order they were declared.
    pub fn clusters(&self) -> &[Arc<Cluster>] {
        &self.clusters
    }

    /// The etcd endpoint.
    pub fn etcd_url(&self) -> &str {
        self.etcd.client_url()
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Pids of every running process.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.etcd.process().pid()];
        pids.extend(self.clusters.iter().flat_map(|c| c.pids()));
        pids
    }

    /// The tails of every process log.
    pub fn log_report(&self, lines: usize) -> String {
        let mut out = format!(
            "----- etcd ({}) -----\n{}\n",
            self.etcd.process().log_path().display(),
            self.etcd.process().log_tail(lines)
        );
        for c in &self.clusters {
            out.push_str(&c.log_report(lines));
        }
        out
    }

    /// A guard that prints every process's log tail if the test panics while it is alive.
    pub fn logs_on_failure(&self) -> LogsOnFailure<'_> {
        LogsOnFailure { cp: self }
    }
}

/// Prints the control plane's logs when dropped during a panic.
pub struct LogsOnFailure<'a> {
    cp: &'a ControlPlane,
}

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "\n===== control plane logs (state in {}) =====\n{}",
                self.cp.state_dir().display(),
                self.cp.log_report(60)
            );
        }
    }
}

/// One control plane per test binary, started on first use and shared by its tests (each test
/// works in its own namespace). Its processes die with the test binary.
///
/// The first caller's `spec` wins; every test of a binary should pass the same one.
///
/// # Panics
/// When the control plane cannot start: every test that needs it would fail anyway, and the
/// message carries the failing process's log.
pub fn shared(spec: fn() -> ControlPlaneBuilder) -> &'static ControlPlane {
    static SHARED: OnceLock<ControlPlane> = OnceLock::new();
    SHARED.get_or_init(|| {
        // Started on its own runtime: each #[tokio::test] has a runtime that ends with the test,
        // and nothing of the control plane may belong to one of them.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async {
                    // A shared control plane is never dropped (its processes die with the test
                    // binary), so its state directory is named after the process and removed by
                    // a later run once that process is gone.
                    prune_dead_state();
                    let dir = tests_root().join(format!("shared-{}", std::process::id()));
                    spec().state_dir(dir).start().await
                })
        })
        .join()
        .expect("control-plane start thread")
        .unwrap_or_else(|e| panic!("starting the shared control plane failed: {e}"))
    })
}

/// A fresh namespace name for one test: `<prefix>-<random>`.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id() % 100_000)
}
