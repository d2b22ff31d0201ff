//! The wiring in the client cluster (RP-2, RP-3) and the shared serving certificate, against a
//! real kube-apiserver (with its aggregator, CRD registration and admission policies).
//!
//! Every test uses its own client name and API groups, so tests run in parallel on one shared
//! control plane. The proxy identity in every test is the harness admin; the "other admin" that
//! the protection must stop is a separate `system:masters` user. Nothing listens on the
//! APIServices' ports, so they are Unavailable: availability is not asserted here.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ObjectMeta, PostParams};
use resource_proxy::config::Config;
use resource_proxy::config::names;
use resource_proxy::listen::serving::{self, ServingMaterial};
use resource_proxy::wiring::{self, RefusalReason, Wiring, WiringReport};
use test_cluster::pki::ADMIN_USER;
use test_cluster::{Cluster, ClusterSpec, ControlPlane};
use tokio::sync::watch;

fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    test_cluster::shared(|| ControlPlane::builder().cluster(ClusterSpec::new("client")))
}

fn cluster() -> &'static Arc<Cluster> {
    cp().cluster("client")
}

/// A resolved configuration for client `name`, with one enabled `<resource>.<group>/<version>`
/// entry per item of `entries`.
fn config(cluster: &Cluster, name: &str, entries: &[&str], base_port: u16) -> Arc<Config> {
    let mut yaml = format!(
        "client:\n  name: {name}\n  project: default\n  kubeconfig: {}\ncustomResources:\n",
        cluster.kubeconfig_path().display()
    );
    for entry in entries {
        yaml.push_str(&format!(
            "  '{entry}': {{enabled: true, targetVirtualCluster: {{name: target}}}}\n"
        ));
    }
    yaml.push_str(&format!(
        "targets:\n  default/target:\n    peers: {{static: ['127.0.0.1:1']}}\n    tls: {{caFile: /nonexistent/ca.crt, serverName: target}}\n    credential: {{tokenFile: /nonexistent/token}}\nlisteners:\n  basePort: {base_port}\n"
    ));
    Arc::new(Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}")))
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn api_service(client: &kube::Client, name: &str) -> Option<APIService> {
    Api::<APIService>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

async fn service(client: &kube::Client, name: &str) -> Option<Service> {
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .get_opt(name)
        .await
        .unwrap()
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The serving material and a wiring for `config`, reconciled once.
async fn wired(client: &kube::Client, config: &Arc<Config>) -> (Wiring, String, WiringReport) {
    let material = serving::ensure(client, config).await.unwrap();
    let wiring = Wiring::new(client.clone(), config.clone()).await.unwrap();
    let report = wiring.reconcile_once(&material.ca_pem).await.unwrap();
    (wiring, material.ca_pem, report)
}

/// Whether `leaf` (first certificate of the chain) verifies for `name` against `ca` the way the
/// aggregator verifies it.
fn verifies(material: &ServingMaterial, name: &str) -> bool {
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(material.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let leaf = CertificateDer::from_pem_slice(material.cert_chain_pem.as_bytes()).unwrap();
    verifier
        .verify_server_cert(
            &leaf,
            &[],
            &ServerName::try_from(name.to_owned()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .is_ok()
}

#[tokio::test]
async fn apiservice_service_and_protection_policy_are_applied_with_the_exact_fields() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    // The second group makes a Service name over 63 characters.
    let long_group = "a-very-long-organisation-name.platform-engineering.wiring.example.test";
    let config = config(
        cluster,
        "exact",
        &[
            "widgets.exact.wiring.example.test/v1",
            &format!("*.{long_group}/v1alpha1"),
        ],
        31000,
    );
    let (wiring, ca_pem, report) = wired(&client, &config).await;
    assert_eq!(wiring.proxy_user(), ADMIN_USER);
    assert_eq!(
        report.wired,
        [
            format!("{long_group}/v1alpha1"),
            "exact.wiring.example.test/v1".to_owned()
        ]
    );
    assert!(report.refused.is_empty() && report.removed.is_empty());

    for listener in &config.listeners {
        let name = names::api_service_name(&listener.group, &listener.version);
        let service_name = names::service_name(&listener.group, &listener.version);
        assert!(service_name.len() <= 63, "{service_name}");
        let a = api_service(&client, &name).await.expect("APIService");
        let spec = a.spec.expect("spec");
        assert_eq!(spec.group.as_deref(), Some(listener.group.as_str()));
        assert_eq!(spec.version.as_deref(), Some(listener.version.as_str()));
        let svc_ref = spec.service.expect("service reference");
        assert_eq!(svc_ref.namespace.as_deref(), Some("kube-system"));
        assert_eq!(svc_ref.name.as_deref(), Some(service_name.as_str()));
        assert_eq!(svc_ref.port, Some(i32::from(listener.port)));
        assert_eq!(
            spec.ca_bundle.expect("caBundle").0,
            ca_pem.as_bytes().to_vec()
        );
        assert_eq!(spec.group_priority_minimum, 100);
        assert_eq!(spec.version_priority, 100);
        assert_ne!(spec.insecure_skip_tls_verify, Some(true));
        assert_eq!(
            label(&a.metadata, names::PROTECTED_LABEL),
            Some("resource-proxy")
        );
        assert_eq!(label(&a.metadata, names::CLIENT_LABEL), Some("exact"));
        assert_eq!(label(&a.metadata, names::AUTOMANAGED_LABEL), None);

        let s = service(&client, &service_name).await.expect("Service");
        let s_spec = s.spec.expect("spec");
        assert_eq!(s_spec.type_.as_deref(), Some("ExternalName"));
        assert_eq!(s_spec.external_name.as_deref(), Some("localhost"));
        assert_eq!(
            label(&s.metadata, names::PROTECTED_LABEL),
            Some("resource-proxy")
        );
        assert_eq!(label(&s.metadata, names::CLIENT_LABEL), Some("exact"));
    }
    assert_eq!(config.listeners[0].port, 31000);
    assert_eq!(config.listeners[1].port, 31001);

    let policy = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .get(names::PROTECTION_POLICY_NAME)
        .await
        .unwrap()
        .spec
        .unwrap();
    let validations = policy.validations.unwrap();
    assert_eq!(validations.len(), 1);
    assert_eq!(
        validations[0].message.as_deref(),
        Some(names::PROTECTION_MESSAGE)
    );
    let exemption = policy
        .match_conditions
        .unwrap()
        .into_iter()
        .find(|c| c.name == "exempt-exact")
        .expect("this client's exemption");
    assert_eq!(
        exemption.expression,
        format!("request.userInfo.username != \"{ADMIN_USER}\"")
    );
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .get(names::PROTECTION_BINDING_NAME)
        .await
        .unwrap()
        .spec;
    assert_eq!(binding.policy_name, names::PROTECTION_POLICY_NAME);
    assert_eq!(binding.validation_actions, ["Deny"]);

    // A second pass changes nothing.
    let again = wiring.reconcile_once(&ca_pem).await.unwrap();
    assert_eq!(again.changed, Vec::<String>::new());
    assert_eq!(again.wired, report.wired);
}

#[tokio::test]
async fn other_admins_cannot_delete_the_wiring_but_the_proxy_removes_stale_entries() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    let kept = "widgets.kept.wiring.example.test/v1";
    let dropped = "widgets.dropped.wiring.example.test/v1";
    let (_, _, report) = wired(
        &client,
        &config(cluster, "protect", &[kept, dropped], 31100),
    )
    .await;
    assert_eq!(report.wired.len(), 2);
    let dropped_api_service = "v1.dropped.wiring.example.test";
    let dropped_service = "proxy-dropped-wiring-example-test-v1";
    let kept_api_service = "v1.kept.wiring.example.test";

    let other_admin = cluster
        .kubeconfig_for("other-admin", &["system:masters"])
        .unwrap();
    let kubectl_as_other = |args: &'static [&'static str]| {
        let mut cmd = cluster.kubectl_with(&other_admin);
        cmd.args(args);
        async move { cmd.output().await.unwrap() }
    };
    // The policy takes effect once the API server has loaded it: wait on a server-side dry run.
    let denied = eventually(
        "the protection policy to deny a dry-run delete",
        Duration::from_secs(30),
        || async {
            let out = kubectl_as_other(&[
                "delete",
                "apiservice",
                "v1.dropped.wiring.example.test",
                "--dry-run=server",
            ])
            .await;
            (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
        },
    )
    .await;
    assert!(denied.contains(names::PROTECTION_MESSAGE), "{denied}");

    let out = kubectl_as_other(&["delete", "apiservice", "v1.dropped.wiring.example.test"]).await;
    assert!(!out.status.success(), "an admin deleted the APIService");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(Forbidden)"), "{stderr}");
    assert!(stderr.contains(names::PROTECTION_MESSAGE), "{stderr}");
    assert!(stderr.contains(names::PROTECTION_POLICY_NAME), "{stderr}");
    let out = kubectl_as_other(&[
        "delete",
        "service",
        "-n",
        "kube-system",
        "proxy-dropped-wiring-example-test-v1",
    ])
    .await;
    assert!(!out.status.success(), "an admin deleted the Service");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(names::PROTECTION_MESSAGE), "{stderr}");
    assert!(api_service(&client, dropped_api_service).await.is_some());
    assert!(service(&client, dropped_service).await.is_some());

    // The policy only protects labelled objects: the same admin deletes an ordinary Service.
    let plain = Service {
        metadata: ObjectMeta {
            name: Some("plain-wiring-test".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some("localhost".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();
    let out = kubectl_as_other(&[
        "delete",
        "service",
        "-n",
        "kube-system",
        "plain-wiring-test",
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The entry leaves the configuration: the proxy (exempt) deletes its wiring.
    let (_, _, report) = wired(&client, &config(cluster, "protect", &[kept], 31100)).await;
    assert_eq!(report.wired, ["kept.wiring.example.test/v1"]);
    assert_eq!(
        report.removed,
        [
            format!("APIService {dropped_api_service}"),
            format!("Service {dropped_service}")
        ]
    );
    assert!(api_service(&client, dropped_api_service).await.is_none());
    assert!(service(&client, dropped_service).await.is_none());
    assert!(api_service(&client, kept_api_service).await.is_some());
}

#[tokio::test]
async fn drift_is_restored_on_the_next_reconcile() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    let config = config(
        cluster,
        "drift",
        &["widgets.drift.wiring.example.test/v1"],
        31200,
    );
    let (wiring, ca_pem, _) = wired(&client, &config).await;
    let name = "v1.drift.wiring.example.test";
    let service_name = "proxy-drift-wiring-example-test-v1";

    let other_ca = test_cluster::pki::Authority::generate("someone-else")
        .unwrap()
        .cert_pem();
    let patch = serde_json::json!({"spec": {
        "caBundle": base64_encode(other_ca.as_bytes()),
        "service": {"port": 443},
        "groupPriorityMinimum": 5,
    }})
    .to_string();
    cluster
        .kubectl_ok(&["patch", "apiservice", name, "--type=merge", "-p", &patch])
        .await
        .unwrap();
    cluster
        .kubectl_ok(&[
            "patch",
            "service",
            "-n",
            "kube-system",
            service_name,
            "--type=merge",
            "-p",
            r#"{"spec":{"externalName":"elsewhere.example.test"}}"#,
        ])
        .await
        .unwrap();
    let drifted = api_service(&client, name).await.unwrap().spec.unwrap();
    assert_eq!(drifted.service.unwrap().port, Some(443));

    let report = wiring.reconcile_once(&ca_pem).await.unwrap();
    assert_eq!(
        report.changed,
        [
            format!("Service {service_name}"),
            format!("APIService {name}")
        ]
    );
    let spec = api_service(&client, name).await.unwrap().spec.unwrap();
    assert_eq!(spec.service.unwrap().port, Some(31200));
    assert_eq!(spec.ca_bundle.unwrap().0, ca_pem.as_bytes().to_vec());
    assert_eq!(spec.group_priority_minimum, 100);
    let s = service(&client, service_name).await.unwrap().spec.unwrap();
    assert_eq!(s.external_name.as_deref(), Some("localhost"));
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn a_group_version_served_by_a_local_crd_is_refused_and_the_crd_keeps_its_apiservice() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    let group = "local.wiring.example.test";
    let name = "v1.local.wiring.example.test";
    let config = config(cluster, "crd", &[&format!("things.{group}/v1")], 31300);

    // Wired while no CRD serves the group/version.
    let (wiring, ca_pem, report) = wired(&client, &config).await;
    assert_eq!(report.wired, [format!("{group}/v1")]);

    let crd = format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: things, singular: thing, kind: Thing}}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
    );
    test_cluster::manifests::apply_crds_yaml(&client, &crd)
        .await
        .unwrap();

    // Refused, with the reason; this proxy's own APIService and Service are removed.
    let report = wiring.reconcile_once(&ca_pem).await.unwrap();
    assert!(report.wired.is_empty(), "{report:?}");
    assert_eq!(report.refused.len(), 1);
    assert_eq!(report.refused[0].group_version, format!("{group}/v1"));
    assert_eq!(
        report.refused[0].reason,
        RefusalReason::Crd {
            name: format!("things.{group}")
        }
    );
    assert!(
        report.refused[0]
            .reason
            .to_string()
            .contains("CustomResourceDefinition things.local.wiring.example.test"),
        "{}",
        report.refused[0].reason
    );
    assert_eq!(
        report.removed,
        [
            format!("APIService {name}"),
            "Service proxy-local-wiring-example-test-v1".to_owned()
        ]
    );

    // The cluster registers the CRD's own APIService; the proxy leaves it alone.
    let local = eventually(
        "the CRD's automanaged APIService",
        Duration::from_secs(30),
        || async {
            api_service(&client, name)
                .await
                .filter(|a| label(&a.metadata, names::AUTOMANAGED_LABEL).is_some())
        },
    )
    .await;
    let report = wiring.reconcile_once(&ca_pem).await.unwrap();
    assert_eq!(report.refused.len(), 1);
    assert!(report.removed.is_empty() && report.changed.is_empty());
    let after = api_service(&client, name).await.expect("still there");
    assert_eq!(after.metadata.uid, local.metadata.uid);
    assert_eq!(label(&after.metadata, names::PROTECTED_LABEL), None);
    assert!(after.spec.unwrap().service.is_none(), "served locally");
    assert!(
        service(&client, "proxy-local-wiring-example-test-v1")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn only_the_leader_writes_and_a_follower_takes_over_when_it_dies() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    let entry = "widgets.leader.wiring.example.test/v1";
    let name = "v1.leader.wiring.example.test";
    // Two replicas of one client; they differ only in base port, so the port shows who wrote.
    let config_a = config(cluster, "leader", &[entry], 31400);
    let config_b = config(cluster, "leader", &[entry], 31500);
    let material = serving::ensure(&client, &config_a).await.unwrap();

    let lease = |config: &Config, identity: &str| {
        let mut lease = wiring::lease_config(config, identity);
        lease.duration_seconds = 4;
        lease.grace_seconds = 1;
        lease
    };
    assert_eq!(lease(&config_a, "a").name, "resource-proxy-leader");
    let a = kube_support::leader::elect(client.clone(), &lease(&config_a, "replica-a"))
        .await
        .unwrap();
    eventually("replica a to lead", Duration::from_secs(15), || async {
        a.is_leader().then_some(())
    })
    .await;
    let b = kube_support::leader::elect(client.clone(), &lease(&config_b, "replica-b"))
        .await
        .unwrap();

    let interval = Duration::from_millis(300);
    let (_serving_tx, serving_rx) = watch::channel(material.clone());
    let start = |config: &Arc<Config>, leader: watch::Receiver<bool>| {
        let client = client.clone();
        let config = config.clone();
        let serving_rx = serving_rx.clone();
        let (reports_tx, reports_rx) = watch::channel(None);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let wiring = Wiring::new(client, config).await?;
            wiring::run(wiring, leader, serving_rx, interval, reports_tx, async {
                let _ = stop_rx.await;
            })
            .await
        });
        (task, reports_rx, stop_tx)
    };
    let (task_a, reports_a, _stop_a) = start(&config_a, a.subscribe());
    let (task_b, reports_b, stop_b) = start(&config_b, b.subscribe());

    let port = || async {
        api_service(&client, name)
            .await
            .and_then(|a| a.spec?.service?.port)
    };
    eventually(
        "the leader's wiring (port 31400)",
        Duration::from_secs(15),
        || async { (port().await == Some(31400)).then_some(()) },
    )
    .await;
    // Drift is restored by the leader's loop, never with the follower's configuration.
    cluster
        .kubectl_ok(&[
            "patch",
            "apiservice",
            name,
            "--type=merge",
            "-p",
            r#"{"spec":{"service":{"port":443}}}"#,
        ])
        .await
        .unwrap();
    eventually(
        "the leader to restore the port",
        Duration::from_secs(15),
        || async { (port().await == Some(31400)).then_some(()) },
    )
    .await;
    // Over many ticks the follower reconciles nothing and its configuration never shows.
    for _ in 0..10 {
        tokio::time::sleep(interval).await;
        assert_eq!(port().await, Some(31400));
        assert!(reports_b.borrow().is_none(), "the follower reconciled");
        assert!(!b.is_leader());
    }
    assert!(reports_a.borrow().is_some());

    // The leader dies without releasing the lease: it stops at once, b takes over after expiry.
    a.abandon();
    let ended = tokio::time::timeout(Duration::from_secs(5), task_a)
        .await
        .expect("the old leader's loop stops")
        .unwrap();
    assert!(
        matches!(ended, Err(wiring::Error::ElectionEnded)),
        "{ended:?}"
    );
    eventually("replica b to lead", Duration::from_secs(15), || async {
        b.is_leader().then_some(())
    })
    .await;
    eventually(
        "the new leader's wiring (port 31500)",
        Duration::from_secs(15),
        || async { (port().await == Some(31500)).then_some(()) },
    )
    .await;
    let report = reports_b.borrow().clone().expect("b reconciled");
    assert_eq!(report.wired, ["leader.wiring.example.test/v1"]);
    let spec = api_service(&client, name).await.unwrap().spec.unwrap();
    assert_eq!(
        spec.ca_bundle.unwrap().0,
        material.ca_pem.as_bytes().to_vec()
    );
    assert!(
        service(&client, "proxy-leader-wiring-example-test-v1")
            .await
            .is_some()
    );

    stop_b.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task_b)
        .await
        .expect("the loop stops on shutdown")
        .unwrap()
        .unwrap();
    b.release().await;
}

#[tokio::test]
async fn concurrent_replicas_converge_on_one_serving_ca() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let config = config(
        cluster,
        "converge",
        &["widgets.converge.wiring.example.test/v1"],
        31600,
    );
    let (client_a, client_b) = (
        cluster.client().await.unwrap(),
        cluster.client().await.unwrap(),
    );
    let (a, b) = tokio::join!(
        serving::ensure(&client_a, &config),
        serving::ensure(&client_b, &config)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "both replicas serve the same material");

    let secret = Api::<Secret>::namespaced(client_a.clone(), "kube-system")
        .get("resource-proxy-serving-converge")
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data["ca.crt"].0, a.ca_pem.as_bytes().to_vec());
    assert_eq!(data["tls.crt"].0, a.cert_chain_pem.as_bytes().to_vec());
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert!(verifies(
        &a,
        "proxy-converge-wiring-example-test-v1.kube-system.svc"
    ));
    assert!(verifies(&a, "localhost"));
    assert!(!verifies(&a, "proxy-other-v1.kube-system.svc"));
    // A later start reads the same material.
    assert_eq!(serving::ensure(&client_a, &config).await.unwrap(), a);
}

#[tokio::test]
async fn a_new_listener_reissues_the_leaf_from_the_same_ca_and_every_replica_reloads_it() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let cluster = cluster();
    let client = cluster.client().await.unwrap();
    let first = "widgets.first.wiring.example.test/v1";
    let second = "widgets.second.wiring.example.test/v1";
    let old_config = config(cluster, "reissue", &[first], 31700);
    let new_config = config(cluster, "reissue", &[first, second], 31700);
    let first_san = "proxy-first-wiring-example-test-v1.kube-system.svc";
    let second_san = "proxy-second-wiring-example-test-v1.kube-system.svc";

    let initial = serving::ensure(&client, &old_config).await.unwrap();
    assert!(verifies(&initial, first_san) && !verifies(&initial, second_san));

    // An old replica and a new one (with the added listener) watch the material.
    let poll = Duration::from_millis(300);
    let mut old_replica =
        serving::watch_serving(client.clone(), old_config.clone(), initial.clone(), poll);
    let mut new_replica =
        serving::watch_serving(client.clone(), new_config.clone(), initial.clone(), poll);
    tokio::time::timeout(Duration::from_secs(10), new_replica.changed())
        .await
        .expect("the new replica re-issues within a few polls")
        .unwrap();
    let reissued = new_replica.borrow_and_update().clone();
    assert_eq!(reissued.ca_pem, initial.ca_pem, "the caBundle stays");
    assert_ne!(reissued.cert_chain_pem, initial.cert_chain_pem);
    assert!(verifies(&reissued, first_san) && verifies(&reissued, second_san));

    // The old replica hot-reloads the new leaf (it covers its SANs too) instead of reverting it.
    tokio::time::timeout(Duration::from_secs(10), old_replica.changed())
        .await
        .expect("the old replica reloads")
        .unwrap();
    assert_eq!(*old_replica.borrow(), reissued);
    tokio::time::sleep(poll * 4).await;
    assert_eq!(*old_replica.borrow(), reissued);
    assert_eq!(*new_replica.borrow(), reissued);
    assert_eq!(
        serving::ensure(&client, &old_config).await.unwrap(),
        reissued
    );
}
