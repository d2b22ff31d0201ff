//! Per-Gateway isolation (TG-7 .. TG-10): a Gateway with `spec.infrastructure.parametersRef`
//! gets its own plane (rendered objects, its own tunnel, its own token), traffic and config stay
//! in it, drift heals, teardown removes it, foreign objects are never touched, tunnel claims are
//! arbitrated and verified with the Cloudflare API, and the per-namespace cap holds.
//!
//! No kubelet runs: the test plays it, starting an in-process proxy with the plane's token and
//! publishing it in the plane's config Service, and setting the Deployment's ready replicas.

use std::time::Duration;

use base64::Engine;
use cloudflare_double::TunnelInfo;
use serde_json::{Value, json};
use test_cluster::unique_name;
use tokio::sync::{RwLockReadGuard, RwLockWriteGuard};

use crate::routing::wait_hostname;
use crate::world::*;

const WAIT: Duration = Duration::from_secs(60);

fn tunnel(name: &str) -> TunnelInfo {
    let w = world();
    w.double.add_tunnel(&w.account, name).unwrap()
}

/// The world, held beside the other read-holding tests, and a backend named `backend`.
async fn shared_world(backend: &str) -> (&'static World, RwLockReadGuard<'static, ()>, u16) {
    let w = world();
    let guard = w.lock.read().await;
    (w, guard, spawn_backend(backend).await)
}

/// The world, held alone (the test changes the class), reset when the test ends, and a backend.
async fn exclusive_world(
    backend: &str,
) -> (
    &'static World,
    RwLockWriteGuard<'static, ()>,
    ClassReset,
    u16,
) {
    let w = world();
    let guard = w.lock.write().await;
    let reset = ClassReset;
    (w, guard, reset, spawn_backend(backend).await)
}

/// A fresh namespace named after `prefix`, a tunnel of its own, and the Gateway `gw` opting in
/// with that tunnel's token ([`dedicated_gateway`]).
async fn own_tunnel_gateway(prefix: &str, gw: &str, backend_port: u16) -> (String, TunnelInfo) {
    let ns = unique_name(prefix);
    let t = tunnel(&ns);
    dedicated_gateway(&ns, gw, &t.token, backend_port).await;
    (ns, t)
}

async fn create_namespace(ns: &str) {
    apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
    ))
    .await;
}

/// Applies an HTTPRoute `name` to Gateway `gw` for `host` ([`route_to`]).
async fn add_route(ns: &str, name: &str, gw: &str, host: &str) {
    apply(&route_to(ns, name, gw, host)).await;
}

/// Waits for an Event in `ns` whose JSON contains `needle` (a reason, possibly quoted).
async fn wait_event(ns: &str, what: &str, needle: &str) {
    eventually(what, WAIT, || async {
        let ev = kubectl(&["get", "events", "-n", ns, "-o", "json"]).await;
        ev.contains(needle)
            .then_some(())
            .ok_or_else(|| "none".to_owned())
    })
    .await;
}

/// Namespace (enforcing the `restricted` Pod Security Standard, as a tenant's may), backend
/// Service, token Secret, GatewayConfig `cfg` and the Gateway `gw` opting in.
async fn dedicated_gateway(ns: &str, gw: &str, token: &str, backend_port: u16) {
    apply(&format!(
        r#"
apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
---
apiVersion: v1
kind: Secret
metadata: {{name: tunnel-{gw}, namespace: {ns}}}
stringData: {{tunnel-token: "{token}"}}
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayConfig
metadata: {{name: cfg-{gw}, namespace: {ns}}}
spec:
  tunnelTokenSecretRef: {{name: tunnel-{gw}}}
"#
    ))
    .await;
    apply(&service_yaml(ns, "echo", backend_port)).await;
    apply(&gateway_yaml(ns, gw, true)).await;
}

fn gateway_yaml(ns: &str, gw: &str, dedicated: bool) -> String {
    let infra = if dedicated {
        format!(
            "  infrastructure:\n    parametersRef: {{group: cf.k8s.lex.la, kind: GatewayConfig, name: cfg-{gw}}}\n"
        )
    } else {
        String::new()
    };
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gw}, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
{infra}  listeners:
  - name: http
    protocol: HTTP
    port: 80
"#
    )
}

fn route_to(ns: &str, name: &str, gw: &str, host: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: {gw}}}]
  hostnames: ["{host}"]
  rules: [{{backendRefs: [{{name: echo, port: 80}}]}}]
"#
    )
}

