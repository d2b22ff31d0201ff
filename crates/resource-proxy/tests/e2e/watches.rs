//! Watches through the aggregator and the proxy: streamed event by event, resumable from a
//! resourceVersion, with bookmarks and the target's own `410 Gone`, and a thousand at once.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, PostParams, WatchEvent, WatchParams,
};

use crate::*;

fn widgets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, "Widget");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn obj(name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": 1}
    }))
    .unwrap()
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin),
) -> WatchEvent<DynamicObject> {
    tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .expect("a watch event within 20 s")
        .expect("watch stream error")
        .expect("watch stream ended")
}

fn added_name(e: &WatchEvent<DynamicObject>) -> Option<String> {
    match e {
        WatchEvent::Added(o) => o.metadata.name.clone(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_stream_each_event_resume_from_a_resource_version_and_pass_the_targets_410() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let client = proxy.tenant.client().await.unwrap();
    let ns = namespace(proxy.tenant, "watch").await;
    let api = widgets(&client, &ns);
    let first = api
        .create(&PostParams::default(), &obj("first"))
        .await
        .unwrap();

    // Each event arrives while the stream stays open (nothing waits for the response to end).
    let rv = first.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &obj("second"))
        .await
        .unwrap();
    assert_eq!(
        added_name(&next_event(&mut stream).await).as_deref(),
        Some("second")
    );
    let third = api
        .create(&PostParams::default(), &obj("third"))
        .await
        .unwrap();
    assert_eq!(
        added_name(&next_event(&mut stream).await).as_deref(),
        Some("third")
    );
    drop(stream);

    // Resume after "third": only what came later is delivered.
    let resume = third.metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &obj("fourth"))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &resume)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        added_name(&next_event(&mut stream).await).as_deref(),
        Some("fourth")
    );
    drop(stream);

    // A streaming list ends its initial events with a bookmark.
    let wp = WatchParams::default().initial_events();
    let mut stream = api.watch(&wp, "").await.unwrap().boxed();
    let mut initial = Vec::new();
    loop {
        match next_event(&mut stream).await {
            WatchEvent::Added(o) => initial.push(o.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["first", "fourth", "second", "third"]);
    drop(stream);

    // A resourceVersion the target no longer has: the target's 410 reaches the caller.
    let gone = match api.watch(&WatchParams::default(), "1").await {
        Ok(stream) => {
            let mut stream = stream.boxed();
            match next_event(&mut stream).await {
                WatchEvent::Error(e) => e.code,
                other => panic!("expected the target's error event, got {other:?}"),
            }
        }
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(gone, 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_watches_are_all_live() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = proxies::a().await;
    let client = proxy.tenant.client().await.unwrap();
    let ns = namespace(proxy.tenant, "many").await;
    let api = widgets(&client, &ns);
    let seed = api
        .create(&PostParams::default(), &obj("seed"))
        .await
        .unwrap();
    let rv = seed.metadata.resource_version.unwrap();

    const N: usize = 1000;
    let mut streams = Vec::with_capacity(N);
    for chunk in 0..N / 50 {
        let opened = futures::future::join_all((0..50).map(|_| {
            let api = api.clone();
            let rv = rv.clone();
            async move {
                api.watch(&WatchParams::default().timeout(290), &rv)
                    .await
                    .unwrap()
                    .boxed()
            }
        }))
        .await;
        streams.extend(opened);
        assert_eq!(streams.len(), (chunk + 1) * 50);
    }
    api.create(&PostParams::default(), &obj("broadcast"))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let got = futures::future::join_all(streams.iter_mut().map(|s| async move {
        loop {
            match tokio::time::timeout(Duration::from_secs(60), s.try_next()).await {
                Ok(Ok(Some(e))) => {
                    if added_name(&e).as_deref() == Some("broadcast") {
                        return true;
                    }
                }
                _ => return false,
            }
        }
    }))
    .await;
    let live = got.iter().filter(|ok| **ok).count();
    assert_eq!(live, N, "{live} of {N} watches received the event");
    eprintln!(
        "{N} watches received the event within {:?}",
        started.elapsed()
    );
}
