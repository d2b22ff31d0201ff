//! The node agent against a real kube-apiserver: a Node with its Lease, Pods bound and run as
//! processes in their own network namespaces, their status, image and restart failures, and
//! graceful deletion; a Pod from one of the project's images (`make images-test`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use test_cluster::node::NodeSpec;
use test_cluster::{ClusterSpec, ControlPlane, ControlPlaneBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SERVER: &str = env!("CARGO_BIN_EXE_kt-test-server");
const NODE: &str = "kt-node";

/// The name a Pod from an image resolves (through its `/etc/hosts`, as every Pod here).
const CONNECTOR_SERVICE: &str = "connector.kt-images.svc.cluster.local";

fn spec() -> ControlPlaneBuilder {
    let mut node = NodeSpec::new(NODE);
    // Only the image test needs them; it says how to build them when they are missing.
    if let Ok(images) = test_cluster::test_images() {
        node = node.image_store(images);
    }
    ControlPlane::builder().cluster(
        ClusterSpec::new("node").controller_manager().node(
            node.image("kt-test-server", SERVER)
                .image("shell", "/bin/sh")
                .image(
                    "registry.k8s.io/kubectl:v1.36.0",
                    test_cluster::Binaries::locate().unwrap().kubectl(),
                )
                .image("echo-basic", test_cluster::echo_basic().unwrap())
                .host(
                    "kt-hosts.test",
                    std::net::Ipv4Addr::new(10, 244, 0, 1).into(),
                )
                .host(
                    CONNECTOR_SERVICE,
                    std::net::Ipv4Addr::new(10, 244, 0, 1).into(),
                ),
        ),
    )
}

fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(spec)
}

async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = test_cluster::unique_name(prefix);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

async fn create_pod(api: &Api<Pod>, pod: serde_json::Value) -> Pod {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap()
}

/// Polls the Pod until `done` holds; panics with its last status after `timeout`.
async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    timeout: Duration,
    done: impl Fn(&Pod) -> bool,
) -> Pod {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pod = api.get(name).await.unwrap();
        if done(&pod) {
            return pod;
        }
        if tokio::time::Instant::now() > deadline {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let events: Vec<_> = events_of(&api.clone().into_client(), &ns, name)
                .await
                .into_iter()
                .map(|e| format!("{:?}: {:?}", e.reason, e.message))
                .collect();
            panic!(
                "pod {name} did not get there in {timeout:?}; status: {}\nevents: {events:#?}",
                serde_json::to_string_pretty(&pod.status).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn status_json(pod: &Pod) -> serde_json::Value {
    serde_json::to_value(&pod.status).unwrap()
}

async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let world = cp().cluster("node").node().unwrap().world();
    let mut stream = world.connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

fn server_pod(name: &str, grace: i64) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [{
                "name": "web",
                "image": "kt-test-server",
                "env": [
                    {"name": "PORT", "value": "8080"},
                    {"name": "IDENTITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "MY_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "MY_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "MY_APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                ],
            }],
        },
    })
}

#[tokio::test]
async fn node_registers_with_a_lease() {
    let client = cp().cluster("node").client().await.unwrap();
    let node = Api::<Node>::all(client.clone()).get(NODE).await.unwrap();
    // Ready, so without the `not-ready` taint the API server gave it (DaemonSets need that).
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.is_empty(), "{taints:?}");
    let status = node.status.unwrap();
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    let addresses = status.addresses.unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == "10.244.0.1")
    );
    assert!(status.capacity.unwrap().contains_key("pods"));
    let lease = Api::<Lease>::namespaced(client, "kube-node-lease")
        .get(NODE)
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert!(spec.renew_time.is_some());
}

#[tokio::test]
async fn a_pod_runs_on_its_own_address_and_stops_gracefully() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "run").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = create_pod(&pods, server_pod("web", 5)).await;
    let uid = created.metadata.uid.unwrap();
    let pod = wait_pod(&pods, "web", Duration::from_secs(30), |p| {
        phase(p) == "Running"
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await;
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some(NODE));
    let status = status_json(&pod);
    let ip: std::net::Ipv4Addr = status["podIP"].as_str().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[..3], [10, 244, 0], "{status}");
    assert_eq!(status["podIPs"][0]["ip"], status["podIP"]);
    for kind in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        let c = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} condition: {status}"));
        assert_eq!(c["status"], "True", "{kind}: {status}");
    }
    let container = &status["containerStatuses"][0];
    assert_eq!(container["name"], "web");
    assert_eq!(container["ready"], true);
    assert_eq!(container["restartCount"], 0);
    assert!(
        container["state"]["running"]["startedAt"].is_string(),
        "{status}"
    );
    let pid: u32 = container["containerID"]
        .as_str()
        .unwrap()
        .strip_prefix("process://")
        .unwrap()
        .parse()
        .unwrap();

    // Served on the pod's address, from inside the private namespace, with the downward API.
    let addr = SocketAddr::from((ip, 8080));
    let mut body = String::new();
    for _ in 0..50 {
        match http_get(addr, "/env").await {
            Ok(b) => {
                body = b;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(body.contains("\r\n\r\nweb\n/env\n"), "{body}");
    for expected in [
        format!("MY_NAMESPACE={ns}\n"),
        format!("MY_UID={uid}\n"),
        format!("MY_POD_IP={ip}\n"),
        format!("MY_NODE={NODE}\n"),
        "MY_APP=web\n".to_owned(),
        "HOSTNAME=web\n".to_owned(),
    ] {
        assert!(body.contains(&expected), "{expected:?} not in {body}");
    }

    // Deletion: SIGTERM (the server says so in its log), then the object goes.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while pods.get_opt("web").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(&ns, "web", "web");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("received SIGTERM"), "{log}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the container's process {pid} is still there"
    );
}

#[tokio::test]
async fn a_stubborn_process_is_killed_after_its_grace_period() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "stubborn").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "stubborn"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": "shell",
                    "command": ["/bin/sh", "-c", "trap 'echo ignoring TERM' TERM; while :; do sleep 0.1; done"],
                }],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "stubborn", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    let id = status_json(&pod)["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let pid = id.strip_prefix("process://").unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = tokio::time::Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    while pods.get_opt("stubborn").await.unwrap().is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the pod was not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    let log = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(&ns, "stubborn", "main");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("ignoring TERM"), "{log}");
}

