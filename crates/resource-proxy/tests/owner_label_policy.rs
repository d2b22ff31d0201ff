//! The owner labels as an access boundary in the target (issue 19, item 1): the
//! ValidatingAdmissionPolicy of `deploy/resource-proxy/target/`, installed with its
//! kustomization in a real kube-apiserver and attacked there directly with kubectl
//! impersonation (`--as`, `--as-group`); and the proxy applying it itself
//! (`applyOwnerLabelPolicy: true`), with and without the permission, while proxied writes
//! keep working through a real client cluster.
//!
//! Identities: `mallory` (group `writers`: every verb on the test groups, nothing else),
//! `platform-admin` (exempt user) and group `label-fixers` (exempt group), proxy identities
//! `loft:vcluster:p-default:client-a` / `client-b` (owner labels `client-a`/`client-b`,
//! project `default`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use test_cluster::{Cluster, ClusterSpec, ControlPlane, ManagedProcess};

const RULE_USERS: &str = "rule: owner labels are set by the resource proxy";
const RULE_PROXY: &str = "rule: a proxy writes only its own owner labels";
const RULE_TAKEOVER: &str = "rule: a proxy does not take over objects of another client";
/// Held by the tests that depend on, or change, `allowTakeover`.
static TAKEOVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const PROXY_A: &str = "loft:vcluster:p-default:client-a";
const PROXY_B: &str = "loft:vcluster:p-default:client-b";
const OWNED_A: &str =
    r#""vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default""#;
const OWNED_B: &str =
    r#""vcluster.com/owner-vcluster": "client-b", "vcluster.com/owner-project": "default""#;

fn crd(group: &str, plural: &str, kind: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: {plural}, kind: {kind}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources: {{status: {{}}}}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

const WRITERS_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: writers}
rules:
- apiGroups: ["example.test", "proxied.test", "unpermitted.test"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: writers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: writers}
subjects:
- {kind: Group, name: writers, apiGroup: rbac.authorization.k8s.io}
"#;

fn spec() -> test_cluster::ControlPlaneBuilder {
    ControlPlane::builder()
        .cluster(ClusterSpec::new("target"))
        .cluster(ClusterSpec::new("tenant"))
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/resource-proxy/target")
}

/// The control plane with the CRDs, the writers' RBAC and the shipped kustomization (its
/// binding guarding `widgets.example.test`, exempt `platform-admin` and `label-fixers`),
/// installed once and in force.
fn cp() -> &'static ControlPlane {
    test_cluster::install_crypto_provider();
    let cp = test_cluster::shared(spec);
    static PREPARED: OnceLock<()> = OnceLock::new();
    PREPARED.get_or_init(|| {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(prepare(test_cluster::shared(spec).cluster("target")))
        })
        .join()
        .unwrap();
    });
    cp
}

async fn prepare(target: &Cluster) {
    let client = target.client().await.unwrap();
    let crds = [
        crd("example.test", "widgets", "Widget"),
        crd("proxied.test", "gizmos", "Gizmo"),
        crd("unpermitted.test", "gadgets", "Gadget"),
    ]
    .join("---\n");
    test_cluster::manifests::apply_crds_yaml(&client, &crds)
        .await
        .unwrap();
    kubectl_in(target, &["apply", "-f", "-"], WRITERS_RBAC).await;
    // The shipped kustomization, its guarded resource renamed to this test's CRD.
    let built = kubectl(target, &["kustomize", deploy_dir().to_str().unwrap()]).await;
    assert!(
        built.contains("kind: ValidatingAdmissionPolicyBinding"),
        "{built}"
    );
    kubectl_in(
        target,
        &["apply", "-f", "-"],
        &built.replace("example.com", "example.test"),
    )
    .await;
    kubectl(
        target,
        &[
            "-n",
            "kube-system",
            "patch",
            "configmap",
            "vcluster-owner-labels",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"exemptUsers":"someone-else, platform-admin","exemptGroups":"label-fixers"}}"#,
        ],
    )
    .await;
    // Policies take effect asynchronously: wait until a forged label is refused.
    kubectl(target, &["create", "namespace", "policy-probe"]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let forged = widget("probe", OWNED_A);
        match target
            .kubectl_stdin(
                &as_mallory(&["create", "-n", "policy-probe", "-f", "-"]),
                &forged,
            )
            .await
        {
            Err(e) if e.to_string().contains(RULE_USERS) => break,
            Err(e) => panic!("probe: {e}"),
            Ok(_) => {
                kubectl(target, &["delete", "widget", "probe", "-n", "policy-probe"]).await;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the owner-label policy did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn target() -> &'static Cluster {
    cp().cluster("target")
}

async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

async fn kubectl_in(cluster: &Cluster, args: &[&str], input: &str) -> String {
    cluster
        .kubectl_stdin(args, input)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

fn impersonating<'a>(user: &'a str, groups: &[&'a str], args: &[&'a str]) -> Vec<&'a str> {
    let mut out = args.to_vec();
    out.extend(["--as", user]);
    for g in groups {
        out.extend(["--as-group", g]);
    }
    out
}

fn as_mallory<'a>(args: &[&'a str]) -> Vec<&'a str> {
    impersonating("mallory", &["writers"], args)
}

