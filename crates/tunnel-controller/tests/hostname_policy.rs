//! Hostname ownership at admission (issue 20, item 2): the optional ValidatingAdmissionPolicy
//! of `deploy/tunnel-gateway/hostname-ownership/`, built with kustomize as a component and
//! installed in a real kube-apiserver with the Gateway API CRDs and ours, then attacked with
//! kubectl writes by tenant identities that may write routes and ListenerSets in their own
//! namespace only.
//!
//! Parameters: the GatewayClassConfig `cloudflare-tunnel` delegating `a.example.com` and
//! `*.a.example.com` to `team-a`, `*.example.com` to `team-b`; its `status.gateways` (which the
//! controller keeps, see the model's golden case `hostname-ownership`) lists `infra/edge` and
//! `team-b/local`. `infra/foreign` is another implementation's Gateway.

use std::time::Duration;

use test_cluster::{Cluster, ClusterSpec, ControlPlane};

const RULE: &str = "rule: hostname ownership";

const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: route-writer}
rules:
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes", "grpcroutes", "listenersets"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: route-writer}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: route-writer}
subjects: [{kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: cf.k8s.lex.la/v1alpha1
kind: GatewayClassConfig
metadata: {name: cloudflare-tunnel}
spec:
  tunnelID: 6ff42ae2-765d-4adf-8112-31c55c1551ef
  cloudflareCredentialsSecretRef: {name: cloudflare}
  hostnameOwnership:
    delegations:
    - namespaces: [team-a]
      hostnames: [a.example.com, "*.a.example.com"]
    - namespaces: [team-b]
      hostnames: ["*.example.com"]
"#;

fn route(kind: &str, ns: &str, name: &str, parent: &str, hostnames: &[&str]) -> String {
    let hosts = hostnames
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: [{parent}]\n  hostnames: [{hosts}]\n"
    )
}

const EDGE: &str = "{name: edge, namespace: infra}";

/// A ListenerSet with one HTTP listener per hostname.
fn listener_set(ns: &str, name: &str, parent: &str, hostnames: &[&str]) -> String {
    let listeners: String = hostnames
        .iter()
        .enumerate()
        .map(|(i, h)| format!("\n  - {{name: l{i}, protocol: HTTP, port: 80, hostname: \"{h}\"}}"))
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRef: {parent}\n  listeners:{listeners}\n"
    )
}

