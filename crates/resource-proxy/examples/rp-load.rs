//! A small closed-loop load generator for the resource-proxy benchmark
//! (`scripts/bench-resource-proxy.sh`): HTTPS with a client certificate, which wrk and oha
//! cannot present.
//!
//! ```text
//! rp-load get   URL --cert C --key K [--ca CA] [--header 'K: V']... [--concurrency N] [--duration S]
//!     N keep-alive HTTP/1.1 connections send GET URL in a loop for S seconds; prints
//!     `rps=… p50_ms=… p99_ms=… errors=…` (errors: non-2xx answers and connections the server
//!     closed, after which the worker reconnects).
//! rp-load watch URL --cert C --key K [--ca CA] [--header 'K: V']... --count N [--hold S]
//!     opens N watches (HTTP/2, 1000 streams per connection), waits until every one has its
//!     response headers, prints `open=N`, holds them S seconds, then prints `still_open=…`.
//! ```
//! Without `--ca` the server certificate is not verified (loopback benchmark).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

struct Args {
    mode: String,
    url: http::Uri,
    cert: String,
    key: String,
    ca: Option<String>,
    headers: Vec<(String, String)>,
    concurrency: usize,
    duration: u64,
    count: usize,
    hold: u64,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let mode = it.next().expect("mode: get or watch");
    let url: http::Uri = it.next().expect("URL").parse().expect("a URL");
    let mut a = Args {
        mode,
        url,
        cert: String::new(),
        key: String::new(),
        ca: None,
        headers: Vec::new(),
        concurrency: 1,
        duration: 5,
        count: 1,
        hold: 5,
    };
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--cert" => a.cert = v,
            "--key" => a.key = v,
            "--ca" => a.ca = Some(v),
            "--header" => {
                let (k, val) = v.split_once(':').expect("--header 'K: V'");
                a.headers.push((k.trim().to_owned(), val.trim().to_owned()));
            }
            "--concurrency" => a.concurrency = v.parse().unwrap(),
            "--duration" => a.duration = v.parse().unwrap(),
            "--count" => a.count = v.parse().unwrap(),
            "--hold" => a.hold = v.parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

#[derive(Debug)]
struct AcceptAny;

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls(a: &Args, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let chain = CertificateDer::pem_file_iter(&a.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&a.key).unwrap();
    let builder = match &a.ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            rustls::ClientConfig::builder().with_root_certificates(roots)
        }
        None => rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny)),
    };
    let mut config = builder.with_client_auth_cert(chain, key).unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

async fn connect(
    a: &Args,
    config: Arc<rustls::ClientConfig>,
) -> TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let host = a.url.host().unwrap().to_owned();
    let port = a.url.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    TokioIo::new(
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .unwrap(),
    )
}

fn request(a: &Args, path: &str) -> http::Request<Empty<Bytes>> {
    let mut b = http::Request::get(path).header("host", "localhost");
    for (k, v) in &a.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Empty::new()).unwrap()
}

async fn get(a: Arc<Args>) {
    let config = tls(&a, b"http/1.1");
    let path = a
        .url
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap();
    let until = Instant::now() + Duration::from_secs(a.duration);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency {
        let a = a.clone();
        let config = config.clone();
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let open = || async {
                let io = connect(&a, config.clone()).await;
                let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(conn);
                sender
            };
            let mut sender = open().await;
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < until {
                if sender.ready().await.is_err() {
                    // The server closed the keep-alive connection: count it, open another.
                    errors += 1;
                    sender = open().await;
                }
                let started = Instant::now();
                match sender.send_request(request(&a, &path)).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let _ = resp.into_body().collect().await;
                        if ok {
                            lat.push(started.elapsed().as_micros() as u64);
                        } else {
                            errors += 1;
                        }
                    }
                    Err(_) => {
                        errors += 1;
                        sender = open().await;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map(|us| *us as f64 / 1000.0)
            .unwrap_or(f64::NAN)
    };
    println!(
        "requests={} rps={:.0} p50_ms={:.3} p99_ms={:.3} errors={errors}",
        all.len(),
        all.len() as f64 / a.duration as f64,
        pct(0.50),
        pct(0.99)
    );
}

async fn watch(a: Arc<Args>) {
    const STREAMS_PER_CONNECTION: usize = 1000;
    let config = tls(&a, b"h2");
    let path = a
        .url
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap();
    let mut bodies = Vec::new();
    let started = Instant::now();
    let mut remaining = a.count;
    while remaining > 0 {
        let n = remaining.min(STREAMS_PER_CONNECTION);
        remaining -= n;
        let io = connect(&a, config.clone()).await;
        let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let opens: Vec<_> = (0..n)
            .map(|_| {
                let mut sender = sender.clone();
                let req = request(&a, &path);
                tokio::spawn(async move { sender.send_request(req).await })
            })
            .collect();
        for o in opens {
            let resp = o.await.unwrap().expect("watch opened");
            assert!(
                resp.status().is_success(),
                "watch answered {}",
                resp.status()
            );
            let mut body = resp.into_body();
            // Drain events (idle watches get none) until the stream ends.
            bodies.push(tokio::spawn(async move {
                while let Some(Ok(_)) = body.frame().await {}
            }));
        }
    }
    println!(
        "open={} in_ms={}",
        bodies.len(),
        started.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_secs(a.hold)).await;
    let open = bodies.iter().filter(|b| !b.is_finished()).count();
    println!("still_open={open}");
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let a = Arc::new(args());
    let rt = tokio::runtime::Runtime::new().unwrap();
    match a.mode.as_str() {
        "get" => rt.block_on(get(a)),
        "watch" => rt.block_on(watch(a)),
        other => panic!("mode {other}: get or watch"),
    }
}
