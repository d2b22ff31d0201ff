//! The cluster network as the node's kube-apiserver sees it: its egress selector `cluster` (the
//! aggregator's connections to APIService backends, the kubelet client behind `kubectl logs`,
//! the `proxy` subresources) goes through an HTTP CONNECT relay on a Unix socket, which dials
//! from inside the node's network namespace, as konnectivity does for a control plane outside
//! the nodes' network.
//!
//! So the kube-apiserver, a host process on loopback, reaches what a kube-apiserver on the node
//! would: Pod addresses, the node's address, and `localhost` meaning the node's loopback, where a
//! `hostNetwork` Pod listens (the aggregator dials an ExternalName Service `localhost` there).
//! The relay dials only addresses inside the namespace (it resolves no name but `localhost`),
//! so nothing outside the node becomes reachable through it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::netns::World;

/// The longest CONNECT head read.
const MAX_HEAD: usize = 8 * 1024;

/// The kube-apiserver's `--egress-selector-config-file` content: `cluster` over `socket`.
pub(crate) fn config_yaml(socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
        socket.display()
    )
}

/// Serves CONNECT requests on `listener` until the runtime ends.
pub(super) async fn serve(listener: std::os::unix::net::UnixListener, world: Arc<World>) {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the egress relay cannot listen");
            return;
        }
    };
    let mut relays = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        relays.spawn(relay(stream, Arc::clone(&world)));
        while relays.try_join_next().is_some() {}
    }
}

async fn relay(mut inbound: tokio::net::UnixStream, world: Arc<World>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.ends_with(b"\r\n\r\n") {
        match inbound.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > MAX_HEAD {
            let _ = inbound
                .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
                .await;
            return;
        }
    }
    let addr = match target(&String::from_utf8_lossy(&head)) {
        Ok(addr) => addr,
        Err(message) => {
            tracing::warn!(%message, "egress relay: refused");
            let answer = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nx-reason: {message}\r\n\r\n"
            );
            let _ = inbound.write_all(answer.as_bytes()).await;
            return;
        }
    };
    match world.connect(addr).await {
        Ok(mut outbound) => {
            if inbound
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_ok()
            {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        }
        Err(e) => {
            tracing::debug!(%addr, error = %e, "egress relay: dial failed");
            let _ = inbound
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    }
}

/// The address a CONNECT head names: an IP literal or `localhost` (the node's loopback), with a
/// port. Whatever data follows the head is not expected (the client waits for the answer).
fn target(head: &str) -> Result<SocketAddr, String> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some("CONNECT"), Some(authority), Some(version)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not a CONNECT request: {line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not a CONNECT request: {line:?}"));
    }
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| format!("{authority:?} has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{authority:?} has no valid port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = if host == "localhost" {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse()
            .map_err(|_| format!("{host:?} is not an address (names are not resolved)"))?
    };
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_targets() {
        let ok = [
            (
                "CONNECT localhost:9100 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                "127.0.0.1:9100",
            ),
            (
                "CONNECT 10.244.0.7:8080 HTTP/1.1\r\n\r\n",
                "10.244.0.7:8080",
            ),
            ("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", "[::1]:443"),
        ];
        for (head, want) in ok {
            assert_eq!(target(head), Ok(want.parse().unwrap()), "{head:?}");
        }
        let refused = [
            "GET / HTTP/1.1\r\n\r\n",
            "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT localhost HTTP/1.1\r\n\r\n",
            "CONNECT localhost:99999 HTTP/1.1\r\n\r\n",
            "CONNECT localhost:80\r\n\r\n",
        ];
        for head in refused {
            assert!(target(head).is_err(), "{head:?}");
        }
    }
}
