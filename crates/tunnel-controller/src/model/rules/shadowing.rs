//! Collisions between routes of different namespaces in one route table (issue 20, item 2):
//! which route loses requests to another, so the loser can say so (`cf.k8s.lex.la/RouteShadowed`).
//! Pure; the table's routes come in the data plane's precedence order (oldest first, then
//! `{namespace}/{name}`), which is the Gateway API tie-break.
//!
//! Two kinds of loss, as the data plane matches (see `tunnel_config::routing`):
//! - **same match**: both routes serve the same hostname with an identical match (path, method,
//!   headers, query parameters; for GRPCRoutes service, method and headers): the later route
//!   in precedence order never sees those requests.
//! - **more specific hostname**: one route serves a hostname strictly below the other's
//!   wildcard (or the other serves any hostname): the data plane looks up the more specific
//!   hostname first, so requests the first route matches there never reach the wildcard route,
//!   whatever the routes' ages.
//!
//! Routes of one namespace are one tenant's business and are not reported.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use tunnel_config::config::{self, PathMatchType};

use crate::model::rules::ownership::covers;

/// One route losing requests to another: indices into the table's routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadow {
    pub loser: usize,
    pub winner: usize,
    pub how: How,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// Both serve `hostname` with the match `what`; the winner ranks first.
    SameMatch { hostname: String, what: String },
    /// The winner serves `specific`, below the loser's `general`.
    MoreSpecificHostname { specific: String, general: String },
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            How::SameMatch { hostname, what } => write!(
                f,
                "requests for {hostname} matching {what} go to the other route: the same match ranks the older route (then the lower namespace/name) first"
            ),
            How::MoreSpecificHostname { specific, general } if general == "*" => write!(
                f,
                "requests for {specific} that the other route matches go to it, not to this route (any hostname): a more specific hostname ranks first"
            ),
            How::MoreSpecificHostname { specific, general } => write!(
                f,
                "requests for {specific} that the other route matches go to it, not to this route's {general}: a more specific hostname ranks first"
            ),
        }
    }
}

/// Every cross-namespace loss among `routes` (in precedence order), at most one per
/// (loser, winner) pair: the first one found.
pub fn shadows(routes: &[config::Route]) -> Vec<Shadow> {
    let views: Vec<View> = routes.iter().map(View::of).collect();
    let mut out = Vec::new();
    for (i, j) in candidates(&views) {
        let (a, b) = (&views[i], &views[j]);
        if let Some(s) = pair(i, a, j, b) {
            out.push(s);
        }
        if let Some(s) = pair_nested(j, b, i, a) {
            out.push(s);
        }
    }
    out
}

/// The pairs `(i, j)`, `i < j`, of routes of different namespaces that can collide: they share a
/// hostname, or one serves a hostname that a wildcard of the other (or any hostname) covers.
/// Found through an index by hostname, so a round costs about the number of such pairs, not
/// the square of the table (3,000 routes were 4.5 million pair checks a round).
fn candidates(views: &[View]) -> BTreeSet<(usize, usize)> {
    let mut by_host: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, v) in views.iter().enumerate() {
        for h in &v.hosts {
            by_host.entry(h).or_default().push(i);
        }
    }
    let mut out = BTreeSet::new();
    let mut add = |x: usize, y: usize| {
        if x != y && views[x].namespace != views[y].namespace {
            out.insert((x.min(y), x.max(y)));
        }
    };
    for list in by_host.values() {
        for (k, &x) in list.iter().enumerate() {
            for &y in &list[k + 1..] {
                add(x, y);
            }
        }
    }
    let any = by_host.get("*").map(Vec::as_slice).unwrap_or_default();
    for (w, v) in views.iter().enumerate() {
        for h in v.hosts.iter().filter(|h| *h != "*") {
            for &l in any {
                add(w, l);
            }
            // `*.suffix` covers `h` exactly when `.suffix` ends `h` after at least one label.
            for (dot, _) in h.match_indices('.') {
                if let Some(list) = by_host.get(format!("*{}", &h[dot..]).as_str()) {
                    for &l in list {
                        add(w, l);
                    }
                }
            }
        }
    }
    out
}

