//! Config push against real tunnel-proxy config APIs (in-process, on loopback): versions,
//! tokens, push health, and the config API's mutual TLS (who may push, what crosses the wire,
//! CA rotation).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tunnel_config::config_api::ClientIdentity;
use tunnel_controller::publish::config_api::pki::{
    CA_LIFETIME, CertKey, LEAF_LIFETIME, generate_ca, issue_client, issue_serving, validity,
};

use tunnel_config::config::Config;
use tunnel_controller::publish::planes::push::TlsTarget;
use tunnel_controller::publish::planes::push::{
    ConditionChange, PushHealth, PushOutcome, Pusher, Transport, VersionClock,
};
use tunnel_proxy::admin::{self, AdminOptions};
use tunnel_proxy::config_tls::{self, ReloadingTls, TlsFiles};
use tunnel_proxy::state::State;

struct ProxyApi {
    addr: String,
    state: Arc<State>,
}

async fn proxy_api(token: &str) -> ProxyApi {
    let state = Arc::new(State::new());
    let router = admin::router(
        state.clone(),
        AdminOptions {
            auth_token: Some(token.to_owned()),
            connector_ready_url: None,
        },
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, router).await });
    ProxyApi { addr, state }
}

fn doc(version: u64, host: &str) -> Config {
    serde_json::from_value(serde_json::json!({
        "version": version,
        "routes": [{"kind": "HTTPRoute", "name": "ns/r", "hostnames": [host],
                    "rules": [{"backends": [{"name": "ns/svc:80", "endpoints": ["127.0.0.1:9"]}]}]}]
    }))
    .unwrap()
}

fn loaded(p: &ProxyApi) -> Option<u64> {
    p.state.document().map(|d| d.version)
}

fn pusher() -> Pusher {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Pusher::new().unwrap()
}