/// Runs `args` (with `input` on stdin when given) and expects the policy's denial naming
/// `rule`; returns the message.
async fn denied(args: &[&str], input: Option<&str>, rule: &str) -> String {
    let result = match input {
        Some(input) => target().kubectl_stdin(args, input).await,
        None => target().kubectl_ok(args).await,
    };
    let message = match result {
        Ok(out) => panic!("kubectl {} succeeded: {out}", args.join(" ")),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("ValidatingAdmissionPolicy 'vcluster-owner-labels'")
            && message.contains(rule),
        "kubectl {}: {message}",
        args.join(" ")
    );
    message
}

fn widget(name: &str, labels: &str) -> String {
    format!(
        "{{\"apiVersion\": \"example.test/v1\", \"kind\": \"Widget\", \"metadata\": {{\"name\": \"{name}\", \"labels\": {{{labels}}}}}, \"spec\": {{\"size\": 1}}}}"
    )
}

async fn namespace(prefix: &str) -> String {
    let ns = test_cluster::unique_name(prefix);
    kubectl(target(), &["create", "namespace", &ns]).await;
    ns
}

/// The owner labels of a widget in the target: (owner-vcluster, owner-project).
async fn owner_of(resource: &str, ns: &str, name: &str) -> (Option<String>, Option<String>) {
    let out = kubectl(target(), &["get", resource, name, "-n", ns, "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let label = |k: &str| v["metadata"]["labels"][k].as_str().map(str::to_owned);
    (
        label("vcluster.com/owner-vcluster"),
        label("vcluster.com/owner-project"),
    )
}

fn owned(vcluster: &str) -> (Option<String>, Option<String>) {
    (Some(vcluster.to_owned()), Some("default".to_owned()))
}

/// Creates `name` as client-a's proxy identity would (its own owner labels).
async fn create_owned_by_a(ns: &str, name: &str) {
    kubectl_in(
        target(),
        &impersonating(PROXY_A, &["writers"], &["create", "-n", ns, "-f", "-"]),
        &widget(name, OWNED_A),
    )
    .await;
}

#[tokio::test]
async fn a_user_with_full_rbac_cannot_forge_steal_or_strip_owner_labels() {
    let ns = namespace("forge").await;
    let ns = ns.as_str();
    // Forge on create: both labels, either one, any value.
    for labels in [
        OWNED_A,
        r#""vcluster.com/owner-vcluster": "client-a""#,
        r#""vcluster.com/owner-project": "default""#,
        r#""vcluster.com/owner-vcluster": """#,
    ] {
        denied(
            &as_mallory(&["create", "-n", ns, "-f", "-"]),
            Some(&widget("forged", labels)),
            RULE_USERS,
        )
        .await;
    }
    denied(
        &as_mallory(&["apply", "--server-side", "-n", ns, "-f", "-"]),
        Some(&widget("forged-by-apply", OWNED_A)),
        RULE_USERS,
    )
    .await;
    let none = kubectl(target(), &["get", "widgets", "-n", ns, "-o", "name"]).await;
    assert_eq!(none.trim(), "", "nothing forged was stored");

    // Steal (another proxy's values) and strip, by every kind of write.
    create_owned_by_a(ns, "w").await;
    let steal = r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":"client-b"}}}"#;
    let attempts: Vec<(Vec<&str>, Option<String>)> = vec![
        (
            as_mallory(&[
                "label",
                "widget",
                "w",
                "-n",
                ns,
                "--overwrite",
                "vcluster.com/owner-vcluster=client-b",
            ]),
            None,
        ),
        (
            as_mallory(&[
                "label",
                "widget",
                "w",
                "-n",
                ns,
                "vcluster.com/owner-vcluster-",
            ]),
            None,
        ),
        (
            as_mallory(&[
                "patch", "widget", "w", "-n", ns, "--type", "merge", "-p", steal,
            ]),
            None,
        ),
        (
            as_mallory(&[
                "patch",
                "widget",
                "w",
                "-n",
                ns,
                "--type",
                "merge",
                "-p",
                r#"{"metadata":{"labels":null}}"#,
            ]),
            None,
        ),
        (
            as_mallory(&[
                "patch",
                "widget",
                "w",
                "-n",
                ns,
                "--type",
                "json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/labels"}]"#,
            ]),
            None,
        ),
        (
            as_mallory(&[
                "patch",
                "widget",
                "w",
                "-n",
                ns,
                "--type",
                "json",
                "-p",
                r#"[{"op":"replace","path":"/metadata/labels/vcluster.com~1owner-project","value":"team-b"}]"#,
            ]),
            None,
        ),
        (
            as_mallory(&["replace", "-n", ns, "-f", "-"]),
            Some(widget("w", r#""app": "stripped""#)),
        ),
        (
            as_mallory(&["replace", "-n", ns, "-f", "-"]),
            Some(widget("w", OWNED_B)),
        ),
        (
            as_mallory(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-n",
                ns,
                "-f",
                "-",
            ]),
            Some(widget("w", OWNED_B)),
        ),
        (
            as_mallory(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-n",
                ns,
                "-f",
                "-",
            ]),
            Some(widget("w", r#""vcluster.com/owner-vcluster": """#)),
        ),
    ];
    for (args, input) in &attempts {
        denied(args, input.as_deref(), RULE_USERS).await;
        assert_eq!(
            owner_of("widget", ns, "w").await,
            owned("client-a"),
            "after kubectl {}",
            args.join(" ")
        );
    }
    // Server-side apply removes what its field manager applied before and applies no more: an
    // object whose labels a proxy applied as `kubectl` loses them when someone else applies as
    // `kubectl` without them. Refused too.
    kubectl_in(
        target(),
        &impersonating(
            PROXY_A,
            &["writers"],
            &["apply", "--server-side", "-n", ns, "-f", "-"],
        ),
        &widget("applied", OWNED_A),
    )
    .await;
    denied(
        &as_mallory(&[
            "apply",
            "--server-side",
            "--field-manager",
            "kubectl",
            "-n",
            ns,
            "-f",
            "-",
        ]),
        Some(&widget("applied", r#""app": "x""#)),
        RULE_USERS,
    )
    .await;
    assert_eq!(owner_of("widget", ns, "applied").await, owned("client-a"));
    // The same apply on a resource no binding guards (gadgets) does strip them.
    let gadget = |labels: &str| {
        format!(
            "{{\"apiVersion\": \"unpermitted.test/v1\", \"kind\": \"Gadget\", \"metadata\": {{\"name\": \"applied\", \"labels\": {{{labels}}}}}}}"
        )
    };
    kubectl_in(
        target(),
        &impersonating(
            PROXY_A,
            &["writers"],
            &["apply", "--server-side", "-n", ns, "-f", "-"],
        ),
        &gadget(OWNED_A),
    )
    .await;
    kubectl_in(
        target(),
        &as_mallory(&[
            "apply",
            "--server-side",
            "--field-manager",
            "kubectl",
            "-n",
            ns,
            "-f",
            "-",
        ]),
        &gadget(r#""app": "x""#),
    )
    .await;
    assert_eq!(owner_of("gadget", ns, "applied").await, (None, None));
    // The same user may change everything else of the owned object (its RBAC decides).
    kubectl(
        target(),
        &as_mallory(&[
            "patch",
            "widget",
            "w",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"app":"x"}},"spec":{"size":3}}"#,
        ]),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "w").await, owned("client-a"));
}

#[tokio::test]
async fn unowned_objects_stay_writable_and_delete_and_status_are_not_affected() {
    let ns = namespace("unowned").await;
    let ns = ns.as_str();
    // Ordinary users create and change objects without owner labels.
    kubectl_in(
        target(),
        &as_mallory(&["create", "-n", ns, "-f", "-"]),
        &widget("plain", r#""app": "web""#),
    )
    .await;
    kubectl(
        target(),
        &as_mallory(&["label", "widget", "plain", "-n", ns, "tier=db"]),
    )
    .await;
    kubectl_in(
        target(),
        &as_mallory(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-n",
            ns,
            "-f",
            "-",
        ]),
        &widget("plain", r#""app": "api""#),
    )
    .await;
    // ... but cannot claim them.
    denied(
        &as_mallory(&[
            "label",
            "widget",
            "plain",
            "-n",
            ns,
            "vcluster.com/owner-vcluster=client-a",
        ]),
        None,
        RULE_USERS,
    )
    .await;
    assert_eq!(owner_of("widget", ns, "plain").await, (None, None));

    // A status write cannot change labels: the API server keeps the stored metadata.
    create_owned_by_a(ns, "w").await;
    kubectl(
        target(),
        &as_mallory(&[
            "patch", "widget", "w", "-n", ns, "--subresource", "status", "--type", "merge", "-p",
            r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":"client-b"}},"status":{"phase":"Ready"}}"#,
        ]),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "w").await, owned("client-a"));
    let phase = kubectl(
        target(),
        &[
            "get",
            "widget",
            "w",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase}",
        ],
    )
    .await;
    assert_eq!(phase, "Ready");

    // DELETE is not matched: the target's RBAC alone decides.
    kubectl(
        target(),
        &as_mallory(&["delete", "widget", "w", "plain", "-n", ns]),
    )
    .await;
    let left = kubectl(target(), &["get", "widgets", "-n", ns, "-o", "name"]).await;
    assert_eq!(left.trim(), "");
}