async fn condition(ns: &str, gw: &str, type_: &str) -> Value {
    let g = get_json(&["gateway", gw, "-n", ns]).await;
    g["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn wait_gateway(ns: &str, gw: &str, type_: &str, status: &str, reason: &str) {
    wait_gateway_saying(ns, gw, type_, status, reason, "").await;
}

/// Waits for `Accepted=False/InvalidParameters` with a message containing `needle`.
async fn wait_invalid_parameters(ns: &str, gw: &str, needle: &str) {
    wait_gateway_saying(ns, gw, "Accepted", "False", "InvalidParameters", needle).await;
}

/// Waits for the condition with a message containing `needle`: a condition keeps its reason
/// across causes (a GatewayConfig not yet seen, then a claim refused are both
/// `InvalidParameters`), so only the message tells the cause the test is after.
async fn wait_gateway_saying(
    ns: &str,
    gw: &str,
    type_: &str,
    status: &str,
    reason: &str,
    needle: &str,
) -> String {
    eventually(
        &format!("Gateway {ns}/{gw} {type_}={status}/{reason} saying {needle:?}"),
        WAIT,
        || async {
            let c = condition(ns, gw, type_).await;
            let message = c["message"].as_str().unwrap_or_default();
            if c["status"] == status && c["reason"] == reason && message.contains(needle) {
                Ok(message.to_owned())
            } else {
                Err(c.to_string())
            }
        },
    )
    .await
}

/// Waits until the object is there (`present`) or gone.
async fn wait_exists(kind: &str, ns: &str, name: &str, present: bool) {
    eventually(
        &format!(
            "{kind} {ns}/{name} {}",
            if present { "present" } else { "gone" }
        ),
        WAIT,
        || async {
            if exists(kind, ns, name).await == present {
                Ok(())
            } else {
                Err(format!("present: {}", !present))
            }
        },
    )
    .await;
}

/// Waits until a proxy answers `host` + `path` with 200.
async fn wait_ok(proxy: std::net::SocketAddr, host: &str, path: &str) {
    eventually(
        &format!("200 for {host}{path} via {proxy}"),
        WAIT,
        || async {
            match get_via(proxy, host, path).await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

async fn exists(kind: &str, ns: &str, name: &str) -> bool {
    cluster()
        .kubectl_ok(&["get", kind, name, "-n", ns, "-o", "name"])
        .await
        .is_ok()
}

/// Plays the kubelet for a plane: a proxy with the plane's token behind its config Service, and
/// the Deployment reporting a ready replica. Returns the proxy.
async fn run_plane(ns: &str, gw: &str) -> Proxy {
    let secret = eventually("the generated token Secret", WAIT, || async {
        cluster()
            .kubectl_ok(&[
                "get",
                "secret",
                &format!("cf-proxy-{gw}-auth"),
                "-n",
                ns,
                "-o",
                "jsonpath={.data.auth-token}",
            ])
            .await
            .map_err(|e| e.to_string())
            .and_then(|b| {
                (!b.is_empty())
                    .then_some(b)
                    .ok_or_else(|| "empty".to_owned())
            })
    })
    .await;
    let token = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(secret.trim())
            .unwrap(),
    )
    .unwrap();
    let p = spawn_plane_proxy(&token, ns, gw).await;
    publish_plane_proxy(ns, gw, &p).await;
    eventually("the Deployment", WAIT, || async {
        exists("deployment", ns, &format!("cf-proxy-{gw}"))
            .await
            .then_some(())
            .ok_or_else(|| "absent".to_owned())
    })
    .await;
    kubectl(&[
        "patch",
        "deployment",
        &format!("cf-proxy-{gw}"),
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":1,"readyReplicas":1,"availableReplicas":1,"updatedReplicas":1}}"#,
    ])
    .await;
    p
}

fn tunnel_hostnames(t: &TunnelInfo) -> Vec<String> {
    let w = world();
    let (doc, _) = w.double.configuration(&w.account, &t.tunnel_id).unwrap();
    doc.as_ref()
        .and_then(|d| d["ingress"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["hostname"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_dedicated_gateway_gets_its_own_plane_and_only_its_routes() {
    let (w, _shared, port) = shared_world("ded").await;
    let (ns, t) = own_tunnel_gateway("ded", "gw", port).await;
    let host = format!("{ns}.example.com");
    add_route(&ns, "web", "gw", &host).await;

    // Rendered, owned by the Gateway, and not Programmed before a replica is ready.
    wait_gateway_saying(&ns, "gw", "Programmed", "False", "Pending", "cf-proxy-gw").await;
    let deploy = get_json(&["deployment", "cf-proxy-gw", "-n", &ns]).await;
    let gw = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        deploy["metadata"]["ownerReferences"][0]["uid"],
        gw["metadata"]["uid"]
    );
    assert_eq!(deploy["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    // The namespace enforces `restricted`: a Pod of the rendered template is admitted (no node
    // here creates the Deployment's Pods, so a dry-run Pod is the check).
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plane-psa", "namespace": ns},
        "spec": deploy["spec"]["template"]["spec"],
    });
    cluster()
        .kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &pod.to_string())
        .await
        .unwrap_or_else(|e| panic!("the plane's pod is refused under restricted: {e}"));
    // Two replicas: at most one evicted at a time.
    let pdb = get_json(&["poddisruptionbudget", "cf-proxy-gw", "-n", &ns]).await;
    assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{pdb}");
    assert_eq!(
        pdb["metadata"]["ownerReferences"][0]["uid"],
        gw["metadata"]["uid"]
    );
    let svc = get_json(&["service", "cf-proxy-gw-config", "-n", &ns]).await;
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let np = get_json(&["networkpolicy", "cf-proxy-gw-netpol", "-n", &ns]).await;
    let ingress = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{np}");
    // The controller pushes over mutual TLS: the config port is 8443, mounted from its Secret.
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": 8443, "protocol": "TCP"}])
    );
    assert_eq!(
        deploy["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "cf-proxy-gw-config-tls"
    );
    let from = &ingress[0]["from"][0];
    assert_eq!(
        from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], SYSTEM_NS,
        "the controller's namespace AND its pods, in one peer: {np}"
    );
    assert!(
        from["podSelector"]["matchLabels"]
            .as_object()
            .is_some_and(|l| !l.is_empty())
    );
    eventually("a ProxyProvisioned Event", WAIT, || async {
        let ev = kubectl(&["get", "events", "-n", &ns, "-o", "json"]).await;
        ev.contains("ProxyProvisioned")
            .then_some(())
            .ok_or_else(|| "none".to_owned())
    })
    .await;

    let plane = run_plane(&ns, "gw").await;
    wait_gateway(&ns, "gw", "Programmed", "True", "Programmed").await;
    let gw = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        gw["status"]["addresses"][0]["value"],
        format!("{}.cfargotunnel.com", t.tunnel_id)
    );

    // Traffic through its own plane; the shared plane does not know the route, and the plane
    // holds no other Gateway's routes.
    let data = plane.data;
    eventually("traffic through the dedicated plane", WAIT, || async {
        match get_via(data, &host, "/x").await {
            Ok((200, b)) if b.contains("ded /x") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (status, _) = get_via(w.proxies[0].data, &host, "/x").await.unwrap();
    assert_eq!(
        status, 404,
        "the shared plane does not serve a dedicated Gateway's route"
    );
    let doc = plane.state.document().unwrap();
    assert!(
        doc.routes.iter().all(|r| match r {
            tunnel_config::config::Route::Http(h) => h.name.starts_with(&format!("{ns}/")),
            tunnel_config::config::Route::Grpc(g) => g.name.starts_with(&format!("{ns}/")),
        }),
        "only this Gateway's routes reach its plane: {doc:?}"
    );
    for p in &w.proxies {
        let shared = format!("{:?}", p.state.document());
        assert!(!shared.contains(&format!("{ns}/web")), "{shared}");
    }
    // Its own tunnel's ingress document, not the class tunnel's.
    eventually("the dedicated tunnel lists the hostname", WAIT, || async {
        let hosts = tunnel_hostnames(&t);
        hosts
            .contains(&host)
            .then_some(())
            .ok_or_else(|| format!("{hosts:?}"))
    })
    .await;
    wait_hostname(&host, false).await;

    // Drift heals.
    kubectl(&[
        "scale",
        "deployment",
        "cf-proxy-gw",
        "-n",
        &ns,
        "--replicas=7",
    ])
    .await;
    eventually("replicas restored", WAIT, || async {
        let d = get_json(&["deployment", "cf-proxy-gw", "-n", &ns]).await;
        (d["spec"]["replicas"] == 2)
            .then_some(())
            .ok_or_else(|| d["spec"]["replicas"].to_string())
    })
    .await;
    kubectl(&["delete", "networkpolicy", "cf-proxy-gw-netpol", "-n", &ns]).await;
    wait_exists("networkpolicy", &ns, "cf-proxy-gw-netpol", true).await;

    // Scaled to one pod the budget goes (it would block every drain), and comes back at two.
    let replicas = |n: u32| format!("{{\"spec\":{{\"replicas\":{n}}}}}");
    kubectl(&[
        "patch",
        "gatewayconfig",
        "cfg-gw",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        &replicas(1),
    ])
    .await;
    wait_exists("poddisruptionbudget", &ns, "cf-proxy-gw", false).await;
    kubectl(&[
        "patch",
        "gatewayconfig",
        "cfg-gw",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        &replicas(2),
    ])
    .await;
    wait_exists("poddisruptionbudget", &ns, "cf-proxy-gw", true).await;

    // Removing parametersRef removes the plane; the Gateway moves to the shared plane.
    apply(&gateway_yaml(&ns, "gw", false)).await;
    eventually("the plane is removed", WAIT, || async {
        let left = [
            exists("deployment", &ns, "cf-proxy-gw").await,
            exists("service", &ns, "cf-proxy-gw-config").await,
            exists("networkpolicy", &ns, "cf-proxy-gw-netpol").await,
            exists("poddisruptionbudget", &ns, "cf-proxy-gw").await,
        ];
        (left == [false; 4])
            .then_some(())
            .ok_or_else(|| format!("{left:?}"))
    })
    .await;
    wait_hostname(&host, true).await;
}

#[tokio::test]
async fn deleting_the_gateway_removes_its_plane_and_foreign_objects_are_never_touched() {
    let (_, _shared, port) = shared_world("foreignobj").await;
    let ns = unique_name("foreignobj");
    let t = tunnel(&ns);
    create_namespace(&ns).await;
    // Someone else's Deployment at the name the plane of Gateway `taken` would get.
    apply(&format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: cf-proxy-taken, namespace: {ns}, labels: {{owner: someone-else}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: theirs}}}}
  template:
    metadata: {{labels: {{app: theirs}}}}
    spec: {{containers: [{{name: c, image: example.com/theirs:1}}]}}
"#
    ))
    .await;
    dedicated_gateway(&ns, "taken", &t.token, port).await;
    wait_invalid_parameters(&ns, "taken", "not owned").await;
    let theirs = get_json(&["deployment", "cf-proxy-taken", "-n", &ns]).await;
    assert_eq!(
        theirs["spec"]["template"]["spec"]["containers"][0]["image"],
        "example.com/theirs:1"
    );
    assert!(
        theirs["metadata"]["ownerReferences"].is_null(),
        "never adopted"
    );
    wait_event(&ns, "a RenderFailed Event", "RenderFailed").await;

    // Deleting that Gateway leaves their Deployment alone; deleting a served Gateway removes its
    // plane (garbage collection through the ownerReference).
    kubectl(&["delete", "gateway", "taken", "-n", &ns]).await;
    let t2 = tunnel(&format!("{ns}-2"));
    dedicated_gateway(&ns, "mine", &t2.token, port).await;
    wait_exists("deployment", &ns, "cf-proxy-mine", true).await;
    kubectl(&["delete", "gateway", "mine", "-n", &ns]).await;
    eventually("garbage collected", WAIT, || async {
        let left = [
            exists("deployment", &ns, "cf-proxy-mine").await,
            exists("service", &ns, "cf-proxy-mine-config").await,
        ];
        (left == [false; 2])
            .then_some(())
            .ok_or_else(|| format!("{left:?}"))
    })
    .await;
    assert!(exists("deployment", &ns, "cf-proxy-taken").await);
}

/// A tenant who creates `cf-proxy-<gw>-config-tls` before the controller does (to hand the
/// plane a serving identity of their own) gets nothing: the controller never writes or trusts
/// that Secret, pushes nothing to the plane, and the Gateway says why
/// (`ConfigAPITLS=False/CertificateMissing` naming the Secret, with a Warning Event). Once the
/// Secret is gone the controller writes its own and the condition turns True.
#[tokio::test]
async fn a_foreign_config_tls_secret_is_left_alone_and_the_gateway_says_so() {
    const TLS: &str = "cf.k8s.lex.la/ConfigAPITLS";
    let (_, _shared, port) = shared_world("foreigntls").await;
    let ns = unique_name("foreigntls");
    let t = tunnel(&ns);
    create_namespace(&ns).await;
    apply(&format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: cf-proxy-gw-config-tls, namespace: {ns}}}
stringData: {{tls.crt: forged, tls.key: forged, ca.crt: forged}}
"#
    ))
    .await;
    dedicated_gateway(&ns, "gw", &t.token, port).await;
    let msg = wait_gateway_saying(
        &ns,
        "gw",
        TLS,
        "False",
        "CertificateMissing",
        &format!("Secret {ns}/cf-proxy-gw-config-tls"),
    )
    .await;
    assert!(msg.contains("not written by the controller"), "{msg}");
    wait_event(&ns, "a CertificateMissing Event", "CertificateMissing").await;
    let theirs = get_json(&["secret", "cf-proxy-gw-config-tls", "-n", &ns]).await;
    let forged = base64::engine::general_purpose::STANDARD.encode("forged");
    assert_eq!(theirs["data"]["tls.crt"], forged.as_str(), "{theirs}");
    assert!(theirs["metadata"]["ownerReferences"].is_null(), "{theirs}");

    kubectl(&["delete", "secret", "cf-proxy-gw-config-tls", "-n", &ns]).await;
    wait_gateway(&ns, "gw", TLS, "True", "CertificatesValid").await;
    let ours = get_json(&["secret", "cf-proxy-gw-config-tls", "-n", &ns]).await;
    assert_eq!(ours["type"], "kubernetes.io/tls");
    assert_eq!(ours["metadata"]["ownerReferences"][0]["name"], "gw");
}

