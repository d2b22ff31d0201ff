//! Gateway API field rules through the controller and the real proxy: equivalent header and
//! query parameter names in one match, redirect ports, filters on backendRefs, the CORS filter,
//! and when a route is live (`cf.k8s.lex.la/Published`). Backends echo what they received.

use std::net::SocketAddr;
use std::time::Duration;

use test_cluster::unique_name;

use crate::routing::{wait_hostname, wait_traffic};
use crate::world::*;

/// One answer: status, `Location`, `x-answered-by` response headers, body.
#[derive(Debug)]
struct Answer {
    status: u16,
    location: Option<String>,
    answered_by: Vec<String>,
    body: String,
}

/// GET `path` through `proxy` with `Host: host` and extra request headers; redirects are not
/// followed.
async fn send(proxy: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut req = client
        .get(format!("http://{proxy}{path}"))
        .header("host", host);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let r = req.send().await.unwrap();
    let h = r.headers();
    Answer {
        status: r.status().as_u16(),
        location: h.get("location").map(|v| v.to_str().unwrap().to_owned()),
        answered_by: h
            .get_all("x-answered-by")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect(),
        body: r.text().await.unwrap_or_default(),
    }
}

/// The value of request header `name` the echo backend reports, if any.
fn echoed<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    body.lines()
        .skip(1)
        .filter_map(|l| l.split_once(": "))
        .filter(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .collect()
}

#[tokio::test]
async fn only_the_first_match_entry_of_an_equivalent_name_is_considered() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("dupnames");
    let host = format!("{ns}.example.com");
    let port = spawn_echo_backend("dup").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{host}"]
  rules:
  - matches:
    - path: {{type: PathPrefix, value: /h}}
      headers: [{{name: x-flavor, value: mint}}, {{name: X-Flavor, value: lime}}]
    # Query parameter names are exact: the API server refuses the same name twice (list map
    # key), so `Flavor` is another parameter, also required.
    - path: {{type: PathPrefix, value: /q}}
      queryParams: [{{name: flavor, value: mint}}, {{name: Flavor, value: lime}}]
    backendRefs: [{{name: echo, port: 80}}]
"#
    ))
    .await;
    wait_route_condition("httproute", &ns, "web", "Accepted", "True", "Accepted").await;
    let proxy = w.proxies[0].data;
    eventually("the route is served", Duration::from_secs(60), || async {
        match send(proxy, &host, "/h", &[("x-flavor", "mint")]).await {
            a if a.status == 200 => Ok(()),
            a => Err(format!("{a:?}")),
        }
    })
    .await;
    type Headers = &'static [(&'static str, &'static str)];
    // (path, request headers, status)
    let rows: [(&str, Headers, u16); 6] = [
        // "only the first entry with an equivalent name MUST be considered for a match"
        ("/h", &[("x-flavor", "mint")], 200),
        ("/h", &[("X-FLAVOR", "mint")], 200),
        // "Subsequent entries with an equivalent header name MUST be ignored"
        ("/h", &[("x-flavor", "lime")], 404),
        ("/q?flavor=mint&Flavor=lime", &[], 200),
        ("/q?flavor=mint", &[], 404),
        ("/q?flavor=lime&Flavor=lime", &[], 404),
    ];
    for p in &w.proxies {
        for (path, headers, status) in rows {
            let a = send(p.data, &host, path, headers).await;
            assert_eq!(a.status, status, "{path} {headers:?}: {a:?}");
        }
    }
}

#[tokio::test]
async fn redirect_ports_follow_the_listener_port_and_the_scheme() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("redirport");
    let (h80, h8080) = (format!("{ns}.example.com"), format!("alt-{ns}.example.com"));
    apply(&namespace_with_gateway(&ns)).await;
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: alt, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
  listeners:
  - {{name: http, protocol: HTTP, port: 8080}}
"#
    ))
    .await;
    let route = |name: &str, gw: &str, host: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: {gw}}}]
  hostnames: ["{host}"]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /keep}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{}}}}]
  - matches: [{{path: {{type: PathPrefix, value: /secure}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{scheme: https}}}}]
  - matches: [{{path: {{type: PathPrefix, value: /port}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{port: 8443}}}}]
  - matches: [{{path: {{type: PathPrefix, value: /eighty}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{scheme: http, port: 80}}}}]
