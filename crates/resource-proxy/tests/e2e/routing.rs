//! Per-resource routing and cluster-scoped resources, in group `route.test/v1` of the target:
//! `parcels` (namespaced, with status and scale), `gadgets` (a sibling kind no named entry lists)
//! and `regions` (cluster-scoped, with status). Tenants A and B proxy `parcels` and `regions`
//! (two entries of one group/version) in `owned` mode; tenant C proxies `*.route.test/v1` in
//! `all` mode. A cluster-scoped `zones.scope.test` is proxied through a relay the test cuts, to
//! see the discovery served while the target is away.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::OnceCell;

use crate::*;

const ROUTE_GROUP: &str = "route.test";

const ROUTE_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: parcels.route.test}
spec:
  group: route.test
  scope: Namespaced
  names: {plural: parcels, singular: parcel, kind: Parcel}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              weight: {type: integer}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.route.test}
spec:
  group: route.test
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              secretSauce: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: regions.route.test}
spec:
  group: route.test
  scope: Cluster
  names: {plural: regions, singular: region, kind: Region}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              zone: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
"#;

/// The target's `route.test` CRDs, installed once.
async fn route_crds() {
    static CRDS: OnceCell<()> = OnceCell::const_new();
    CRDS.get_or_init(|| async {
        let client = cp().cluster("target").client().await.unwrap();
        test_cluster::manifests::apply_crds_yaml(&client, ROUTE_CRDS)
            .await
            .unwrap();
    })
    .await;
}

async fn route_proxy(
    tenant: &'static str,
    client_name: &'static str,
    project: &'static str,
    access: &'static str,
    resources: Vec<&'static str>,
) -> Proxy {
    route_crds().await;
    start_proxy(ProxySpec {
        cp: cp(),
        group: ROUTE_GROUP,
        tenant,
        client_name,
        project,
        target: "target",
        access,
        resources,
    })
    .await
}

/// Tenant A: `route-a` of `team-ra`, owned, `parcels` and `regions`.
async fn a() -> &'static Proxy {
    static A: OnceCell<Proxy> = OnceCell::const_new();
    A.get_or_init(|| {
        route_proxy(
            "tenant-a",
            "route-a",
            "team-ra",
            "owned",
            vec!["parcels", "regions"],
        )
    })
    .await
}

/// Tenant B: `route-b` of `team-rb`, like A.
async fn b() -> &'static Proxy {
    static B: OnceCell<Proxy> = OnceCell::const_new();
    B.get_or_init(|| {
        route_proxy(
            "tenant-b",
            "route-b",
            "team-rb",
            "owned",
            vec!["parcels", "regions"],
        )
    })
    .await
}

/// Tenant C: `route-c` of `team-rc`, `all`, the whole group/version.
async fn c() -> &'static Proxy {
    static C: OnceCell<Proxy> = OnceCell::const_new();
    C.get_or_init(|| route_proxy("tenant-c", "route-c", "team-rc", "all", vec!["*"]))
        .await
}

fn lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    v.sort_unstable();
    v
}

/// A raw request through the tenant's kube-apiserver (so through its aggregator and the proxy):
/// the status code and the answer.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req.body(body.as_bytes().to_vec()).unwrap();
    match client.request_text(req).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(s)) => (s.code, format!("{} {}", s.reason, s.message)),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

