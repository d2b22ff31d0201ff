//! The install as the Helm chart: `helm install` of charts/tunnel-gateway (the Cloudflare API
//! URL and the GatewayClassConfig as values) into the namespace enforcing `restricted`; the
//! controller becomes leader and the shared plane serves a route through the edge; `helm
//! upgrade` to new image tags rolls the controller and the shared plane under traffic without a
//! failed request; `helm uninstall` removes every object of the release and leaves the CRDs.

use std::time::Duration;

use crate::support::{
    Answers, CONTROLLER_IMAGE, Install, Method, NS, PROXY_IMAGE, RELEASE, Traffic, answered_by,
    apply, echo_route, json, kubectl, leader, pod_names, retag, until_status, wait,
};

const HOSTNAME: &str = "echo.helm.example.com";
/// The tag `helm upgrade` moves both images to.
const NEW_TAG: &str = "0.1.1";

/// The images of every container (init containers included) of the Pods matching `selector`.
async fn pod_images(install: &Install, selector: &str) -> Vec<String> {
    json(
        install.cluster(),
        &["-n", NS, "get", "pods", "-l", selector],
    )
    .await["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            ["initContainers", "containers"]
                .iter()
                .filter_map(|k| p["spec"][*k].as_array())
                .flatten()
                .map(|c| c["image"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_upgrades_under_traffic_and_uninstalls() {
    let install = Install::start_with(Method::Helm, &[NEW_TAG]).await;
    let _logs = install.cp.logs_on_failure();
    let cluster = install.cluster();
    let (double, edge, tunnel) = (&install.double, install.edge, &install.tunnel);
    let chart = tunnel_gateway_fixtures::on_node::chart_dir();
    let chart = chart.to_str().unwrap();

    // Installed into the namespace that enforces `restricted`: its Pods were admitted.
    let namespace = json(cluster, &["get", "namespace", NS]).await;
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    leader(cluster).await;

    apply(cluster, &echo_route(HOSTNAME)).await;
    wait(
        cluster,
        "echo",
        "deployment/echo",
        "condition=Available",
        "120s",
    )
    .await;
    wait(
        cluster,
        NS,
        "deployment/tunnel-proxy",
        "condition=Available",
        "180s",
    )
    .await;
    let echo_pods = pod_names(cluster, "echo", "app=echo").await;
    let body = until_status(edge, HOSTNAME, 200, Duration::from_secs(120)).await;
    assert!(answered_by(&body, &echo_pods), "{echo_pods:?}: {body}");

    // The upgrade: new tags for the controller and the proxy (the dedicated planes' too).
    let traffic = Traffic::start(edge, HOSTNAME, "/during-upgrade", move |body| {
        answered_by(body, &echo_pods)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = tokio::time::Instant::now();
    cluster
        .helm_ok(&[
            "upgrade",
            RELEASE,
            chart,
            "-n",
            NS,
            "--reuse-values",
            "--set",
            &format!("image.tag={NEW_TAG},proxy.image.tag={NEW_TAG}"),
        ])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for deployment in ["tunnel-gateway-controller", "tunnel-proxy"] {
        kubectl(
            cluster,
            &[
                "-n",
                NS,
                "rollout",
                "status",
                &format!("deployment/{deployment}"),
                "--timeout=300s",
            ],
        )
        .await;
    }
    // Rolled: only new Pods are left, and both new connectors are registered.
    let (new_proxy, new_controller) = (
        retag(PROXY_IMAGE, NEW_TAG),
        retag(CONTROLLER_IMAGE, NEW_TAG),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let plane = pod_images(&install, "app.kubernetes.io/name=tunnel-proxy").await;
        let controllers =
            pod_images(&install, "app.kubernetes.io/name=tunnel-gateway-controller").await;
        let proxies: Vec<&String> = plane
            .iter()
            .filter(|i| i.contains("tunnel-proxy"))
            .collect();
        if proxies.len() == 2
            && proxies.iter().all(|i| **i == new_proxy)
            && controllers.len() == 2
            && controllers.iter().all(|i| *i == new_controller)
            && double.live_connections(&tunnel.tunnel_id) == 2
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not rolled to {NEW_TAG}: plane {plane:?}, controllers {controllers:?}, {} connectors",
            double.live_connections(&tunnel.tunnel_id)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rolled = started.elapsed();
    // The new Pods carry the traffic for a while.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let Answers {
        ok,
        unconfigured,
        failed,
    } = traffic.stop().await;
    eprintln!(
        "helm upgrade to {NEW_TAG}: controller and shared plane rolled in {rolled:.0?}; {ok} \
         requests answered, {unconfigured} answered 404 by a Pod without config, {} failed",
        failed.len()
    );
    assert!(ok > 0);
    assert!(failed.is_empty(), "failed during the upgrade: {failed:?}");
    assert_eq!(unconfigured, 0, "answered by a plane Pod without config");
    leader(cluster).await;
    let env = kubectl(
        cluster,
        &[
            "-n",
            NS,
            "get",
            "deployment/tunnel-gateway-controller",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"CF_PROXY_IMAGE\")].value}",
        ],
    )
    .await;
    assert_eq!(
        env, new_proxy,
        "the dedicated planes' image follows the chart"
    );

    // Uninstall: the Gateway goes first (its class keeps a finalizer while a Gateway of it
    // exists, which only the running controller removes).
    let manifest = cluster
        .helm_ok(&["get", "manifest", RELEASE, "-n", NS])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubectl(
        cluster,
        &[
            "delete",
            "namespace",
            "echo",
            "--wait=true",
            "--timeout=120s",
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !kubectl(
        cluster,
        &[
            "get",
            "gatewayclass",
            "cloudflare-tunnel",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
    )
    .await
    .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the class keeps its finalizer"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster
        .helm_ok(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout=120s"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&manifest).unwrap();
    let mut left = Vec::new();
    for o in objects.iter().filter(|o| !o.is_null()) {
        let (kind, name) = (
            o["kind"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap(),
        );
        let group = o["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit_once('/')
            .map(|(g, _)| g);
        let what = match group {
            Some(g) => format!("{}.{g}/{name}", kind.to_lowercase()),
            None => format!("{}/{name}", kind.to_lowercase()),
        };
        let mut args = vec!["get", what.as_str(), "--ignore-not-found", "-o", "name"];
        if o["metadata"]["namespace"].is_string() {
            args.extend(["-n", NS]);
        }
        if !kubectl(cluster, &args).await.trim().is_empty() {
            left.push(what);
        }
    }
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
    // Their Pods end too (the plane's within its termination grace period).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let pods = kubectl(cluster, &["-n", NS, "get", "pods", "-o", "name"]).await;
        if pods.trim().is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "Pods left: {pods}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The CRDs stay: Helm never deletes (or upgrades) what crds/ installed.
    for crd in [
        "gatewayclassconfigs.cf.k8s.lex.la",
        "gatewayconfigs.cf.k8s.lex.la",
    ] {
        kubectl(cluster, &["get", "crd", crd]).await;
    }
}
