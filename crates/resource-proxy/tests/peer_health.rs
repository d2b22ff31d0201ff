//! Peer health through the real connector (TCP + TLS), with tokio's paused clock: a peer that
//! accepts TCP but never completes TLS and a peer that never answers each count as dial failures
//! after 5 s; three quarantine the host; with no selectable host, requests fail at once.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use resource_proxy::config::{
    BaseCredential, Credential, PeerAddress, PeerSource, Target, TargetRef,
};
use resource_proxy::peers::{DIAL_TIMEOUT, NoPeer};
use resource_proxy::target::{TargetClient, TargetError};

struct Fixture {
    _dir: tempfile::TempDir,
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
    Fixture { _dir: dir, target }
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
    let req = http::Request::get("/version")
        .body(Full::new(Bytes::new()))
        .unwrap();
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
async fn a_refused_peer_is_skipped_and_requests_go_to_the_other() {
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
    let mut refused_errors = 0;
    let mut timeouts = 0;
    for _ in 0..6 {
        match get(&client).await.unwrap_err().reason() {
            "error" => refused_errors += 1,
            "timeout" => timeouts += 1,
            other => panic!("{other}"),
        }
    }
    assert_eq!(
        (refused_errors, timeouts),
        (3, 3),
        "round-robin until both are quarantined"
    );
    assert_eq!(get(&client).await.unwrap_err().reason(), "all_quarantined");
    // After 20 s each host gets exactly one trial.
    tokio::time::advance(resource_proxy::peers::QUARANTINE_DURATION).await;
    let census = client.peers().census();
    assert_eq!(census[2].1, 2, "both half-open: {census:?}");
}
