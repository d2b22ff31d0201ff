//! The kubelet's log endpoint, so `kubectl logs` works: `GET /containerLogs/<namespace>/<pod>/
//! <container>` over TLS with `tailLines`, `limitBytes`, `follow`, `sinceTime`, `sinceSeconds`
//! and `timestamps`.
//!
//! It listens on host loopback, relayed into the node's namespace at the Node's address and
//! [`super::KUBELET_PORT`] (kube-apiserver dials it through its `cluster` egress, see
//! [`super::egress`]), with a certificate of its own authority; kube-apiserver is not given
//! that authority (no `--kubelet-certificate-authority`), as in most test clusters. Logs are
//! CRI log files (see `crilog`), so `sinceTime`, `sinceSeconds` and `timestamps` work too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

use k8s_openapi::jiff::Timestamp;

use super::crilog;
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
        let serving = authority.serving_cert(
            &[node, "localhost"],
            &[[127, 0, 0, 1].into(), crate::netns::GATEWAY.into()],
        )?;
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
    let mut view = View::default();
    let mut tail: Option<usize> = None;
    let mut limit: Option<usize> = None;
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        let value = percent_decode(value);
        match key {
            "follow" => follow = value == "true",
            "timestamps" => view.timestamps = value == "true",
            "tailLines" => tail = value.parse().ok(),
            "limitBytes" => limit = value.parse().ok(),
            "sinceTime" => match value.parse::<Timestamp>() {
                Ok(t) => view.since = Some(t),
                Err(e) => {
                    return respond(&mut stream, 400, &format!("sinceTime {value:?}: {e}\n")).await;
                }
            },
            "sinceSeconds" => {
                let seconds: i64 = value.parse().unwrap_or(0);
                view.since = Timestamp::now()
                    .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
                    .ok();
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
    // Only whole lines; a line being written is sent when it is complete.
    let complete = content
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let mut lines = view.render(&content[..complete]);
    if let Some(n) = tail {
        lines.drain(..lines.len().saturating_sub(n));
    }
    let mut out = lines.concat();
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
        let mut pending = content[complete..].to_vec();
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
            pending.extend_from_slice(&more);
            let complete = pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let out = view.render(&pending[..complete]).concat();
            pending.drain(..complete);
            if !out.is_empty()
                && (stream.write_all(&out).await.is_err() || stream.flush().await.is_err())
            {
                return;
            }
        }
    }
    let _ = stream.shutdown().await;
}

/// Which lines a request wants, and how.
#[derive(Default)]
struct View {
    since: Option<Timestamp>,
    timestamps: bool,
}

impl View {
    /// The lines of CRI log `content` (whole lines) as the client sees them.
    fn render(&self, content: &[u8]) -> Vec<Vec<u8>> {
        content
            .split(|b| *b == b'\n')
            .filter_map(crilog::parse)
            .filter(|line| {
                self.since
                    .is_none_or(|since| line.time.parse::<Timestamp>().is_ok_and(|t| t >= since))
            })
            .map(|line| {
                let mut out = Vec::with_capacity(line.text.len() + 32);
                if self.timestamps {
                    out.extend_from_slice(line.time.as_bytes());
                    out.push(b' ');
                }
                out.extend_from_slice(line.text);
                out.push(b'\n');
                out
            })
            .collect()
    }
}

/// Decodes `%XX` escapes (and `+` as a space) in a query value.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(
            percent_decode("2026-01-02T03%3A04%3A05Z"),
            "2026-01-02T03:04:05Z"
        );
        assert_eq!(percent_decode("a+b%2"), "a b%2");
    }

    #[test]
    fn a_view_filters_by_time_and_adds_timestamps() {
        let log = b"2026-01-01T00:00:01.000000000Z stdout F one\n\
2026-01-01T00:00:02.000000000Z stderr F two words\n";
        let all = View::default().render(log).concat();
        assert_eq!(all, b"one\ntwo words\n");
        let since = View {
            since: Some("2026-01-01T00:00:02Z".parse().unwrap()),
            timestamps: true,
        };
        assert_eq!(
            since.render(log).concat(),
            b"2026-01-01T00:00:02.000000000Z two words\n"
        );
    }
}
