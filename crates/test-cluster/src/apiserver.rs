//! One kube-apiserver process: its flags, start, readiness wait, stop and restart on the same
//! port.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::time::Duration;

use crate::pki::{ClusterPki, FRONT_PROXY_CLIENT_CN};
use crate::process::{ManagedProcess, free_port};
use crate::{Binaries, Error};

/// How long an API server may take to report `/readyz` ok.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A kube-apiserver (running or stopped) with a fixed port.
pub struct ApiServer {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    log_path: PathBuf,
    port: u16,
    process: Option<ManagedProcess>,
}

impl ApiServer {
    /// Prepares the flags of API server `index` of cluster `cluster`, storing under `prefix`,
    /// with `extra` flags.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bins: &Binaries,
        cluster: &str,
        index: usize,
        dir: &Path,
        pki: &ClusterPki,
        etcd_url: &str,
        prefix: &str,
        extra: &[String],
    ) -> Result<Self, Error> {
        let port = free_port()?;
        let f = pki.files();
        let p = |p: &Path| p.display().to_string();
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--etcd-prefix={prefix}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", p(&f.serving_cert)),
            format!("--tls-private-key-file={}", p(&f.serving_key)),
            format!("--client-ca-file={}", p(&f.ca_cert)),
            "--authorization-mode=RBAC".to_owned(),
            // Each cluster has its own issuer, so a token of one cluster means nothing to another.
            format!("--service-account-issuer=https://{cluster}.kube-tenancy.invalid"),
            format!("--service-account-key-file={}", p(&f.sa_public)),
            format!("--service-account-signing-key-file={}", p(&f.sa_private)),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            // The aggregation layer, exactly as kubeadm sets it up.
            format!(
                "--requestheader-client-ca-file={}",
                p(&f.front_proxy_ca_cert)
            ),
            format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT_CN}"),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            format!("--proxy-client-cert-file={}", p(&f.front_proxy_client_cert)),
            format!("--proxy-client-key-file={}", p(&f.front_proxy_client_key)),
            // ExternalName services only resolve through the ClusterIP resolver.
            "--enable-aggregator-routing=false".to_owned(),
            "--allow-privileged=true".to_owned(),
            // No service-account controller runs, so pods would wait for a default account.
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ];
        args.extend_from_slice(extra);
        let name = format!("{cluster}/kube-apiserver-{index}");
        Ok(Self {
            name,
            program: bins.kube_apiserver(),
            args,
            log_path: dir.join(format!("kube-apiserver-{index}.log")),
            port,
            process: None,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The secure port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The OS pid while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ManagedProcess::pid)
    }

    /// Whether the process is running.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Starts the process (no wait; see [`wait_ready`]).
    pub fn start(&mut self) -> Result<(), Error> {
        if self.process.is_none() {
            crate::process::ensure_port_free(self.port)?;
            self.process = Some(ManagedProcess::spawn(
                &self.name,
                &self.program,
                &self.args,
                &self.log_path,
            )?);
        }
        Ok(())
    }

    /// Kills the process; the port stays reserved for a restart.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Whether the started process exited on its own; its exit as an error with the log tail.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        if let Some(p) = self.process.as_mut()
            && let Some(status) = p.exited()
        {
            return Err(Error::Exited {
                component: self.name.clone(),
                status: status.to_string(),
                log_tail: p.log_tail(40),
            });
        }
        Ok(())
    }

    /// The last lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::tail_file(&self.log_path, lines)
    }
}

/// Polls `/readyz` through `client` until it answers `ok`, the process exits, or the timeout.
pub async fn wait_ready(
    server: &std::sync::Mutex<ApiServer>,
    client: &kube::Client,
) -> Result<(), Error> {
    let start = tokio::time::Instant::now();
    loop {
        server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .check_alive()?;
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("static request");
        if let Ok(Ok(body)) =
            tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            let s = server.lock().unwrap_or_else(PoisonError::into_inner);
            return Err(Error::NotReady {
                component: s.name.clone(),
                waited: READY_TIMEOUT,
                log_tail: s.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
