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
//! rp-load interleave [--duration S] path NAME URL --cert C --key K [--ca CA] [--header 'K: V']...
//!                    path NAME URL ...
//!     one keep-alive HTTP/1.1 connection per path; GET is sent on each path in turn (one
//!     request in flight in all, the order shuffled every round) for S seconds, so drift on a
//!     shared machine hits every path alike; prints `path=NAME requests=… p50_ms=… p99_ms=…
//!     errors=…` per path.
//! ```
//! Without `--ca` the server certificate is not verified (loopback benchmark).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

/// Where to send requests and as whom.
struct Path {
    name: String,
    url: http::Uri,
    cert: String,
    key: String,
    ca: Option<String>,
    headers: Vec<(String, String)>,
}

struct Args {
    mode: String,
    paths: Vec<Path>,
    concurrency: usize,
    duration: u64,
    count: usize,
    hold: u64,
}

impl Args {
    /// The one path of the `get` and `watch` modes.
    fn path(&self) -> &Path {
        &self.paths[0]
    }
}

/// The path the flags that follow `path NAME URL` (or the URL) belong to.
fn last(paths: &mut [Path]) -> &mut Path {
    paths.last_mut().expect("a path before its flags")
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let mode = it.next().expect("mode: get, watch or interleave");
    let new_path = |name: String, url: String| Path {
        name,
        url: url.parse().expect("a URL"),
        cert: String::new(),
        key: String::new(),
        ca: None,
        headers: Vec::new(),
    };
    let mut a = Args {
        mode,
        paths: Vec::new(),
        concurrency: 1,
        duration: 5,
        count: 1,
        hold: 5,
    };
    if a.mode != "interleave" {
        a.paths
            .push(new_path(String::new(), it.next().expect("URL")));
    }
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        if flag == "path" {
            a.paths.push(new_path(v, it.next().expect("path NAME URL")));
            continue;
        }
        match flag.as_str() {
            "--cert" => last(&mut a.paths).cert = v,
            "--key" => last(&mut a.paths).key = v,
            "--ca" => last(&mut a.paths).ca = Some(v),
            "--header" => {
                let (k, val) = v.split_once(':').expect("--header 'K: V'");
                last(&mut a.paths)
                    .headers
                    .push((k.trim().to_owned(), val.trim().to_owned()));
            }
            "--concurrency" => a.concurrency = v.parse().unwrap(),
            "--duration" => a.duration = v.parse().unwrap(),
            "--count" => a.count = v.parse().unwrap(),
            "--hold" => a.hold = v.parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(!a.paths.is_empty(), "no path given");
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

fn tls(a: &Path, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
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
    a: &Path,
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

fn request(a: &Path, path: &str) -> http::Request<Empty<Bytes>> {
    let mut b = http::Request::get(path).header("host", "localhost");
    for (k, v) in &a.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Empty::new()).unwrap()
}

async fn get(a: Arc<Args>) {
    let config = tls(a.path(), b"http/1.1");
    let path = a
        .path()
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
            let mut sender = open_http1(a.path(), config.clone()).await;
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < until {
                match timed_get(a.path(), &config, &mut sender, &path).await {
                    Some(us) => lat.push(us),
                    None => errors += 1,
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
    println!(
        "requests={} rps={:.0} p50_ms={:.3} p99_ms={:.3} errors={errors}",
        all.len(),
        all.len() as f64 / a.duration as f64,
        percentile_ms(&all, 0.50),
        percentile_ms(&all, 0.99)
    );
}

/// The `p` quantile of sorted latencies in µs, in ms.
fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .map(|us| *us as f64 / 1000.0)
        .unwrap_or(f64::NAN)
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn open_http1(path: &Path, config: Arc<rustls::ClientConfig>) -> Sender {
    let io = connect(path, config).await;
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender
}

/// One GET on `sender`: its latency in µs if it succeeded. A closed connection is reopened.
async fn timed_get(
    path: &Path,
    config: &Arc<rustls::ClientConfig>,
    sender: &mut Sender,
    target: &str,
) -> Option<u64> {
    if sender.ready().await.is_err() {
        *sender = open_http1(path, config.clone()).await;
        return None;
    }
    let started = Instant::now();
    match sender.send_request(request(path, target)).await {
        Ok(resp) => {
            let ok = resp.status().is_success();
            let _ = resp.into_body().collect().await;
            ok.then(|| started.elapsed().as_micros() as u64)
        }
        Err(_) => {
            *sender = open_http1(path, config.clone()).await;
            None
        }
    }
}

async fn interleave(a: Arc<Args>) {
    struct Lane<'a> {
        path: &'a Path,
        config: Arc<rustls::ClientConfig>,
        sender: Sender,
        target: String,
        latencies: Vec<u64>,
        errors: u64,
    }
    let mut lanes = Vec::new();
    for path in &a.paths {
        let config = tls(path, b"http/1.1");
        let sender = open_http1(path, config.clone()).await;
        let target = path.url.path_and_query().unwrap().as_str().to_owned();
        lanes.push(Lane {
            path,
            config,
            sender,
            target,
            latencies: Vec::new(),
            errors: 0,
        });
    }
    // xorshift64: a fresh order every round, without a dependency.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut order: Vec<usize> = (0..lanes.len()).collect();
    let until = Instant::now() + Duration::from_secs(a.duration);
    while Instant::now() < until {
        for i in (1..order.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            order.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            let lane = &mut lanes[i];
            match timed_get(lane.path, &lane.config, &mut lane.sender, &lane.target).await {
                Some(us) => lane.latencies.push(us),
                None => lane.errors += 1,
            }
        }
    }
    for mut lane in lanes {
        lane.latencies.sort_unstable();
        println!(
            "path={} requests={} p50_ms={:.3} p99_ms={:.3} errors={}",
            lane.path.name,
            lane.latencies.len(),
            percentile_ms(&lane.latencies, 0.50),
            percentile_ms(&lane.latencies, 0.99),
            lane.errors
        );
    }
}

async fn watch(a: Arc<Args>) {
    const STREAMS_PER_CONNECTION: usize = 1000;
    let config = tls(a.path(), b"h2");
    let path = a
        .path()
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
        let io = connect(a.path(), config.clone()).await;
        let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let opens: Vec<_> = (0..n)
            .map(|_| {
                let mut sender = sender.clone();
                let req = request(a.path(), &path);
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
        "interleave" => rt.block_on(interleave(a)),
        other => panic!("mode {other}: get, watch or interleave"),
    }
}