#[tokio::test]
async fn an_unmapped_image_is_err_image_pull_with_an_event() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "pull").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "nope"},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/nope:1"}]},
        }),
    )
    .await;
    let pod = wait_pod(&pods, "nope", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let status = status_json(&pod);
    let message = status["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("registry.invalid/nope:1"), "{message}");
    assert!(message.contains("kt-test-server"), "{message}");
    assert_eq!(status["containerStatuses"][0]["ready"], false);
    let events = Api::<Event>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Failed")
                && e.type_.as_deref() == Some("Warning")
                && e.involved_object.name.as_deref() == Some("nope")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("registry.invalid/nope:1"))),
        "{:?}",
        events.items
    );
    pods.delete("nope", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn exit_codes_set_the_phase_and_a_crash_loop_backs_off() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "exit").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let shell = |name: &str, policy: &str, script: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "shell", "args": ["-c", script]}],
            },
        })
    };
    create_pod(&pods, shell("ok", "Never", "exit 0")).await;
    create_pod(&pods, shell("bad", "Never", "exit 3")).await;
    create_pod(&pods, shell("loop", "Always", "exit 1")).await;
    wait_pod(&pods, "ok", Duration::from_secs(30), |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let bad = wait_pod(&pods, "bad", Duration::from_secs(30), |p| {
        phase(p) == "Failed"
    })
    .await;
    let bad = status_json(&bad);
    assert_eq!(
        bad["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3,
        "{bad}"
    );
    assert_eq!(
        bad["containerStatuses"][0]["state"]["terminated"]["reason"], "Error",
        "{bad}"
    );
    let looping = wait_pod(&pods, "loop", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let looping = status_json(&looping);
    let container = &looping["containerStatuses"][0];
    assert!(
        container["restartCount"].as_i64().unwrap() >= 1,
        "{looping}"
    );
    assert_eq!(
        container["lastState"]["terminated"]["exitCode"], 1,
        "{looping}"
    );
    for name in ["ok", "bad", "loop"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

fn probed_pod(name: &str, probes: serde_json::Value) -> serde_json::Value {
    let mut pod = server_pod(name, 2);
    let container = &mut pod["spec"]["containers"][0];
    container["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    for (k, v) in probes.as_object().unwrap() {
        container[k] = v.clone();
    }
    pod
}

fn condition(pod: &Pod, kind: &str) -> String {
    status_json(pod)["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_owned()
}

async fn events_of(client: &kube::Client, ns: &str, pod: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .collect()
}

#[tokio::test]
async fn readiness_probes_decide_ready() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "ready").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let http = json!({"readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1}});
    let closed = json!({"readinessProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1}});
    create_pod(&pods, probed_pod("http", http)).await;
    create_pod(&pods, probed_pod("closed", closed)).await;
    wait_pod(&pods, "http", Duration::from_secs(30), |p| {
        condition(p, "Ready") == "True"
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_of(&client, &ns, "closed").await;
        if events.iter().any(|e| {
            e.reason.as_deref() == Some("Unhealthy")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Readiness probe failed"))
        }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Unhealthy event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The status is reported after the step that probed (and recorded the Event).
    let closed = wait_pod(&pods, "closed", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(condition(&closed, "Ready"), "False");
    assert_eq!(condition(&closed, "ContainersReady"), "False");
    let status = status_json(&closed);
    assert_eq!(status["containerStatuses"][0]["ready"], false, "{status}");
    assert_eq!(status["containerStatuses"][0]["started"], true, "{status}");
    for name in ["http", "closed"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "live").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let probes = json!({"livenessProbe": {
        "httpGet": {"path": "/healthz", "port": 9999}, "periodSeconds": 1, "failureThreshold": 2,
    }});
    create_pod(&pods, probed_pod("sick", probes)).await;
    let pod = wait_pod(&pods, "sick", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let status = status_json(&pod);
    // Stopped with SIGTERM, which the server answers by exiting 0.
    assert_eq!(
        status["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 0,
        "{status}"
    );
    let log = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(&ns, "sick", "web");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("received SIGTERM"), "{log}");
    let events = events_of(&client, &ns, "sick").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Killing")
            && e.message.as_deref()
                == Some("Container web failed liveness probe, will be restarted")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Unhealthy")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Liveness probe failed"))),
        "{events:?}"
    );
    pods.delete("sick", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn a_namespace_with_running_pods_deletes_completely() {
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "gone").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(&pods, server_pod("one", 5)).await;
    create_pod(&pods, server_pod("two", 5)).await;
    let mut pids = Vec::new();
    for name in ["one", "two"] {
        let pod = wait_pod(&pods, name, Duration::from_secs(30), |p| {
            phase(p) == "Running"
        })
        .await;
        let id = status_json(&pod)["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap()
            .to_owned();
        pids.push(id.strip_prefix("process://").unwrap().to_owned());
    }
    // kubectl sees them on the node.
    let wide = cluster
        .kubectl_ok(&["get", "pods", "-n", &ns, "-o", "wide"])
        .await
        .unwrap();
    assert!(wide.contains(NODE) && wide.contains("10.244.0."), "{wide}");

    cluster
        .kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while namespaces.get_opt(&ns).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "namespace {ns} is still there"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid}"
        );
    }
    for name in ["one", "two"] {
        let log = cp()
            .cluster("node")
            .node()
            .unwrap()
            .container_log_path(&ns, name, "web");
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("received SIGTERM"), "{log}");
    }
}

#[tokio::test]
async fn secrets_and_config_maps_feed_the_environment_once_they_exist() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "config").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "late"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "web",
                    "image": "kt-test-server",
                    "args": ["$(PORT)"],
                    "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                    "env": [
                        {"name": "PORT", "value": "8081"},
                        {"name": "MY_TOKEN", "valueFrom": {"secretKeyRef": {"name": "late-secret", "key": "token"}}},
                        {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                        {"name": "GREETING", "value": "hello $(MY_TOKEN) $$(PORT)"},
                    ],
                }],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "late", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let status = status_json(&pod);
    let message = status["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert_eq!(message, "configmap \"settings\" not found", "{status}");

    let config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"MODE": "fast"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    wait_pod(&pods, "late", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["message"]
            == "secret \"late-secret\" not found"
    })
    .await;
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "late-secret"}, "stringData": {"token": "s3cret"}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let pod = wait_pod(&pods, "late", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    let ip: std::net::Ipv4Addr = status_json(&pod)["podIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut body = String::new();
    for _ in 0..50 {
        if let Ok(b) = http_get(SocketAddr::from((ip, 8081)), "/env").await {
            body = b;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for expected in [
        "MY_TOKEN=s3cret\n",
        "CFG_MODE=fast\n",
        "GREETING=hello s3cret $(PORT)\n",
    ] {
        assert!(body.contains(expected), "{expected:?} not in {body}");
    }
    assert!(!body.contains("MAYBE="), "{body}");
    assert_eq!(status_json(&pod)["containerStatuses"][0]["restartCount"], 0);
    pods.delete("late", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn pre_stop_hooks_run_before_sigterm() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "prestop").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = |name: &str, hook: serde_json::Value| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 10,
                "containers": [{
                    "name": "main",
                    "image": "shell",
                    "command": ["/bin/sh", "-c", "trap 'echo TERM; exit 0' TERM; while :; do sleep 0.1; done"],
                    "env": [{"name": "WHO", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "lifecycle": {"preStop": hook},
                }],
            },
        })
    };
    create_pod(
        &pods,
        pod(
            "exec",
            json!({"exec": {"command": ["/bin/sh", "-c", "echo preStop of $WHO"]}}),
        ),
    )
    .await;
    create_pod(&pods, pod("sleep", json!({"sleep": {"seconds": 2}}))).await;
    for name in ["exec", "sleep"] {
        wait_pod(&pods, name, Duration::from_secs(30), |p| {
            phase(p) == "Running"
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = tokio::time::Instant::now();
    for name in ["exec", "sleep"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let mut sleep_gone = None;
    while sleep_gone.is_none() || pods.get_opt("exec").await.unwrap().is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "pods were not removed"
        );
        if sleep_gone.is_none() && pods.get_opt("sleep").await.unwrap().is_none() {
            sleep_gone = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sleep_gone = sleep_gone.unwrap();
    assert!(sleep_gone >= Duration::from_secs(2), "{sleep_gone:?}");
    assert!(sleep_gone < Duration::from_secs(8), "{sleep_gone:?}");
    let node = cp().cluster("node").node().unwrap();
    let log = std::fs::read_to_string(node.container_log_path(&ns, "exec", "main")).unwrap();
    let hook = log
        .find("preStop of exec\n")
        .unwrap_or_else(|| panic!("{log}"));
    let term = log.find("TERM\n").unwrap_or_else(|| panic!("{log}"));
    assert!(hook < term, "{log}");
    let log = std::fs::read_to_string(node.container_log_path(&ns, "sleep", "main")).unwrap();
    assert!(log.contains("TERM\n"), "{log}");
}

/// A `hostNetwork` Pod runs in the node's namespace: its address is the node's, and the
/// kube-apiserver reaches it through its `cluster` egress (here the `proxy` subresource) as a
/// kube-apiserver next to the node would; deleted, it is gone from that address.
#[tokio::test]
async fn a_host_network_pod_serves_on_the_node_address_and_the_apiserver_reaches_it() {
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "hostnet").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "host"},
            "spec": {
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "web",
                    "image": "kt-test-server",
                    "env": [
                        {"name": "PORT", "value": "18080"},
                        {"name": "IDENTITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 18080}, "periodSeconds": 1},
                }],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "host", Duration::from_secs(60), |p| {
        condition(p, "Ready") == "True"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(status["podIP"], "10.244.0.1", "{status}");
    assert_eq!(status["hostIP"], "10.244.0.1", "{status}");
    let answer = http_get("10.244.0.1:18080".parse().unwrap(), "/direct")
        .await
        .unwrap();
    assert!(answer.contains("host\n/direct"), "{answer}");
    let path = format!("/api/v1/namespaces/{ns}/pods/host:18080/proxy/through-the-apiserver");
    let answer = cluster.kubectl_ok(&["get", "--raw", &path]).await.unwrap();
    assert!(
        answer.starts_with("host\n/through-the-apiserver"),
        "{answer}"
    );
    pods.delete("host", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.get_opt("host").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        http_get("10.244.0.1:18080".parse().unwrap(), "/")
            .await
            .is_err(),
        "still served after the Pod was deleted"
    );
}

/// The `<word> <seconds since the epoch>` lines a container printed (its CRI log), in order.
fn stamps(ns: &str, pod: &str, container: &str) -> Vec<(String, f64)> {
    let node = cp().cluster("node").node().unwrap();
    let log =
        std::fs::read_to_string(node.container_log_path(ns, pod, container)).unwrap_or_default();
    log.lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .filter_map(|l| {
            let (word, at) = l.split_once(' ')?;
            Some((word.to_owned(), at.parse().ok()?))
        })
        .collect()
}

fn stamp(ns: &str, pod: &str, container: &str, word: &str) -> f64 {
    stamps(ns, pod, container)
        .into_iter()
        .find(|(w, _)| w == word)
        .unwrap_or_else(|| panic!("{container} of {pod} never printed {word}"))
        .1
}

/// Native sidecars: started in their turn among the init containers, the next one held back
/// until the sidecar's startup probe passes, and the Pod Ready only once the sidecar is.
#[tokio::test]
async fn sidecars_start_in_order_behind_their_startup_probe_and_count_toward_ready() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "sidecar").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let work = json!([{"name": "work", "mountPath": "/work"}]);
    let step = |word: &str| format!("echo {word} $(date +%s.%N)");
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "ordered"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "work", "emptyDir": {}}],
                "initContainers": [
                    {"name": "setup", "image": "shell", "volumeMounts": work,
                     "args": ["-c", step("setup")]},
                    // Started at once, but past its startup probe only 3 s later.
                    {"name": "side", "image": "shell", "restartPolicy": "Always", "volumeMounts": work,
                     "args": ["-c", format!("{}; sleep 3; {}; touch /work/started; exec sleep 600",
                                            step("side"), step("side-started"))],
                     "startupProbe": {"exec": {"command": ["test", "-f", "/work/started"]},
                                      "periodSeconds": 1, "failureThreshold": 30},
                     "readinessProbe": {"exec": {"command": ["test", "-f", "/work/ready"]},
                                        "periodSeconds": 1}},
                    {"name": "after", "image": "shell", "volumeMounts": work,
                     "args": ["-c", step("after")]},
                ],
                // The app makes the sidecar ready 3 s after it started.
                "containers": [{"name": "main", "image": "shell", "volumeMounts": work,
                                "args": ["-c", format!("{}; sleep 3; touch /work/ready; exec sleep 600",
                                                       step("main"))]}],
            },
        }),
    )
    .await;

    // The sidecar runs, not yet started: the next init container and the app wait.
    let pod = wait_pod(&pods, "ordered", Duration::from_secs(30), |p| {
        status_json(p)["initContainerStatuses"][1]["state"]["running"].is_object()
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(phase(&pod), "Pending", "{status}");
    assert_eq!(condition(&pod, "Initialized"), "False");
    let init = &status["initContainerStatuses"];
    assert_eq!(init[0]["state"]["terminated"]["exitCode"], 0, "{status}");
    assert_eq!(
        init[0]["ready"], true,
        "a completed init container: {status}"
    );
    assert_eq!(init[1]["started"], false, "{status}");
    assert_eq!(init[1]["ready"], false, "{status}");
    assert!(init[2]["state"]["waiting"].is_object(), "{status}");
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing",
        "{status}"
    );

    // Started: the rest follow; the app runs while the sidecar is not ready yet.
    let pod = wait_pod(&pods, "ordered", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["ready"] == true
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(phase(&pod), "Running", "{status}");
    assert_eq!(condition(&pod, "Initialized"), "True");
    assert_eq!(
        status["initContainerStatuses"][1]["started"], true,
        "{status}"
    );
    assert!(
        status["initContainerStatuses"][1]["state"]["running"].is_object(),
        "{status}"
    );
    assert_eq!(
        condition(&pod, "Ready"),
        "False",
        "the sidecar is not ready yet: {status}"
    );
    let pod = wait_pod(&pods, "ordered", Duration::from_secs(30), |p| {
        condition(p, "Ready") == "True"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(
        status["initContainerStatuses"][1]["ready"], true,
        "{status}"
    );
    assert_eq!(
        status["initContainerStatuses"][1]["restartCount"], 0,
        "{status}"
    );
    assert_eq!(
        status["initContainerStatuses"][2]["state"]["terminated"]["exitCode"],
        0
    );

    let side_started = stamp(&ns, "ordered", "side", "side-started");
    let setup = stamp(&ns, "ordered", "setup", "setup");
    let side = stamp(&ns, "ordered", "side", "side");
    let after = stamp(&ns, "ordered", "after", "after");
    let main = stamp(&ns, "ordered", "main", "main");
    assert!(setup < side, "{setup} {side}");
    assert!(
        side_started < after && after < main,
        "the init container after the sidecar began at {after}, the sidecar passed its \
         startup probe after {side_started}, the app began at {main}"
    );
    cluster_delete_namespace(&ns).await;
}

/// A sidecar that exits is restarted (whatever the Pod's restart policy); on deletion the
/// sidecars stop after the app container, the later sidecar first, and their preStop hooks run
/// at the start, as the kubelet's.
#[tokio::test]
async fn an_exiting_sidecar_is_restarted_and_sidecars_stop_after_the_app_in_reverse_order() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "sidecar").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let stopping = |who: &str, linger: &str| {
        format!(
            "trap 'echo {who}-term $(date +%s.%N); sleep {linger}; echo {who}-exit $(date +%s.%N); exit 0' TERM; \
             echo {who}-start $(date +%s.%N); while :; do sleep 0.1; done"
        )
    };
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "stopping"},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 20,
                "volumes": [{"name": "work", "emptyDir": {}}],
                "initContainers": [
                    // Exits once (status 1), then runs.
                    {"name": "first", "image": "shell", "restartPolicy": "Always",
                     "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                     "args": ["-c", format!("if [ ! -f /work/once ]; then touch /work/once; exit 1; fi; {}",
                                            stopping("first", "0"))]},
                    {"name": "second", "image": "shell", "restartPolicy": "Always",
                     "args": ["-c", stopping("second", "0")],
                     "lifecycle": {"preStop": {"exec": {"command": [
                         "/bin/sh", "-c", "echo second-prestop $(date +%s.%N)"]}}}},
                ],
                "containers": [{"name": "main", "image": "shell", "args": ["-c", stopping("main", "2")]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "stopping", Duration::from_secs(30), |p| {
        let s = status_json(p);
        s["initContainerStatuses"][0]["restartCount"] == 1
            && s["initContainerStatuses"][0]["state"]["running"].is_object()
            && condition(p, "Ready") == "True"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(phase(&pod), "Running", "{status}");
    assert_eq!(
        status["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"], 1,
        "{status}"
    );
    assert_eq!(
        status["containerStatuses"][0]["restartCount"], 0,
        "{status}"
    );
    for c in ["first", "second", "main"] {
        stamp(&ns, "stopping", c, &format!("{c}-start"));
    }

    pods.delete("stopping", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.get_opt("stopping").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let at = |c: &str, w: &str| stamp(&ns, "stopping", c, &format!("{c}-{w}"));
    let (main_term, main_exit) = (at("main", "term"), at("main", "exit"));
    let (second_prestop, second_term) = (at("second", "prestop"), at("second", "term"));
    let first_term = at("first", "term");
    assert!(
        second_prestop < main_exit,
        "the sidecar's preStop hook runs at the start: {second_prestop} vs {main_exit}"
    );
    assert!(
        main_term < main_exit && main_exit < second_term && second_term < first_term,
        "main got SIGTERM at {main_term} and exited at {main_exit}; the sidecars got it at \
         {second_term} (second) and {first_term} (first)"
    );
    cluster_delete_namespace(&ns).await;
}

/// With `restartPolicy: Never`, a Pod whose app container finished does not stay up for its
/// sidecar: the sidecar is stopped and the Pod succeeds.
#[tokio::test]
async fn a_finished_app_stops_its_sidecars_and_the_pod_succeeds() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "sidecar").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "job"},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "initContainers": [{"name": "side", "image": "shell", "restartPolicy": "Always",
                                    "args": ["-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"]}],
                "containers": [{"name": "main", "image": "shell", "args": ["-c", "sleep 1"]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "job", Duration::from_secs(30), |p| {
        phase(p) == "Succeeded"
            && status_json(p)["initContainerStatuses"][0]["state"]["terminated"].is_object()
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(
        status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 0,
        "stopped with SIGTERM, not killed: {status}"
    );
    assert_eq!(
        status["initContainerStatuses"][0]["restartCount"], 0,
        "{status}"
    );
    cluster_delete_namespace(&ns).await;
}

async fn cluster_delete_namespace(ns: &str) {
    cp().cluster("node")
        .kubectl_ok(&["delete", "namespace", ns, "--wait=false"])
        .await
        .unwrap();
}

/// `test-cluster up --node`: a Pod created with kubectl runs, and the printed namespace reaches
/// it; `down` stops the node with everything else.
#[test]
fn the_command_starts_a_node() {
    use std::io::BufRead;
    use std::path::Path;
    use std::process::{Command, Stdio};
    const BIN: &str = env!("CARGO_BIN_EXE_test-cluster");
    let state = tempfile::tempdir().unwrap();
    let mut up = Command::new(BIN)
        .args(["up", "--clusters", "solo", "--node", "solo"])
        .arg(format!("--image=kt-test-server={SERVER}"))
        .arg("--host=kt-cli.test=10.244.0.1")
        .arg("--state-dir")
        .arg(state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Stops `up` (and with it everything) whatever happens below.
    struct Down<'a>(&'a Path, std::process::Child);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = Command::new(BIN)
                .args(["down", "--state-dir"])
                .arg(self.0)
                .stdout(Stdio::null())
                .status();
            let _ = self.1.kill();
            let _ = self.1.wait();
        }
    }
    let stdout = up.stdout.take().unwrap();
    let down = Down(state.path(), up);
    let mut ns_path = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.trim().strip_prefix("pod network: nsenter --net=") {
            ns_path = rest.split_whitespace().next().map(str::to_owned);
        }
        if line.starts_with("ready;") {
            break;
        }
    }
    let ns_path = ns_path.expect("`up` printed the pod network");
    let kubeconfig = state.path().join("solo/kubeconfig");
    let kubectl = test_cluster::Binaries::locate().unwrap().kubectl();
    let kubectl = |args: &[&str]| {
        let out = Command::new(&kubectl)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    kubectl(&[
        "run",
        "web",
        "--image=kt-test-server",
        "--env=IDENTITY=from-cli",
    ]);
    kubectl(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    let ip = kubectl(&["get", "pod", "web", "-o", "jsonpath={.status.podIP}"]);
    let node = kubectl(&["get", "pod", "web", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(node, "solo-node");
    // The Pod's /etc/hosts (as the node wrote it) has the entry given on the command line.
    let hosts = state
        .path()
        .join("solo/node/pods/default_web/volumes/etc-hosts:node/hosts");
    let hosts = std::fs::read_to_string(&hosts).unwrap();
    assert!(hosts.contains("10.244.0.1\tkt-cli.test\n"), "{hosts}");
    // From inside the printed namespace.
    let ns = std::fs::File::open(&ns_path).unwrap();
    let addr: SocketAddr = format!("{ip}:8080").parse().unwrap();
    let body = std::thread::spawn(move || {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let mut last = None;
        for _ in 0..50 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(mut s) => {
                    use std::io::{Read, Write};
                    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
                    let mut out = String::new();
                    s.read_to_string(&mut out).unwrap();
                    return out;
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{addr}: {last:?}");
    })
    .join()
    .unwrap();
    assert!(body.contains("\r\n\r\nfrom-cli\n"), "{body}");
    drop(down);
    assert!(!Path::new(&ns_path).exists(), "{ns_path} outlived `down`");
}

#[tokio::test]
async fn a_deployment_becomes_available_with_endpoint_slices_and_scales_down_gracefully() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "deploy").await;
    let manifest = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: kt-test-server
        ports: [{{name: http, containerPort: 8080}}]
        env: [{{name: IDENTITY, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
        readinessProbe: {{httpGet: {{path: /ready, port: http}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: http}}]
"#
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], &manifest)
        .await
        .unwrap();
    cluster
        .kubectl_ok(&[
            "wait",
            "-n",
            &ns,
            "--for=condition=Available",
            "deployment/web",
            "--timeout=60s",
        ])
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2);
    let mut ips: Vec<String> = listed
        .iter()
        .map(|p| status_json(p)["podIP"].as_str().unwrap().to_owned())
        .collect();
    ips.sort();
    // Each Pod answers on its own address with its own name.
    for p in &listed {
        let ip: std::net::Ipv4Addr = status_json(p)["podIP"].as_str().unwrap().parse().unwrap();
        let body = http_get(SocketAddr::from((ip, 8080)), "/").await.unwrap();
        let name = p.metadata.name.as_deref().unwrap();
        assert!(body.contains(&format!("\r\n\r\n{name}\n")), "{body}");
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut ready: Vec<String> = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .unwrap()
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.iter().cloned())
            .collect();
        ready.sort();
        if ready == ips {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "slices list {ready:?}, pods {ips:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    cluster
        .kubectl_ok(&["scale", "-n", &ns, "deployment/web", "--replicas=1"])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.list(&ListParams::default()).await.unwrap().items.len() != 1 {
        assert!(tokio::time::Instant::now() < deadline, "not scaled down");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let remaining = pods.list(&ListParams::default()).await.unwrap().items;
    let kept = remaining[0].metadata.name.clone().unwrap();
    let gone = listed
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .find(|n| *n != kept)
        .unwrap();
    let log = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(&ns, &gone, "web");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("received SIGTERM"), "{log}");
    let deployments: Api<Deployment> = Api::namespaced(client, &ns);
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn kubectl_logs_reads_a_container_with_tail_and_follow() {
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "logs").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "talker"},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main",
                    "image": "shell",
                    "args": ["-c", "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.2; done"],
                }],
            },
        }),
    )
    .await;
    wait_pod(&pods, "talker", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all = cluster
        .kubectl_ok(&["logs", "-n", &ns, "talker"])
        .await
        .unwrap();
    assert!(all.starts_with("line 1\nline 2\n"), "{all}");
    let tail = cluster
        .kubectl_ok(&["logs", "-n", &ns, "talker", "--tail=2"])
        .await
        .unwrap();
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(tail.starts_with("line "), "{tail}");
    // Following: lines written after the request arrive on the open stream.
    let mut follow = cluster.kubectl();
    follow
        .args(["logs", "-n", &ns, "talker", "-f", "--tail=1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = follow.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 1024];
    while seen.lines().count() < 4 {
        let n = tokio::time::timeout_at(deadline, out.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("follow gave only {seen:?}"))
            .unwrap();
        assert!(n > 0, "follow ended: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let numbers: Vec<u32> = seen
        .lines()
        .map(|l| l.strip_prefix("line ").unwrap().parse().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{seen}");
    child.kill().await.unwrap();
    // Timestamps, and only lines from a given time on.
    let stamped = cluster
        .kubectl_ok(&["logs", "-n", &ns, "talker", "--timestamps", "--tail=1"])
        .await
        .unwrap();
    let (time, text) = stamped.trim_end().split_once(' ').unwrap();
    assert!(text.starts_with("line "), "{stamped}");
    let time: k8s_openapi::jiff::Timestamp = time.parse().unwrap();
    // The last line's second, truncated: the log started well before it (follow took 4 lines).
    let since = time
        .round(
            k8s_openapi::jiff::TimestampRound::new()
                .smallest(k8s_openapi::jiff::Unit::Second)
                .mode(k8s_openapi::jiff::RoundMode::Trunc),
        )
        .unwrap();
    let recent = cluster
        .kubectl_ok(&[
            "logs",
            "-n",
            &ns,
            "talker",
            "--since-time",
            &since.to_string(),
        ])
        .await
        .unwrap();
    let first: u32 = recent.lines().next().unwrap()["line ".len()..]
        .parse()
        .unwrap();
    assert!(first > 1, "{recent}");
    let hour = cluster
        .kubectl_ok(&["logs", "-n", &ns, "talker", "--since=1h"])
        .await
        .unwrap();
    assert!(hour.starts_with("line 1\n"), "{hour}");
    pods.delete("talker", &DeleteParams::default())
        .await
        .unwrap();
}

/// The pid a container's shell printed as `child <pid>`.
fn printed_child(ns: &str, pod: &str) -> Option<u32> {
    let path = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(ns, pod, "main");
    let log = std::fs::read_to_string(path).ok()?;
    let at = log.find("child ")?;
    log[at + "child ".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn wait_gone(pid: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"));
        if zombie {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} outlived its container"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn what_a_container_started_ends_with_it() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "tree").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let shell = |name: &str, script: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "shell", "args": ["-c", script]}],
            },
        })
    };
    // The main process exits and leaves a child behind.
    create_pod(&pods, shell("leaves", "sleep 300 & echo child $!; exit 0")).await;
    // A child that ignores SIGTERM, under a main process that waits for it.
    create_pod(
        &pods,
        shell(
            "stubborn",
            "(trap '' TERM; sleep 300) & echo child $!; wait",
        ),
    )
    .await;
    wait_pod(&pods, "leaves", Duration::from_secs(30), |p| {
        phase(p) == "Succeeded"
    })
    .await;
    wait_gone(printed_child(&ns, "leaves").expect("the shell printed its child")).await;

    wait_pod(&pods, "stubborn", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let child = loop {
        if let Some(pid) = printed_child(&ns, "stubborn") {
            break pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "no child printed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while pods.get_opt("stubborn").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod was not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_gone(child).await;
    pods.delete("leaves", &DeleteParams::default())
        .await
        .unwrap();
}

/// The `key=value` lines a container printed (its CRI log), up to the line `done`.
fn printed(
    ns: &str,
    pod: &str,
    container: &str,
) -> Option<std::collections::BTreeMap<String, String>> {
    let node = cp().cluster("node").node().unwrap();
    let log = std::fs::read_to_string(node.container_log_path(ns, pod, container)).ok()?;
    let lines: Vec<&str> = log
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    lines.contains(&"done").then(|| {
        lines
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    })
}

async fn create<K>(client: &kube::Client, ns: &str, object: serde_json::Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
}

const READER: &str = r#"
r() { printf '%s=%s\n' "$1" "$2"; }
r secret "$(cat /etc/kt-creds/dir/a.txt)"
r secret_mode "$(stat -c %a /etc/kt-creds/dir/a.txt)"
r secret_b "$(ls /etc/kt-creds/b 2>/dev/null || echo absent)"
r etc_kept "$(head -c 5 /etc/passwd)"
r conf "$(cat /kt-conf/app.conf)"
r conf_mode "$(stat -c %a /kt-conf/app.conf)"
r conf_write "$(touch /kt-conf/new 2>/dev/null && echo writable || echo refused)"
r root_kept "$(test -x /bin/sh && echo yes)"
r maybe "$(ls -A /kt-maybe | wc -l)"
r proj_b "$(cat /var/run/kt-proj/b)"
r proj_other "$(cat /var/run/kt-proj/sub/other)"
r proj_name "$(cat /var/run/kt-proj/name)"
r proj_labels "$(cat /var/run/kt-proj/labels)"
r proj_mode "$(stat -c %a /var/run/kt-proj/b)"
r token "$(cat /var/run/kt-proj/token)"
r subpath "$(cat /etc/kt-app.conf)"
r pwd "$(pwd)"
r hosts "$(getent hosts kt-hosts.test | awk '{print $1}')"
r sa_namespace "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
r api "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
until test -f /scratch/from-writer; do sleep 0.1; done
r shared "$(cat /scratch/from-writer)"
r scratch_write "$(echo x > /scratch/work/mine && echo ok)"
echo done
exec sleep 3600
"#;

#[tokio::test]
async fn volumes_are_mounted_for_the_container_only_once_their_sources_exist() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "volumes").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create::<ServiceAccount>(&client, &ns, json!({"metadata": {"name": "reader"}})).await;
    create::<ConfigMap>(
        &client,
        &ns,
        json!({"metadata": {"name": "conf"}, "data": {"app.conf": "x=1", "other": "o"}}),
    )
    .await;
    let scratch = json!({"name": "scratch", "mountPath": "/scratch"});
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "vols", "labels": {"app": "vols"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "serviceAccountName": "reader",
                "volumes": [
                    {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o440,
                        "items": [{"key": "a", "path": "dir/a.txt", "mode": 0o400}]}},
                    {"name": "conf", "configMap": {"name": "conf", "defaultMode": 0o600}},
                    {"name": "maybe", "configMap": {"name": "absent", "optional": true}},
                    {"name": "proj", "projected": {"defaultMode": 0o444, "sources": [
                        {"secret": {"name": "creds", "items": [{"key": "b", "path": "b"}]}},
                        {"configMap": {"name": "conf", "items": [{"key": "other", "path": "sub/other"}]}},
                        {"downwardAPI": {"items": [
                            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        ]}},
                        {"serviceAccountToken": {"path": "token", "audience": "kt-test"}},
                    ]}},
                    {"name": "scratch", "emptyDir": {}},
                ],
                "containers": [
                    {
                        "name": "reader",
                        "image": "shell",
                        "command": ["sh", "-c", READER],
                        "workingDir": "/scratch/work",
                        "volumeMounts": [
                            {"name": "creds", "mountPath": "/etc/kt-creds"},
                            {"name": "conf", "mountPath": "/kt-conf"},
                            {"name": "maybe", "mountPath": "/kt-maybe"},
                            {"name": "proj", "mountPath": "/var/run/kt-proj"},
                            {"name": "conf", "mountPath": "/etc/kt-app.conf", "subPath": "app.conf"},
                            scratch,
                        ],
                    },
                    {
                        "name": "writer",
                        "image": "shell",
                        "command": ["sh", "-c", "echo shared > /scratch/from-writer; exec sleep 3600"],
                        "volumeMounts": [scratch],
                    },
                ],
            },
        }),
    )
    .await;

    // The Secret does not exist yet: the Pod waits, saying why.
    let pod = wait_pod(&pods, "vols", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
            && status_json(p)["containerStatuses"][0]["state"]["waiting"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("secret \"creds\" not found"))
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let events = events_of(&client, &ns, "vols").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedMount")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref()
                    == Some(
                        "MountVolume.SetUp failed for volume \"creds\" : secret \"creds\" not found"
                    )),
        "{events:?}"
    );
    assert!(printed(&ns, "vols", "reader").is_none());

    create::<Secret>(
        &client,
        &ns,
        json!({"metadata": {"name": "creds"}, "stringData": {"a": "alpha", "b": "beta"}}),
    )
    .await;
    wait_pod(&pods, "vols", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let seen = loop {
        if let Some(seen) = printed(&ns, "vols", "reader") {
            break seen;
        }
        if tokio::time::Instant::now() > deadline {
            let node = cp().cluster("node").node().unwrap();
            let log = std::fs::read_to_string(node.container_log_path(&ns, "vols", "reader"));
            let pod = pods.get("vols").await.unwrap();
            let events = events_of(&client, &ns, "vols").await;
            let events: Vec<_> = events.iter().map(|e| e.message.clone()).collect();
            panic!(
                "the reader did not finish: {log:?}\n{}\n{events:?}",
                status_json(&pod)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let expect = |key: &str, value: &str| {
        assert_eq!(
            seen.get(key).map(String::as_str),
            Some(value),
            "{key} in {seen:?}"
        );
    };
    expect("secret", "alpha");
    expect("secret_mode", "400");
    expect("secret_b", "absent");
    expect("etc_kept", "root:");
    expect("conf", "x=1");
    expect("conf_mode", "600");
    expect("conf_write", "refused");
    expect("root_kept", "yes");
    expect("maybe", "0");
    expect("proj_b", "beta");
    expect("proj_other", "o");
    expect("proj_name", "vols");
    expect("proj_labels", "app=\"vols\"");
    expect("proj_mode", "444");
    expect("subpath", "x=1");
    expect("pwd", "/scratch/work");
    expect("shared", "shared");
    expect("scratch_write", "ok");
    expect("hosts", "10.244.0.1");
    expect("sa_namespace", &ns);
    expect("api", "10.244.0.1:443");
    // The token is the Pod's ServiceAccount's, for the audience asked, bound to this Pod.
    use base64::Engine;
    let token = &seen["token"];
    let claims = token.split('.').nth(1).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], json!(["kt-test"]), "{claims}");
    assert_eq!(claims["sub"], format!("system:serviceaccount:{ns}:reader"));
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "vols", "{claims}");

    // None of it is on the host: no mount point created, no mount in the host's table.
    for path in [
        "/etc/kt-creds",
        "/kt-conf",
        "/kt-maybe",
        "/var/run/kt-proj",
        "/etc/kt-app.conf",
        "/scratch",
    ] {
        assert!(
            !std::path::Path::new(path).exists(),
            "{path} appeared on the host"
        );
    }
    let pod_dir = cp()
        .cluster("node")
        .node()
        .unwrap()
        .container_log_path(&ns, "vols", "reader")
        .parent()
        .unwrap()
        .to_owned();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(pod_dir.to_str().unwrap()) && !mountinfo.contains("kt-"),
        "{mountinfo}"
    );

    // Deleted: the volumes (the Secret's files among them) are removed from the node.
    pods.delete("vols", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.get_opt("vols").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!pod_dir.join("volumes").exists());
}

