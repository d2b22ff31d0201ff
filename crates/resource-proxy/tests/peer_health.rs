//! Peer health through the real connector (TCP + TLS), with tokio's paused clock: a peer that
//! accepts TCP but never completes TLS and a peer that never answers each count as dial failures
//! after 5 s; three quarantine the host; with no selectable host, requests fail at once. A
//! request whose dial fails is tried once more on another peer. Requests share idle HTTP/1.1
//! connections, and a connection the peer closes is handled as HTTP clients must: not reused
//! once seen closed, a repeatable request sent again, a write never repeated.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use resource_proxy::config::{
    BaseCredential, Credential, PeerAddress, PeerSource, Target, TargetRef,
};
use resource_proxy::target::peers::{DIAL_TIMEOUT, NoPeer};
use resource_proxy::target::{TargetClient, TargetError};

struct Fixture {
    _dir: tempfile::TempDir,
    ca: test_cluster::pki::Authority,
    target: Target,
}

/// CA and client credential files; `peers` are the addresses to dial.
fn fixture(peers: Vec<PeerAddress>) -> Fixture {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let ca = test_cluster::pki::Authority::generate("peer-test-ca").unwrap();
    let client = ca.client_cert("loft:vcluster:p-x:y", &[]).unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(p("c.crt"), &client.cert_pem).unwrap();
    std::fs::write(p("c.key"), &client.key_pem).unwrap();
    let target = Target {
        peers: PeerSource::Static(peers),
        ca_file: p("ca.crt"),
        server_name: "localhost".into(),
        credential: Credential::Direct(BaseCredential::ClientCertificate {
            cert_file: p("c.crt"),
            key_file: p("c.key"),
        }),
    };
    Fixture {
        _dir: dir,
        ca,
        target,
    }
}

fn target_ref() -> TargetRef {
    TargetRef {
        project: "p".into(),
        name: "t".into(),
    }
}

/// A listener that accepts connections and then says nothing (TLS never completes).
async fn silent_peer() -> (PeerAddress, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (
        PeerAddress {
            host: "127.0.0.1".into(),
            port,
        },
        task,
    )
}