/// What `a` (earlier, index `i`) takes from `b` (later, index `j`), if anything.
fn pair(i: usize, a: &View, j: usize, b: &View) -> Option<Shadow> {
    for ha in &a.hosts {
        for hb in &b.hosts {
            if ha == hb
                && a.grpc == b.grpc
                && let Some(m) = b.matches.iter().find(|m| a.matches.contains(m))
            {
                return Some(Shadow {
                    loser: j,
                    winner: i,
                    how: How::SameMatch {
                        hostname: ha.clone(),
                        what: m.clone(),
                    },
                });
            }
        }
    }
    pair_nested(i, a, j, b)
}

/// Whether `w` (index `wi`) serves a hostname strictly more specific than one of `l`'s.
fn pair_nested(wi: usize, w: &View, li: usize, l: &View) -> Option<Shadow> {
    for hw in &w.hosts {
        for hl in &l.hosts {
            if hw != hl && (hl == "*" || covers(hl, hw)) && !l.excludes(hl, hw) {
                return Some(Shadow {
                    loser: li,
                    winner: wi,
                    how: How::MoreSpecificHostname {
                        specific: hw.clone(),
                        general: hl.clone(),
                    },
                });
            }
        }
    }
    None
}

/// The parts of a table route that collisions compare.
struct View {
    namespace: String,
    grpc: bool,
    /// Normalized; `*` for any hostname.
    hosts: Vec<String>,
    /// Each match in a canonical spelling (header and parameter order does not matter).
    matches: Vec<String>,
    /// `excludedHostnames` (listener isolation), normalized, by host.
    excluded: HashMap<String, Vec<String>>,
}

impl View {
    /// Whether the route does not serve `specific` through its hostname `general` (it belongs
    /// to a narrower listener): nothing is lost there.
    fn excludes(&self, general: &str, specific: &str) -> bool {
        self.excluded.get(general).is_some_and(|ex| {
            ex.iter()
                .any(|e| crate::model::rules::hostnames::covers(Some(e), specific))
        })
    }

    fn of(r: &config::Route) -> View {
        let (name, hostnames, excluded, grpc, matches) = match r {
            config::Route::Http(h) => (
                &h.name,
                &h.hostnames,
                &h.excluded_hostnames,
                false,
                h.rules
                    .iter()
                    .flat_map(|rule| {
                        if rule.matches.is_empty() {
                            vec![http_match(&config::HttpMatch::default())]
                        } else {
                            rule.matches.iter().map(http_match).collect()
                        }
                    })
                    .collect(),
            ),
            config::Route::Grpc(g) => (
                &g.name,
                &g.hostnames,
                &g.excluded_hostnames,
                true,
                g.rules
                    .iter()
                    .flat_map(|rule| {
                        if rule.matches.is_empty() {
                            vec![grpc_match(&config::GrpcMatch::default())]
                        } else {
                            rule.matches.iter().map(grpc_match).collect()
                        }
                    })
                    .collect(),
            ),
        };
        let hosts = if hostnames.is_empty() {
            vec!["*".to_owned()]
        } else {
            hostnames
                .iter()
                .map(|h| crate::model::rules::hostnames::normalize(h))
                .collect()
        };
        let norm = |h: &String| crate::model::rules::hostnames::normalize(h);
        View {
            namespace: name.split('/').next().unwrap_or_default().to_owned(),
            grpc,
            hosts,
            matches,
            excluded: excluded
                .iter()
                .map(|(h, ex)| (norm(h), ex.iter().map(norm).collect()))
                .collect(),
        }
    }
}

fn values(kind: &str, v: &[config::ValueMatch], lower_names: bool) -> String {
    let mut parts: Vec<String> = v
        .iter()
        .map(|m| {
            let name = if lower_names {
                m.name.to_ascii_lowercase()
            } else {
                m.name.clone()
            };
            format!("{kind} {name}{}{}", op(m.kind), m.value)
        })
        .collect();
    parts.sort();
    parts.join(", ")
}

fn op(k: config::ValueMatchType) -> &'static str {
    match k {
        config::ValueMatchType::Exact => "=",
        config::ValueMatchType::RegularExpression => "~",
    }
}

