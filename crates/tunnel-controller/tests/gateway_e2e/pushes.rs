//! Config delivery to the shared plane: new pods get the last config, a proxy refusing pushes
//! shows on the routes and clears.

use std::time::Duration;

use test_cluster::unique_name;

use crate::routing::wait_traffic;
use crate::world::*;

#[tokio::test]
async fn a_new_proxy_pod_gets_the_config_without_any_route_change() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("newpod");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("newpod").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;
    wait_traffic(&host, "/", 200, "newpod").await;

    let p = spawn_proxy(SHARED_TOKEN).await;
    assert!(p.state.document().is_none());
    publish_proxy(cluster(), &unique_name("new"), &p).await;
    let data = p.data;
    eventually(
        "the new pod serves the existing route",
        Duration::from_secs(30),
        || {
            let host = host.clone();
            async move {
                match get_via(data, &host, "/").await {
                    Ok((200, b)) if b.contains("newpod") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
    assert_eq!(
        p.state.document().map(|d| d.version),
        w.proxies[0].state.document().map(|d| d.version),
        "the replayed config is the current one"
    );
}

#[tokio::test]
async fn a_proxy_refusing_pushes_sets_proxy_config_pushed_false_then_clears() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("refuse");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("refuse").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;
    wait_traffic(&host, "/", 200, "refuse").await;

    // A pod that does not accept the shared plane's token.
    let stranger = spawn_proxy("some-other-partition").await;
    let pod = unique_name("stranger");
    publish_proxy(cluster(), &pod, &stranger).await;
    let msg = wait_route_condition(
        "httproute",
        &ns,
        "web",
        "cf.k8s.lex.la/ProxyConfigPushed",
        "False",
        "ProxyConfigPushFailed",
    )
    .await;
    assert!(msg.contains("401"), "the message says why: {msg}");
    assert!(
        stranger.state.document().is_none(),
        "a refused push changes nothing"
    );
    // Accepted does not flap.
    assert_eq!(
        route_condition("httproute", &ns, "web", "Accepted")
            .await
            .map(|c| c.0),
        Some("True".to_owned())
    );
    eventually(
        "a ProxyConfigPushFailed Event",
        Duration::from_secs(30),
        || async {
            let ev = kubectl(&["get", "events", "-n", &ns, "-o", "json"]).await;
            if ev.contains("ProxyConfigPushFailed") {
                Ok(())
            } else {
                Err("none yet".to_owned())
            }
        },
    )
    .await;

    kubectl(&[
        "delete",
        "endpointslice",
        &format!("tunnel-proxy-config-{pod}"),
        "-n",
        SYSTEM_NS,
    ])
    .await;
    eventually(
        "ProxyConfigPushed cleared",
        Duration::from_secs(60),
        || async {
            match route_condition("httproute", &ns, "web", "cf.k8s.lex.la/ProxyConfigPushed").await
            {
                None => Ok(()),
                Some(c) => Err(format!("{c:?}")),
            }
        },
    )
    .await;
}