async fn get(client: &TargetClient) -> Result<u16, TargetError> {
    let req = http::Request::get("/version").body(Bytes::new()).unwrap();
    client.send(req).await.map(|r| r.status().as_u16())
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_never_completes_tls_is_quarantined_after_three_five_second_dials() {
    let (peer, _task) = silent_peer().await;
    let f = fixture(vec![peer.clone()]);
    let client = TargetClient::new(&target_ref(), &f.target).unwrap();
    for attempt in 1..=3 {
        let started = tokio::time::Instant::now();
        let err = get(&client).await.unwrap_err();
        assert_eq!(err.reason(), "timeout", "attempt {attempt}: {err}");
        assert_eq!(
            started.elapsed(),
            DIAL_TIMEOUT,
            "attempt {attempt} waited the dial timeout"
        );
    }
    let started = tokio::time::Instant::now();
    let err = get(&client).await.unwrap_err();
    assert!(
        matches!(
            err,
            TargetError::NoPeer {
                why: NoPeer::AllQuarantined,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "fails at once, without a dial"
    );
}

#[tokio::test(start_paused = true)]
async fn a_trial_whose_request_is_cancelled_still_reports_its_dial() {
    let (peer, _task) = silent_peer().await;
    let f = fixture(vec![peer.clone()]);
    let client = TargetClient::new(&target_ref(), &f.target).unwrap();
    for _ in 0..3 {
        assert_eq!(get(&client).await.unwrap_err().reason(), "timeout");
    }
    tokio::time::advance(resource_proxy::target::peers::QUARANTINE_DURATION).await;
    // The trial's caller gives up after 1 s; its dial goes on to its 5 s timeout and reports.
    let cancelled = tokio::time::timeout(Duration::from_secs(1), get(&client)).await;
    assert!(cancelled.is_err(), "cancelled before the dial ended");
    assert_eq!(
        get(&client).await.unwrap_err().reason(),
        "all_quarantined",
        "the trial is still in flight: others fail fast"
    );
    tokio::time::sleep(DIAL_TIMEOUT).await;
    let census = client.peers().census();
    assert_eq!(
        census[1].1, 1,
        "the trial's dial failed and quarantined the host again, instead of leaving it half-open \
         with no trial: {census:?}"
    );
    tokio::time::advance(resource_proxy::target::peers::QUARANTINE_DURATION).await;
    assert_eq!(
        get(&client).await.unwrap_err().reason(),
        "timeout",
        "and the next quarantine ends in a trial again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_dial_is_retried_once_on_the_other_peer_and_both_are_quarantined_in_turn() {
    // Port of a listener that was closed: connections are refused at once.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (silent, _task) = silent_peer().await;
    let f = fixture(vec![
        PeerAddress {
            host: "127.0.0.1".into(),
            port: refused,
        },
        silent.clone(),
    ]);
    let client = TargetClient::new(&target_ref(), &f.target).unwrap();
    // Each request: refused on the first peer, retried on the other, which times out.
    for attempt in 1..=3 {
        let started = tokio::time::Instant::now();
        let err = get(&client).await.unwrap_err();
        assert_eq!(err.reason(), "timeout", "attempt {attempt}: {err}");
        assert_eq!(started.elapsed(), DIAL_TIMEOUT, "one retry, not more");
    }
    assert_eq!(
        (
            dial_failures(&client, "error"),
            dial_failures(&client, "timeout")
        ),
        (3, 3),
        "three dials to each peer quarantine both"
    );
    assert_eq!(get(&client).await.unwrap_err().reason(), "all_quarantined");
    // After 20 s each host gets exactly one trial.
    tokio::time::advance(resource_proxy::target::peers::QUARANTINE_DURATION).await;
    let census = client.peers().census();
    assert_eq!(census[2].1, 2, "both half-open: {census:?}");
}

fn dial_failures(client: &TargetClient, reason: &str) -> u64 {
    client
        .metrics()
        .peer_dial_failures
        .get_or_create(&resource_proxy::metrics::ReasonLabels {
            target: "p/t".into(),
            reason: reason.into(),
        })
        .get()
}

/// A TLS peer (HTTP/2 or HTTP/1.1 by ALPN) answering 200 to everything.
async fn answering_peer(ca: &test_cluster::pki::Authority) -> PeerAddress {
    let acceptor = tls_acceptor(ca);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"{}"),
                    )))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    PeerAddress {
        host: "127.0.0.1".into(),
        port,
    }
}

#[tokio::test]
async fn a_request_whose_dial_is_refused_is_answered_by_the_other_peer() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        PeerAddress {
            host: "127.0.0.1".into(),
            port: l.local_addr().unwrap().port(),
        }
    };
    let mut f = fixture(vec![]);
    let answering = answering_peer(&f.ca).await;
    f.target.peers = PeerSource::Static(vec![refused.clone(), answering.clone()]);
    let client = TargetClient::new(&target_ref(), &f.target).unwrap();
    for i in 0..8 {
        assert_eq!(get(&client).await.unwrap(), 200, "request {i}");
    }
    assert_eq!(
        dial_failures(&client, "error"),
        3,
        "the refused peer was tried until its quarantine"
    );
    assert_eq!(client.peers().census()[1].1, 1, "and is quarantined");
    assert_eq!(
        client.connections(&answering),
        1,
        "every request rode on one (HTTP/1.1) connection"
    );
}

fn tls_acceptor(ca: &test_cluster::pki::Authority) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let cert = ca.serving_cert(&["localhost"], &[]).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// What a [`scripted_peer`] saw: connections accepted, and the request lines read.
#[derive(Default)]
struct Seen {
    connections: usize,
    requests: Vec<String>,
}

