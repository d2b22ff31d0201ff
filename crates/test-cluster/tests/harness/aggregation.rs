//! The exact path the resource proxy uses: an APIService whose Service is
//! `type: ExternalName, externalName: localhost` reaches a TLS server on loopback, which receives
//! the aggregator's front-proxy client certificate and the caller's identity headers.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use serde_json::json;
use tokio_rustls::TlsAcceptor;

use super::{cp, eventually};

const GROUP: &str = "aggregation.harness.example.test";
const VERSION: &str = "v1alpha1";

/// What the server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    user: Option<String>,
    groups: Vec<String>,
    client_cert: Vec<u8>,
}

async fn serve(tls: Arc<rustls::ServerConfig>, seen: Arc<Mutex<Vec<Seen>>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let client_cert = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.to_vec())
                    .unwrap_or_default();
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    let client_cert = client_cert.clone();
                    async move {
                        let header = |n: &str| {
                            req.headers()
                                .get_all(n)
                                .iter()
                                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                                .collect::<Vec<_>>()
                        };
                        let s = Seen {
                            path: req.uri().path().to_owned(),
                            user: header("x-remote-user").into_iter().next(),
                            groups: header("x-remote-group"),
                            client_cert,
                        };
                        seen.lock().unwrap().push(s.clone());
                        let body = if s.path == format!("/apis/{GROUP}/{VERSION}") {
                            json!({
                                "kind": "APIResourceList",
                                "apiVersion": "v1",
                                "groupVersion": format!("{GROUP}/{VERSION}"),
                                "resources": [{
                                    "name": "echoes", "singularName": "echo", "namespaced": true,
                                    "kind": "Echo", "verbs": ["get", "list"]
                                }]
                            })
                        } else {
                            json!({"path": s.path, "user": s.user, "groups": s.groups})
                        };
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body.to_string())))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn an_external_name_apiservice_reaches_a_loopback_tls_server_with_the_front_proxy_identity() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let alpha = cp.cluster("alpha");
    let svc_name = "harness-aggregated";

    // The extension server: serving cert for <svc>.kube-system.svc from its own CA; client
    // certificates must chain to the cluster's front-proxy CA.
    let own_ca = test_cluster::pki::Authority::generate("harness-extension-ca").unwrap();
    let serving = own_ca
        .serving_cert(
            &[&format!("{svc_name}.kube-system.svc")],
            &["127.0.0.1".parse::<IpAddr>().unwrap()],
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            CertificateDer::from_pem_slice(alpha.pki().front_proxy_ca.cert_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let mut tls = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(serving.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let seen = Arc::new(Mutex::new(Vec::new()));
    let port = serve(Arc::new(tls), seen.clone()).await;

    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(own_ca.cert_pem());
    let manifests = format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: {svc_name}, namespace: kube-system}}
spec: {{type: ExternalName, externalName: localhost}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {VERSION}.{GROUP}}}
spec:
  group: {GROUP}
  version: {VERSION}
  service: {{name: {svc_name}, namespace: kube-system, port: {port}}}
  caBundle: {ca_bundle}
  groupPriorityMinimum: 1000
  versionPriority: 15
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: echo-reader}}
rules:
- apiGroups: ["{GROUP}"]
  resources: ["echoes"]
  verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: echo-reader-alice}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: echo-reader}}
subjects:
- {{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}}
"#
    );
    let client = alpha.client().await.unwrap();
    test_cluster::manifests::apply_yaml(&client, &manifests, "default")
        .await
        .unwrap();

    // `kubectl get apiservice` reports it Available: the availability probe went through.
    let available = r#"jsonpath={.status.conditions[?(@.type=="Available")].status}"#;
    eventually(
        "the APIService to be Available",
        Duration::from_secs(60),
        || async {
            let out = alpha
                .kubectl_ok(&[
                    "get",
                    "apiservice",
                    &format!("{VERSION}.{GROUP}"),
                    "-o",
                    available,
                ])
                .await
                .ok()?;
            (out.trim() == "True").then_some(())
        },
    )
    .await;
    let table = alpha
        .kubectl_ok(&["get", "apiservice", &format!("{VERSION}.{GROUP}")])
        .await
        .unwrap();
    assert!(
        table.contains(&format!("kube-system/{svc_name}")) && table.contains("True"),
        "{table}"
    );

    // A non-admin kubectl user reaches the server; the server sees the user's identity.
    let alice = alpha.kubeconfig_for("alice", &["devs"]).unwrap();
    let path = format!("/apis/{GROUP}/{VERSION}/namespaces/default/echoes/hello");
    let out = alpha
        .kubectl_with(&alice)
        .args(["get", "--raw", &path])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let echoed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(echoed["user"], "alice");

    let front_proxy_client = CertificateDer::from_pem_slice(
        alpha
            .pki()
            .front_proxy_client()
            .unwrap()
            .cert_pem
            .as_bytes(),
    )
    .unwrap();
    let seen = seen.lock().unwrap().clone();
    let req = seen
        .iter()
        .find(|s| s.path == path)
        .expect("the proxied request reached the server");
    assert_eq!(req.user.as_deref(), Some("alice"));
    assert!(req.groups.contains(&"devs".to_owned()), "{:?}", req.groups);
    assert!(
        req.groups.contains(&"system:authenticated".to_owned()),
        "{:?}",
        req.groups
    );
    assert_eq!(
        req.client_cert,
        front_proxy_client.to_vec(),
        "the aggregator presents the front-proxy client certificate"
    );

    // The aggregator's own discovery probe carries its identity.
    assert!(
        seen.iter()
            .any(|s| s.path == format!("/apis/{GROUP}/{VERSION}")
                && s.user.as_deref() == Some("system:kube-aggregator"))
    );

    // A user without RBAC is stopped by the client cluster before the server sees anything.
    let bob = alpha.kubeconfig_for("bob", &[]).unwrap();
    let out = alpha
        .kubectl_with(&bob)
        .args(["get", "--raw", &path])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