#[tokio::test]
async fn a_proxy_identity_writes_only_its_own_owner_labels() {
    let ns = namespace("proxy-id").await;
    let ns = ns.as_str();
    let create_a: Vec<&str> =
        impersonating(PROXY_A, &["writers"], &["create", "-n", ns, "-f", "-"]);
    // Its own values: allowed.
    kubectl_in(target(), &create_a, &widget("mine", OWNED_A)).await;
    assert_eq!(owner_of("widget", ns, "mine").await, owned("client-a"));
    // client-b's values, a wrong project, one label only, none: refused, naming what it must write.
    for labels in [
        OWNED_B,
        r#""vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "team-b""#,
        r#""vcluster.com/owner-vcluster": "client-a""#,
        "",
    ] {
        let message = denied(&create_a, Some(&widget("not-mine", labels)), RULE_PROXY).await;
        assert!(
            message.contains("must write vcluster.com/owner-vcluster=client-a and vcluster.com/owner-project=default"),
            "{message}"
        );
    }
    // Changing its own object to client-b's values, or stripping them: refused.
    for patch in [
        r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":"client-b"}}}"#,
        r#"{"metadata":{"labels":{"vcluster.com/owner-project":null}}}"#,
    ] {
        denied(
            &impersonating(
                PROXY_A,
                &["writers"],
                &[
                    "patch", "widget", "mine", "-n", ns, "--type", "merge", "-p", patch,
                ],
            ),
            None,
            RULE_PROXY,
        )
        .await;
    }
    assert_eq!(owner_of("widget", ns, "mine").await, owned("client-a"));
    // client-b's proxy identity cannot write client-a's values either.
    denied(
        &impersonating(
            PROXY_B,
            &["writers"],
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-n",
                ns,
                "-f",
                "-",
            ],
        ),
        Some(&widget("mine", OWNED_A)),
        RULE_PROXY,
    )
    .await;
    // It cannot take over client-b's object (allowTakeover is "false"), by any write.
    let _takeover = TAKEOVER.lock().await;
    kubectl_in(
        target(),
        &impersonating(PROXY_B, &["writers"], &["create", "-n", ns, "-f", "-"]),
        &widget("theirs", OWNED_B),
    )
    .await;
    let message = denied(
        &impersonating(PROXY_A, &["writers"], &["replace", "-n", ns, "-f", "-"]),
        Some(&widget("theirs", OWNED_A)),
        RULE_TAKEOVER,
    )
    .await;
    assert!(
        message.contains("may not take over an object owned by vcluster.com/owner-vcluster=client-b,vcluster.com/owner-project=default"),
        "{message}"
    );
    denied(
        &impersonating(
            PROXY_A,
            &["writers"],
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-n",
                ns,
                "-f",
                "-",
            ],
        ),
        Some(&widget("theirs", OWNED_A)),
        RULE_TAKEOVER,
    )
    .await;
    assert_eq!(owner_of("widget", ns, "theirs").await, owned("client-b"));
    drop(_takeover);
    // An object without owner labels it may adopt (an `all` client's update does that).
    kubectl_in(
        target(),
        &as_mallory(&["create", "-n", ns, "-f", "-"]),
        &widget("plain", ""),
    )
    .await;
    kubectl(
        target(),
        &impersonating(
            PROXY_A,
            &["writers"],
            &[
                "label",
                "widget",
                "plain",
                "-n",
                ns,
                "vcluster.com/owner-vcluster=client-a",
                "vcluster.com/owner-project=default",
            ],
        ),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "plain").await, owned("client-a"));
    // Updates that keep its own labels pass.
    kubectl(
        target(),
        &impersonating(
            PROXY_A,
            &["writers"],
            &[
                "patch",
                "widget",
                "mine",
                "-n",
                ns,
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"size":2}}"#,
            ],
        ),
    )
    .await;
    // A proxy-shaped user whose project namespace lacks the prefix has no owner labels.
    let message = denied(
        &impersonating(
            "loft:vcluster:team-x:client-x",
            &["writers"],
            &["create", "-n", ns, "-f", "-"],
        ),
        Some(&widget(
            "x",
            r#""vcluster.com/owner-vcluster": "client-x", "vcluster.com/owner-project": "team-x""#,
        )),
        RULE_PROXY,
    )
    .await;
    assert!(
        message.contains(r#"does not start with the project namespace prefix "p-""#),
        "{message}"
    );
}

