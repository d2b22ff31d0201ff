//! The tunnel gateway's config compiler (`tunnel_config::compile`): any document either parses
//! and compiles or is refused with a path, never a panic; a parsed document written back parses
//! to the same document; `validate` refuses exactly what `compile` (with [`Check`], which checks
//! each backend with `backend::check`, as the proxy's `Build` does by building it) refuses, with the same
//! error; a compiled document routes deterministically (two compilations pick the same rule for
//! the same request), every match's hostname label has its state in the table, and a request
//! for the exact path (or prefix) of a plain HTTP match of a route, on one of its hosts admitted
//! by the listeners, is routed.
#![no_main]

use http::{HeaderMap, Method};
use libfuzzer_sys::fuzz_target;
use tunnel_config::compile::{self, Check};
use tunnel_config::config::{Config, PathMatchType, Route};
use tunnel_config::routing::{HostPattern, RequestView, RouteMatch, normalize_host};

/// A compiled table of this target: nothing built per backend or per hostname.
type RouteTable = compile::RouteTable<(), ()>;


fuzz_target!(|data: &[u8]| {
    let Ok(config) = compile::parse(data) else {
        return;
    };
    let written = serde_json::to_vec(&config).expect("a parsed document serializes");
    let again = compile::parse(&written).unwrap_or_else(|e| {
        panic!(
            "written back as {}, it fails: {e}",
            String::from_utf8_lossy(&written)
        )
    });
    assert_eq!(again, config);

    let validated = compile::validate(&config);
    let Some(first) = compiled(&config, &validated) else {
        return;
    };
    let second = compiled(&config, &validated).expect("compiled once, so again");

    let probes = probes(&config);
    let headers = HeaderMap::new();
    for (host, path, must_route) in &probes {
        for grpc in [false, true] {
            let req = RequestView {
                host,
                path,
                query: None,
                method: &Method::GET,
                headers: &headers,
                grpc,
            };
            let a = first.table.lookup(&req);
            let b = second.table.lookup(&req);
            for (t, m) in [(&first, &a), (&second, &b)] {
                if let Some(m) = m {
                    assert!(
                        t.host(m.hostname).is_some(),
                        "{host} {path}: no state for the label {}",
                        m.hostname
                    );
                }
            }
            let pick = |t: &RouteTable, m: &Option<RouteMatch<'_, _>>| {
                m.as_ref().map(|m| {
                    let rule = t.table.rules().position(|r| std::ptr::eq(r, m.rule));
                    (
                        rule,
                        m.hostname.to_owned(),
                        m.matched_prefix.map(str::to_owned),
                    )
                })
            };
            assert_eq!(
                pick(&first, &a),
                pick(&second, &b),
                "{host} {path} grpc={grpc}"
            );
            if *must_route && !grpc {
                assert!(a.is_some(), "{host} {path} is not routed");
            }
        }
    }
});

/// Compiles `config` with [`Check`], checking it agrees with `validate`.
fn compiled(config: &Config, validated: &Result<(), compile::CompileError>) -> Option<RouteTable> {
    let result = compile::compile(config, &mut Check);
    match (result, validated) {
        (Ok(table), Ok(())) => Some(table),
        (Err(a), Err(b)) => {
            assert_eq!(&a, b);
            None
        }
        (result, validated) => panic!(
            "compile says {:?}, validate {validated:?}",
            result.map(|_| ())
        ),
    }
}

/// Requests to try: (host, path, whether a route must take it). Hosts of the routes (a name
/// under each wildcard) and one no route names; paths of the HTTP matches and `/`.
fn probes(config: &Config) -> Vec<(String, String, bool)> {
    let admitted = |host: &str| {
        config.listeners.is_empty()
            || config.listeners.iter().any(|l| {
                l.hostname
                    .as_deref()
                    .is_none_or(|h| HostPattern::parse(h).is_ok_and(|p| p.matches(host)))
            })
    };
    let host_of = |h: &str| {
        let h = h
            .strip_prefix("*.")
            .map_or(h.to_owned(), |rest| format!("x.{rest}"));
        normalize_host(&h).map(|h| h.into_owned())
    };
    let mut probes = vec![("unnamed.example".to_owned(), "/".to_owned(), false)];
    for route in &config.routes {
        let (hostnames, plain_paths): (&[String], Vec<(&str, bool)>) = match route {
            Route::Http(r) => (
                &r.hostnames,
                r.rules
                    .iter()
                    .flat_map(|rule| {
                        // A rule without matches matches every path (PathPrefix `/`).
                        let default = rule.matches.is_empty().then_some(("/", true));
                        rule.matches
                            .iter()
                            .map(|m| {
                                let plain = m.headers.is_empty()
                                    && m.query_params.is_empty()
                                    && m.method.is_none();
                                match &m.path {
                                    None => ("/", plain),
                                    Some(p) => (
                                        p.value.as_str(),
                                        plain && p.kind != PathMatchType::RegularExpression,
                                    ),
                                }
                            })
                            .chain(default)
                    })
                    .collect(),
            ),
            Route::Grpc(r) => (&r.hostnames, Vec::new()),
        };
        let hosts: Vec<String> = if hostnames.is_empty() {
            vec!["any.example".to_owned()]
        } else {
            hostnames.iter().filter_map(|h| host_of(h)).collect()
        };
        for host in hosts {
            let admitted = admitted(&host);
            probes.push((host.clone(), "/".to_owned(), false));
            for &(path, plain) in &plain_paths {
                probes.push((host.clone(), path.to_owned(), plain && admitted));
            }
        }
    }
    probes.truncate(256);
    probes
}