/// A token naming `tunnel` in `account` with a secret that is not the tunnel's.
fn forged_token(account: &str, tunnel: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    b64.encode(json!({"a": account, "t": tunnel, "s": b64.encode([7u8; 32])}).to_string())
}

#[tokio::test]
async fn tunnel_claims_are_verified_and_arbitrated() {
    let (w, _shared, port) = shared_world("claims").await;

    // The class tunnel belongs to the operator.
    let ns = unique_name("claim-class");
    dedicated_gateway(&ns, "gw", &w.tunnel.token, port).await;
    wait_invalid_parameters(&ns, "gw", "GatewayClass tunnel").await;
    wait_event(&ns, "TunnelClaimRejected", "TunnelClaimRejected").await;
    assert!(!exists("deployment", &ns, "cf-proxy-gw").await, "no plane");
    add_route(&ns, "web", "gw", &format!("{ns}.example.com")).await;
    let why = wait_route_condition(
        "httproute",
        &ns,
        "web",
        "Accepted",
        "False",
        "TunnelClaimRejected",
    )
    .await;
    assert!(why.contains("refused"), "routes say why: {why}");

    // A forged token (the right tunnel id, a wrong secret) is refused by verification.
    let victim = tunnel(&unique_name("victim"));
    let ns = unique_name("claim-forged");
    dedicated_gateway(
        &ns,
        "gw",
        &forged_token(&w.account, &victim.tunnel_id),
        port,
    )
    .await;
    wait_gateway(&ns, "gw", "Accepted", "False", "TunnelSecretMismatch").await;
    assert!(!exists("deployment", &ns, "cf-proxy-gw").await);

    // Possession beats age: an older Gateway whose configuration resolves only later does not
    // take the tunnel from the Gateway already serving it.
    let t = tunnel(&unique_name("contested"));
    let old_ns = unique_name("claim-old");
    create_namespace(&old_ns).await;
    apply(&gateway_yaml(&old_ns, "gw", true)).await; // no GatewayConfig yet
    wait_gateway(&old_ns, "gw", "Accepted", "False", "InvalidParameters").await;
    next_second().await;
    let holder_ns = unique_name("claim-holder");
    dedicated_gateway(&holder_ns, "gw", &t.token, port).await;
    eventually("the holder advertises the tunnel", WAIT, || async {
        let g = get_json(&["gateway", "gw", "-n", &holder_ns]).await;
        (g["status"]["addresses"][0]["value"] == format!("{}.cfargotunnel.com", t.tunnel_id))
            .then_some(())
            .ok_or_else(|| g["status"].to_string())
    })
    .await;
    dedicated_gateway(&old_ns, "gw", &t.token, port).await;
    wait_invalid_parameters(&old_ns, "gw", &holder_ns).await;
    assert_eq!(
        condition(&holder_ns, "gw", "Accepted").await["status"],
        "True"
    );

    // Same namespace: two Gateways may share a tunnel, and their routes say so.
    let (ns, _) = own_tunnel_gateway("claim-same", "one", port).await;
    apply(&format!(
        r#"
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayConfig
metadata: {{name: cfg-two, namespace: {ns}}}
spec:
  tunnelTokenSecretRef: {{name: tunnel-one}}
"#
    ))
    .await;
    apply(&gateway_yaml(&ns, "two", true)).await;
    add_route(&ns, "web", "two", &format!("{ns}.example.com")).await;
    let note = wait_route_condition(
        "httproute",
        &ns,
        "web",
        "cf.k8s.lex.la/TunnelShared",
        "True",
        "TunnelSharedInNamespace",
    )
    .await;
    assert!(
        note.contains(&format!("{ns}/one")),
        "names the other Gateway: {note}"
    );
    assert_eq!(condition(&ns, "one", "Accepted").await["status"], "True");
    assert_eq!(condition(&ns, "two", "Accepted").await["status"], "True");
}

