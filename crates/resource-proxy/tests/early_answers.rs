//! Early answers reach a caller that is still sending its body: a listener assembled in-process
//! answers 401 (no front-proxy certificate) before reading a 10 MiB body and 413 after the
//! first 3 MiB of one. Over HTTP/1.1 a plain client that writes the whole request before it
//! reads gets the complete Status (no broken pipe) and can go on using the connection; over
//! HTTP/2 the stream ends with the complete Status and no reset, and the connection carries the
//! next request.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use resource_proxy::config::{
    AccessMode, BaseCredential, ClientIdentity, Credential, GroupVersionListener, PeerAddress,
    PeerSource, Resources, Target, TargetRef,
};
use resource_proxy::listen::caller_auth::Authenticator;
use resource_proxy::listen::server::{self, ServingCert};
use resource_proxy::metrics::Metrics;
use resource_proxy::request::context::ListenerContext;
use resource_proxy::target::TargetClient;
use resource_proxy::tenancy::labels::OwnerLabels;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIST: &str = "/apis/example.test/v1/namespaces/ns/widgets";
const BODY_BYTES: usize = 10 * 1024 * 1024;

struct Env {
    _dir: tempfile::TempDir,
    proxy: SocketAddr,
    roots: rustls::RootCertStore,
    aggregator: test_cluster::pki::CertKey,
    _shutdown: tokio::sync::watch::Sender<bool>,
}

