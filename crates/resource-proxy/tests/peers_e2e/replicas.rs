//! Two replicas for one client cluster: both serve; the Lease holder writes the wiring; when
//! it dies the other takes over within the lease duration and repairs drift made meanwhile.

use std::time::Duration;

use tokio::time::Instant;

use crate::*;

const LIST: &str = "/apis/example.test/v1/namespaces/default/widgets";

async fn get(cluster: &test_cluster::Cluster, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_replicas_serve_and_the_survivor_takes_over_the_wiring_within_the_lease() {
    let cp = cp().await;
    let _serial = serial().await;
    let _logs = cp.logs_on_failure();
    let host = cp.cluster("host");
    let tenant = cp.cluster("tenant-r");
    let spec = |identity| ProxySpec {
        tenant: "tenant-r",
        client_name: "replicated",
        project: "rep",
        peers_yaml: format!("      static: [\"127.0.0.1:{}\"]\n", host.server_port(0)),
        target: host,
        target_name: "host",
        identity,
    };
    let a = start_proxy(&spec("replica-a")).await;
    wait_available(tenant, "replica A to wire the tenant").await;
    let b = start_proxy(&spec("replica-b")).await;
    wait_serving(&a).await;

    let lease = resource_proxy::config::names::lease_name("replicated");
    let holder = || async {
        tenant
            .kubectl_ok(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                &lease,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .await
            .unwrap_or_default()
    };
    assert_eq!(holder().await, "replica-a");
    let apiservice = resource_proxy::config::names::api_service_name(GROUP, VERSION);
    let service = resource_proxy::config::names::service_name(GROUP, VERSION);
    let port = || async {
        get(
            tenant,
            &[
                "get",
                "apiservice",
                &apiservice,
                "-o",
                "jsonpath={.spec.service.port}",
            ],
        )
        .await
    };
    assert_eq!(port().await, a.port.to_string(), "the leader's wiring");

    // Both serve.
    for proxy in [&a, &b] {
        let answer = direct(proxy, "GET", LIST, "").await;
        assert_eq!(answer.code, 200, "{answer:?}");
    }
    // The follower wrote nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(port().await, a.port.to_string());
    assert!(!b.log().contains("became leader"), "{}", b.log_tail());

    // The leader dies without releasing the Lease; the wiring drifts while nobody leads.
    a.kill();
    let killed = Instant::now();
    get(
        tenant,
        &[
            "patch",
            "service",
            "-n",
            "kube-system",
            &service,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"externalName":"drifted.example"}}"#,
        ],
    )
    .await;
    wait_until(
        "replica B to hold the Lease",
        Duration::from_secs(30),
        || async { holder().await == "replica-b" },
    )
    .await;
    let took_over = killed.elapsed();
    eprintln!("replica B took over {took_over:?} after the leader was killed");
    assert!(
        took_over <= Duration::from_secs(15 + 3),
        "within the 15 s lease (plus a retry): {took_over:?}"
    );
    // B repairs the drift and points the APIService at its own listener.
    wait_until(
        "the wiring to be repaired",
        Duration::from_secs(20),
        || async {
            get(
                tenant,
                &[
                    "get",
                    "service",
                    "-n",
                    "kube-system",
                    &service,
                    "-o",
                    "jsonpath={.spec.externalName}",
                ],
            )
            .await
                == "localhost"
                && port().await == b.port.to_string()
        },
    )
    .await;
    wait_until(
        "widgets through replica B",
        Duration::from_secs(60),
        || async {
            tenant
                .kubectl_ok(&["get", "widgets", "-n", "default"])
                .await
                .is_ok()
        },
    )
    .await;
}