/// A gadget made directly in the target, carrying A's owner labels: only the routing can hide it.
const GADGET: &str = r#"{"apiVersion":"route.test/v1","kind":"Gadget","metadata":{"name":"g1","labels":{"vcluster.com/owner-vcluster":"route-a","vcluster.com/owner-project":"team-ra"}},"spec":{"secretSauce":"original"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_no_entry_names_is_absent_from_discovery_and_openapi_and_404_on_every_verb() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = a().await;
    let tenant = proxy.tenant;
    let target = cp.cluster("target");
    let ns = namespace(tenant, "route").await;
    kubectl(target, &["create", "namespace", &ns]).await;
    kubectl_in(target, &["create", "-n", &ns, "-f", "-"], GADGET).await;

    // Discovery: the two named kinds (one namespaced, one cluster-scoped), not the sibling.
    let names = kubectl(
        tenant,
        &["api-resources", "--api-group", ROUTE_GROUP, "-o", "name"],
    )
    .await;
    assert_eq!(lines(&names), ["parcels.route.test", "regions.route.test"]);
    let list: Value =
        serde_json::from_str(&kubectl(tenant, &["get", "--raw", "/apis/route.test/v1"]).await)
            .unwrap();
    let listed: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines(&listed.join("\n")),
        [
            "parcels",
            "parcels/scale",
            "parcels/status",
            "regions",
            "regions/status"
        ]
    );
    let err = kubectl_err(tenant, &["get", "gadgets.route.test", "-n", &ns]).await;
    assert!(err.contains("doesn't have a resource type"), "{err}");
    let err = kubectl_err(tenant, &["explain", "gadgets.route.test"]).await;
    assert!(err.contains("doesn't have a resource type"), "{err}");
    let explained = kubectl(tenant, &["explain", "parcels.route.test.spec"]).await;
    assert!(explained.contains("weight"), "{explained}");

    // Every verb on the sibling kind, as the API server answers a resource it does not serve.
    let client = tenant.client().await.unwrap();
    let base = format!("/apis/{ROUTE_GROUP}/v1");
    let one = format!("{base}/namespaces/{ns}/gadgets/g1");
    let collection = format!("{base}/namespaces/{ns}/gadgets");
    let replaced = GADGET.replace("original", "replaced");
    let requests: Vec<(&str, String, Option<&str>, String)> = vec![
        ("GET", one.clone(), None, String::new()),
        ("GET", format!("{one}/status"), None, String::new()),
        ("GET", collection.clone(), None, String::new()),
        ("GET", format!("{base}/gadgets"), None, String::new()),
        (
            "GET",
            format!("{collection}?watch=true&timeoutSeconds=2"),
            None,
            String::new(),
        ),
        (
            "GET",
            format!("{base}/gadgets?watch=1&timeoutSeconds=2"),
            None,
            String::new(),
        ),
        (
            "GET",
            format!("{base}/watch/namespaces/{ns}/gadgets?timeoutSeconds=2"),
            None,
            String::new(),
        ),
        (
            "GET",
            format!("{collection}?fieldSelector=metadata.name%3Dg1"),
            None,
            String::new(),
        ),
        (
            "POST",
            collection.clone(),
            Some("application/json"),
            GADGET.replace("\"g1\"", "\"g2\""),
        ),
        (
            "PUT",
            one.clone(),
            Some("application/json"),
            replaced.clone(),
        ),
        (
            "PUT",
            format!("{one}/status"),
            Some("application/json"),
            replaced.clone(),
        ),
        (
            "PATCH",
            one.clone(),
            Some("application/merge-patch+json"),
            r#"{"spec":{"secretSauce":"merged"}}"#.to_owned(),
        ),
        (
            "PATCH",
            one.clone(),
            Some("application/json-patch+json"),
            r#"[{"op":"replace","path":"/spec/secretSauce","value":"json"}]"#.to_owned(),
        ),
        (
            "PATCH",
            format!("{one}?fieldManager=t&force=true"),
            Some("application/apply-patch+yaml"),
            replaced.clone(),
        ),
        (
            "PATCH",
            format!("{one}/status"),
            Some("application/merge-patch+json"),
            r#"{"status":{"x":"y"}}"#.to_owned(),
        ),
        ("DELETE", one.clone(), None, String::new()),
        ("DELETE", collection.clone(), None, String::new()),
        ("DELETE", format!("{base}/gadgets"), None, String::new()),
    ];
    for (method, path, ct, body) in &requests {
        let (code, answer) = raw(&client, method, path, *ct, body).await;
        assert_eq!(code, 404, "{method} {path}: {answer}");
        assert!(answer.starts_with("NotFound "), "{method} {path}: {answer}");
    }
    // Straight to the listener (no aggregator to normalise the path): encoded and case
    // spellings of the sibling are not routed either.
    let aggregator = tenant.pki().front_proxy_client().unwrap();
    for path in [
        format!("{base}/namespaces/{ns}/%67adgets/g1"),
        format!("{base}/namespaces/{ns}/Gadgets/g1"),
        format!("{base}/namespaces/{ns}/parcels/%2e%2e/gadgets/g1"),
    ] {
        let (code, body) = direct_request(
            proxy,
            "DELETE",
            &path,
            Some(&aggregator),
            &[
                ("X-Remote-User", "admin"),
                ("X-Remote-Group", "system:masters"),
            ],
            vec![],
        )
        .await;
        assert_eq!(code, 404, "{path}: {body}");
    }
    // The same requests for the routed kind are served (the 404 above is the routing's).
    let (code, answer) = raw(
        &client,
        "GET",
        &format!("{base}/namespaces/{ns}/parcels"),
        None,
        "",
    )
    .await;
    assert_eq!(code, 200, "{answer}");

    // Nothing reached the target: the gadget is as it was, and no other was made.
    let in_target = kubectl(
        target,
        &["get", "gadgets.route.test", "-n", &ns, "-o", "json"],
    )
    .await;
    let in_target: Value = serde_json::from_str(&in_target).unwrap();
    let items = in_target["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{in_target}");
    assert_eq!(items[0]["metadata"]["name"], "g1");
    assert_eq!(items[0]["spec"]["secretSauce"], "original");
    assert!(items[0].get("status").is_none(), "{in_target}");

    // OpenAPI v3 as the client serves it: the routed kinds' schemas, not the sibling's.
    let root: Value =
        serde_json::from_str(&kubectl(tenant, &["get", "--raw", "/openapi/v3"]).await).unwrap();
    let url = root["paths"]["apis/route.test/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{root}"))
        .to_owned();
    let v3: Value = serde_json::from_str(&kubectl(tenant, &["get", "--raw", &url]).await).unwrap();
    let schemas: Vec<&String> = v3["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert!(
        schemas.iter().any(|s| s.as_str() == "test.route.v1.Parcel"),
        "{schemas:?}"
    );
    assert!(
        schemas.iter().any(|s| s.as_str() == "test.route.v1.Region"),
        "{schemas:?}"
    );
    assert!(!schemas.iter().any(|s| s.contains("Gadget")), "{schemas:?}");
    let paths: Vec<&String> = v3["paths"].as_object().unwrap().keys().collect();
    assert!(paths.iter().any(|p| p.contains("/parcels")), "{paths:?}");
    assert!(!paths.iter().any(|p| p.contains("gadgets")), "{paths:?}");

    // OpenAPI v2 as the listener serves it to the aggregator.
    let (code, body) = direct_request(
        proxy,
        "GET",
        "/openapi/v2",
        Some(&aggregator),
        &[
            ("X-Remote-User", "system:kube-aggregator"),
            ("Accept", "application/json"),
        ],
        vec![],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v2: Value = serde_json::from_str(&body).unwrap();
    let definitions: Vec<&String> = v2["definitions"].as_object().unwrap().keys().collect();
    assert!(
        definitions
            .iter()
            .any(|d| d.as_str() == "test.route.v1.Parcel"),
        "{definitions:?}"
    );
    assert!(
        !definitions.iter().any(|d| d.contains("Gadget")),
        "{definitions:?}"
    );
    assert!(
        !v2["paths"]
            .as_object()
            .unwrap()
            .keys()
            .any(|p| p.contains("gadgets"))
    );
    // And the v2 explain of the client (the aggregator downloads it when the APIService turns
    // Available, then every minute).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match tenant
            .kubectl_ok(&[
                "explain",
                "regions.route.test",
                "--output=plaintext-openapiv2",
            ])
            .await
        {
            Ok(out) if out.contains("Region") => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "kubectl explain --output=plaintext-openapiv2: {other:?}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }

    // The routed kind's subresources work: scale goes through.
    kubectl_in(
        tenant,
        &["create", "-n", &ns, "-f", "-"],
        "apiVersion: route.test/v1\nkind: Parcel\nmetadata: {name: p1}\nspec: {replicas: 1, weight: 2}\n",
    )
    .await;
    kubectl(
        tenant,
        &[
            "scale",
            "parcels.route.test",
            "p1",
            "-n",
            &ns,
            "--replicas=3",
        ],
    )
    .await;
    let replicas = kubectl(
        target,
        &[
            "get",
            "parcels.route.test",
            "p1",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    assert_eq!(replicas, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_entry_routes_every_kind_of_the_group_version() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let proxy = c().await;
    let target = cp.cluster("target");
    let ns = namespace(proxy.tenant, "route-all").await;
    kubectl(target, &["create", "namespace", &ns]).await;
    kubectl_in(target, &["create", "-n", &ns, "-f", "-"], GADGET).await;

    let names = kubectl(
        proxy.tenant,
        &["api-resources", "--api-group", ROUTE_GROUP, "-o", "name"],
    )
    .await;
    assert_eq!(
        lines(&names),
        [
            "gadgets.route.test",
            "parcels.route.test",
            "regions.route.test"
        ]
    );
    let got = kubectl(
        proxy.tenant,
        &["get", "gadgets.route.test", "-n", &ns, "-o", "name"],
    )
    .await;
    assert_eq!(got.trim(), "gadget.route.test/g1");
}

fn region(name: &str, zone: &str) -> String {
    format!(
        "apiVersion: route.test/v1\nkind: Region\nmetadata: {{name: {name}}}\nspec: {{zone: {zone}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_resource_is_isolated_between_two_owned_clients_through_every_verb() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let (a, b) = tokio::join!(a(), b());
    let target = cp.cluster("target");
    let ra = test_cluster::unique_name("ra");
    let rb = test_cluster::unique_name("rb");

    // Discovery says cluster-scoped, as the target does.
    let cluster_scoped = kubectl(
        a.tenant,
        &[
            "api-resources",
            "--api-group",
            ROUTE_GROUP,
            "--namespaced=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(lines(&cluster_scoped), ["regions.route.test"]);

    // A namespaced path to it is the API server's 404, and mirrors no namespace to the target.
    let ns = namespace(a.tenant, "no-mirror").await;
    let client = a.tenant.client().await.unwrap();
    let (code, answer) = raw(
        &client,
        "POST",
        &format!("/apis/{ROUTE_GROUP}/v1/namespaces/{ns}/regions"),
        Some("application/json"),
        r#"{"apiVersion":"route.test/v1","kind":"Region","metadata":{"name":"in-a-namespace"}}"#,
    )
    .await;
    assert_eq!(code, 404, "{answer}");
    let mirrored = kubectl(
        target,
        &["get", "namespace", &ns, "--ignore-not-found", "-o", "name"],
    )
    .await;
    assert_eq!(
        mirrored.trim(),
        "",
        "no namespace is mirrored for a cluster-scoped resource"
    );

    // B watches from before anything exists.
    let mut watch = b.tenant.kubectl();
    watch
        .args(["get", "regions.route.test", "-w", "-o", "name"])
        .stdout(std::process::Stdio::piped());
    let watch = watch.spawn().unwrap();

    // Each creates its own; the target holds both with their owners' labels.
    kubectl_in(a.tenant, &["create", "-f", "-"], &region(&ra, "north")).await;
    kubectl_in(
        b.tenant,
        &["apply", "--server-side", "-f", "-"],
        &region(&rb, "south"),
    )
    .await;
    let labels = |name: String| async move {
        let out = kubectl(target, &["get", "regions.route.test", &name, "-o", "json"]).await;
        let v: Value = serde_json::from_str(&out).unwrap();
        v["metadata"]["labels"].clone()
    };
    let la = labels(ra.clone()).await;
    assert_eq!(la["vcluster.com/owner-vcluster"], "route-a", "{la}");
    assert_eq!(la["vcluster.com/owner-project"], "team-ra", "{la}");
    let lb = labels(rb.clone()).await;
    assert_eq!(lb["vcluster.com/owner-vcluster"], "route-b", "{lb}");

    // Lists and gets: each sees only its own.
    let seen_by_a = kubectl(a.tenant, &["get", "regions.route.test", "-o", "name"]).await;
    assert!(
        seen_by_a.contains(&format!("region.route.test/{ra}")),
        "{seen_by_a}"
    );
    assert!(!seen_by_a.contains(&rb), "{seen_by_a}");
    let seen_by_b = kubectl(b.tenant, &["get", "regions.route.test", "-o", "name"]).await;
    assert!(
        seen_by_b.contains(&format!("region.route.test/{rb}")),
        "{seen_by_b}"
    );
    assert!(!seen_by_b.contains(&ra), "{seen_by_b}");
    let not_found = format!(r#"regions.route.test "{ra}" not found"#);
    let err = kubectl_err(b.tenant, &["get", "regions.route.test", &ra]).await;
    assert!(err.contains(&not_found), "{err}");

    // Every write of B on A's object is a NotFound, as for a missing one.
    let takeover = region(&ra, "stolen");
    for args in [
        vec![
            "patch",
            "regions.route.test",
            &ra,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"zone":"stolen"}}"#,
        ],
        vec![
            "patch",
            "regions.route.test",
            &ra,
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/zone","value":"stolen"}]"#,
        ],
        vec![
            "patch",
            "regions.route.test",
            &ra,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"stolen"}}"#,
        ],
        vec!["label", "regions.route.test", &ra, "stolen=yes"],
        vec!["annotate", "regions.route.test", &ra, "stolen=yes"],
        vec!["delete", "regions.route.test", &ra],
    ] {
        let err = kubectl_err(b.tenant, &args).await;
        assert!(err.contains(&not_found), "{args:?}: {err}");
    }
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "-f", "-"],
        vec!["replace", "-f", "-"],
    ] {
        let err = b
            .tenant
            .kubectl_stdin(&args, &takeover)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("not found"), "{args:?}: {err}");
    }
    // Creating the same name is refused by the target: it stays A's.
    let err = b
        .tenant
        .kubectl_stdin(&["create", "-f", "-"], &takeover)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    // delete --all removes only B's.
    kubectl(b.tenant, &["delete", "regions.route.test", "--all"]).await;
    let left = kubectl(target, &["get", "regions.route.test", "-o", "name"]).await;
    assert!(left.contains(&ra), "{left}");
    assert!(!left.contains(&rb), "{left}");

    // A's own verbs work: patches of every type, the status subresource, and delete.
    kubectl(
        a.tenant,
        &[
            "patch",
            "regions.route.test",
            &ra,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"zone":"east"}}"#,
        ],
    )
    .await;
    kubectl(
        a.tenant,
        &[
            "patch",
            "regions.route.test",
            &ra,
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/metadata/labels/tier","value":"gold"}]"#,
        ],
    )
    .await;
    kubectl_in(
        a.tenant,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "a",
            "-f",
            "-",
        ],
        &region(&ra, "west"),
    )
    .await;
    kubectl(
        a.tenant,
        &[
            "patch",
            "regions.route.test",
            &ra,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"ready"}}"#,
        ],
    )
    .await;
    let out = kubectl(target, &["get", "regions.route.test", &ra, "-o", "json"]).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["spec"]["zone"], "west", "{v}");
    assert_eq!(v["status"]["phase"], "ready", "{v}");
    assert_eq!(v["metadata"]["labels"]["tier"], "gold", "{v}");
    assert_eq!(
        v["metadata"]["labels"]["vcluster.com/owner-vcluster"], "route-a",
        "{v}"
    );
    assert!(v["metadata"]["labels"].get("stolen").is_none(), "{v}");
    assert!(
        v["metadata"]
            .get("annotations")
            .and_then(|a| a.get("stolen"))
            .is_none(),
        "{v}"
    );
    let status = kubectl(
        a.tenant,
        &[
            "get",
            "regions.route.test",
            &ra,
            "-o",
            "jsonpath={.status.phase}",
        ],
    )
    .await;
    assert_eq!(status, "ready");
    kubectl(a.tenant, &["delete", "regions.route.test", &ra]).await;
    let gone = kubectl(
        target,
        &[
            "get",
            "regions.route.test",
            &ra,
            "--ignore-not-found",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(gone.trim(), "");

    // B's watch saw its own object come and go, and nothing of A's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut watch = watch;
    let _ = watch.start_kill();
    let out = watch.wait_with_output().await.unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains(&format!("region.route.test/{rb}")), "{seen}");
    assert!(!seen.contains(&ra), "{seen}");
}