#[tokio::test]
async fn a_sub_path_that_a_container_points_outside_its_volume_is_refused() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "subpath").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // `evil` replaces the subPath directory with a symlink to the host's /etc; `victim` exits
    // after 2 s, and its restart must not mount the host's /etc.
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "escape"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "victim",
                        "image": "shell",
                        "command": ["sh", "-c", "ls /mnt/sub; sleep 2"],
                        "volumeMounts": [{"name": "data", "mountPath": "/mnt/sub", "subPath": "esc"}],
                    },
                    {
                        "name": "evil",
                        "image": "shell",
                        "command": ["sh", "-c", "sleep 0.5; rm -rf /data/esc && ln -s /etc /data/esc; exec sleep 3600"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    },
                ],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "escape", Duration::from_secs(30), |p| {
        status_json(p)["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    })
    .await;
    let message = status_json(&pod)["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("subPath \"esc\"") && message.contains("outside its volume"),
        "{message}"
    );
    assert_eq!(
        status_json(&pod)["containerStatuses"][0]["restartCount"],
        0,
        "the victim must not have run again"
    );
    pods.delete("escape", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn kubectl_in_a_pod_uses_its_service_account_and_rbac() {
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "incluster").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "visible"}})).await;
    for name in ["lister", "nobody"] {
        create::<ServiceAccount>(&client, &ns, json!({"metadata": {"name": name}})).await;
    }
    create::<Role>(
        &client,
        &ns,
        json!({"metadata": {"name": "read-cm"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await;
    create::<RoleBinding>(
        &client,
        &ns,
        json!({"metadata": {"name": "lister"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-cm"},
               "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}]}),
    )
    .await;
    // No flags, no kubeconfig: kubectl's in-cluster configuration (the `kubernetes` Service's
    // environment and the mounted token and CA).
    for (pod, account) in [("allowed", "lister"), ("denied", "nobody")] {
        create_pod(
            &pods,
            json!({
                "metadata": {"name": pod},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": account,
                    "containers": [{
                        "name": "kubectl",
                        "image": "registry.k8s.io/kubectl:v1.36.0",
                        "command": ["kubectl", "get", "configmaps", "-o", "name"],
                    }],
                },
            }),
        )
        .await;
    }
    let node = cp().cluster("node").node().unwrap();
    let finished = |p: &Pod| matches!(phase(p), "Succeeded" | "Failed");
    let allowed = wait_pod(&pods, "allowed", Duration::from_secs(60), finished).await;
    let log = std::fs::read_to_string(node.container_log_path(&ns, "allowed", "kubectl")).unwrap();
    assert_eq!(phase(&allowed), "Succeeded", "{log}");
    assert!(log.contains("configmap/visible"), "{log}");
    let denied = wait_pod(&pods, "denied", Duration::from_secs(60), finished).await;
    let log = std::fs::read_to_string(node.container_log_path(&ns, "denied", "kubectl")).unwrap();
    assert_eq!(phase(&denied), "Failed", "{log}");
    assert!(
        log.contains(&format!(
            "User \"system:serviceaccount:{ns}:nobody\" cannot list resource \"configmaps\""
        )),
        "{log}"
    );
    assert!(!log.contains("configmap/visible"), "{log}");

    // Only the relayed address reaches the API: the apiserver's own port is on host loopback,
    // which a Pod's loopback and the node's address do not lead to.
    let port = cp().cluster("node").server_port(0);
    for (pod, server) in [
        ("loopback", format!("https://127.0.0.1:{port}")),
        ("other-port", format!("https://10.244.0.1:{port}")),
    ] {
        create_pod(
            &pods,
            json!({
                "metadata": {"name": pod},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": "lister",
                    "containers": [{
                        "name": "kubectl",
                        "image": "registry.k8s.io/kubectl:v1.36.0",
                        "command": ["kubectl", "--server", server, "--request-timeout=5s",
                                    "--token=unused", "--insecure-skip-tls-verify",
                                    "get", "configmaps", "-o", "name"],
                    }],
                },
            }),
        )
        .await;
        let done = wait_pod(&pods, pod, Duration::from_secs(60), finished).await;
        let log = std::fs::read_to_string(node.container_log_path(&ns, pod, "kubectl")).unwrap();
        assert_eq!(phase(&done), "Failed", "{log}");
        assert!(log.contains("connection refused"), "{log}");
    }
}

#[tokio::test]
async fn echo_basic_pods_serve_their_identity_and_scale_down_gracefully() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "echo").await;
    // As the Gateway API conformance suite deploys it.
    let manifest = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: echo, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: echo}}}}
  template:
    metadata: {{labels: {{app: echo}}}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: echo
        image: echo-basic
        env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
        readinessProbe: {{httpGet: {{path: /, port: 3000}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: {ns}}}
spec:
  selector: {{app: echo}}
  ports: [{{port: 8080, targetPort: 3000}}]
"#
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], &manifest)
        .await
        .unwrap();
    cluster
        .kubectl_ok(&[
            "wait",
            "-n",
            &ns,
            "--for=condition=Available",
            "deployment/echo",
            "--timeout=60s",
        ])
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2);
    let mut ips: Vec<String> = listed
        .iter()
        .map(|p| status_json(p)["podIP"].as_str().unwrap().to_owned())
        .collect();
    ips.sort();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut ready: Vec<String> = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=echo"))
            .await
            .unwrap()
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.iter().cloned())
            .collect();
        ready.sort();
        if ready == ips {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "slices list {ready:?}, pods {ips:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Each Pod answers with its own name and namespace (read from the downward API).
    let world = cluster.node().unwrap().world();
    for p in &listed {
        let ip: std::net::Ipv4Addr = status_json(p)["podIP"].as_str().unwrap().parse().unwrap();
        let name = p.metadata.name.as_deref().unwrap();
        let mut stream = world.connect(SocketAddr::from((ip, 3000))).await.unwrap();
        stream
            .write_all(b"GET /hello-echo HTTP/1.1\r\nhost: echo.test\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let body: serde_json::Value =
            serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["pod"], name, "{body}");
        assert_eq!(body["namespace"], ns.as_str(), "{body}");
        assert_eq!(body["path"], "/hello-echo", "{body}");
        let logs = cluster
            .kubectl_ok(&["logs", "-n", &ns, name])
            .await
            .unwrap();
        assert!(
            logs.contains("Echoing back request made to /hello-echo"),
            "{logs}"
        );
    }

    // Scaling down: the Pod leaves on SIGTERM, long before its 30 s grace period ends.
    let started = tokio::time::Instant::now();
    cluster
        .kubectl_ok(&["scale", "-n", &ns, "deployment/echo", "--replicas=1"])
        .await
        .unwrap();
    while pods.list(&ListParams::default()).await.unwrap().items.len() != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not scaled down gracefully"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let kept = pods.list(&ListParams::default()).await.unwrap().items;
    let gone = listed
        .iter()
        .find(|p| p.metadata.uid != kept[0].metadata.uid)
        .unwrap();
    let events = events_of(&client, &ns, gone.metadata.name.as_deref().unwrap()).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Killing")),
        "{events:?}"
    );
    cluster
        .kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])
        .await
        .unwrap();
}