"#
        )
    };
    apply(&route("web", "gw", &h80)).await;
    apply(&route("alt", "alt", &h8080)).await;
    wait_route_condition("httproute", &ns, "web", "Accepted", "True", "Accepted").await;
    wait_route_condition("httproute", &ns, "alt", "Accepted", "True", "Accepted").await;
    let proxy = w.proxies[0].data;
    for host in [&h80, &h8080] {
        eventually(
            "the redirects are served",
            Duration::from_secs(60),
            || async {
                match send(proxy, host, "/keep", &[]).await {
                    a if a.status == 302 => Ok(()),
                    a => Err(format!("{a:?}")),
                }
            },
        )
        .await;
    }
    // (Host header, path, X-Forwarded-Proto, Location)
    let rows = [
        // "If redirect scheme is empty, the redirect port MUST be the Gateway Listener port"
        // (80: not added), not the port of the request's Host (issue 15)
        (
            format!("{h80}:8080"),
            "/keep",
            None,
            format!("http://{h80}/keep"),
        ),
        (h80.clone(), "/keep", None, format!("http://{h80}/keep")),
        (
            format!("{h8080}:9999"),
            "/keep",
            None,
            format!("http://{h8080}:8080/keep"),
        ),
        (
            h8080.clone(),
            "/keep",
            None,
            format!("http://{h8080}:8080/keep"),
        ),
        // HTTPS came through Cloudflare's edge on 443 (decision, docs/tunnel-gateway.md)
        (
            h8080.clone(),
            "/keep",
            Some("https"),
            format!("https://{h8080}/keep"),
        ),
        // "If redirect scheme is not-empty, the redirect port MUST be the well-known port
        // associated with the redirect scheme"
        (
            format!("{h8080}:8080"),
            "/secure",
            None,
            format!("https://{h8080}/secure"),
        ),
        // an explicit port is used
        (
            format!("{h80}:8080"),
            "/port",
            None,
            format!("http://{h80}:8443/port"),
        ),
        // "SHOULD NOT add the port number ... HTTP and port 80"
        (
            format!("{h8080}:8080"),
            "/eighty",
            Some("https"),
            format!("http://{h8080}/eighty"),
        ),
    ];
    for p in &w.proxies {
        for (host, path, proto, want) in &rows {
            let headers: Vec<(&str, &str)> =
                proto.iter().map(|v| ("x-forwarded-proto", *v)).collect();
            let a = send(p.data, host, path, &headers).await;
            assert_eq!(a.status, 302, "{host}{path}: {a:?}");
            assert_eq!(
                a.location.as_deref(),
                Some(want.as_str()),
                "{host}{path} {proto:?}"
            );
        }
    }
}

#[tokio::test]
async fn backend_ref_filters_apply_after_the_rules_only_to_their_backend() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("befilters");
    let host = format!("{ns}.example.com");
    let (a, b) = (
        spawn_echo_backend("backend-a").await,
        spawn_echo_backend("backend-b").await,
    );
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "a", a)).await;
    apply(&service_yaml(&ns, "b", b)).await;
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{host}"]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{{name: x-rule, value: rule}}, {{name: x-backend, value: rule}}]
    backendRefs:
    - name: a
      port: 80
      weight: 1
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier:
          set: [{{name: x-backend, value: a}}]
          remove: [x-drop]
      - type: ResponseHeaderModifier
        responseHeaderModifier:
          add: [{{name: x-answered-by, value: a}}]
    - name: b
      port: 80
      weight: 1
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier:
          add: [{{name: x-backend, value: b}}]
"#
    ))
    .await;
    wait_route_condition(
        "httproute",
        &ns,
        "web",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    wait_traffic(&host, "/", 200, "backend-").await;
    let mut seen = (0, 0);
    for i in 0..40 {
        let proxy = w.proxies[i % w.proxies.len()].data;
        let r = send(
            proxy,
            &host,
            "/x",
            &[("x-drop", "1"), ("x-backend", "client")],
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(echoed(&r.body, "x-rule"), ["rule"], "{}", r.body);
        if r.body.starts_with("backend-a ") {
            seen.0 += 1;
            // the rule's set, then the backend's set
            assert_eq!(echoed(&r.body, "x-backend"), ["a"], "{}", r.body);
            assert!(echoed(&r.body, "x-drop").is_empty(), "{}", r.body);
            assert_eq!(r.answered_by, ["a"]);
        } else {
            assert!(r.body.starts_with("backend-b "), "{}", r.body);
            seen.1 += 1;
            // the rule's set, then the backend's add; a's filters are not applied
            assert_eq!(echoed(&r.body, "x-backend"), ["rule", "b"], "{}", r.body);
            assert_eq!(echoed(&r.body, "x-drop"), ["1"], "{}", r.body);
            assert!(r.answered_by.is_empty(), "{r:?}");
        }
    }
    assert!(
        seen.0 > 0 && seen.1 > 0,
        "both backends took traffic: {seen:?}"
    );
}

#[tokio::test]
async fn a_cors_filter_answers_preflights_at_the_proxy_and_marks_actual_answers() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("cors");
    let host = format!("{ns}.example.com");
    let port = spawn_echo_backend("cors-backend").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "web", port)).await;
    apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{host}"]
  rules:
  - filters:
    - type: CORS
      cors:
        allowOrigins: ["https://app.example", "https://*.tenant.example"]
        allowMethods: [GET, PUT]
        allowHeaders: [x-token]
        exposeHeaders: [x-total]
        allowCredentials: true
        maxAge: 120
    backendRefs: [{{name: web, port: 80}}]