fn http_match(m: &config::HttpMatch) -> String {
    let path = match &m.path {
        None => "path prefix /".to_owned(),
        Some(p) => match p.kind {
            PathMatchType::Exact => format!("path {}", p.value),
            PathMatchType::PathPrefix => format!("path prefix {}", p.value),
            PathMatchType::RegularExpression => format!("path ~{}", p.value),
        },
    };
    let mut parts = vec![path];
    parts.extend(m.method.as_ref().map(|x| format!("method {x}")));
    parts.push(values("header", &m.headers, true));
    parts.push(values("query", &m.query_params, false));
    parts.retain(|p| !p.is_empty());
    parts.join(", ")
}

fn grpc_match(m: &config::GrpcMatch) -> String {
    let method = match &m.method {
        None => "any gRPC method".to_owned(),
        Some(x) => format!(
            "gRPC {}{}/{}",
            op(x.kind),
            x.service.as_deref().unwrap_or("*"),
            x.method.as_deref().unwrap_or("*")
        ),
    };
    let mut parts = vec![method, values("header", &m.headers, true)];
    parts.retain(|p| !p.is_empty());
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::{GrpcRoute, HttpMatch, HttpRoute, HttpRule, PathMatch, ValueMatch};

    fn http(name: &str, hosts: &[&str], paths: &[&str]) -> config::Route {
        config::Route::Http(HttpRoute {
            name: name.into(),
            hostnames: hosts.iter().map(|h| h.to_string()).collect(),
            excluded_hostnames: Default::default(),
            rules: vec![HttpRule {
                name: None,
                matches: paths
                    .iter()
                    .map(|p| HttpMatch {
                        path: Some(PathMatch {
                            kind: PathMatchType::PathPrefix,
                            value: p.to_string(),
                        }),
                        ..Default::default()
                    })
                    .collect(),
                filters: vec![],
                backends: vec![],
                timeouts: Default::default(),
                failure_status: None,
            }],
        })
    }

    fn grpc(name: &str, hosts: &[&str]) -> config::Route {
        config::Route::Grpc(GrpcRoute {
            name: name.into(),
            hostnames: hosts.iter().map(|h| h.to_string()).collect(),
            excluded_hostnames: Default::default(),
            rules: vec![config::GrpcRule {
                name: None,
                matches: vec![],
                filters: vec![],
                backends: vec![],
                timeouts: Default::default(),
                failure_status: None,
            }],
        })
    }

    fn same(hostname: &str, what: &str) -> How {
        How::SameMatch {
            hostname: hostname.into(),
            what: what.into(),
        }
    }

    fn nested(specific: &str, general: &str) -> How {
        How::MoreSpecificHostname {
            specific: specific.into(),
            general: general.into(),
        }
    }

    fn isolated(mut r: config::Route, host: &str, excluded: &[&str]) -> config::Route {
        if let config::Route::Http(h) = &mut r {
            h.excluded_hostnames.insert(
                host.into(),
                excluded.iter().map(|e| e.to_string()).collect(),
            );
        }
        r
    }

    fn shadow(loser: usize, winner: usize, how: How) -> Shadow {
        Shadow { loser, winner, how }
    }

    #[test]
    fn collisions_table() {
        let cases: Vec<(&str, Vec<config::Route>, Vec<Shadow>)> = vec![
            (
                "same hostname and path: the later route loses",
                vec![
                    http("a/site", &["a.example"], &["/"]),
                    http("b/steal", &["A.example."], &["/"]),
                ],
                vec![shadow(1, 0, same("a.example", "path prefix /"))],
            ),
            (
                "a rule without matches is PathPrefix /",
                vec![
                    http("a/site", &["a.example"], &[]),
                    http("b/steal", &["a.example"], &["/"]),
                ],
                vec![shadow(1, 0, same("a.example", "path prefix /"))],
            ),
            (
                "same hostname, different paths: plain precedence, no collision",
                vec![
                    http("a/site", &["a.example"], &["/"]),
                    http("b/other", &["a.example"], &["/login"]),
                ],
                vec![],
            ),
            (
                "the same namespace is not reported",
                vec![
                    http("a/one", &["a.example"], &["/"]),
                    http("a/two", &["a.example"], &["/"]),
                ],
                vec![],
            ),
            (
                "an exact hostname below a wildcard wins, whatever its age",
                vec![
                    http("a/wild", &["*.a.example"], &["/"]),
                    http("b/exact", &["x.a.example"], &["/api"]),
                ],
                vec![shadow(0, 1, nested("x.a.example", "*.a.example"))],
            ),
            (
                "a host the wildcard route excludes (a narrower listener's) is not lost",
                vec![
                    isolated(
                        http("a/wild", &["*.a.example"], &["/"]),
                        "*.a.example",
                        &["*.x.a.example"],
                    ),
                    http("b/exact", &["y.x.a.example"], &["/api"]),
                ],
                vec![],
            ),
            (
                "overlapping wildcards: the longer one wins",
                vec![
                    http("b/wide", &["*.example"], &["/"]),
                    http("a/narrow", &["*.a.example"], &["/"]),
                ],
                vec![shadow(0, 1, nested("*.a.example", "*.example"))],
            ),
            (
                "a route for any hostname loses every hostname another serves",
                vec![
                    http("b/any", &[], &["/"]),
                    http("a/site", &["a.example"], &["/"]),
                ],
                vec![shadow(0, 1, nested("a.example", "*"))],
            ),
            (
                "two GRPCRoutes with the same (empty) match collide; an HTTPRoute does not",
                vec![
                    grpc("a/svc", &["g.example"]),
                    http("c/web", &["g.example"], &["/"]),
                    grpc("b/svc", &["g.example"]),
                ],
                vec![shadow(2, 0, same("g.example", "any gRPC method"))],
            ),
            (
                "an older wildcard route loses the exact hostname too (and no same-match report)",
                vec![
                    http("a/wild", &["*.example"], &["/"]),
                    grpc("b/svc", &["x.example"]),
                ],
                vec![shadow(0, 1, nested("x.example", "*.example"))],
            ),
            (
                "unrelated hostnames",
                vec![
                    http("a/site", &["a.example"], &["/"]),
                    http("b/site", &["b.example", "*.b.example"], &["/"]),
                ],
                vec![],
            ),
        ];
        for (name, routes, want) in cases {
            assert_eq!(shadows(&routes), want, "{name}");
        }
    }

    #[test]
    fn header_order_and_name_case_do_not_make_matches_differ() {
        let with = |headers: Vec<(&str, &str)>| {
            let mut r = http("x/r", &["h.example"], &["/"]);
            if let config::Route::Http(h) = &mut r {
                h.rules[0].matches[0].headers = headers
                    .into_iter()
                    .map(|(n, v)| ValueMatch {
                        kind: Default::default(),
                        name: n.into(),
                        value: v.into(),
                    })
                    .collect();
            }
            r
        };
        let a = with(vec![("X-A", "1"), ("x-b", "2")]);
        let mut b = with(vec![("x-b", "2"), ("x-a", "1")]);
        if let config::Route::Http(h) = &mut b {
            h.name = "y/r".into();
        }
        let got = shadows(&[a, b]);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].how,
            same("h.example", "path prefix /, header x-a=1, header x-b=2")
        );
    }

    /// The index must find exactly what comparing every pair finds, in the same order.
    #[test]
    fn index_finds_what_every_pair_finds() {
        let hosts = [
            "a.example",
            "x.a.example",
            "*.a.example",
            "y.x.a.example",
            "*.x.a.example",
            "*.example",
            "b.example",
            "A.Example.",
        ];
        let paths = ["/", "/api", "/web"];
        // A fixed pseudo-random table: namespaces, hostnames (none = any) and paths vary.
        let mut seed = 7u32;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as usize % n
        };
        let mut routes = Vec::new();
        for k in 0..120 {
            let ns = ["t1", "t2", "t3"][next(3)];
            let hs: Vec<&str> = (0..next(3)).map(|_| hosts[next(hosts.len())]).collect();
            let ps = [paths[next(paths.len())]];
            routes.push(if next(6) == 0 {
                grpc(&format!("{ns}/g{k}"), &hs)
            } else {
                http(&format!("{ns}/r{k}"), &hs, &ps)
            });
        }
        let views: Vec<View> = routes.iter().map(View::of).collect();
        let mut every_pair = Vec::new();
        for (i, a) in views.iter().enumerate() {
            for (j, b) in views.iter().enumerate().skip(i + 1) {
                if a.namespace != b.namespace {
                    every_pair.extend(pair(i, a, j, b));
                    every_pair.extend(pair_nested(j, b, i, a));
                }
            }
        }
        assert!(
            every_pair.len() > 100,
            "the table collides: {}",
            every_pair.len()
        );
        assert_eq!(shadows(&routes), every_pair);
    }
}