async fn set_class(patch: &str) {
    kubectl(&[
        "patch",
        "gatewayclassconfig",
        CLASS,
        "--type=merge",
        "-p",
        patch,
    ])
    .await;
}

/// Puts the class back (no cap, no sharing) when a test that changed it ends, even by a panic,
/// so one failure does not cascade into the other tests.
struct ClassReset;

impl Drop for ClassReset {
    fn drop(&mut self) {
        let kubectl = cluster().kubectl();
        let std = kubectl.as_std();
        let _ = std::process::Command::new(std.get_program())
            .args(std.get_args())
            .args([
                "patch",
                "gatewayclassconfig",
                CLASS,
                "--type=merge",
                "-p",
                r#"{"spec":{"maxDataPlanesPerNamespace":null,"allowSharedTunnels":false}}"#,
            ])
            .status();
    }
}

/// Gateways are ranked by creationTimestamp (seconds), then UID: let a second pass so the one
/// created next is younger.
async fn next_second() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

async fn unset_cap() {
    kubectl(&[
        "patch",
        "gatewayclassconfig",
        CLASS,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/maxDataPlanesPerNamespace"}]"#,
    ])
    .await;
}

#[tokio::test]
async fn the_per_namespace_cap_refuses_the_newest_and_frees_the_slot_promptly() {
    let (w, _exclusive, _reset, port) = exclusive_world("cap").await;
    set_class(r#"{"spec":{"maxDataPlanesPerNamespace":1}}"#).await;
    let ns = unique_name("cap");
    let tokens: Vec<TunnelInfo> = (0..3).map(|i| tunnel(&format!("{ns}-{i}"))).collect();
    // `elder` exists first, on the shared plane: it does not count.
    create_namespace(&ns).await;
    apply(&gateway_yaml(&ns, "elder", false)).await;
    wait_gateway(&ns, "elder", "Accepted", "True", "Accepted").await;
    next_second().await;
    dedicated_gateway(&ns, "first", &tokens[0].token, port).await;
    wait_gateway(&ns, "first", "Programmed", "False", "Pending").await;
    next_second().await;
    dedicated_gateway(&ns, "second", &tokens[1].token, port).await;
    wait_gateway_saying(
        &ns,
        "second",
        "Accepted",
        "False",
        "DataPlaneQuotaExceeded",
        "first",
    )
    .await;
    wait_gateway(&ns, "second", "Programmed", "False", "NoResources").await;
    assert!(!exists("deployment", &ns, "cf-proxy-second").await);
    add_route(&ns, "web", "second", &format!("{ns}.example.com")).await;
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "Accepted",
        "False",
        "DataPlaneQuotaExceeded",
    )
    .await;

    // Deleting the sibling frees the slot at once.
    kubectl(&["delete", "gateway", "first", "-n", &ns]).await;
    wait_gateway(&ns, "second", "Accepted", "True", "Accepted").await;
    wait_exists("deployment", &ns, "cf-proxy-second", true).await;

    // An older Gateway opting in later evicts the newest.
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: tunnel-elder, namespace: {ns}}}\nstringData: {{tunnel-token: \"{}\"}}\n---\napiVersion: cf.k8s.lex.la/v1alpha1\nkind: GatewayConfig\nmetadata: {{name: cfg-elder, namespace: {ns}}}\nspec:\n  tunnelTokenSecretRef: {{name: tunnel-elder}}\n",
        tokens[2].token
    ))
    .await;
    apply(&gateway_yaml(&ns, "elder", true)).await;
    wait_gateway(&ns, "second", "Accepted", "False", "DataPlaneQuotaExceeded").await;
    wait_gateway(&ns, "elder", "Accepted", "True", "Accepted").await;
    wait_exists("deployment", &ns, "cf-proxy-second", false).await;
    // The evicted Gateway keeps its published address.
    let g = get_json(&["gateway", "second", "-n", &ns]).await;
    assert_eq!(
        g["status"]["addresses"][0]["value"],
        format!("{}.cfargotunnel.com", tokens[1].tunnel_id)
    );

    // Raising the cap admits it again; lowering it evicts the newest again.
    set_class(r#"{"spec":{"maxDataPlanesPerNamespace":2}}"#).await;
    wait_gateway(&ns, "second", "Accepted", "True", "Accepted").await;
    set_class(r#"{"spec":{"maxDataPlanesPerNamespace":1}}"#).await;
    wait_gateway(&ns, "second", "Accepted", "False", "DataPlaneQuotaExceeded").await;
    assert_eq!(condition(&ns, "elder", "Accepted").await["status"], "True");

    // A Gateway refused for its tunnel claim still holds its slot.
    let ns2 = unique_name("cap-claim");
    dedicated_gateway(&ns2, "squatter", &w.tunnel.token, port).await;
    wait_gateway(&ns2, "squatter", "Accepted", "False", "InvalidParameters").await;
    next_second().await;
    let t = tunnel(&ns2);
    dedicated_gateway(&ns2, "later", &t.token, port).await;
    wait_gateway(&ns2, "later", "Accepted", "False", "DataPlaneQuotaExceeded").await;

    unset_cap().await;
    wait_gateway(&ns2, "later", "Accepted", "True", "Accepted").await;
}

#[tokio::test]
async fn allow_shared_tunnels_merges_claims_across_namespaces() {
    let (_, _exclusive, _reset, port) = exclusive_world("sharedt").await;
    let (ns_a, ns_b) = (unique_name("share-a"), unique_name("share-b"));
    let t = tunnel(&ns_a);
    dedicated_gateway(&ns_a, "gw", &t.token, port).await;
    wait_gateway(&ns_a, "gw", "Programmed", "False", "Pending").await;
    // Once both advertise the tunnel, turning sharing off leaves it to the older: make that
    // ns_a beyond doubt (a shared second would leave it to the UIDs).
    next_second().await;
    dedicated_gateway(&ns_b, "gw", &t.token, port).await;
    wait_invalid_parameters(&ns_b, "gw", &ns_a).await;

    set_class(r#"{"spec":{"allowSharedTunnels":true}}"#).await;
    wait_gateway(&ns_b, "gw", "Accepted", "True", "Accepted").await;
    add_route(&ns_b, "web", "gw", &format!("{ns_b}.example.com")).await;
    let note = wait_route_condition(
        "httproute",
        &ns_b,
        "web",
        "cf.k8s.lex.la/TunnelShared",
        "True",
        "TunnelSharedAcrossNamespaces",
    )
    .await;
    assert!(note.contains(&format!("{ns_a}/gw")), "{note}");
    wait_event(&ns_b, "a TunnelShared Event", "\"TunnelShared\"").await;

    set_class(r#"{"spec":{"allowSharedTunnels":false}}"#).await;
    wait_gateway(&ns_b, "gw", "Accepted", "False", "InvalidParameters").await;
    assert_eq!(condition(&ns_a, "gw", "Accepted").await["status"], "True");
}

#[tokio::test]
async fn an_established_holder_keeps_its_tunnel_through_a_token_rotation() {
    let (w, _shared, port) = shared_world("holdrot").await;
    let (ns, t) = own_tunnel_gateway("holdrot", "gw", port).await;
    wait_gateway(&ns, "gw", "Programmed", "False", "Pending").await;
    let hash = |d: &Value| {
        d["spec"]["template"]["metadata"]["annotations"]["cf.k8s.lex.la/tunnel-token-hash"].clone()
    };
    let before = hash(&get_json(&["deployment", "cf-proxy-gw", "-n", &ns]).await);

    let rotated = w
        .double
        .rotate_tunnel_secret(&w.account, &t.tunnel_id)
        .unwrap();
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: tunnel-gw, namespace: {ns}}}\nstringData: {{tunnel-token: \"{rotated}\"}}\n"
    ))
    .await;
    eventually("the pods roll onto the new token", WAIT, || async {
        let d = get_json(&["deployment", "cf-proxy-gw", "-n", &ns]).await;
        (hash(&d) != before)
            .then_some(())
            .ok_or_else(|| hash(&d).to_string())
    })
    .await;
    assert_eq!(condition(&ns, "gw", "Accepted").await["status"], "True");
    let g = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        g["status"]["addresses"][0]["value"],
        format!("{}.cfargotunnel.com", t.tunnel_id)
    );
}

