//! Requests to a real kube-apiserver share HTTP/2 connections: watches are streams on a few
//! connections, another connection opens when one carries its limit, and every watch is live.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use resource_proxy::config::{
    BaseCredential, Credential, PeerAddress, PeerSource, Target, TargetRef,
};
use resource_proxy::target::pool::STREAMS_PER_CONNECTION;
use resource_proxy::target::{TargetBody, TargetClient};

use crate::*;

const WATCH: &str = "/apis/example.test/v1/namespaces/default/widgets?watch=true";

async fn open_watches(client: &TargetClient, n: usize) -> Vec<http::Response<TargetBody>> {
    futures::future::join_all((0..n).map(|_| async {
        let req = http::Request::get(WATCH)
            .header("accept", "application/json")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = client.watch(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        resp
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_to_the_target_are_streams_on_shared_http2_connections() {
    let cp = cp().await;
    let _serial = serial().await;
    let _logs = cp.logs_on_failure();
    let host = cp.cluster("host");
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("ca.crt"), host.ca_pem()).unwrap();
    let cred = host
        .mint_client_cert("multiplexing", &["system:masters"])
        .unwrap();
    std::fs::write(p("c.crt"), &cred.cert_pem).unwrap();
    std::fs::write(p("c.key"), &cred.key_pem).unwrap();
    let peer = PeerAddress {
        host: "127.0.0.1".into(),
        port: host.server_port(0),
    };
    let client = TargetClient::new(
        &TargetRef {
            project: "p".into(),
            name: "host".into(),
        },
        &Target {
            peers: PeerSource::Static(vec![peer.clone()]),
            ca_file: p("ca.crt"),
            server_name: "localhost".into(),
            credential: Credential::Direct(BaseCredential::ClientCertificate {
                cert_file: p("c.crt"),
                key_file: p("c.key"),
            }),
        },
    )
    .unwrap();

    // A just-established CRD answers 429 `storage is (re)initializing` for a moment.
    wait_until(
        "the widgets to be served",
        Duration::from_secs(60),
        || async {
            let req = http::Request::get("/apis/example.test/v1/namespaces/default/widgets")
                .body(Bytes::new())
                .unwrap();
            client.send(req).await.is_ok_and(|r| r.status() == 200)
        },
    )
    .await;

    // 2.5 connections' worth of watches, opened all at once: three connections, not 250.
    let n = STREAMS_PER_CONNECTION * 5 / 2;
    let mut watches = open_watches(&client, n).await;
    // Plus the idle HTTP/1.1 connection of the requests above.
    assert_eq!(client.connections(&peer), 1 + 3);

    // Every one is live: each gets the event of a widget created now.
    host.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.test/v1\nkind: Widget\nmetadata: {name: multiplexed, namespace: default}\n",
    )
    .await
    .unwrap();
    let events = futures::future::join_all(watches.iter_mut().map(|w| async {
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("multiplexed") {
            let frame = w.body_mut().frame().await.unwrap().unwrap();
            seen.extend_from_slice(&frame.into_data().unwrap());
        }
    }));
    tokio::time::timeout(Duration::from_secs(30), events)
        .await
        .expect("every watch received the event");

    // Ended watches free their streams: as many new ones fit on the same connections.
    watches.truncate(n - STREAMS_PER_CONNECTION);
    let more = open_watches(&client, STREAMS_PER_CONNECTION).await;
    assert_eq!(
        client.connections(&peer),
        1 + 3,
        "the freed streams are reused"
    );
    drop((watches, more));
    host.kubectl_ok(&["delete", "widget", "multiplexed", "-n", "default"])
        .await
        .unwrap();
}