/// A loopback TCP relay to the target's API server that the test can cut, so one proxy sees its
/// target go away while the shared target keeps serving the other tests.
struct Relay {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", to)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Relay { port, task }
    }

    /// Closes every relayed connection and the listening socket: new dials are refused.
    fn cut(&self) {
        self.task.abort();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const ZONE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: zones.scope.test}
spec:
  group: scope.test
  scope: Cluster
  names: {plural: zones, singular: zone, kind: Zone}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_discovery_keeps_a_cluster_scoped_resource_cluster_scoped() {
    let cp = cp();
    let _logs = cp.logs_on_failure();
    let target = cp.cluster("target");
    test_cluster::manifests::apply_crds_yaml(&target.client().await.unwrap(), ZONE_CRD)
        .await
        .unwrap();
    let relay = Relay::start(target.server_port(0)).await;
    let proxy = start_proxy_via(
        ProxySpec {
            cp,
            group: "scope.test",
            tenant: "tenant-c",
            client_name: "scope-c",
            project: "team-sc",
            target: "target",
            access: "owned",
            resources: vec!["zones"],
        },
        Some(relay.port),
    )
    .await;
    let zone = test_cluster::unique_name("zone");
    kubectl_in(
        proxy.tenant,
        &["create", "-f", "-"],
        &format!("apiVersion: scope.test/v1\nkind: Zone\nmetadata: {{name: {zone}}}\n"),
    )
    .await;
    assert_eq!(
        kubectl(
            target,
            &[
                "get",
                "zones.scope.test",
                &zone,
                "-o",
                "jsonpath={.metadata.labels.vcluster\\.com/owner-vcluster}"
            ]
        )
        .await,
        "scope-c"
    );

    let fallbacks = || proxy.log_tail().matches("discovery served locally").count();
    let before = fallbacks();
    relay.cut();
    let list: Value = serde_json::from_str(
        &kubectl(proxy.tenant, &["get", "--raw", "/apis/scope.test/v1"]).await,
    )
    .unwrap();
    assert!(
        fallbacks() > before,
        "the answer must be the proxy's fallback: {}",
        proxy.log_tail()
    );
    let zones = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "zones")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(zones["namespaced"], false, "{list}");
    let cluster_scoped = kubectl(
        proxy.tenant,
        &[
            "api-resources",
            "--api-group",
            "scope.test",
            "--namespaced=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(lines(&cluster_scoped), ["zones.scope.test"]);
    // The objects are the target's to serve: while it is away, a read is a 503.
    let err = kubectl_err(proxy.tenant, &["get", "zones.scope.test", &zone]).await;
    assert!(err.contains("unavailable"), "{err}");
}