#[tokio::test]
async fn a_configuration_that_stops_resolving_keeps_the_plane_serving_and_fails_new_changes_closed()
{
    let (_, _shared, port) = shared_world("broken").await;
    let (ns, t) = own_tunnel_gateway("broken", "gw", port).await;
    let host = format!("{ns}.example.com");
    add_route(&ns, "web", "gw", &host).await;
    let plane = run_plane(&ns, "gw").await;
    let data = plane.data;
    wait_ok(data, &host, "/").await;
    let served = plane.state.document().unwrap().version;

    // The token Secret goes away after a healthy render.
    kubectl(&["delete", "secret", "tunnel-gw", "-n", &ns]).await;
    wait_invalid_parameters(&ns, "gw", "tunnel-gw").await;
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "Accepted",
        "False",
        "InvalidParameters",
    )
    .await;
    // A new route is not delivered; the plane keeps serving the last config.
    let new_host = format!("new-{ns}.example.com");
    add_route(&ns, "later", "gw", &new_host).await;
    wait_route_condition(
        "httproute",
        &ns,
        "later",
        "Accepted",
        "False",
        "InvalidParameters",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        plane.state.document().unwrap().version,
        served,
        "nothing new was pushed"
    );
    assert!(
        exists("deployment", &ns, "cf-proxy-gw").await,
        "the plane is kept"
    );
    let (status, _) = get_via(data, &host, "/still").await.unwrap();
    assert_eq!(status, 200, "the last config keeps serving");
    let (status, _) = get_via(data, &new_host, "/").await.unwrap();
    assert_eq!(status, 404, "new changes fail closed");
    // The tunnel stays claimed: the Gateway keeps advertising it.
    let g = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        g["status"]["addresses"][0]["value"],
        format!("{}.cfargotunnel.com", t.tunnel_id)
    );
}

