//! Config delivery to the shared plane: new pods get the last config, a proxy refusing pushes
//! shows on the routes and clears, and a rotation of the config API's CA reaches the planes
//! without a failed push.

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

fn pem_count(secret: &serde_json::Value, key: &str) -> usize {
    use base64::Engine;
    let pem = secret["data"][key]
        .as_str()
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .unwrap_or_default();
    String::from_utf8_lossy(&pem)
        .matches("BEGIN CERTIFICATE")
        .count()
}

#[tokio::test]
async fn a_config_ca_rotation_keeps_the_old_ca_until_every_plane_serves_the_new_one() {
    let w = world();
    let _exclusive = w.lock.write().await;
    let ns = unique_name("rotate");
    let host = format!("{ns}.example.com");
    let port = spawn_backend("rotate").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&http_route(&ns, "web", &host, &ns, "echo")).await;
    wait_traffic(&host, "/", 200, "rotate").await;
    let ca = || get_json(&["secret", "tunnel-gateway-config-ca", "-n", SYSTEM_NS]);
    let before = ca().await;
    assert_eq!(
        pem_count(&before, "previous.crt"),
        0,
        "no rotation under way"
    );

    let request = unique_name("r");
    kubectl(&[
        "annotate",
        "secret",
        "tunnel-gateway-config-ca",
        "-n",
        SYSTEM_NS,
        &format!("cf.k8s.lex.la/rotate-config-ca={request}"),
    ])
    .await;
    // The plane's Secret trusts both CAs and carries a certificate of the new one ...
    let shared = eventually(
        "the shared plane's Secret moves to the new CA",
        Duration::from_secs(60),
        || async {
            let s = get_json(&["secret", "tunnel-proxy-config-tls", "-n", SYSTEM_NS]).await;
            (pem_count(&s, "ca.crt") == 2)
                .then_some(s)
                .ok_or("one CA".to_owned())
        },
    )
    .await;
    let rotating = ca().await;
    assert_eq!(
        rotating["metadata"]["annotations"]["cf.k8s.lex.la/rotated-config-ca"],
        request.as_str(),
        "the request is answered"
    );
    assert_ne!(rotating["data"]["ca.crt"], before["data"]["ca.crt"]);
    assert_eq!(rotating["data"]["previous.crt"], before["data"]["ca.crt"]);
    // ... but the pods still serve the old certificate (their files have not caught up): the
    // old CA stays trusted, however many rounds pass.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        ca().await["data"]["previous.crt"],
        before["data"]["ca.crt"],
        "not retired while a plane serves a certificate of it"
    );
    assert!(shared["data"]["tls.crt"].is_string());

    // The files catch up (the kubelet's copy); once every pod presented the new certificate,
    // the old CA is retired.
    eventually(
        "the previous CA retired",
        Duration::from_secs(90),
        || async {
            resync_plane_tls().await;
            let now = ca().await;
            (pem_count(&now, "previous.crt") == 0)
                .then_some(())
                .ok_or("still trusted".to_owned())
        },
    )
    .await;
    let after = get_json(&["secret", "tunnel-proxy-config-tls", "-n", SYSTEM_NS]).await;
    assert_eq!(
        pem_count(&after, "ca.crt"),
        1,
        "the bundle holds the new CA only"
    );
    resync_plane_tls().await;

    // Pushes keep working with the new CA alone: a route change reaches every pod.
    apply(&http_route(
        &ns,
        "web2",
        &format!("two.{host}"),
        &ns,
        "echo",
    ))
    .await;
    wait_traffic(&format!("two.{host}"), "/", 200, "rotate").await;
}
