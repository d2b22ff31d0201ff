//! The kubelet's log endpoint, so `kubectl logs` works: `GET /containerLogs/<namespace>/<pod>/
//! <container>` over TLS with `tailLines`, `limitBytes` and `follow`.
//!
//! It listens on host loopback (the Node's `Hostname` address is `127.0.0.1`, the address type
//! kube-apiserver prefers) with a certificate of its own authority; kube-apiserver is not given
//! that authority (no `--kubelet-certificate-authority`), as in most test clusters. Log files
//! carry no timestamps yet, so `sinceTime`, `sinceSeconds` and `timestamps` are refused with
//! 400 rather than ignored.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

use super::pod::log_path;
use crate::Error;
use crate::pki::Authority;

/// A bound log endpoint, not serving yet.
pub(super) struct Endpoint {
    listener: std::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
}

impl Endpoint {
    /// Binds 127.0.0.1 on a free port with a fresh serving certificate.
    pub(super) fn bind(node: &str) -> Result<Self, Error> {
        let authority = Authority::generate(&format!("{node}-kubelet-ca"))?;
        let serving = authority.serving_cert(&[node, "localhost"], &[[127, 0, 0, 1].into()])?;
        let cert = CertificateDer::from_pem_slice(serving.cert_pem.as_bytes())
            .map_err(|e| Error::Pki(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
            .map_err(|e| Error::Pki(e.to_string()))?;
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .map_err(|e| Error::Pki(e.to_string()))?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?;
        Ok(Self {
            listener,
            tls: Arc::new(tls),
        })
    }

    pub(super) fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Serves until the runtime ends.
    pub(super) async fn serve(self, dir: PathBuf) {
        let _ = self.listener.set_nonblocking(true);
        let Ok(listener) = tokio::net::TcpListener::from_std(self.listener) else {
            return;
        };
        let acceptor = TlsAcceptor::from(self.tls);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let dir = dir.clone();
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(stream).await {
                    answer(stream, &dir).await;
                }
            });
        }
    }
}

async fn answer<S>(mut stream: S, dir: &Path)
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let target = head.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", namespace, pod, container] = parts[..] else {
        return respond(&mut stream, 404, "not found\n").await;
    };
    let mut follow = false;
    let mut tail: Option<usize> = None;
    let mut limit: Option<usize> = None;
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        match key {
            "follow" => follow = value == "true",
            "tailLines" => tail = value.parse().ok(),
            "limitBytes" => limit = value.parse().ok(),
            "sinceTime" | "sinceSeconds" | "timestamps" if value != "false" => {
                let message = format!("{key} is not supported by this node yet\n");
                return respond(&mut stream, 400, &message).await;
            }
            _ => {}
        }
    }
    let file = log_path(dir, namespace, pod, container);
    let Ok(mut log) = tokio::fs::File::open(&file).await else {
        let message = format!("container {container} in pod {namespace}/{pod} has no log\n");
        return respond(&mut stream, 404, &message).await;
    };
    let mut content = Vec::new();
    if log.read_to_end(&mut content).await.is_err() {
        return;
    }
    let mut start = 0;
    if let Some(n) = tail {
        // The start of the n-th line from the end (a final newline ends a line, not starts one).
        let body = content.strip_suffix(b"\n").unwrap_or(&content);
        start = body
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, b)| **b == b'\n')
            .nth(n.saturating_sub(1))
            .map_or(0, |(i, _)| i + 1);
        if n == 0 {
            start = content.len();
        }
    }
    let mut out = content[start..].to_vec();
    if let Some(limit) = limit {
        out.truncate(limit);
    }
    let header = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
    if stream.write_all(header.as_bytes()).await.is_err()
        || stream.write_all(&out).await.is_err()
        || stream.flush().await.is_err()
    {
        return;
    }
    if follow {
        // Reading tells when the client goes away; it sends nothing else.
        let (mut reader, mut stream) = tokio::io::split(stream);
        let mut offset = content.len() as u64;
        loop {
            tokio::select! {
                read = reader.read(&mut buf) => {
                    if matches!(read, Ok(0) | Err(_)) {
                        return;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if log.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
                return;
            }
            let mut more = Vec::new();
            if log.read_to_end(&mut more).await.is_err() {
                return;
            }
            offset += more.len() as u64;
            if !more.is_empty()
                && (stream.write_all(&more).await.is_err() || stream.flush().await.is_err())
            {
                return;
            }
        }
    }
    let _ = stream.shutdown().await;
}

async fn respond<S: AsyncWrite + Unpin>(stream: &mut S, code: u16, body: &str) {
    let reason = if code == 404 {
        "Not Found"
    } else {
        "Bad Request"
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