#[tokio::test]
async fn exempt_users_and_groups_may_set_change_and_remove_owner_labels() {
    let ns = namespace("exempt").await;
    let ns = ns.as_str();
    kubectl_in(
        target(),
        &impersonating(
            "platform-admin",
            &["writers"],
            &["create", "-n", ns, "-f", "-"],
        ),
        &widget("repaired", OWNED_B),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "repaired").await, owned("client-b"));
    kubectl(
        target(),
        &impersonating(
            "carol",
            &["writers", "label-fixers"],
            &[
                "label",
                "widget",
                "repaired",
                "-n",
                ns,
                "--overwrite",
                "vcluster.com/owner-vcluster=client-a",
            ],
        ),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "repaired").await, owned("client-a"));
    kubectl(
        target(),
        &impersonating(
            "carol",
            &["writers", "label-fixers"],
            &[
                "label",
                "widget",
                "repaired",
                "-n",
                ns,
                "vcluster.com/owner-project-",
            ],
        ),
    )
    .await;
    assert_eq!(
        owner_of("widget", ns, "repaired").await,
        (Some("client-a".into()), None)
    );
    // Membership is exact: carol without the group, and the cluster admin (system:masters,
    // not listed), are refused like anyone else.
    denied(
        &impersonating(
            "carol",
            &["writers"],
            &[
                "label",
                "widget",
                "repaired",
                "-n",
                ns,
                "vcluster.com/owner-project=default",
            ],
        ),
        None,
        RULE_USERS,
    )
    .await;
    denied(
        &[
            "label",
            "widget",
            "repaired",
            "-n",
            ns,
            "vcluster.com/owner-project=default",
        ],
        None,
        RULE_USERS,
    )
    .await;
}