#[tokio::test]
async fn a_tunnel_sync_failure_marks_only_that_gateways_routes_pending() {
    let (w, _shared, port) = shared_world("contain").await;
    let (ns_a, ta) = own_tunnel_gateway("contain-a", "gw", port).await;
    let (ns_b, tb) = own_tunnel_gateway("contain-b", "gw", port).await;
    add_route(&ns_a, "web", "gw", &format!("{ns_a}.example.com")).await;
    add_route(&ns_b, "web", "gw", &format!("{ns_b}.example.com")).await;
    wait_route_condition("httproute", &ns_a, "web", "Accepted", "True", "Accepted").await;
    wait_route_condition("httproute", &ns_b, "web", "Accepted", "True", "Accepted").await;

    w.double.inject(
        cloudflare_double::FaultRule::new(
            format!(
                "/accounts/{}/cfd_tunnel/{}/configurations",
                w.account, ta.tunnel_id
            ),
            cloudflare_double::Fault::Status(503),
        )
        .times(100_000),
    );
    add_route(&ns_a, "more", "gw", &format!("more-{ns_a}.example.com")).await;
    add_route(&ns_b, "more", "gw", &format!("more-{ns_b}.example.com")).await;
    wait_route_condition("httproute", &ns_a, "web", "Accepted", "False", "Pending").await;
    wait_route_condition("httproute", &ns_b, "more", "Accepted", "True", "Accepted").await;
    assert_eq!(
        route_condition("httproute", &ns_b, "web", "Accepted")
            .await
            .map(|c| c.0),
        Some("True".into()),
        "the other tunnel's routes are untouched"
    );
    eventually("tunnel B's document updated", WAIT, || async {
        let hosts = tunnel_hostnames(&tb);
        hosts
            .contains(&format!("more-{ns_b}.example.com"))
            .then_some(())
            .ok_or_else(|| format!("{hosts:?}"))
    })
    .await;
    w.double.clear_faults();
    wait_route_condition("httproute", &ns_a, "more", "Accepted", "True", "Accepted").await;
}