#[tokio::test]
async fn init_containers_run_in_order_to_completion_before_the_app() {
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "init").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let work = json!([{"name": "work", "mountPath": "/work"}]);
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "ordered"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "work", "emptyDir": {}}],
                "initContainers": [
                    {"name": "first", "image": "shell", "args": ["-c", "echo one >> /work/order"],
                     "volumeMounts": work},
                    {"name": "second", "image": "shell",
                     "args": ["-c", "sleep 2; echo two >> /work/order"], "volumeMounts": work},
                ],
                "containers": [{"name": "main", "image": "shell", "volumeMounts": work,
                                "args": ["-c", "tr '\\n' , < /work/order; echo; exec sleep 60"]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "ordered", Duration::from_secs(30), |p| {
        status_json(p)["initContainerStatuses"][1]["state"]["running"].is_object()
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(condition(&pod, "Initialized"), "False");
    assert_eq!(
        status["initContainerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
        "{status}"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing",
        "{status}"
    );
    let pod = wait_pod(&pods, "ordered", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(condition(&pod, "Initialized"), "True");
    for i in 0..2 {
        assert_eq!(
            status["initContainerStatuses"][i]["state"]["terminated"]["exitCode"], 0,
            "{status}"
        );
        assert_eq!(
            status["initContainerStatuses"][i]["restartCount"], 0,
            "{status}"
        );
    }
    let log = cluster
        .node()
        .unwrap()
        .container_log_path(&ns, "ordered", "main");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("one,two,") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A failing init container is restarted with back-off; the app never starts.
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "crashing"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "initContainers": [{"name": "fail", "image": "shell", "args": ["-c", "exit 3"]}],
                "containers": [{"name": "main", "image": "shell", "args": ["-c", "sleep 60"]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "crashing", Duration::from_secs(30), |p| {
        status_json(p)["initContainerStatuses"][0]["state"]["waiting"]["reason"]
            == "CrashLoopBackOff"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(
        status["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"], 3,
        "{status}"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing",
        "{status}"
    );
    let shown = cluster
        .kubectl_ok(&["get", "pod", "-n", &ns, "crashing", "--no-headers"])
        .await
        .unwrap();
    assert!(shown.contains("Init:CrashLoopBackOff"), "{shown}");

    // With restartPolicy Never, a failed init container fails the Pod.
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "never"},
            "spec": {
                "restartPolicy": "Never",
                "initContainers": [{"name": "fail", "image": "shell", "args": ["-c", "exit 1"]}],
                "containers": [{"name": "main", "image": "shell", "args": ["-c", "true"]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "never", Duration::from_secs(30), |p| {
        phase(p) == "Failed"
    })
    .await;
    let status = status_json(&pod);
    assert_eq!(
        status["initContainerStatuses"][0]["restartCount"], 0,
        "{status}"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing",
        "{status}"
    );
    cluster
        .kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])
        .await
        .unwrap();
}

#[tokio::test]
async fn post_start_hooks_and_exec_probes_run_inside_the_container() {
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "exec").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // /state exists only in the container's mount namespace: the hook and the probe see it.
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "hooked"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "state", "emptyDir": {}}],
                "containers": [{
                    "name": "main",
                    "image": "shell",
                    "args": ["-c", "exec sleep 60"],
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                    "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo $HOSTNAME > /state/ready"]}}},
                    "readinessProbe": {"exec": {"command": ["grep", "-q", "hooked", "/state/ready"]}, "periodSeconds": 1},
                }],
            },
        }),
    )
    .await;
    wait_pod(&pods, "hooked", Duration::from_secs(30), |p| {
        condition(p, "Ready") == "True"
    })
    .await;

    create_pod(
        &pods,
        json!({
            "metadata": {"name": "unwell"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "badhook",
                        "image": "shell",
                        "args": ["-c", "exec sleep 60"],
                        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo no >&2; exit 2"]}}},
                    },
                    {
                        "name": "dying",
                        "image": "shell",
                        "args": ["-c", "exec sleep 60"],
                        "livenessProbe": {"exec": {"command": ["sh", "-c", "exit 1"]},
                                          "periodSeconds": 1, "failureThreshold": 1},
                    },
                ],
            },
        }),
    )
    .await;
    wait_pod(&pods, "unwell", Duration::from_secs(30), |p| {
        let s = status_json(p);
        s["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
            && s["containerStatuses"][1]["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let events = events_of(&client, &ns, "unwell").await;
    let has = |reason: &str, text: &str| {
        events.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref().is_some_and(|m| m.contains(text))
        })
    };
    assert!(
        has(
            "FailedPostStartHook",
            "PostStartHook for container badhook failed"
        ),
        "{events:?}"
    );
    assert!(
        has(
            "Unhealthy",
            "Liveness probe failed: command [\"sh\", \"-c\", \"exit 1\"] exited with 1"
        ),
        "{events:?}"
    );
    assert!(
        has("Killing", "Container dying failed liveness probe"),
        "{events:?}"
    );
    let ready = pods.get("hooked").await.unwrap();
    assert_eq!(
        status_json(&ready)["containerStatuses"][0]["restartCount"],
        0
    );
    for pod in ["hooked", "unwell"] {
        pods.delete(pod, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test]
async fn a_changed_config_map_reaches_a_running_pod() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let client = cp().cluster("node").client().await.unwrap();
    let ns = namespace(&client, "live").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create::<ConfigMap>(
        &client,
        &ns,
        json!({"metadata": {"name": "live"}, "data": {"k": "v1"}}),
    )
    .await;
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "watcher"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "cfg", "configMap": {"name": "live"}}],
                "containers": [{
                    "name": "main",
                    "image": "shell",
                    "args": ["-c", "exec sleep 120"],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
                    "readinessProbe": {"exec": {"command": ["grep", "-qx", "v2", "/cfg/k"]}, "periodSeconds": 1},
                }],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "watcher", Duration::from_secs(30), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(condition(&pod, "Ready"), "False");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(
            "live",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"k": "v2"}})),
        )
        .await
        .unwrap();
    wait_pod(&pods, "watcher", Duration::from_secs(60), |p| {
        condition(p, "Ready") == "True"
    })
    .await;
    pods.delete("watcher", &DeleteParams::default())
        .await
        .unwrap();
}