/// A TLS peer speaking raw HTTP/1.1 that answers the first `answered` requests of each
/// connection with 200, then closes the connection: at once, or (`read_one_more`) after reading
/// one more request it leaves unanswered (as a server restarting or timing the connection out
/// does).
async fn scripted_peer(
    ca: &test_cluster::pki::Authority,
    answered: usize,
    read_one_more: bool,
) -> (PeerAddress, std::sync::Arc<std::sync::Mutex<Seen>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let acceptor = tls_acceptor(ca);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            let seen = record.clone();
            seen.lock().unwrap().connections += 1;
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let requests = if read_one_more {
                    answered + 1
                } else {
                    answered
                };
                for n in 0..requests {
                    // One request: a head (these requests have no body but the POST's `{}`).
                    let line = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            let body = if head.contains("content-length: 2") {
                                2
                            } else {
                                0
                            };
                            while buf.len() < end + 4 + body {
                                let mut more = [0u8; 4096];
                                let k = tls.read(&mut more).await.unwrap_or(0);
                                if k == 0 {
                                    return;
                                }
                                buf.extend_from_slice(&more[..k]);
                            }
                            buf.drain(..end + 4 + body);
                            break head.lines().next().unwrap_or_default().to_owned();
                        }
                        let mut more = [0u8; 4096];
                        match tls.read(&mut more).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&more[..k]),
                        }
                    };
                    seen.lock().unwrap().requests.push(line);
                    if n == answered {
                        break;
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                    if tls.write_all(answer).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                }
                let _ = tls.shutdown().await;
            });
        }
    });
    (
        PeerAddress {
            host: "127.0.0.1".into(),
            port,
        },
        seen,
    )
}

/// A client of one [`scripted_peer`] that has had its first request answered.
struct Scripted {
    _fixture: Fixture,
    peer: PeerAddress,
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
    client: TargetClient,
}

async fn scripted(answered: usize, read_one_more: bool) -> Scripted {
    let mut f = fixture(vec![]);
    let (peer, seen) = scripted_peer(&f.ca, answered, read_one_more).await;
    f.target.peers = PeerSource::Static(vec![peer.clone()]);
    let client = TargetClient::new(&target_ref(), &f.target).unwrap();
    assert_eq!(get(&client).await.unwrap(), 200, "the first request");
    Scripted {
        _fixture: f,
        peer,
        seen,
        client,
    }
}

#[tokio::test]
async fn requests_in_turn_share_one_connection() {
    let s = scripted(usize::MAX, false).await;
    for i in 1..5 {
        assert_eq!(get(&s.client).await.unwrap(), 200, "request {i}");
    }
    let seen = s.seen.lock().unwrap();
    assert_eq!((seen.connections, seen.requests.len()), (1, 5));
    assert_eq!(s.client.connections(&s.peer), 1);
}

#[tokio::test]
async fn a_connection_the_peer_closed_while_idle_is_not_used_again() {
    let s = scripted(1, false).await;
    // The peer has closed the idle connection; a write (never sent twice) must not be put on it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.client.send(post()).await.unwrap().status(), 200);
    assert_eq!(s.seen.lock().unwrap().connections, 2);
}

fn post() -> http::Request<Bytes> {
    http::Request::post("/apis/example.test/v1/namespaces/a/widgets")
        .header("content-type", "application/json")
        .body(Bytes::from_static(b"{}"))
        .unwrap()
}

#[tokio::test]
async fn a_get_whose_connection_closes_before_any_answer_is_sent_again_on_a_new_one() {
    let s = scripted(1, true).await;
    // Sent on the idle connection, which the peer closes unanswered: sent again on a new one.
    assert_eq!(get(&s.client).await.unwrap(), 200);
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.connections, 2);
    assert_eq!(seen.requests, vec!["GET /version HTTP/1.1"; 3]);
}

#[tokio::test]
async fn a_write_whose_connection_closes_before_any_answer_is_not_sent_again() {
    let s = scripted(1, true).await;
    let err = s.client.send(post()).await.unwrap_err();
    assert!(
        err.may_have_been_sent(),
        "the caller must learn the write may have happened: {err}"
    );
    let seen = s.seen.lock().unwrap();
    assert_eq!(
        seen.requests
            .iter()
            .filter(|l| l.starts_with("POST"))
            .count(),
        1,
        "the POST reached the peer once: {:?}",
        seen.requests
    );
}