/// Creates `yaml` as `user`: `Ok` or the API server's refusal.
async fn create_as(cluster: &Cluster, user: &str, yaml: &str) -> Result<(), String> {
    cluster
        .kubectl_stdin(&["create", "--as", user, "-f", "-"], yaml)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn refused(result: Result<(), String>, what: &str, names: &[&str]) {
    let err = result.expect_err(&format!("{what} must be refused"));
    assert!(err.contains(RULE), "{what}: {err}");
    for n in names {
        assert!(err.contains(n), "{what}: the refusal names {n}: {err}");
    }
}

#[tokio::test]
async fn the_admission_policy_refuses_other_tenants_hostnames_and_ignores_other_implementations() {
    test_cluster::install_crypto_provider();
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("vap"))
        .gateway_api()
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let cluster = cp.cluster("vap");
    let client = cluster.client().await.unwrap();
    test_cluster::manifests::apply_crds_yaml(&client, &tunnel_controller::api::crds_yaml())
        .await
        .unwrap();
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], SETUP)
        .await
        .unwrap();
    // What the controller writes: the Gateways of the classes using this config.
    cluster
        .kubectl_ok(&[
            "patch",
            "gcconfig",
            "cloudflare-tunnel",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"gateways":["infra/edge","team-b/local"]}}"#,
        ])
        .await
        .unwrap();

    // The shipped component, included the way the docs say.
    let overlay = cp.state_dir().join("hostname-ownership-overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    let component = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/tunnel-gateway/hostname-ownership")
        .canonicalize()
        .unwrap();
    // kustomize takes only relative roots: up from the overlay to `/`, then down.
    let up = "../".repeat(overlay.canonicalize().unwrap().components().count() - 1);
    let relative = format!(
        "{up}{}",
        component.display().to_string().trim_start_matches('/')
    );
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n- {relative}\n"
        ),
    )
    .unwrap();
    let built = cluster
        .kubectl_ok(&["kustomize", overlay.to_str().unwrap()])
        .await
        .unwrap();
    assert!(
        built.contains("kind: ValidatingAdmissionPolicyBinding"),
        "{built}"
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], &built)
        .await
        .unwrap();

    // Policies take effect asynchronously: wait until a stolen hostname is refused.
    let probe = route("HTTPRoute", "team-b", "probe", EDGE, &["x.a.example.com"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match create_as(cluster, "bob", &probe).await {
            Err(e) if e.contains(RULE) => break,
            Err(e) => panic!("probe: {e}"),
            Ok(()) => {
                cluster
                    .kubectl_ok(&["delete", "httproute", "probe", "-n", "team-b"])
                    .await
                    .unwrap();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the policy never took effect"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Tenant B cannot publish or take over A's names, by either route kind, exact or wildcard.
    let b = |kind: &str, name: &str, hosts: &[&str]| route(kind, "team-b", name, EDGE, hosts);
    let attacks = [
        (
            "an exact name below A's wildcard",
            b("HTTPRoute", "x", &["x.a.example.com"]),
            "x.a.example.com",
        ),
        (
            "A's exact apex",
            b("HTTPRoute", "apex", &["a.example.com"]),
            "a.example.com",
        ),
        (
            "A's wildcard",
            b("HTTPRoute", "wild", &["*.a.example.com"]),
            "*.a.example.com",
        ),
        (
            "a wildcard below A's",
            b("HTTPRoute", "deeper", &["*.x.a.example.com"]),
            "*.x.a.example.com",
        ),
        (
            "B's own wildcard, which overlaps A's names",
            b("HTTPRoute", "wide", &["*.example.com"]),
            "*.example.com",
        ),
        (
            "A's name by GRPCRoute",
            b("GRPCRoute", "g", &["a.example.com"]),
            "a.example.com",
        ),
        (
            "A's wildcard by GRPCRoute",
            b("GRPCRoute", "gw", &["*.a.example.com"]),
            "*.a.example.com",
        ),
        (
            "a name nobody delegated",
            b("HTTPRoute", "none", &["example.org"]),
            "example.org",
        ),
        (
            "one stolen name among B's own",
            b("HTTPRoute", "mixed", &["shop.example.com", "a.example.com"]),
            "a.example.com",
        ),
    ];
    for (what, yaml, host) in &attacks {
        refused(
            create_as(cluster, "bob", yaml).await,
            what,
            &[host, "team-b"],
        );
    }
    // A parentRef without a namespace names a Gateway of the route's own namespace.
    refused(
        create_as(
            cluster,
            "bob",
            &route(
                "HTTPRoute",
                "team-b",
                "local",
                "{name: local}",
                &["a.example.com"],
            ),
        )
        .await,
        "a local parentRef of ours",
        &["a.example.com"],
    );

    // Each tenant's own names are admitted.
    create_as(
        cluster,
        "bob",
        &b(
            "HTTPRoute",
            "shop",
            &["shop.example.com", "*.shop.example.com"],
        ),
    )
    .await
    .unwrap();
    create_as(cluster, "bob", &b("GRPCRoute", "api", &["api.example.com"]))
        .await
        .unwrap();
    create_as(
        cluster,
        "alice",
        &route(
            "HTTPRoute",
            "team-a",
            "site",
            EDGE,
            &["a.example.com", "*.a.example.com", "x.a.example.com"],
        ),
    )
    .await
    .unwrap();

    // An update is checked like a create: B cannot add A's name to an admitted route.
    let err = cluster
        .kubectl_ok(&[
            "patch",
            "--as",
            "bob",
            "httproute",
            "shop",
            "-n",
            "team-b",
            "--type=merge",
            "-p",
            r#"{"spec":{"hostnames":["shop.example.com","x.a.example.com"]}}"#,
        ])
        .await
        .expect_err("an update taking A's name must be refused")
        .to_string();
    assert!(
        err.contains(RULE) && err.contains("x.a.example.com"),
        "{err}"
    );
    let kept = cluster
        .kubectl_ok(&[
            "get",
            "httproute",
            "shop",
            "-n",
            "team-b",
            "-o",
            "jsonpath={.spec.hostnames}",
        ])
        .await
        .unwrap();
    assert!(!kept.contains("a.example.com"), "{kept}");

    // A ListenerSet on a Gateway of ours is checked with its own namespace: B cannot add a
    // listener for A's name; its own name, and A's name on another implementation's Gateway, are
    // admitted.
    refused(
        create_as(
            cluster,
            "bob",
            &listener_set(
                "team-b",
                "squat",
                EDGE,
                &["shop.example.com", "x.a.example.com"],
            ),
        )
        .await,
        "a ListenerSet listener for A's name",
        &["x.a.example.com", "team-b"],
    );
    create_as(
        cluster,
        "bob",
        &listener_set("team-b", "own", EDGE, &["blog.example.com"]),
    )
    .await
    .unwrap();
    create_as(
        cluster,
        "bob",
        &listener_set(
            "team-b",
            "foreign",
            "{name: foreign, namespace: infra}",
            &["x.a.example.com"],
        ),
    )
    .await
    .unwrap();

    // Routes for another implementation's Gateway, or for a non-Gateway parent, are not this
    // policy's business: admitted whatever their hostnames.
    create_as(
        cluster,
        "bob",
        &route(
            "HTTPRoute",
            "team-b",
            "foreign",
            "{name: foreign, namespace: infra}",
            &["a.example.com", "*.example.com"],
        ),
    )
    .await
    .unwrap();
    create_as(
        cluster,
        "bob",
        &route(
            "GRPCRoute",
            "team-b",
            "foreign",
            "{name: foreign, namespace: infra}",
            &["x.a.example.com"],
        ),
    )
    .await
    .unwrap();
    create_as(
        cluster,
        "bob",
        &route(
            "HTTPRoute",
            "team-b",
            "mesh",
            "{group: \"\", kind: Service, name: edge, namespace: infra}",
            &["a.example.com"],
        ),
    )
    .await
    .unwrap();
    // Nor is a route without hostnames: what it serves depends on the listener (the controller
    // judges it).
    create_as(
        cluster,
        "bob",
        &route("HTTPRoute", "team-b", "no-hostnames", EDGE, &[]),
    )
    .await
    .unwrap();

    // Turning ownership off in the config lifts the check.
    cluster
        .kubectl_ok(&[
            "patch",
            "gcconfig",
            "cloudflare-tunnel",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/hostnameOwnership"}]"#,
        ])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match create_as(
            cluster,
            "bob",
            &b("HTTPRoute", "after", &["x.a.example.com"]),
        )
        .await
        {
            Ok(()) => break,
            Err(e) if e.contains(RULE) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("with ownership off the route must be admitted: {e}"),
        }
    }
}