/// tunnel-proxy from its image: unpacked, chrooted, run as the image's user 65532 with the
/// Pod's env, args and a Secret volume (its config API takes the token from it); it resolves a
/// Service name through the `/etc/hosts` the node writes into the image's root (its `/readyz`
/// waits for the connector URL it names, here a host-network kt-test-server), so the Pod
/// becomes Ready only if the name resolves inside the image.
#[tokio::test]
async fn a_pod_from_an_image_runs_as_its_user_and_resolves_a_service_name() {
    test_cluster::test_images().unwrap_or_else(|e| panic!("{e}"));
    let cluster = cp().cluster("node");
    let client = cluster.client().await.unwrap();
    let ns = namespace(&client, "image").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create::<k8s_openapi::api::core::v1::Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "proxy"},
               "stringData": {"token": "image-test-token"}}),
    )
    .await;
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "connector"},
            "spec": {
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "web", "image": "kt-test-server",
                                "env": [{"name": "PORT", "value": "18091"}]}],
            },
        }),
    )
    .await;
    create_pod(
        &pods,
        json!({
            "metadata": {"name": "proxy"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "token", "secret": {"secretName": "proxy"}},
                            {"name": "scratch", "emptyDir": {}}],
                "containers": [{
                    "name": "proxy",
                    "image": "ghcr.io/kube-tenancy/tunnel-proxy:0.1.0",
                    "securityContext": {"readOnlyRootFilesystem": true},
                    "args": ["--grace-period", "0s", "--log-format", "text"],
                    "env": [
                        {"name": "TUNNEL_TOKEN", "value": "present"},
                        {"name": "TUNNEL_PROXY_CONNECTOR_READY_URL",
                         "value": format!("http://{CONNECTOR_SERVICE}:18091/ready")},
                        {"name": "PROXY_AUTH_TOKEN_FILE", "value": "/var/run/proxy/token"},
                    ],
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run/proxy"},
                                     {"name": "scratch", "mountPath": "/tmp"}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8081}, "periodSeconds": 1},
                }],
            },
        }),
    )
    .await;
    let running = wait_pod(&pods, "proxy", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    })
    .await;
    // Ready once a config is loaded (and the connector answers): pushed with the token from the
    // Secret volume, which the process read inside the image.
    let ip = status_json(&running)["podIP"].as_str().unwrap().to_owned();
    let admin: SocketAddr = format!("{ip}:8081").parse().unwrap();
    let put = |token: &'static str| async move {
        let world = cp().cluster("node").node().unwrap().world();
        let mut stream = world.connect(admin).await?;
        let body = r#"{"version": 1, "routes": []}"#;
        let head = format!(
            "PUT /config HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let answer = loop {
        match put("image-test-token").await {
            Ok(answer) => break answer,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "{admin}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let refused = put("another-token").await.unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    wait_pod(&pods, "proxy", Duration::from_secs(60), |p| {
        condition(p, "Ready") == "True"
    })
    .await;
    // Ready means `/readyz` got 200 from the connector URL: only kt-test-server listens there,
    // and the proxy found it by name.
    let node = cluster.node().unwrap();

    // The process: chrooted in the Pod's copy of the image, as 65532:65532.
    let log = node.container_log_path(&ns, "proxy", "proxy");
    let root = log.parent().unwrap().join("rootfs").join("proxy");
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| std::fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|r| r == root))
        .unwrap_or_else(|| panic!("no process runs in {}", root.display()));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ids = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap()
    };
    assert_eq!(ids("Uid:"), ["65532"; 4], "{status}");
    assert_eq!(ids("Gid:"), ["65532"; 4], "{status}");
    assert_eq!(ids("Groups:"), ["65532"], "{status}");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, root.join("usr/local/bin/tunnel-proxy"));
    // readOnlyRootFilesystem: its root is a read-only mount (the kernel refuses every write),
    // the Secret volume too, the emptyDir is writable.
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let options = |point: &str| {
        mountinfo
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.len() > 5 && f[4] == point)
            .map(|f| f[5].split(',').map(str::to_owned).collect::<Vec<_>>())
            .next_back()
            .unwrap_or_else(|| panic!("no mount at {point}:\n{mountinfo}"))
    };
    assert!(options("/").contains(&"ro".to_owned()), "{mountinfo}");
    assert!(
        options("/var/run/proxy").contains(&"ro".to_owned()),
        "{mountinfo}"
    );
    assert!(options("/tmp").contains(&"rw".to_owned()), "{mountinfo}");
    // Nothing of the Pod was mounted on the host or written into the store's copy.
    assert!(!Path::new("/var/run/proxy").exists());

    for name in ["proxy", "connector"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.get_opt("proxy").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!root.exists(), "the Pod's root is removed with it");
}
