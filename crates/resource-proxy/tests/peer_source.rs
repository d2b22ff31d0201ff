//! The EndpointSlice peer source against an in-process fake API server, with tokio's paused
//! clock: the first list publishes the ready endpoints; when the watch drops the cached list is
//! used for 60 s and then distrusted (503 `stale_peers`); a fresh list restores service at once.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use resource_proxy::config::{BaseCredential, Credential, PeerSource, Target, TargetRef};
use resource_proxy::metrics::{Metrics, PeerStateLabels, TargetLabels};
use resource_proxy::target::peer_source::{self, EndpointSliceSource};
use resource_proxy::target::peers::{NoPeer, STALE_AFTER};
use resource_proxy::target::{TargetClient, TargetError};
use tokio::sync::watch;
use tokio::time::Instant;

/// A fake host cluster: answers the EndpointSlice list while `up`, holds watches open until it
/// goes down, and answers 503 while down.
fn host_cluster(up: watch::Receiver<bool>, slices: serde_json::Value) -> kube::Client {
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let up = up.clone();
        let slices = slices.clone();
        async move {
            let query = req.uri().query().unwrap_or_default().to_owned();
            assert!(
                query.contains("labelSelector=kubernetes.io%2Fservice-name%3Dkube-apiserver"),
                "{query}"
            );
            if !*up.borrow() {
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503, "reason": "ServiceUnavailable", "message": "down"});
                return Ok::<_, Infallible>(
                    http::Response::builder()
                        .status(503)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(status.to_string())).boxed_unsync())
                        .unwrap(),
                );
            }
            if query.contains("watch=true") {
                // Open until the cluster goes down, then the stream ends.
                let mut up = up.clone();
                let stream = futures::stream::once(async move {
                    let _ = up.wait_for(|u| !*u).await;
                })
                .filter_map(|()| async { None::<Result<Frame<Bytes>, Infallible>> });
                return Ok(http::Response::builder()
                    .header("content-type", "application/json")
                    .body(StreamBody::new(stream).boxed_unsync())
                    .unwrap());
            }
            let list = serde_json::json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
                "metadata": {"resourceVersion": "7"}, "items": slices,
            });
            Ok(http::Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(list.to_string())).boxed_unsync())
                .unwrap())
        }
    });
    kube::Client::new(svc, "default")
}

fn slice(name: &str, port: u16) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "vc-t", "resourceVersion": "7",
                     "labels": {"kubernetes.io/service-name": "kube-apiserver"}},
        "addressType": "IPv4",
        "ports": [{"name": "https", "port": port}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
    })
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_cached_peer_list_is_used_for_sixty_seconds_after_the_watch_drops_then_distrusted_until_a_fresh_list()
 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let ca = test_cluster::pki::Authority::generate("peer-source-ca").unwrap();
    let client_cert = ca.client_cert("loft:vcluster:p-x:y", &[]).unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(p("c.crt"), &client_cert.cert_pem).unwrap();
    std::fs::write(p("c.key"), &client_cert.key_pem).unwrap();
    let target = Target {
        peers: PeerSource::EndpointSlice {
            kubeconfig: p("unused"),
            namespace: "vc-t".into(),
            service: "kube-apiserver".into(),
            port_name: "https".into(),
        },
        ca_file: p("ca.crt"),
        server_name: "localhost".into(),
        credential: Credential::Direct(BaseCredential::ClientCertificate {
            cert_file: p("c.crt"),
            key_file: p("c.key"),
        }),
    };
    let metrics = Metrics::new();
    let client = TargetClient::with_metrics(
        &TargetRef {
            project: "p".into(),
            name: "t".into(),
        },
        &target,
        metrics.clone(),
        vec!["example.test/v1".into()],
    )
    .unwrap();
    let label = TargetLabels {
        target: "p/t".into(),
    };
    let synced = || metrics.peer_cache_synced.get_or_create(&label).get();
    let healthy = || {
        metrics
            .peers
            .get_or_create(&PeerStateLabels {
                target: "p/t".into(),
                group_version: "example.test/v1".into(),
                state: "healthy".into(),
            })
            .get()
    };

    // Before the first list: no peer, not synced.
    assert_eq!(client.peers().pick().unwrap_err(), NoPeer::Empty);
    assert_eq!(synced(), 0);

    let (up_tx, up) = watch::channel(true);
    let host = host_cluster(up, serde_json::json!([slice("a", 1111), slice("b", 2222)]));
    let source = EndpointSliceSource {
        namespace: "vc-t".into(),
        service: "kube-apiserver".into(),
        port_name: "https".into(),
    };
    tokio::spawn(peer_source::follow(client.clone(), host, source));
    until("the first publication", || client.peers().is_synced()).await;
    let hosts: Vec<String> = client
        .peers()
        .hosts()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(hosts, ["127.0.0.1:1111", "127.0.0.1:2222"]);
    assert_eq!((synced(), healthy()), (1, 2));

    // The host cluster goes away: the watch drops, the clock starts.
    up_tx.send_replace(false);
    until("the watch to drop", || {
        client.peers().watch_down_for().is_some()
    })
    .await;
    assert_eq!(synced(), 0);
    let down_for = client.peers().watch_down_for().unwrap();
    tokio::time::sleep(STALE_AFTER - down_for).await;
    assert!(
        client.peers().pick().is_ok(),
        "the cached list is used up to 60 s"
    );
    client.refresh_peer_gauges();
    let age = metrics.peer_list_age.get_or_create(&label).get();
    assert!((age - 60.0).abs() < 0.001, "list age {age}");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(client.peers().pick().unwrap_err(), NoPeer::Stale);
    let started = Instant::now();
    let err = client
        .send(http::Request::get("/version").body(Bytes::new()).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TargetError::NoPeer {
                why: NoPeer::Stale,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.reason(), "stale_peers");
    assert_eq!(started.elapsed(), Duration::ZERO, "fails at once");

    // It comes back: the next attempt lists afresh and the list is trusted again.
    up_tx.send_replace(true);
    let back = Instant::now();
    until("a fresh publication", || client.peers().is_synced()).await;
    assert!(
        back.elapsed() <= peer_source::MAX_RETRY_DELAY,
        "recovered within the retry delay: {:?}",
        back.elapsed()
    );
    assert_eq!(client.peers().watch_down_for(), None);
    assert!(client.peers().pick().is_ok());
    assert_eq!(metrics.peer_list_age.get_or_create(&label).get(), 0.0);
    assert_eq!(synced(), 1);
}