"#
    ))
    .await;
    wait_traffic(&host, "/", 200, "cors-backend").await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for p in &w.proxies {
        let url = format!("http://{}/api", p.data);
        let r = client
            .request(reqwest::Method::OPTIONS, &url)
            .header("host", &host)
            .header("origin", "https://x.tenant.example")
            .header("access-control-request-method", "PUT")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 204);
        let h = r.headers().clone();
        assert_eq!(h["access-control-allow-origin"], "https://x.tenant.example");
        assert_eq!(h["access-control-allow-methods"], "GET, PUT");
        assert_eq!(h["access-control-allow-headers"], "x-token");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-max-age"], "120");
        // The echo backend answers 200 with a body: this answer is the proxy's.
        assert_eq!(r.text().await.unwrap(), "");

        for (origin, allowed) in [
            ("https://app.example", true),
            ("https://evil.example", false),
        ] {
            let r = client
                .get(&url)
                .header("host", &host)
                .header("origin", origin)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let h = r.headers().clone();
            assert_eq!(h["vary"], "Origin");
            if allowed {
                assert_eq!(h["access-control-allow-origin"], origin);
                assert_eq!(h["access-control-expose-headers"], "x-total");
            } else {
                assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");
            }
            assert!(r.text().await.unwrap().starts_with("cors-backend /api"));
        }
    }
}

/// `kubectl wait` for our parent entry's `cf.k8s.lex.la/Published=True` (route conditions live
/// under `status.parents`, so `--for=condition` does not reach them; `--for=jsonpath` does).
async fn kubectl_wait_published(ns: &str, name: &str) {
    let jsonpath = format!(
        "--for=jsonpath={{.status.parents[?(@.controllerName==\"{CONTROLLER}\")].conditions[?(@.type==\"cf.k8s.lex.la/Published\")].status}}=True"
    );
    kubectl(&[
        "wait",
        &format!("httproute/{name}"),
        "-n",
        ns,
        &jsonpath,
        "--timeout=90s",
    ])
    .await;
}