// ---- The proxy applying the policy itself ----

/// A running proxy in the `tenant` cluster for `<resource>.<group>/v1` of the target.
struct Proxy {
    dir: tempfile::TempDir,
    metrics_port: u16,
    _process: ManagedProcess,
}

impl Proxy {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("proxy.log")).unwrap_or_default()
    }

    /// `vcluster_proxy_owner_label_policy_applied{target="default/target"}`, if exported.
    async fn policy_applied(&self) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port))
            .await
            .ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.lines()
            .find_map(|l| {
                l.strip_prefix(
                    r#"vcluster_proxy_owner_label_policy_applied{target="default/target"} "#,
                )
            })
            .map(str::to_owned)
    }

    /// Waits until the metric is exported and returns it.
    async fn wait_policy_metric(&self) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = self.policy_applied().await {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no policy metric\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn start_proxy(client: &str, group: &str, resource: &str, policy_rbac: bool) -> Proxy {
    let cp = cp();
    let target = cp.cluster("target");
    let tenant = cp.cluster("tenant");
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let identity = format!("loft:vcluster:p-default:{client}");
    std::fs::write(p("target-ca.crt"), target.ca_pem()).unwrap();
    let cred = target.mint_client_cert(&identity, &[]).unwrap();
    std::fs::write(p("target.crt"), &cred.cert_pem).unwrap();
    std::fs::write(p("target.key"), &cred.key_pem).unwrap();
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "proxy-{client}"}}
rules:
- apiGroups: ["{group}"]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "create"]
- apiGroups: ["authentication.k8s.io"]
  resources: ["selfsubjectreviews"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "proxy-{client}"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "proxy-{client}"}}