#[tokio::test]
async fn every_proxy_of_the_partition_gets_the_document_with_the_partitions_token() {
    let (a, b) = (proxy_api("plane-a").await, proxy_api("plane-a").await);
    let clock = VersionClock::default();
    let v = clock.next();
    let out = pusher()
        .push(
            &[a.addr.clone(), b.addr.clone()],
            "plane-a",
            &doc(v, "a.example.com"),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert!(out.iter().all(|(_, o)| o.is_loaded()), "{out:?}");
    assert_eq!((loaded(&a), loaded(&b)), (Some(v), Some(v)));
}

#[tokio::test]
async fn another_partitions_token_is_refused_and_changes_nothing() {
    let theirs = proxy_api("plane-b").await;
    let clock = VersionClock::default();
    let out = pusher()
        .push(
            std::slice::from_ref(&theirs.addr),
            "plane-a",
            &doc(clock.next(), "a.example.com"),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert_eq!(out[0].1, PushOutcome::Unauthorized);
    assert_eq!(
        loaded(&theirs),
        None,
        "a plane never receives another partition's config"
    );
}

#[tokio::test]
async fn a_proxy_holding_a_newer_version_gets_the_document_again_above_it() {
    let p = proxy_api("t").await;
    let clock = VersionClock::default();
    let ahead = clock.next() + 1_000_000;
    let out = pusher()
        .push(
            std::slice::from_ref(&p.addr),
            "t",
            &doc(ahead, "old.example.com"),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert!(out[0].1.is_loaded());
    // A restarted controller with a clock behind the proxy's version.
    let behind = VersionClock::default();
    let out = pusher()
        .push(
            std::slice::from_ref(&p.addr),
            "t",
            &doc(behind.next(), "new.example.com"),
            None,
            &behind,
            &Transport::Plain,
        )
        .await;
    assert!(out[0].1.is_loaded(), "{out:?}");
    let now = p.state.document().unwrap();
    assert!(now.version > ahead);
    assert!(
        serde_json::to_string(&*now)
            .unwrap()
            .contains("new.example.com")
    );
    assert!(
        behind.next() > now.version,
        "the clock moved past the proxy's version"
    );
}

#[tokio::test]
async fn an_invalid_document_is_rejected_and_the_proxy_keeps_serving_its_config() {
    let p = proxy_api("t").await;
    let clock = VersionClock::default();
    let good = clock.next();
    pusher()
        .push(
            std::slice::from_ref(&p.addr),
            "t",
            &doc(good, "a.example.com"),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    let bad: Config = serde_json::from_value(serde_json::json!({
        "version": clock.next(),
        "routes": [{"kind": "HTTPRoute", "name": "x",
                    "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "("}}]}]}]
    }))
    .unwrap();
    let out = pusher()
        .push(
            std::slice::from_ref(&p.addr),
            "t",
            &bad,
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert!(
        matches!(&out[0].1, PushOutcome::Rejected { status: 400, message } if message.contains("regex")),
        "{out:?}"
    );
    assert_eq!(loaded(&p), Some(good));
}

#[tokio::test]
async fn a_sustained_run_of_failed_rounds_sets_the_condition_and_the_first_success_clears_it() {
    let refusing = test_cluster::RefusingPort::bind().unwrap();
    let down = refusing.addr();
    let up = proxy_api("t").await;
    let clock = VersionClock::default();
    let pusher = pusher();
    let mut health = PushHealth::default();
    let mut changes = Vec::new();
    for _ in 0..4 {
        let out = pusher
            .push(
                &[up.addr.clone(), down.clone()],
                "t",
                &doc(clock.next(), "a.example.com"),
                None,
                &clock,
                &Transport::Plain,
            )
            .await;
        assert!(matches!(out[1].1, PushOutcome::Failed(_)));
        changes.push(health.record(&out));
    }
    assert_eq!(
        changes,
        [
            ConditionChange::None,
            ConditionChange::None,
            ConditionChange::Failing,
            ConditionChange::None
        ]
    );
    assert!(health.is_failing());
    let out = pusher
        .push(
            std::slice::from_ref(&up.addr),
            "t",
            &doc(clock.next(), "a.example.com"),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert_eq!(health.record(&out), ConditionChange::Recovered);
    assert_eq!(
        health.record(&[]),
        ConditionChange::None,
        "no pods is neutral"
    );
}

// --- The config API over mutual TLS -------------------------------------------------------

const PLANE: &str = "tunnel-proxy-config.tunnel-gateway-system.svc";
const TOKEN: &str = "token-0123456789abcdef-never-in-clear";

fn now() -> SystemTime {
    SystemTime::now()
}

fn ca() -> CertKey {
    generate_ca(now(), CA_LIFETIME).unwrap()
}

fn serving(ca: &CertKey) -> CertKey {
    issue_serving(
        ca,
        &[PLANE.to_owned(), "localhost".to_owned()],
        now(),
        LEAF_LIFETIME,
    )
    .unwrap()
}

fn controller(ca: &CertKey) -> ClientIdentity {
    issue_client(ca, now(), LEAF_LIFETIME).unwrap()
}

/// A client certificate of `ca` with another URI identity.
fn impostor(ca: &CertKey, uri: &str) -> ClientIdentity {
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        &ca.cert_pem,
        rcgen::KeyPair::from_pem(&ca.key_pem).unwrap(),
    )
    .unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().unwrap())];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    ClientIdentity {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn tls(trust: &[&CertKey], identities: Vec<ClientIdentity>) -> Transport {
    Transport::Tls(Arc::new(TlsTarget {
        trust_pem: trust.iter().map(|c| c.cert_pem.as_str()).collect(),
        identities,
        plane_name: PLANE.to_owned(),
    }))
}

/// Writes a plane's files the way a Secret volume changes: all at once (a rename).
fn write_files(dir: &std::path::Path, serving: &CertKey, bundle: &[&CertKey]) {
    let next = dir.with_extension("next");
    std::fs::create_dir_all(&next).unwrap();
    std::fs::write(next.join("tls.crt"), &serving.cert_pem).unwrap();
    std::fs::write(next.join("tls.key"), &serving.key_pem).unwrap();
    let ca: String = bundle.iter().map(|c| c.cert_pem.as_str()).collect();
    std::fs::write(next.join("ca.crt"), ca).unwrap();
    let old = dir.with_extension("old");
    let _ = std::fs::remove_dir_all(&old);
    if dir.exists() {
        std::fs::rename(dir, &old).unwrap();
    }
    std::fs::rename(&next, dir).unwrap();
}

/// A proxy as the binary runs it with `--config-tls-dir`: `/config` over mutual TLS on one
/// listener (`addr`), the status routes in plain HTTP on the admin port (`admin`).
struct TlsProxy {
    addr: String,
    admin: String,
    state: Arc<State>,
    files: std::path::PathBuf,
    _dir: tempfile::TempDir,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn tls_proxy(serving: &CertKey, bundle: &[&CertKey]) -> TlsProxy {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("config-tls");
    write_files(&files, serving, bundle);
    let state = Arc::new(State::new());
    let expiry = state.metrics().config_tls_expiry().clone();
    let reloading = ReloadingTls::load(TlsFiles::in_dir(&files), expiry).unwrap();
    let (status, config) = admin::split(
        state.clone(),
        AdminOptions {
            auth_token: Some(TOKEN.to_owned()),
            connector_ready_url: None,
        },
    )
    .unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = a.local_addr().unwrap().to_string();
    let tasks = vec![
        reloading.watch(Duration::from_millis(20)),
        tokio::spawn(config_tls::serve(l, config, reloading)),
        tokio::spawn(async move {
            let _ = axum::serve(a, status).await;
        }),
    ];
    TlsProxy {
        addr,
        admin,
        state,
        files,
        _dir: dir,
        tasks,
    }
}

fn loaded_tls(p: &TlsProxy) -> Option<u64> {
    p.state.document().map(|d| d.version)
}

async fn push_one(addr: &str, token: &str, version: u64, transport: &Transport) -> PushOutcome {
    let clock = VersionClock::default();
    pusher()
        .push(
            &[addr.to_owned()],
            token,
            &doc(version, "a.example.com"),
            None,
            &clock,
            transport,
        )
        .await
        .remove(0)
        .1
}

#[tokio::test]
async fn the_config_api_takes_pushes_only_from_the_controllers_certificate_and_token_over_tls() {
    let ours = ca();
    let theirs = ca();
    let p = tls_proxy(&serving(&ours), &[&ours]).await;
    let v = VersionClock::default().next();

    let refused = [
        (
            "another CA's certificate with the controller's identity",
            tls(&[&ours], vec![controller(&theirs)]),
        ),
        (
            "our CA's certificate with another identity",
            tls(
                &[&ours],
                vec![impostor(&ours, "spiffe://tunnel-gateway/tenant")],
            ),
        ),
        ("plain HTTP to the TLS port", Transport::Plain),
    ];
    for (what, transport) in &refused {
        let out = push_one(&p.addr, TOKEN, v, transport).await;
        assert!(matches!(out, PushOutcome::Failed(_)), "{what}: {out:?}");
        assert_eq!(loaded_tls(&p), None, "{what} changed the loaded config");
    }

    // No client certificate at all: a TLS client that trusts the plane but has none.
    let ca_cert = reqwest::Certificate::from_pem(ours.cert_pem.as_bytes()).unwrap();
    let anonymous = reqwest::Client::builder()
        .tls_certs_only([ca_cert])
        .build()
        .unwrap();
    let port = p.addr.rsplit_once(':').unwrap().1;
    let resp = anonymous
        .put(format!("https://localhost:{port}/config"))
        .bearer_auth(TOKEN)
        .json(&doc(v, "a.example.com"))
        .send()
        .await;
    assert!(resp.is_err(), "no client certificate: {resp:?}");
    assert_eq!(loaded_tls(&p), None);

    // The admin port (plain HTTP) has no config API at all.
    let resp = reqwest::Client::new()
        .put(format!("http://{}/config", p.admin))
        .bearer_auth(TOKEN)
        .json(&doc(v, "a.example.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(loaded_tls(&p), None);

    // The controller's certificate with a wrong token: still refused (defence in depth).
    let controller_tls = tls(&[&ours], vec![controller(&ours)]);
    let out = push_one(&p.addr, "not-the-token", v, &controller_tls).await;
    assert_eq!(out, PushOutcome::Unauthorized);
    assert_eq!(loaded_tls(&p), None);

    // A serving certificate of another CA is refused by the controller, too.
    let fake = tls_proxy(&serving(&theirs), &[&ours]).await;
    let out = push_one(&fake.addr, TOKEN, v, &controller_tls).await;
    assert!(matches!(out, PushOutcome::Failed(_)), "{out:?}");
    assert_eq!(loaded_tls(&fake), None);

    // The controller's certificate and token: loaded.
    let out = push_one(&p.addr, TOKEN, v, &controller_tls).await;
    assert!(out.is_loaded(), "{out:?}");
    assert_eq!(loaded_tls(&p), Some(v));
}

/// A TCP relay that forwards to `upstream` and records every byte the client sent.
async fn recording_relay(upstream: String) -> (String, Arc<Mutex<Vec<u8>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            let upstream = upstream.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let mut server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let up = async {
                    let mut buf = [0u8; 16384];
                    loop {
                        let n = cr.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            let _ = sw.shutdown().await;
                            return;
                        }
                        record.lock().unwrap().extend_from_slice(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                let down = tokio::io::copy(&mut sr, &mut cw);
                let _ = tokio::join!(up, down);
            });
        }
    });
    (addr, seen)
}

/// A document carrying a backend's mTLS key, as a push of a BackendTLSPolicy route does.
fn secret_doc(version: u64, backend: &CertKey, client: &CertKey) -> Config {
    serde_json::from_value(serde_json::json!({
        "version": version,
        "routes": [{"kind": "HTTPRoute", "name": "ns/r", "hostnames": ["a.example.com"],
                    "rules": [{"backends": [{"name": "ns/svc:443", "endpoints": ["127.0.0.1:9"],
                        "tls": {"caBundlePem": backend.cert_pem, "serverName": "svc.ns.svc",
                                "clientCertPem": client.cert_pem,
                                "clientKeyPem": client.key_pem}}]}]}]
    }))
    .unwrap()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn nothing_secret_crosses_the_network_in_clear() {
    let ours = ca();
    let backend_ca = ca();
    let backend_client =
        issue_serving(&backend_ca, &["client.ns".to_owned()], now(), LEAF_LIFETIME).unwrap();
    let key_body = backend_client
        .key_pem
        .lines()
        .nth(1)
        .expect("a PEM body line")
        .to_owned();
    let clock = VersionClock::default();

    // Over mutual TLS: the push loads, the wire carries neither the token nor the key.
    let p = tls_proxy(&serving(&ours), &[&ours]).await;
    let (relay, seen) = recording_relay(p.addr.clone()).await;
    let out = pusher()
        .push(
            &[relay],
            TOKEN,
            &secret_doc(clock.next(), &backend_ca, &backend_client),
            None,
            &clock,
            &tls(&[&ours], vec![controller(&ours)]),
        )
        .await;
    assert!(out[0].1.is_loaded(), "{out:?}");
    let wire = seen.lock().unwrap().clone();
    assert!(
        wire.len() > 1000,
        "the relay saw the push ({} bytes)",
        wire.len()
    );
    for secret in [TOKEN, key_body.as_str(), "PRIVATE KEY", "a.example.com"] {
        assert!(!contains(&wire, secret), "{secret:?} crossed in clear");
    }

    // The same relay in front of a plain-HTTP config API sees them: the check above can fail.
    let plain = proxy_api(TOKEN).await;
    let (relay, seen) = recording_relay(plain.addr.clone()).await;
    let out = pusher()
        .push(
            &[relay],
            TOKEN,
            &secret_doc(clock.next(), &backend_ca, &backend_client),
            None,
            &clock,
            &Transport::Plain,
        )
        .await;
    assert!(out[0].1.is_loaded(), "{out:?}");
    let wire = seen.lock().unwrap().clone();
    assert!(contains(&wire, TOKEN) && contains(&wire, &key_body));
}

#[tokio::test]
async fn a_ca_rotation_under_continuous_pushes_loses_none() {
    let old = ca();
    let p = tls_proxy(&serving(&old), &[&old]).await;
    let transport = Arc::new(Mutex::new(tls(&[&old], vec![controller(&old)])));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The rotation step a push ran in.
    let phase = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pushing = {
        let (addr, transport, stop) = (p.addr.clone(), transport.clone(), stop.clone());
        let (phase, done) = (phase.clone(), done.clone());
        tokio::spawn(async move {
            let pusher = pusher();
            let clock = VersionClock::default();
            let mut results = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let t = transport.lock().unwrap().clone();
                let step = phase.load(std::sync::atomic::Ordering::SeqCst);
                let v = clock.next();
                let out = pusher
                    .push(
                        std::slice::from_ref(&addr),
                        TOKEN,
                        &doc(v, "a.example.com"),
                        None,
                        &clock,
                        &t,
                    )
                    .await;
                results.push((step, v, out[0].1.clone()));
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            results
        })
    };
    // Each step lasts long enough for the proxy to reload (it polls every 20 ms) and for
    // several pushes to start and finish within it.
    let settle = || async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = done.load(std::sync::atomic::Ordering::SeqCst);
        while done.load(std::sync::atomic::Ordering::SeqCst) < start + 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        phase.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    };
    settle().await;
    let new = ca();
    // 1. The controller trusts both CAs and holds a client certificate of each; the proxy
    //    still trusts only the old one (its files have not changed yet).
    *transport.lock().unwrap() = tls(&[&new, &old], vec![controller(&new), controller(&old)]);
    settle().await;
    // 2. The plane's bundle gains the new CA.
    write_files(&p.files, &serving(&old), &[&new, &old]);
    settle().await;
    // 3. The plane's serving certificate is reissued by the new CA.
    write_files(&p.files, &serving(&new), &[&new, &old]);
    settle().await;
    // 4. Every plane presents the new CA: the controller drops the old one ...
    *transport.lock().unwrap() = tls(&[&new], vec![controller(&new)]);
    settle().await;
    // 5. ... and so does the plane's bundle.
    let last = serving(&new);
    write_files(&p.files, &last, &[&new]);
    settle().await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let results = pushing.await.unwrap();
    let failed: Vec<_> = results.iter().filter(|(_, _, o)| !o.is_loaded()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} pushes failed: {failed:?}",
        failed.len(),
        results.len()
    );
    for step in 0..6 {
        assert!(
            results.iter().any(|(s, _, _)| *s == step),
            "no push ran during step {step}"
        );
    }
    assert_eq!(loaded_tls(&p), results.last().map(|(_, v, _)| *v));

    // The expiry gauge follows the reloaded files.
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, p.state.registry()).unwrap();
    for (kind, pem) in [("serving", &last.cert_pem), ("client_ca", &new.cert_pem)] {
        let (_, not_after) = validity(pem).unwrap();
        let series = format!(
            "cftunnel_proxy_config_tls_expiry_timestamp_seconds{{kind=\"{kind}\"}} {not_after}\n"
        );
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }

    // After the rotation the old CA's certificate is refused.
    let out = push_one(
        &p.addr,
        TOKEN,
        u64::MAX,
        &tls(&[&new], vec![controller(&old)]),
    )
    .await;
    assert!(matches!(out, PushOutcome::Failed(_)), "{out:?}");
}

/// `count` routes, the one named `ns/r{changed}` pointing at `host`.
fn routes_doc(count: usize, changed: usize, host: &str) -> Config {
    let routes: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            let h = if i == changed {
                host.to_owned()
            } else {
                format!("r{i}.example.com")
            };
            serde_json::json!({"kind": "HTTPRoute", "name": format!("ns/r{i}"), "hostnames": [h],
                "rules": [{"backends": [{"name": "ns/svc:80", "endpoints": ["127.0.0.1:9"]}]}]})
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "version": 0, "routes": routes })).unwrap()
}

/// A round of the shared partition, pushed to `relay` with token `t` in plain HTTP.
async fn shared_round(
    planes: &mut tunnel_controller::publish::planes::Planes,
    doc: &Config,
    relay: &str,
    seq: u64,
) -> tunnel_controller::publish::planes::RoundReport {
    let key = tunnel_controller::keys::PartitionKey::Shared;
    planes
        .round(
            &key,
            doc,
            &shared(relay),
            Ok("t"),
            Ok(&Transport::Plain),
            seq,
        )
        .await
}

fn shared(addr: &str) -> tunnel_controller::publish::planes::ConfigEndpoints {
    tunnel_controller::publish::planes::ConfigEndpoints {
        all: vec![addr.to_owned()],
        ready: [addr.to_owned()].into(),
    }
}

/// How many requests of each method the relay saw, and the bytes sent.
fn methods(seen: &Mutex<Vec<u8>>) -> (usize, usize, usize) {
    let seen = seen.lock().unwrap();
    let count = |m: &str| seen.windows(m.len()).filter(|w| *w == m.as_bytes()).count();
    (count("PUT /config"), count("PATCH /config"), seen.len())
}

#[tokio::test]
async fn a_proxy_holding_the_previous_version_gets_only_the_changed_route() {
    let p = proxy_api("t").await;
    let (relay, seen) = recording_relay(p.addr.clone()).await;
    let mut planes = tunnel_controller::publish::planes::Planes::new(pusher());
    let mut round = async |doc: &Config| {
        let report = shared_round(&mut planes, doc, &relay, 0).await;
        assert!(report.loaded, "{report:?}");
        let held = p.state.document().unwrap();
        let mut content = (*held).clone();
        content.version = 0;
        assert_eq!(&content, doc, "the proxy holds exactly the document");
        held.version
    };
    let v1 = round(&routes_doc(200, 0, "r0.example.com")).await;
    let (puts, patches, first) = methods(&seen);
    assert_eq!((puts, patches), (1, 0));
    // One route of 200 changes: a delta on top of v1, a fraction of the whole document's size.
    let v2 = round(&routes_doc(200, 150, "new.example.com")).await;
    let (puts, patches, total) = methods(&seen);
    assert_eq!((puts, patches), (1, 1));
    assert!(v2 > v1);
    assert!(total - first < first / 20, "delta {} bytes", total - first);
    // A route removed and one added: deltas again.
    round(&routes_doc(199, 150, "new.example.com")).await;
    let mut more = routes_doc(199, 150, "new.example.com");
    let mut added = more.routes[0].clone();
    if let tunnel_config::config::Route::Http(r) = &mut added {
        r.name = "ns/added".to_owned();
        r.hostnames = vec!["added.example.com".to_owned()];
    }
    more.routes.insert(7, added);
    round(&more).await;
    assert_eq!(methods(&seen).0, 1);
    assert_eq!(methods(&seen).1, 3);
}

#[tokio::test]
async fn a_delta_refused_for_another_base_falls_back_to_the_whole_document() {
    let p = proxy_api("t").await;
    let (relay, seen) = recording_relay(p.addr.clone()).await;
    let mut planes = tunnel_controller::publish::planes::Planes::new(pusher());
    let first = routes_doc(20, 0, "r0.example.com");
    let report = shared_round(&mut planes, &first, &relay, 0).await;
    assert!(report.loaded, "{report:?}");
    let v1 = p.state.document().unwrap().version;
    // Behind the controller's back the proxy moved to another document (say a second
    // controller instance pushed): the controller's delta names a base it does not hold.
    let mut other = routes_doc(3, 0, "other.example.com");
    other.version = v1 + 1000;
    p.state.apply(&serde_json::to_vec(&other).unwrap()).unwrap();
    let next = routes_doc(20, 5, "new.example.com");
    let report = shared_round(&mut planes, &next, &relay, 0).await;
    assert!(report.loaded, "{report:?}");
    // PATCH refused (409), PUT refused as older (409), PUT above the proxy's version.
    assert_eq!(methods(&seen).1, 1);
    assert_eq!(methods(&seen).0, 3, "the whole document after the refusal");
    let mut held = (*p.state.document().unwrap()).clone();
    assert!(held.version > v1 + 1000);
    held.version = 0;
    assert_eq!(held, next);
}

#[tokio::test]
async fn the_route_lane_pushes_a_splice_and_an_older_round_does_not_take_it_back() {
    use std::collections::BTreeMap;
    use tunnel_controller::model::lane::Splice;

    let p = proxy_api("t").await;
    let (relay, seen) = recording_relay(p.addr.clone()).await;
    let mut planes = tunnel_controller::publish::planes::Planes::new(pusher());
    let before = routes_doc(200, 0, "r0.example.com");
    let report = shared_round(&mut planes, &before, &relay, 1).await;
    assert!(report.loaded, "{report:?}");
    let v1 = p.state.document().unwrap().version;

    // The lane, as of watch event 5: route 150 gets another hostname, in place.
    let after = routes_doc(200, 150, "new.example.com");
    let pushed = planes
        .lane(5, |docs| {
            let mut out = BTreeMap::new();
            for (partition, doc) in docs {
                doc.routes[150] = after.routes[150].clone();
                out.insert(
                    partition.clone(),
                    Splice {
                        start: 150,
                        remove: 1,
                        insert: 1,
                    },
                );
            }
            Ok::<_, std::convert::Infallible>(out)
        })
        .await
        .unwrap();
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].1.iter().all(|(_, o)| o.is_loaded()), "{pushed:?}");
    let held = p.state.document().unwrap();
    assert!(held.version > v1);
    let mut content = (*held).clone();
    content.version = 0;
    assert_eq!(content, after, "the proxy holds the spliced document");
    assert_eq!(methods(&seen).0, 1);
    assert_eq!(methods(&seen).1, 1, "the lane sends a delta");

    // A round made from a snapshot before event 5 (it has the old route 150) pushes nothing.
    let report = shared_round(&mut planes, &before, &relay, 4).await;
    assert!(report.incomplete && report.loaded, "{report:?}");
    assert_eq!(p.state.document().unwrap().version, held.version);
    assert_eq!((methods(&seen).0, methods(&seen).1), (1, 1));

    // The round after it finds the proxy holding what it would push.
    let report = shared_round(&mut planes, &after, &relay, 6).await;
    assert!(report.loaded && !report.incomplete, "{report:?}");
    assert_eq!((methods(&seen).0, methods(&seen).1), (1, 1));
    assert_eq!(p.state.document().unwrap().version, held.version);
}