#[tokio::test]
async fn published_turns_true_only_once_the_plane_serves_the_route_and_the_tunnel_lists_it() {
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("published");
    let port = spawn_backend("published").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;
    // A burst: several routes at once.
    let names: Vec<String> = (0..4).map(|i| format!("r{i}")).collect();
    let yaml: String = names
        .iter()
        .map(|n| {
            format!(
                "---\n{}",
                http_route(&ns, n, &format!("{n}-{ns}.example.com"), &ns, "echo")
            )
        })
        .collect();
    apply(&yaml).await;
    for n in &names {
        let host = format!("{n}-{ns}.example.com");
        kubectl_wait_published(&ns, n).await;
        // Checked once, right after the wait: never True before both are done.
        let (hosts, _) = ingress_hostnames();
        assert!(
            hosts.contains(&host),
            "Published=True but {host} is not in the ingress document: {hosts:?}"
        );
        for p in &w.proxies {
            let (status, body) = get_via(p.data, &host, "/p").await.unwrap();
            assert_eq!(
                (status, body.as_str()),
                (200, "published /p"),
                "Published=True but {} does not serve {host}",
                p.data
            );
        }
    }
    // Edited to a new hostname: once Published=True is observed for the new generation, the
    // new hostname is served and listed (checked once, no retry).
    let host = format!("new-{ns}.example.com");
    apply(&http_route(&ns, "r0", &host, &ns, "echo")).await;
    eventually(
        "Published=True for the edited generation",
        Duration::from_secs(90),
        || async {
            let r = get_json(&["httproute", "r0", "-n", &ns]).await;
            let generation = r["metadata"]["generation"].clone();
            let published = r["status"]["parents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["controllerName"] == CONTROLLER)
                .flat_map(|p| p["conditions"].as_array().cloned().unwrap_or_default())
                .find(|c| c["type"] == "cf.k8s.lex.la/Published");
            match published {
                Some(c) if c["status"] == "True" && c["observedGeneration"] == generation => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let (hosts, _) = ingress_hostnames();
    assert!(hosts.contains(&host), "{host} not listed: {hosts:?}");
    let (status, _) = get_via(w.proxies[0].data, &host, "/").await.unwrap();
    assert_eq!(status, 200, "Published=True but {host} is not served");
    wait_hostname(&host, true).await;
}

/// A burst of routes (one `kubectl apply` of more than the 64 statuses a burst's rounds write
/// before they wait) is written once per route, `Published=True` included: the rounds of the
/// burst hold route statuses back until the ingress writes are due, instead of writing
/// `Published=False` first and every route again once the tunnel lists its hostname. At most
/// the 64 written before the burst was one may be written twice, however slowly the apply
/// arrives (on a loaded machine, about 50 routes a round). Counted from a watch of the
/// namespace's routes: each event whose `status` differs from the route's previous one.
#[tokio::test]
async fn a_burst_of_routes_is_written_once_per_route() {
    use std::collections::BTreeMap;

    use futures::StreamExt;
    use gateway_api::apis::standard::httproutes::HttpRoute;
    use kube::runtime::watcher::{self, Event};

    const ROUTES: usize = 100;
    let w = world();
    let _shared = w.lock.read().await;
    let ns = unique_name("burst");
    let port = spawn_backend("burst").await;
    apply(&namespace_with_gateway(&ns)).await;
    apply(&service_yaml(&ns, "echo", port)).await;

    let routes: kube::Api<HttpRoute> =
        kube::Api::namespaced(cluster().client().await.unwrap(), &ns);
    let mut events = watcher::watcher(routes, watcher::Config::default()).boxed();
    // Wait for the (empty) initial list, so no event of the burst is missed.
    loop {
        match events.next().await {
            Some(Ok(Event::InitDone)) => break,
            Some(Ok(_)) => {}
            other => panic!("the route watch ended: {other:?}"),
        }
    }
    let host = format!("{ns}.example.com");
    let yaml: String = (0..ROUTES)
        .map(|i| {
            format!(
                r#"---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: ["{host}"]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /r{i}}}}}]
    backendRefs: [{{name: echo, port: 80}}]
"#
            )
        })
        .collect();
    apply(&yaml).await;

    // route name -> (the last status seen, how many times it changed)
    let mut seen: BTreeMap<String, (Option<serde_json::Value>, usize)> = BTreeMap::new();
    let published =
        |status: &Option<serde_json::Value>| {
            status.as_ref().is_some_and(|s| {
                s["parents"].as_array().into_iter().flatten().any(|p| {
                    p["controllerName"] == CONTROLLER
                        && p["conditions"].as_array().into_iter().flatten().any(|c| {
                            c["type"] == "cf.k8s.lex.la/Published" && c["status"] == "True"
                        })
                })
            })
        };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < ROUTES || !seen.values().all(|(s, _)| published(s)) {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| {
                let waiting: Vec<_> = seen
                    .iter()
                    .filter(|(_, (s, _))| !published(s))
                    .map(|(n, _)| n)
                    .collect();
                panic!(
                    "{} of {ROUTES} routes seen, not Published=True: {waiting:?}",
                    seen.len()
                )
            });
        let route = match event {
            Some(Ok(Event::Apply(r) | Event::InitApply(r))) => r,
            Some(Ok(_)) => continue,
            other => panic!("the route watch ended: {other:?}"),
        };
        let status = route
            .status
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap());
        let entry = seen.entry(route.metadata.name.unwrap()).or_default();
        if status.is_some() && status != entry.0 {
            entry.1 += 1;
        }
        entry.0 = status;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, (_, n))| *n > 1).collect();
    assert!(
        twice.len() <= 64,
        "{} of {ROUTES} routes had their status written more than once: {:?}",
        twice.len(),
        twice.iter().map(|(n, (_, k))| (n, k)).collect::<Vec<_>>()
    );
    let gateway = get_json(&["gateway", "gw", "-n", &ns]).await;
    assert_eq!(
        gateway["status"]["listeners"][0]["attachedRoutes"], ROUTES,
        "{}",
        gateway["status"]
    );
    let (status, _) = get_via(w.proxies[0].data, &host, "/r7").await.unwrap();
    assert_eq!(status, 200);
}
