//! Config push against real tunnel-proxy config APIs (in-process, on loopback).

use std::sync::Arc;

use tunnel_config::config::Config;
use tunnel_controller::push::{ConditionChange, PushHealth, PushOutcome, Pusher, VersionClock};
use tunnel_proxy::admin::{self, AdminOptions};
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
            &clock,
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
            &clock,
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
            &clock,
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
            &behind,
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
            &clock,
        )
        .await;
    let bad: Config = serde_json::from_value(serde_json::json!({
        "version": clock.next(),
        "routes": [{"kind": "HTTPRoute", "name": "x",
                    "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "("}}]}]}]
    }))
    .unwrap();
    let out = pusher()
        .push(std::slice::from_ref(&p.addr), "t", &bad, &clock)
        .await;
    assert!(
        matches!(&out[0].1, PushOutcome::Rejected { status: 400, message } if message.contains("regex")),
        "{out:?}"
    );
    assert_eq!(loaded(&p), Some(good));
}

#[tokio::test]
async fn a_sustained_run_of_failed_rounds_sets_the_condition_and_the_first_success_clears_it() {
    let down: String = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
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
                &clock,
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
            &clock,
        )
        .await;
    assert_eq!(health.record(&out), ConditionChange::Recovered);
    assert_eq!(
        health.record(&[]),
        ConditionChange::None,
        "no pods is neutral"
    );
}