#[tokio::test]
async fn rotating_a_bring_your_own_token_rolls_the_pods_and_reauthenticates_the_pushes() {
    let (_, _shared, port) = shared_world("rotate").await;
    let ns = unique_name("rotate");
    let t = tunnel(&ns);
    apply(&format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: tunnel-gw, namespace: {ns}}}
stringData: {{tunnel-token: "{token}"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: plane-auth, namespace: {ns}}}
stringData: {{auth-token: first-token}}
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayConfig
metadata: {{name: cfg-gw, namespace: {ns}}}
spec:
  tunnelTokenSecretRef: {{name: tunnel-gw}}
  authTokenSecretRef: {{name: plane-auth}}
"#,
        token = t.token
    ))
    .await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&gateway_yaml(&ns, "gw", true)).await;
    let host = format!("{ns}.example.com");
    add_route(&ns, "web", "gw", &host).await;

    let hash = |d: &Value| {
        d["spec"]["template"]["metadata"]["annotations"]["cf.k8s.lex.la/auth-token-hash"].clone()
    };
    let before = eventually("the Deployment", WAIT, || async {
        let d = get_json(&["deployment", "-n", &ns]).await;
        d["items"]
            .as_array()
            .and_then(|i| i.first().cloned())
            .ok_or_else(|| "absent".to_owned())
    })
    .await;
    assert!(
        !exists("secret", &ns, "cf-proxy-gw-auth").await,
        "a bring-your-own token generates nothing"
    );
    let first = spawn_plane_proxy("first-token", &ns, "gw").await;
    publish_plane_proxy(&ns, "gw", &first).await;
    let data = first.data;
    wait_ok(data, &host, "/").await;

    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: plane-auth, namespace: {ns}}}\nstringData: {{auth-token: second-token}}\n"
    ))
    .await;
    eventually("the pod template rolls", WAIT, || async {
        let d = get_json(&["deployment", "cf-proxy-gw", "-n", &ns]).await;
        (hash(&d) != hash(&before))
            .then_some(())
            .ok_or_else(|| hash(&d).to_string())
    })
    .await;
    // The rolled pod has the new token; pushes authenticate with it.
    let second = spawn_plane_proxy("second-token", &ns, "gw").await;
    publish_plane_proxy(&ns, "gw", &second).await;
    let data = second.data;
    wait_ok(data, &host, "/").await;
}

/// Points the plane's config Service at `p` (replacing the previous pod).
async fn publish_plane_proxy(ns: &str, gw: &str, p: &Proxy) {
    let service = format!("cf-proxy-{gw}-config");
    apply(&config_endpoint_slice(
        ns,
        &service,
        &format!("{service}-1"),
        p,
    ))
    .await;
}