subjects:
- {{kind: User, name: "{identity}", apiGroup: rbac.authorization.k8s.io}}
"#
    );
    kubectl_in(target, &["apply", "-f", "-"], &rbac).await;
    if policy_rbac {
        // The shipped optional RBAC, for this identity.
        let shipped =
            std::fs::read_to_string(deploy_dir().join("owner-label-policy-rbac.yaml")).unwrap();
        assert!(shipped.contains(PROXY_A));
        kubectl_in(
            target,
            &["apply", "-f", "-"],
            &shipped.replace(PROXY_A, &identity),
        )
        .await;
    }
    let base_port = test_cluster::free_port().unwrap();
    let metrics_port = test_cluster::free_port().unwrap();
    let config = format!(
        "client:\n  name: {client}\n  project: default\n  kubeconfig: {kc}\napplyOwnerLabelPolicy: true\ncustomResources:\n  {resource}.{group}/v1:\n    enabled: true\n    targetVirtualCluster: {{name: target}}\ntargets:\n  default/target:\n    peers:\n      static: [\"127.0.0.1:{port}\"]\n    tls:\n      caFile: {ca}\n      serverName: localhost\n    credential:\n      clientCertificate:\n        certFile: {crt}\n        keyFile: {key}\nlisteners:\n  basePort: {base_port}\nmetrics:\n  address: 127.0.0.1:{metrics_port}\n",
        kc = tenant
            .kubeconfig_for(&format!("resource-proxy-{client}"), &["system:masters"])
            .unwrap()
            .display(),
        port = target.server_port(0),
        ca = p("target-ca.crt").display(),
        crt = p("target.crt").display(),
        key = p("target.key").display(),
    );
    std::fs::write(p("config.yaml"), config).unwrap();
    let process = ManagedProcess::spawn(
        &format!("resource-proxy-{client}"),
        Path::new(env!("CARGO_BIN_EXE_resource-proxy")),
        &[
            "--config".to_owned(),
            p("config.yaml").display().to_string(),
        ],
        &p("proxy.log"),
    )
    .unwrap();
    let proxy = Proxy {
        dir,
        metrics_port,
        _process: process,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = tenant
            .kubectl_ok(&["api-resources", "--api-group", group, "-o", "name"])
            .await
            .unwrap_or_default();
        if out.contains(&format!("{resource}.{group}")) {
            return proxy;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy did not become available\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn the_proxy_applies_the_policy_at_start_and_its_writes_still_pass() {
    let proxy = start_proxy("client-a", "proxied.test", "gizmos", true).await;
    let target = target();
    let tenant = cp().cluster("tenant");
    assert_eq!(proxy.wait_policy_metric().await, "1", "{}", proxy.log());
    assert!(
        proxy
            .log()
            .contains("applied the owner-label policy in the target"),
        "{}",
        proxy.log()
    );
    // Its binding guards its resource in every version; the policy carries its apply.
    let binding: serde_json::Value = serde_json::from_str(
        &kubectl(
            target,
            &[
                "get",
                "validatingadmissionpolicybinding",
                "vcluster-owner-labels.gizmos.proxied.test",
                "-o",
                "json",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        binding["spec"]["matchResources"]["resourceRules"],
        serde_json::json!([{"apiGroups": ["proxied.test"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["gizmos"], "scope": "*"}])
    );
    assert_eq!(
        binding["spec"]["paramRef"]["parameterNotFoundAction"],
        "Deny"
    );
    let managers = kubectl(
        target,
        &[
            "get",
            "validatingadmissionpolicy",
            "vcluster-owner-labels",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ],
    )
    .await;
    assert!(
        managers.split(' ').any(|m| m == "resource-proxy"),
        "{managers}"
    );

    // Every kind of write through the client cluster still passes.
    let ns = test_cluster::unique_name("through");
    kubectl(tenant, &["create", "namespace", &ns]).await;
    let ns = ns.as_str();
    let gizmo = |labels: &str| {
        format!(
            "{{\"apiVersion\": \"proxied.test/v1\", \"kind\": \"Gizmo\", \"metadata\": {{\"name\": \"g\", \"labels\": {{{labels}}}}}, \"spec\": {{\"size\": 1}}}}"
        )
    };
    kubectl_in(
        tenant,
        &["create", "-n", ns, "-f", "-"],
        &gizmo(r#""app": "web""#),
    )
    .await;
    kubectl(tenant, &["label", "gizmo", "g", "-n", ns, "tier=db"]).await;
    kubectl(
        tenant,
        &[
            "patch",
            "gizmo",
            "g",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":2}}"#,
        ],
    )
    .await;
    kubectl(
        tenant,
        &[
            "patch",
            "gizmo",
            "g",
            "-n",
            ns,
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/size","value":3}]"#,
        ],
    )
    .await;
    kubectl_in(
        tenant,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-n",
            ns,
            "-f",
            "-",
        ],
        &gizmo(r#""app": "api""#),
    )
    .await;
    // A caller trying to write another client's labels through the proxy is overwritten, not refused.
    kubectl_in(tenant, &["replace", "-n", ns, "-f", "-"], &gizmo(OWNED_B)).await;
    assert_eq!(owner_of("gizmo", ns, "g").await, owned("client-a"));
    // Directly in the target the proxy's binding guards the resource.
    denied(
        &as_mallory(&[
            "label",
            "gizmo",
            "g",
            "-n",
            ns,
            "--overwrite",
            "vcluster.com/owner-vcluster=client-b",
        ]),
        None,
        RULE_USERS,
    )
    .await;
    kubectl(tenant, &["delete", "gizmo", "g", "-n", ns]).await;
    let left = kubectl(target, &["get", "gizmos", "-n", ns, "-o", "name"]).await;
    assert_eq!(left.trim(), "");
}

#[tokio::test]
async fn without_permission_the_proxy_warns_and_keeps_serving() {
    let proxy = start_proxy("client-b", "unpermitted.test", "gadgets", false).await;
    let tenant = cp().cluster("tenant");
    assert_eq!(proxy.wait_policy_metric().await, "0", "{}", proxy.log());
    let log = proxy.log();
    assert!(
        log.contains("cannot apply the owner-label policy in the target: its RBAC does not allow this proxy identity")
            && log.contains("still serving"),
        "{log}"
    );
    let missing = target()
        .kubectl_ok(&[
            "get",
            "validatingadmissionpolicybinding",
            "vcluster-owner-labels.gadgets.unpermitted.test",
        ])
        .await;
    assert!(missing.is_err(), "{missing:?}");
    // It serves.
    let ns = test_cluster::unique_name("serving");
    kubectl(tenant, &["create", "namespace", &ns]).await;
    kubectl_in(
        tenant,
        &["create", "-n", &ns, "-f", "-"],
        r#"{"apiVersion": "unpermitted.test/v1", "kind": "Gadget", "metadata": {"name": "d"}}"#,
    )
    .await;
    assert_eq!(owner_of("gadget", &ns, "d").await, owned("client-b"));
}

/// A resource-proxy configuration for client `client` of project `default` proxying
/// `entry` to the target (no listener is started: the file is only read), with its client
/// certificate in the target.
fn in_process_config(dir: &Path, client: &str, entry: &str) -> resource_proxy::config::Config {
    let target = target();
    let p = |n: &str| dir.join(n);
    std::fs::write(p("target-ca.crt"), target.ca_pem()).unwrap();
    let cred = target
        .mint_client_cert(&format!("loft:vcluster:p-default:{client}"), &[])
        .unwrap();
    std::fs::write(p("target.crt"), &cred.cert_pem).unwrap();
    std::fs::write(p("target.key"), &cred.key_pem).unwrap();
    resource_proxy::config::Config::from_yaml(&format!(
        "client: {{name: {client}, project: default, kubeconfig: /unused}}\napplyOwnerLabelPolicy: true\ncustomResources:\n  \"{entry}\": {{enabled: true, targetVirtualCluster: {{name: target}}}}\ntargets:\n  default/target:\n    peers: {{static: [\"127.0.0.1:{port}\"]}}\n    tls: {{caFile: {ca}, serverName: localhost}}\n    credential: {{clientCertificate: {{certFile: {crt}, keyFile: {key}}}}}\n",
        port = target.server_port(0),
        ca = p("target-ca.crt").display(),
        crt = p("target.crt").display(),
        key = p("target.key").display(),
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn field(resource: &str, name: &str, ns: Option<&str>, path: &str) -> String {
    let mut args = vec!["get", resource, name, "-o"];
    let jsonpath = format!("jsonpath={path}");
    args.push(&jsonpath);
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    kubectl(target(), &args).await
}

#[tokio::test]
async fn applying_again_changes_nothing_and_keeps_the_administrators_parameters() {
    use resource_proxy::owner_label_policy::{ApplyError, apply};
    let dir = tempfile::tempdir().unwrap();
    let config = in_process_config(dir.path(), "client-c", "*.proxied.test/v1");
    let (target_ref, target_config) = config.targets.iter().next().unwrap();
    let client = resource_proxy::target::TargetClient::new(target_ref, target_config).unwrap();

    // Without the permission: a Forbidden error naming the object, nothing written.
    let err = apply(&client, &config, target_ref).await.unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    assert!(
        matches!(&err, ApplyError::Forbidden { object, .. } if object == "ConfigMap kube-system/vcluster-owner-labels"),
        "{err}"
    );

    let shipped =
        std::fs::read_to_string(deploy_dir().join("owner-label-policy-rbac.yaml")).unwrap();
    kubectl_in(
        target(),
        &["apply", "-f", "-"],
        &shipped
            .replace(PROXY_A, "loft:vcluster:p-default:client-c")
            .replace(
                "name: resource-proxy:owner-label-policy",
                "name: resource-proxy:owner-label-policy:client-c",
            ),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let bindings = loop {
        // RBAC takes effect at once, but keep a margin for the authorizer's informer.
        match apply(&client, &config, target_ref).await {
            Ok(bindings) => break bindings,
            Err(e) if e.is_forbidden() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(bindings, ["vcluster-owner-labels-all.proxied.test"]);
    let rules = field(
        "validatingadmissionpolicybinding",
        &bindings[0],
        None,
        "{.spec.matchResources.resourceRules[0].apiGroups[0]}/{.spec.matchResources.resourceRules[0].resources[0]}",
    )
    .await;
    assert_eq!(rules, "proxied.test/*");

    let binding_rv = field(
        "validatingadmissionpolicybinding",
        &bindings[0],
        None,
        "{.metadata.resourceVersion}",
    )
    .await;
    let policy_generation = field(
        "validatingadmissionpolicy",
        "vcluster-owner-labels",
        None,
        "{.metadata.generation}",
    )
    .await;
    apply(&client, &config, target_ref).await.unwrap();
    assert_eq!(
        field(
            "validatingadmissionpolicybinding",
            &bindings[0],
            None,
            "{.metadata.resourceVersion}"
        )
        .await,
        binding_rv,
        "a second apply changed the binding"
    );
    assert_eq!(
        field(
            "validatingadmissionpolicy",
            "vcluster-owner-labels",
            None,
            "{.metadata.generation}"
        )
        .await,
        policy_generation,
        "a second apply changed the policy"
    );
    // The administrator's exemptions are untouched (the ConfigMap exists: create only).
    assert_eq!(
        field(
            "configmap",
            "vcluster-owner-labels",
            Some("kube-system"),
            "{.data.exemptUsers}"
        )
        .await,
        "someone-else, platform-admin"
    );
}

/// Sets `allowTakeover` in the policy's parameters and waits until the policy acts on it.
async fn set_allow_takeover(value: &str, ns: &str) {
    kubectl(
        target(),
        &[
            "-n",
            "kube-system",
            "patch",
            "configmap",
            "vcluster-owner-labels",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"data":{{"allowTakeover":"{value}"}}}}"#),
        ],
    )
    .await;
    // The probe: client-b's identity writes its labels over client-a's object (dry run).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let result = target()
            .kubectl_stdin(
                &impersonating(
                    PROXY_B,
                    &["writers"],
                    &["replace", "--dry-run=server", "-n", ns, "-f", "-"],
                ),
                &widget("probe", OWNED_B),
            )
            .await;
        if result.is_ok() == (value == "true") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "allowTakeover={value} not in force: {result:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn allow_takeover_lets_a_proxy_replace_another_clients_labels_with_its_own() {
    let _takeover = TAKEOVER.lock().await;
    let ns = namespace("takeover").await;
    let ns = ns.as_str();
    // "probe" stays client-a's (only dry runs touch it); "taken" is taken over.
    create_owned_by_a(ns, "probe").await;
    create_owned_by_a(ns, "taken").await;
    set_allow_takeover("true", ns).await;
    kubectl_in(
        target(),
        &impersonating(PROXY_B, &["writers"], &["replace", "-n", ns, "-f", "-"]),
        &widget("taken", OWNED_B),
    )
    .await;
    assert_eq!(owner_of("widget", ns, "taken").await, owned("client-b"));
    // Still only its own values, and still nobody else.
    denied(
        &impersonating(
            PROXY_A,
            &["writers"],
            &[
                "label",
                "widget",
                "taken",
                "-n",
                ns,
                "--overwrite",
                "vcluster.com/owner-project=team-a",
            ],
        ),
        None,
        RULE_PROXY,
    )
    .await;
    denied(
        &as_mallory(&[
            "label",
            "widget",
            "taken",
            "-n",
            ns,
            "--overwrite",
            "vcluster.com/owner-vcluster=client-a",
        ]),
        None,
        RULE_USERS,
    )
    .await;
    set_allow_takeover("false", ns).await;
    denied(
        &impersonating(PROXY_A, &["writers"], &["replace", "-n", ns, "-f", "-"]),
        Some(&widget("taken", OWNED_A)),
        RULE_TAKEOVER,
    )
    .await;
    assert_eq!(owner_of("widget", ns, "taken").await, owned("client-b"));
}
