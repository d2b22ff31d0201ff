//! A delta makes exactly the table a push of the whole patched document makes, and shares with
//! the table before it what it did not change.

use std::collections::BTreeSet;

use http::{HeaderMap, Method};
use serde_json::{Value, json};
use tunnel_config::compile::parse;
use tunnel_config::delta::Delta;
use tunnel_config::routing::RequestView;

use super::*;
use crate::table::Rule;

fn backend(name: &str, port: u16) -> Value {
    json!({ "name": name, "endpoints": [format!("127.0.0.1:{port}")] })
}

fn http(name: &str, hostnames: &[&str], rules: Value) -> Value {
    json!({ "kind": "HTTPRoute", "name": name, "hostnames": hostnames, "rules": rules })
}

fn prefix(path: &str, backends: Value) -> Value {
    json!({ "matches": [{ "path": { "type": "PathPrefix", "value": path } }], "backends": backends })
}

/// The routes of the first document, by name.
fn a() -> Value {
    http(
        "ns/a",
        &["a.example"],
        json!([
            prefix("/api", json!([backend("ns/svc-1:80", 8001)])),
            { "filters": [{ "type": "RequestMirror", "backend": backend("ns/svc-3:80", 8003) }],
              "backends": [backend("ns/svc-2:80", 8002)] },
        ]),
    )
}

fn b() -> Value {
    let mut b = http(
        "ns/b",
        &["*.wild.example", "b.example"],
        json!([{ "matches": [{ "path": { "type": "Exact", "value": "/b" } }],
                 "backends": [backend("ns/svc-3:80", 8003)] }]),
    );
    b["excludedHostnames"] = json!({ "*.wild.example": ["x.wild.example"] });
    b
}

fn c() -> Value {
    http(
        "ns/c",
        &[],
        json!([{ "matches": [{ "path": { "type": "PathPrefix", "value": "/c" } }],
                 "filters": [{ "type": "RequestRedirect", "hostname": "elsewhere.example" }] }]),
    )
}

fn d(backend: Value) -> Value {
    http(
        "ns/d",
        &["a.example"],
        json!([prefix("/api", json!([backend]))]),
    )
}

fn g() -> Value {
    json!({ "kind": "GRPCRoute", "name": "ns/g", "hostnames": ["a.example"],
            "rules": [{ "matches": [{ "method": { "service": "pkg.Svc" } }],
                        "backends": [{ "name": "ns/svc-g:80", "endpoints": ["127.0.0.1:8009"],
                                       "protocol": "http2" }] }] })
}

fn document(version: u64, listeners: Value, routes: Vec<Value>) -> Config {
    let doc = json!({ "version": version, "listeners": listeners, "routes": routes });
    parse(doc.to_string().as_bytes()).unwrap()
}

/// The documents pushed one after the other, each step as a delta from the one before.
fn documents() -> Vec<(&'static str, Config)> {
    let d1 = || d(backend("ns/svc-4:80", 8004));
    let a_moved = {
        let mut a = a();
        a["rules"][0]["backends"] = json!([backend("ns/svc-1:80", 8011)]);
        a
    };
    let e = http(
        "ns/e",
        &["a.example"],
        json!([prefix("/api", json!([backend("ns/svc-5:80", 8005)]))]),
    );
    let b_moved = http(
        "ns/b",
        &["a.example", "b.example"],
        json!([{ "matches": [{ "path": { "type": "Exact", "value": "/b" } }],
                 "backends": [backend("ns/svc-3:80", 8003)] }]),
    );
    let d_h2 = d(
        json!({ "name": "ns/svc-4:80", "endpoints": ["127.0.0.1:8014"],
                         "protocol": "http2" }),
    );
    let gate = json!([{ "name": "ns/gw/wild", "hostname": "*.wild.example" },
                      { "name": "ns/gw/a", "hostname": "a.example" }]);
    vec![
        (
            "first",
            document(1, json!([]), vec![a(), b(), c(), g(), d1()]),
        ),
        (
            "a route replaced in place (new endpoint)",
            document(2, json!([]), vec![a_moved.clone(), b(), c(), g(), d1()]),
        ),
        (
            "a route inserted before one of equal precedence",
            document(
                3,
                json!([]),
                vec![e.clone(), a_moved.clone(), b(), c(), g(), d1()],
            ),
        ),
        (
            "a route removed",
            document(4, json!([]), vec![e.clone(), b(), c(), g(), d1()]),
        ),
        (
            "listeners changed",
            document(5, gate.clone(), vec![e.clone(), b(), c(), g(), d1()]),
        ),
        (
            "hostnames moved between buckets",
            document(
                6,
                gate.clone(),
                vec![e.clone(), b_moved.clone(), c(), g(), d1()],
            ),
        ),
        (
            "a backend needs another client (http2)",
            document(
                7,
                gate.clone(),
                vec![e.clone(), b_moved.clone(), c(), g(), d_h2.clone()],
            ),
        ),
        (
            "one of two routes of a client removed",
            document(
                8,
                json!([]),
                vec![e.clone(), b_moved.clone(), c(), d_h2.clone()],
            ),
        ),
        (
            "every route moved",
            document(9, json!([]), vec![d_h2, c(), b(), a(), e]),
        ),
        ("all removed", document(10, json!([]), vec![])),
        ("back", document(11, json!([]), vec![a(), b(), g()])),
    ]
}

