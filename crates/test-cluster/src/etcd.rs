//! One etcd on loopback, shared by every cluster of a control plane (each cluster keeps its
//! objects under its own `--etcd-prefix`).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::process::{ManagedProcess, free_port};
use crate::{Binaries, Error};

/// A running etcd.
pub struct Etcd {
    process: ManagedProcess,
    client_url: String,
}

impl Etcd {
    /// Starts etcd with its data and log in `dir` and waits until it reports healthy.
    pub async fn start(bins: &Binaries, dir: &Path) -> Result<Self, Error> {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data_dir = dir.join("etcd-data");
        let args = vec![
            "--name=kube-tenancy".to_owned(),
            format!("--data-dir={}", data_dir.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=kube-tenancy={peer_url}"),
            // Throwaway data: durability buys nothing and fsync dominates apiserver latency.
            "--unsafe-no-fsync".to_owned(),
            // kube-apiserver's watch cache needs progress notifications (RequestWatchProgress).
            "--watch-progress-notify-interval=5s".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        let mut process =
            ManagedProcess::spawn("etcd", &bins.etcd(), &args, &dir.join("etcd.log"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if http_get_ok(client_port, "/health").await {
                return Ok(Self {
                    process,
                    client_url,
                });
            }
            if let Some(status) = process.exited() {
                return Err(Error::Exited {
                    component: "etcd".into(),
                    status: status.to_string(),
                    log_tail: process.log_tail(30),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::NotReady {
                    component: "etcd".into(),
                    waited: Duration::from_secs(30),
                    log_tail: process.log_tail(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// The process, for logs.
    pub fn process(&self) -> &ManagedProcess {
        &self.process
    }
}

/// A plain-HTTP GET on loopback that only asks "did it answer 200?".
async fn http_get_ok(port: u16, path: &str) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let head = String::from_utf8_lossy(&buf);
        Some(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
