//! Test support shared by the resource-proxy test binaries.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;

/// An HTTP/1.1 connection over TLS to a proxy listener (server name `localhost`), ready to send.
pub async fn connect_http1(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(tls)
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}