const HOSTS: &[&str] = &[
    "a.example",
    "b.example",
    "x.wild.example",
    "y.wild.example",
    "other.example",
];
const PATHS: &[&str] = &["/", "/api", "/api/v1", "/b", "/c/d", "/pkg.Svc/Get"];

/// What the table decides for each probe: the matched hostname label, the matched prefix and
/// the whole rule (its route, filters, mirrors and action, backends with their endpoints).
fn decisions(table: &RouteTable) -> Vec<String> {
    let headers = HeaderMap::new();
    let mut out = Vec::new();
    for host in HOSTS {
        for path in PATHS {
            for (grpc, method) in [(false, Method::GET), (true, Method::POST)] {
                let view = RequestView {
                    host,
                    path,
                    query: None,
                    method: &method,
                    headers: &headers,
                    grpc,
                };
                let decision = table
                    .table
                    .lookup(&view)
                    .map(|m| format!("{} {:?} {:?}", m.hostname, m.matched_prefix, m.rule));
                out.push(format!("{host}{path} grpc={grpc}: {decision:?}"));
            }
        }
    }
    out
}

fn labels(table: &RouteTable) -> BTreeSet<String> {
    table.labels().map(str::to_owned).collect()
}

/// Rules of routes outside the splice: the same objects before and after, found by probing.
fn kept_rules<'t>(table: &'t RouteTable, changed: &BTreeSet<String>) -> Vec<(String, &'t Rule)> {
    let headers = HeaderMap::new();
    let mut out = Vec::new();
    for host in HOSTS {
        for path in PATHS {
            let view = RequestView {
                host,
                path,
                query: None,
                method: &Method::GET,
                headers: &headers,
                grpc: false,
            };
            if let Some(m) = table.table.lookup(&view)
                && !changed.contains(&*m.rule.route)
            {
                out.push((format!("{host}{path}"), m.rule));
            }
        }
    }
    out
}

fn names(routes: &[tunnel_config::config::Route]) -> BTreeSet<String> {
    routes
        .iter()
        .map(|r| match r {
            tunnel_config::config::Route::Http(r) => r.name.clone(),
            tunnel_config::config::Route::Grpc(r) => r.name.clone(),
        })
        .collect()
}

#[test]
fn a_delta_makes_the_table_of_the_whole_patched_document_and_keeps_the_rest() {
    let docs = documents();
    let incremental = State::new();
    incremental
        .apply(&serde_json::to_vec(&docs[0].1).unwrap())
        .unwrap();
    for pair in docs.windows(2) {
        let [(_, base), (step, next)] = pair else {
            unreachable!()
        };
        let delta = Delta::between(base, next);
        let changed: BTreeSet<String> = names(&base.routes[delta.start..][..delta.remove])
            .union(&names(&delta.routes))
            .cloned()
            .collect();
        let untouched = names(&base.routes).difference(&changed).count();
        let before = incremental.table.load_full().unwrap();
        let version = incremental
            .apply_delta(&serde_json::to_vec(&delta).unwrap())
            .unwrap_or_else(|e| panic!("{step}: {e}"));
        assert_eq!(version, next.version, "{step}");
        let after = incremental.table.load_full().unwrap();

        let whole = State::new();
        whole.apply(&serde_json::to_vec(next).unwrap()).unwrap();
        let expected = whole.table.load_full().unwrap();
        assert_eq!(after.version, expected.version, "{step}");
        for (got, want) in decisions(&after).iter().zip(&decisions(&expected)) {
            assert_eq!(got, want, "{step}");
        }
        assert_eq!(labels(&after), labels(&expected), "{step}");
        assert_eq!(
            incremental.clients.lock().unwrap().keys(),
            whole.clients.lock().unwrap().keys(),
            "{step}: the clients kept"
        );
        assert_eq!(incremental.document().as_deref(), Some(next), "{step}");

        // What the delta did not bring is shared: compiled rules (with their upstreams) and
        // host metrics handles.
        let kept = kept_rules(&before, &changed);
        let now: std::collections::HashMap<_, _> =
            kept_rules(&after, &changed).into_iter().collect();
        let mut compared = 0;
        for (probe, rule) in &kept {
            if let Some(same) = now.get(probe) {
                assert!(
                    std::ptr::eq(*rule, *same),
                    "{step}: {probe} was compiled again"
                );
                compared += 1;
            }
        }
        assert!(
            untouched == 0 || compared > 0,
            "{step}: no probe reached a route the delta kept"
        );
        for label in labels(&before).intersection(&labels(&after)) {
            assert!(
                Arc::ptr_eq(before.host(label).unwrap(), after.host(label).unwrap()),
                "{step}: new metrics handles for {label}"
            );
        }
    }
}
