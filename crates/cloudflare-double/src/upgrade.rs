//! WebSockets through the tunnel, shared by the edge and the connector stand-in.
//!
//! Cloudflare proxies WebSockets to a tunnel's origins (on by default for every zone). A visitor's
//! `Upgrade: websocket` request crosses the tunnel's HTTP/2 connection, which has neither
//! `Connection`/`Upgrade` headers nor `101` answers, so, as cloudflared does, the two sides mark
//! the stream instead: the edge sends the request with [`UPGRADE_HEADER`] and a body that carries
//! the visitor's bytes; the connector makes the HTTP/1.1 upgrade request to the origin and, when
//! the origin switches protocols, answers `200` with [`UPGRADE_HEADER`] and a body that carries
//! the origin's bytes. The edge then answers the visitor `101` and splices ([`splice`]). Any
//! other answer of the origin (it refused the upgrade) reaches the visitor unchanged.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::HeaderMap;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Marks a WebSocket stream on the tunnel connection, both ways (see the module docs).
pub const UPGRADE_HEADER: &str = "cf-double-upgrade";

/// Bytes buffered per direction before the reader waits for the writer.
const CHUNKS_IN_FLIGHT: usize = 16;

/// Whether a visitor's (HTTP/1.1) request asks for a WebSocket: `Connection: upgrade` and
/// `Upgrade: websocket`, case-insensitive, as RFC 6455 section 4.2.1 requires of the handshake.
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let has_token = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    has_token(header::CONNECTION, "upgrade") && has_token(header::UPGRADE, "websocket")
}

/// Drops the hop-by-hop headers of an upgrade, which HTTP/2 cannot carry.
pub fn strip_upgrade_headers(headers: &mut HeaderMap) {
    headers.remove(header::CONNECTION);
    headers.remove(header::UPGRADE);
}

/// Puts back the headers of an HTTP/1.1 WebSocket upgrade.
pub fn set_upgrade_headers(headers: &mut HeaderMap) {
    headers.remove(UPGRADE_HEADER);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
}

/// A body fed by a channel: what one side of the tunnel stream sends.
pub struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// A channel and the body its sender feeds.
pub fn channel() -> (mpsc::Sender<Bytes>, UnsyncBoxBody<Bytes, hyper::Error>) {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let body = ChannelBody(rx)
        .map_err(|never: Infallible| match never {})
        .boxed_unsync();
    (tx, body)
}

/// Relays both ways until each side ends: what `io` reads goes to `out` (the body of the tunnel
/// stream this side sends), what `incoming` (the body the other side sends) carries is written
/// to `io`. Either end closing ends its direction; `io` is shut down for writing then.
pub fn splice(io: Upgraded, out: mpsc::Sender<Bytes>, mut incoming: Incoming) {
    let (mut read, mut write) = tokio::io::split(TokioIo::new(io));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if out.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        while let Some(Ok(frame)) = incoming.frame().await {
            if let Ok(data) = frame.into_data()
                && write.write_all(&data).await.is_err()
            {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_websocket_request_needs_both_headers_in_any_case() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(
                    header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            h
        };
        for (pairs, want) in [
            (
                &[("connection", "Upgrade"), ("upgrade", "websocket")][..],
                true,
            ),
            (
                &[
                    ("connection", "keep-alive, UPGRADE"),
                    ("upgrade", "WebSocket"),
                ][..],
                true,
            ),
            (&[("upgrade", "websocket")][..], false),
            (&[("connection", "upgrade"), ("upgrade", "h2c")][..], false),
            (
                &[("connection", "upgraded"), ("upgrade", "websocket")][..],
                false,
            ),
        ] {
            assert_eq!(is_websocket_request(&headers(pairs)), want, "{pairs:?}");
        }
    }
}