impl Env {
    /// TLS to the listener offering `alpn`, as the aggregator (`aggregator`) or as anyone.
    fn tls(&self, aggregator: bool, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
        let builder = rustls::ClientConfig::builder().with_root_certificates(self.roots.clone());
        let mut config = if aggregator {
            builder
                .with_client_auth_cert(
                    vec![
                        CertificateDer::from_pem_slice(self.aggregator.cert_pem.as_bytes())
                            .unwrap(),
                    ],
                    PrivateKeyDer::from_pem_slice(self.aggregator.key_pem.as_bytes()).unwrap(),
                )
                .unwrap()
        } else {
            builder.with_no_client_auth()
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    }

    async fn connect(
        &self,
        tls: Arc<rustls::ClientConfig>,
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let tcp = tokio::net::TcpStream::connect(self.proxy).await.unwrap();
        tokio_rustls::TlsConnector::from(tls)
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap()
    }
}

/// A listener for `example.test/v1` whose target is never reached (nothing listens on its port):
/// every answer here is the proxy's own.
async fn env() -> Env {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let ca = test_cluster::pki::Authority::generate("target-ca").unwrap();
    let cred = ca.client_cert("loft:vcluster:p-p:c", &[]).unwrap();
    std::fs::write(p("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(p("c.crt"), &cred.cert_pem).unwrap();
    std::fs::write(p("c.key"), &cred.key_pem).unwrap();
    let target_ref = TargetRef {
        project: "p".into(),
        name: "t".into(),
    };
    let target = Target {
        peers: PeerSource::Static(vec![PeerAddress {
            host: "127.0.0.1".into(),
            port: test_cluster::free_port().unwrap(),
        }]),
        ca_file: p("ca.crt"),
        server_name: "localhost".into(),
        credential: Credential::Direct(BaseCredential::ClientCertificate {
            cert_file: p("c.crt"),
            key_file: p("c.key"),
        }),
    };
    let metrics = Metrics::new();
    let target = TargetClient::with_metrics(
        &target_ref,
        &target,
        metrics.clone(),
        vec!["example.test/v1".into()],
    )
    .unwrap();
    let listener = GroupVersionListener {
        group: "example.test".into(),
        version: "v1".into(),
        port: 0,
        resources: Resources::Named(vec!["widgets".into()]),
        cluster_scoped: vec![],
        target: target_ref,
        access: AccessMode::Owned,
        entries: vec!["widgets.example.test/v1".into()],
    };
    let front = test_cluster::pki::Authority::generate("front-proxy-ca").unwrap();
    let aggregator = front.client_cert("front-proxy-client", &[]).unwrap();
    let auth = Authenticator::default();
    auth.update(&BTreeMap::from([
        ("requestheader-client-ca-file".to_owned(), front.cert_pem()),
        (
            "requestheader-allowed-names".to_owned(),
            r#"["front-proxy-client"]"#.to_owned(),
        ),
    ]))
    .unwrap();
    // The client cluster is never asked: the body is read before the namespace check.
    let client_cluster = kube::Client::new(
        tower::service_fn(|_: http::Request<kube::client::Body>| async move {
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(500)
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
        }),
        "default",
    );
    let ctx = Arc::new(ListenerContext::new(
        listener,
        target,
        auth,
        OwnerLabels::for_client(&ClientIdentity {
            name: "c".into(),
            project: "p".into(),
            project_namespace: "p-p".into(),
        }),
        client_cluster,
        metrics,
    ));
    let serving = ca
        .serving_cert(&["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    let cert = ServingCert::from_pem(&serving.cert_pem, &serving.key_pem).unwrap();
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let (proxy, _task) = server::serve(
        ctx,
        "127.0.0.1:0".parse().unwrap(),
        server::tls_config(cert),
        rx,
    )
    .await
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    Env {
        _dir: dir,
        proxy,
        roots,
        aggregator,
        _shutdown: shutdown,
    }
}

/// Reads one HTTP/1.1 answer with a `Content-Length` body: status code and body.
async fn read_http1_answer(
    stream: &mut (impl AsyncReadExt + Unpin),
    buf: &mut Vec<u8>,
) -> (u16, Value) {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("reading the answer");
        assert!(
            n > 0,
            "the connection closed before the answer's head: {buf:?}"
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let code: u16 = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no Content-Length: {head}"));
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("reading the answer");
        assert!(n > 0, "the connection closed inside the answer's body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
    buf.drain(..head_end + length);
    (code, body)
}

/// Sends a POST with a 10 MiB body as a plain client does, the whole request before reading,
/// then reads the answer; then a GET on the same connection.
async fn http1_early_answer(env: &Env, aggregator: bool) -> ((u16, Value), (u16, Value)) {
    let mut tls = env.connect(env.tls(aggregator, b"http/1.1")).await;
    let head = format!(
        "POST {LIST} HTTP/1.1\r\nHost: localhost\r\nX-Remote-User: alice\r\nContent-Type: application/json\r\nContent-Length: {BODY_BYTES}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..BODY_BYTES / chunk.len() {
        tls.write_all(&chunk)
            .await
            .expect("the listener takes the whole body (no broken pipe)");
    }
    tls.flush().await.unwrap();
    let mut buf = Vec::new();
    let first = read_http1_answer(&mut tls, &mut buf).await;
    let again = format!("GET {LIST} HTTP/1.1\r\nHost: localhost\r\nX-Remote-User: alice\r\n\r\n");
    tls.write_all(again.as_bytes()).await.unwrap();
    let second = read_http1_answer(&mut tls, &mut buf).await;
    (first, second)
}

/// Sends a POST with a 10 MiB body over HTTP/2 and reads the answer; the stream must end
/// without a reset (curl reports even a NO_ERROR reset during its upload as "Stream error in the
/// HTTP/2 framing layer"). Then a GET on the same connection.
async fn http2_early_answer(env: &Env, aggregator: bool) -> ((u16, Value), (u16, Value)) {
    let tls = env.connect(env.tls(aggregator, b"h2")).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.unwrap();
    let request = |method: &str| {
        http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{LIST}"))
            .header("x-remote-user", "alice")
            .header("content-type", "application/json")
            .body(())
            .unwrap()
    };
    let (answer, mut upload) = client.send_request(request("POST"), false).unwrap();
    upload
        .send_data(Bytes::from(vec![b' '; BODY_BYTES]), true)
        .unwrap();
    let first = read_h2_answer(answer).await;
    let reset = tokio::time::timeout(
        Duration::from_secs(3),
        std::future::poll_fn(|cx| upload.poll_reset(cx)),
    )
    .await;
    assert!(reset.is_err(), "the listener reset the stream: {reset:?}");
    let mut client = client.ready().await.unwrap();
    let (answer, _) = client.send_request(request("GET"), true).unwrap();
    let second = read_h2_answer(answer).await;
    (first, second)
}

async fn read_h2_answer(answer: h2::client::ResponseFuture) -> (u16, Value) {
    let resp = answer.await.expect("an answer, not a stream error");
    let code = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the whole answer, not a stream error");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (code, serde_json::from_slice(&bytes).unwrap())
}

fn assert_status(answer: &(u16, Value), code: u16, reason: &str) {
    assert_eq!(answer.0, code, "{}", answer.1);
    assert_eq!(answer.1["kind"], "Status", "{}", answer.1);
    assert_eq!(answer.1["code"], code, "{}", answer.1);
    assert_eq!(answer.1["reason"], reason, "{}", answer.1);
}

#[tokio::test]
async fn an_http1_caller_sending_a_large_body_receives_the_401_and_keeps_its_connection() {
    let env = env().await;
    let (first, second) = http1_early_answer(&env, false).await;
    assert_status(&first, 401, "Unauthorized");
    assert_status(&second, 401, "Unauthorized");
}

#[tokio::test]
async fn an_http1_caller_sending_a_large_body_receives_the_413_and_keeps_its_connection() {
    let env = env().await;
    let (first, second) = http1_early_answer(&env, true).await;
    assert_status(&first, 413, "RequestEntityTooLarge");
    // The target is unreachable: the GET is the proxy's 503, on the same connection.
    assert_status(&second, 503, "ServiceUnavailable");
}

#[tokio::test]
async fn an_http2_caller_sending_a_large_body_receives_the_401_without_a_stream_error() {
    let env = env().await;
    let (first, second) = http2_early_answer(&env, false).await;
    assert_status(&first, 401, "Unauthorized");
    assert_status(&second, 401, "Unauthorized");
}

#[tokio::test]
async fn an_http2_caller_sending_a_large_body_receives_the_413_without_a_stream_error() {
    let env = env().await;
    let (first, second) = http2_early_answer(&env, true).await;
    assert_status(&first, 413, "RequestEntityTooLarge");
    assert_status(&second, 503, "ServiceUnavailable");
}
