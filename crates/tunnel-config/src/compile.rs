//! Validation and compilation of a [`Config`] into an immutable [`RouteTable`].
//!
//! Everything that can fail (JSON shape, hostnames, regexes, header names and values, methods,
//! weights, status codes, durations, endpoints, certificates and keys) fails here, with the
//! JSON path of the offending field, before anything is swapped in. What a backend becomes
//! (pooled clients in the proxy, nothing in [`validate`]) and what the table keeps per
//! hostname is the caller's [`Build`].
//!
//! A document compiles route by route ([`compile_route`], whose result depends on the route and
//! its index only) and its table is assembled from the compiled routes and listeners
//! ([`RouteTable::assemble`]), so a caller that keeps them (the proxy, for deltas) compiles only
//! the routes that changed and still gets the table [`compile`] would make.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::backend::{self, UpstreamError};
use crate::config::{self, BackendProtocol, BackendTls, Config, Route};
use crate::cors::Cors;
use crate::delta::Delta;
use crate::filters::{HeaderModifier, PathRewrite, Redirect, UrlRewrite};
use crate::routing::{
    HostPattern, Matchers, PathMatcher, RouteSpec, RuleSpec, Table, WeightedChoice,
};

mod parts;

pub use parts::parse_duration;
use parts::{
    chain, cors, grpc_match, header_modifier, http_match, redirect, status, timeout, url_rewrite,
};

/// Gateway API maximum backend weight.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// A refused document: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CompileError {
    /// JSON path such as `routes[0].rules[1].matches[0].path.value`.
    pub path: String,
    pub message: String,
}

fn err(path: impl Into<String>, message: impl std::fmt::Display) -> CompileError {
    CompileError {
        path: path.into(),
        message: message.to_string(),
    }
}

/// Parses a JSON document; errors name the path of the bad field.
///
/// Routes are decoded one by one after reading their `kind`: serde's tagged enums buffer
/// their content and would lose the path inside a route.
pub fn parse(body: &[u8]) -> Result<Config, CompileError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Raw {
        version: u64,
        #[serde(default)]
        listeners: Vec<config::Listener>,
        #[serde(default)]
        routes: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    let raw: Raw = from_slice(body)?;
    Ok(Config {
        version: raw.version,
        listeners: raw.listeners,
        routes: routes(raw.routes)?,
    })
}

/// Parses a [`Delta`] (`PATCH /config`), its routes decoded as [`parse`] decodes a document's.
pub fn parse_delta(body: &[u8]) -> Result<Delta, CompileError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Raw {
        base_version: u64,
        version: u64,
        #[serde(default)]
        listeners: Option<Vec<config::Listener>>,
        start: usize,
        remove: usize,
        #[serde(default)]
        routes: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    let raw: Raw = from_slice(body)?;
    Ok(Delta {
        base_version: raw.base_version,
        version: raw.version,
        listeners: raw.listeners,
        start: raw.start,
        remove: raw.remove,
        routes: routes(raw.routes)?,
    })
}

fn from_slice<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, CompileError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let raw: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        err(
            if path == "." { "$".to_owned() } else { path },
            e.into_inner(),
        )
    })?;
    de.end().map_err(|e| err("$", e))?;
    Ok(raw)
}

fn routes(
    raw: Vec<serde_json::Map<String, serde_json::Value>>,
) -> Result<Vec<Route>, CompileError> {
    fn typed<T: serde::de::DeserializeOwned>(
        prefix: &str,
        value: serde_json::Value,
    ) -> Result<T, CompileError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." {
                prefix.to_owned()
            } else {
                format!("{prefix}.{path}")
            };
            err(path, e.into_inner())
        })
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, mut route)| {
            let at = format!("routes[{i}]");
            match route.remove("kind").as_ref().and_then(|k| k.as_str()) {
                Some("HTTPRoute") => typed(&at, route.into()).map(Route::Http),
                Some("GRPCRoute") => typed(&at, route.into()).map(Route::Grpc),
                _ => Err(err(
                    format!("{at}.kind"),
                    "must be `HTTPRoute` or `GRPCRoute`",
                )),
            }
        })
        .collect()
}

/// Checks a document exactly as a push is checked (the same compilation), keeping nothing: no
/// metrics series, no pooled clients, no background tasks. The controller runs each translated
/// rule through this, so one bad rule can never make the proxy refuse a whole document.
pub fn validate(config: &Config) -> Result<(), CompileError> {
    compile(config, &mut Check).map(|_| ())
}

/// What the caller builds while a document compiles: a backend's endpoints (checked with
/// [`backend::check`] or by building them) and the per-hostname state of the table.
pub trait Build {
    /// A backend with endpoints, ready to forward to.
    type Upstream;
    /// What the table keeps per route hostname label (the proxy: its metrics handles).
    type Host: Clone;
    /// Checks and builds the endpoints of a backend; `tls` when it is dialled with TLS.
    fn upstream(
        &mut self,
        endpoints: &[String],
        protocol: BackendProtocol,
        tls: Option<&BackendTls>,
    ) -> Result<Self::Upstream, UpstreamError>;
    /// The state of a hostname label, asked for by each route that has the label; a table
    /// keeps the first route's.
    fn host(&mut self, label: &str) -> Self::Host;
}

/// The [`Build`] of [`validate`]: every check, nothing built (a table of it routes, but has no
/// clients).
pub struct Check;

impl Build for Check {
    type Upstream = ();
    type Host = ();

    fn upstream(
        &mut self,
        endpoints: &[String],
        protocol: BackendProtocol,
        tls: Option<&BackendTls>,
    ) -> Result<(), UpstreamError> {
        backend::check(endpoints, protocol, tls)
    }

    fn host(&mut self, _label: &str) {}
}

// === compiled form ===

/// The compiled, immutable route table.
#[derive(Debug)]
pub struct RouteTable<U, H> {
    pub version: u64,
    pub table: Table<Rule<U>>,
    hosts: crate::routing::HostMap<H>,
}

impl<U, H> RouteTable<U, H> {
    /// The state of a hostname label returned by a lookup.
    pub fn host(&self, hostname: &str) -> Option<&H> {
        self.hosts.get(hostname)
    }

    /// The hostname labels of its routes (`*` for a route without hostnames), each once.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }
}

impl<U, H: Clone> RouteTable<U, H> {
    /// The table of a document from its parts: the listeners' gate ([`compile_listeners`]) and
    /// its routes in document order ([`compile_route`]), which it shares with any other table
    /// built from them. The table [`compile`] makes of the same document.
    pub fn assemble<'a>(
        version: u64,
        listeners: Arc<[HostPattern]>,
        routes: impl IntoIterator<Item = &'a CompiledRoute<U, H>>,
    ) -> Self
    where
        U: 'a,
        H: 'a,
    {
        let mut hosts = crate::routing::HostMap::default();
        let routes: Vec<_> = routes
            .into_iter()
            .map(|route| {
                for (label, state) in &route.hosts {
                    if !hosts.contains_key(label.as_str()) {
                        hosts.insert(label.clone(), state.clone());
                    }
                }
                route.spec.clone()
            })
            .collect();
        RouteTable {
            version,
            table: Table::new(listeners, routes),
            hosts,
        }
    }
}

/// One route compiled on its own: its rules, shared by every table that has the route (so a
/// change to one route compiles only that route), and the state of its hostname labels.
#[derive(Debug)]
pub struct CompiledRoute<U, H> {
    spec: Arc<RouteSpec<Rule<U>>>,
    hosts: Vec<(String, H)>,
}

/// One compiled HTTPRoute or GRPCRoute rule.
#[derive(Debug)]
pub struct Rule<U> {
    /// `{namespace}/{name}` of the route, for logs.
    pub route: Arc<str>,
    pub grpc: bool,
    pub request_headers: Option<HeaderModifier>,
    pub response_headers: Option<HeaderModifier>,
    pub rewrite: Option<UrlRewrite>,
    /// The rule's CORS filter: preflights answered by the proxy, actual responses gain headers.
    pub cors: Option<Arc<Cors>>,
    pub mirrors: Vec<Mirror<U>>,
    pub action: Action<U>,
    pub request_timeout: Option<Duration>,
    pub backend_timeout: Option<Duration>,
}

impl<U> Rule<U> {
    /// How long a forwarded request may wait for its response head: the smaller of the
    /// request and backend timeouts, or the one that is set.
    pub fn response_timeout(&self) -> Option<Duration> {
        match (self.request_timeout, self.backend_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// What a rule does with a matched request.
#[derive(Debug)]
pub enum Action<U> {
    /// Answer locally (fail-closed rules, rules with nothing to forward to).
    Respond(StatusCode),
    Redirect(Redirect),
    Forward {
        choice: WeightedChoice,
        backends: Vec<Backend<U>>,
    },
}

#[derive(Debug)]
pub struct Backend<U> {
    pub name: Arc<str>,
    pub target: Target<U>,
    /// When the backendRef has filters of its own: the rule as requests forwarded to this
    /// backend see it, see [`Backend::rule`].
    filtered: Option<Box<Rule<U>>>,
}

impl<U> Backend<U> {
    /// The rule a request forwarded to this backend is handled with: `rule` itself, or, when the
    /// backendRef has filters, a copy of `rule` whose filters are the rule's followed by the
    /// backend's (header modifiers chained, URLRewrite fields the backend sets replacing the
    /// rule's, mirrors of both). Its action is never consulted: the backend is already chosen.
    pub fn rule<'a>(&'a self, rule: &'a Rule<U>) -> &'a Rule<U> {
        self.filtered.as_deref().unwrap_or(rule)
    }
}

#[derive(Debug)]
pub enum Target<U> {
    /// Fail closed for this share of the traffic.
    Fail(StatusCode),
    Upstream(Box<U>),
}

#[derive(Debug)]
pub struct Mirror<U> {
    pub backend: Backend<U>,
    pub percent: u32,
}

// === compilation ===

/// A route's `excludedHostnames`, one list per entry of `hostnames` (one for any host when it
/// is empty). Each key must name an entry, and each excluded pattern must lie inside it.
fn excluded_hostnames(
    at: &str,
    hostnames: &[HostPattern],
    excluded: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<Vec<Vec<HostPattern>>, CompileError> {
    let keys: Vec<HostPattern> = if hostnames.is_empty() {
        vec![HostPattern::Any]
    } else {
        hostnames.to_vec()
    };
    for key in excluded.keys() {
        let known = if key == "*" {
            hostnames.is_empty()
        } else {
            HostPattern::parse(key).is_ok_and(|k| keys.contains(&k))
        };
        if !known {
            return Err(err(
                format!("{at}.excludedHostnames[{key}]"),
                "is not one of the route's hostnames (`*` when it has none)",
            ));
        }
    }
    keys.iter()
        .map(|key| {
            let Some(list) = excluded.get(&key.label()) else {
                return Ok(Vec::new());
            };
            list.iter()
                .enumerate()
                .map(|(i, h)| {
                    let path = format!("{at}.excludedHostnames[{}][{i}]", key.label());
                    let p = HostPattern::parse(h).map_err(|e| err(&path, e))?;
                    if key.contains(&p) && &p != key {
                        Ok(p)
                    } else {
                        Err(err(path, format!("does not lie inside {}", key.label())))
                    }
                })
                .collect()
        })
        .collect()
}

/// Compiles a document; `build` makes its backends and hostname state.
pub fn compile<B: Build>(
    config: &Config,
    build: &mut B,
) -> Result<RouteTable<B::Upstream, B::Host>, CompileError> {
    let listeners = compile_listeners(&config.listeners)?;
    let routes = config
        .routes
        .iter()
        .enumerate()
        .map(|(i, route)| compile_route(i, route, build))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RouteTable::assemble(config.version, listeners, &routes))
}

/// The listeners' gate of a table: the hosts some listener admits (empty: no gate).
pub fn compile_listeners(
    listeners: &[config::Listener],
) -> Result<Arc<[HostPattern]>, CompileError> {
    let listeners = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| match &l.hostname {
            None => Ok(HostPattern::Any),
            Some(h) => {
                HostPattern::parse(h).map_err(|e| err(format!("listeners[{i}].hostname"), e))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    // One listener without hostname admits every host: no gate.
    Ok(if listeners.contains(&HostPattern::Any) {
        Arc::from([])
    } else {
        listeners.into()
    })
}

/// Compiles the route at `index` of a document (errors name it by that index).
pub fn compile_route<B: Build>(
    index: usize,
    route: &Route,
    build: &mut B,
) -> Result<CompiledRoute<B::Upstream, B::Host>, CompileError> {
    let at = format!("routes[{index}]");
    let (name, hostnames, excluded) = match route {
        Route::Http(r) => (&r.name, &r.hostnames, &r.excluded_hostnames),
        Route::Grpc(r) => (&r.name, &r.hostnames, &r.excluded_hostnames),
    };
    let hostnames = hostnames
        .iter()
        .enumerate()
        .map(|(i, h)| HostPattern::parse(h).map_err(|e| err(format!("{at}.hostnames[{i}]"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let excluded = excluded_hostnames(&at, &hostnames, excluded)?;
    let labels: Vec<String> = if hostnames.is_empty() {
        vec![HostPattern::Any.label()]
    } else {
        hostnames.iter().map(HostPattern::label).collect()
    };
    let hosts = labels
        .into_iter()
        .map(|label| {
            let state = build.host(&label);
            (label, state)
        })
        .collect();
    let route_name: Arc<str> = Arc::from(name.as_str());
    let mut ctx = Ctx { build };
    let rules = match route {
        Route::Http(r) => r
            .rules
            .iter()
            .enumerate()
            .map(|(i, rule)| ctx.http_rule(&format!("{at}.rules[{i}]"), &route_name, rule))
            .collect::<Result<Vec<_>, _>>()?,
        Route::Grpc(r) => r
            .rules
            .iter()
            .enumerate()
            .map(|(i, rule)| ctx.grpc_rule(&format!("{at}.rules[{i}]"), &route_name, rule))
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(CompiledRoute {
        spec: Arc::new(RouteSpec {
            hostnames,
            excluded,
            rules,
        }),
        hosts,
    })
}

struct Ctx<'a, B> {
    build: &'a mut B,
}

/// The filters of a rule, split by kind.
struct Filters<U> {
    request_headers: Option<HeaderModifier>,
    response_headers: Option<HeaderModifier>,
    redirect: Option<Redirect>,
    rewrite: Option<UrlRewrite>,
    cors: Option<Arc<Cors>>,
    mirrors: Vec<Mirror<U>>,
}

impl<B: Build> Ctx<'_, B> {
    fn http_rule(
        &mut self,
        at: &str,
        route: &Arc<str>,
        rule: &config::HttpRule,
    ) -> Result<RuleSpec<Rule<B::Upstream>>, CompileError> {
        let matchers = rule
            .matches
            .iter()
            .enumerate()
            .map(|(i, m)| http_match(&format!("{at}.matches[{i}]"), m))
            .collect::<Result<Vec<_>, _>>()?;
        let filters = self.filters(at, &rule.filters, false)?;
        let prefix_rewrite = |p: &Option<PathRewrite>| matches!(p, Some(PathRewrite::Prefix(_)));
        let uses_prefix = filters
            .redirect
            .as_ref()
            .is_some_and(|r| prefix_rewrite(&r.path))
            || filters
                .rewrite
                .as_ref()
                .is_some_and(|r| prefix_rewrite(&r.path));
        if uses_prefix
            && matchers
                .iter()
                .any(|m| !matches!(m.path, PathMatcher::Prefix(_)))
        {
            return Err(err(
                format!("{at}.filters"),
                "ReplacePrefixMatch requires every match of the rule to be a PathPrefix match",
            ));
        }
        let all_prefix = matchers
            .iter()
            .all(|m| matches!(m.path, PathMatcher::Prefix(_)));
        let rule = self.rule(
            at,
            route,
            false,
            (filters, &rule.filters, all_prefix),
            &rule.backends,
            &rule.timeouts,
            rule.failure_status,
        )?;
        Ok(RuleSpec {
            matchers: Matchers::Http(matchers),
            payload: rule,
        })
    }

    fn grpc_rule(
        &mut self,
        at: &str,
        route: &Arc<str>,
        rule: &config::GrpcRule,
    ) -> Result<RuleSpec<Rule<B::Upstream>>, CompileError> {
        let matchers = rule
            .matches
            .iter()
            .enumerate()
            .map(|(i, m)| grpc_match(&format!("{at}.matches[{i}]"), m))
            .collect::<Result<Vec<_>, _>>()?;
        let filters = self.filters(at, &rule.filters, true)?;
        for (i, b) in rule.backends.iter().enumerate() {
            if b.failure_status.is_none() && b.protocol != config::BackendProtocol::Http2 {
                return Err(err(
                    format!("{at}.backends[{i}].protocol"),
                    "gRPC backends must use http2 (h2c, or TLS with ALPN h2)",
                ));
            }
        }
        let rule = self.rule(
            at,
            route,
            true,
            (filters, &rule.filters, true),
            &rule.backends,
            &rule.timeouts,
            rule.failure_status,
        )?;
        Ok(RuleSpec {
            matchers: Matchers::Grpc(matchers),
            payload: rule,
        })
    }

    /// A rule from its compiled `filters`, given with the document's (compiled again for each
    /// backend with filters of its own) and whether every match is a PathPrefix match.
    #[allow(clippy::too_many_arguments)]
    fn rule(
        &mut self,
        at: &str,
        route: &Arc<str>,
        grpc: bool,
        (filters, rule_filters, all_prefix): (Filters<B::Upstream>, &[config::Filter], bool),
        backends: &[config::Backend],
        timeouts: &config::Timeouts,
        failure_status: Option<u16>,
    ) -> Result<Rule<B::Upstream>, CompileError> {
        let request_timeout = timeout(&format!("{at}.timeouts.request"), &timeouts.request)?;
        let backend_timeout = timeout(
            &format!("{at}.timeouts.backendRequest"),
            &timeouts.backend_request,
        )?;
        let mut compiled_backends = Vec::with_capacity(backends.len());
        for (i, b) in backends.iter().enumerate() {
            let bat = format!("{at}.backends[{i}]");
            let mut backend = self.backend(&bat, b)?;
            if !b.filters.is_empty() {
                let own = self.filters(&bat, &b.filters, grpc)?;
                if own.cors.is_some() {
                    return Err(err(
                        format!("{bat}.filters"),
                        "CORS is not valid on a backendRef (a preflight is answered before a backend is chosen); put it on the rule",
                    ));
                }
                if own.redirect.is_some() {
                    return Err(err(
                        format!("{bat}.filters"),
                        "RequestRedirect is not valid on a backendRef (a redirect forwards nothing); put it on the rule",
                    ));
                }
                if !all_prefix
                    && own
                        .rewrite
                        .as_ref()
                        .is_some_and(|r| matches!(r.path, Some(PathRewrite::Prefix(_))))
                {
                    return Err(err(
                        format!("{bat}.filters"),
                        "ReplacePrefixMatch requires every match of the rule to be a PathPrefix match",
                    ));
                }
                let base = self.filters(at, rule_filters, grpc)?;
                let mut mirrors = base.mirrors;
                mirrors.extend(own.mirrors);
                backend.filtered = Some(Box::new(Rule {
                    route: route.clone(),
                    grpc,
                    request_headers: chain(base.request_headers, own.request_headers),
                    response_headers: chain(base.response_headers, own.response_headers),
                    rewrite: match (base.rewrite, own.rewrite) {
                        (Some(base), Some(own)) => Some(UrlRewrite {
                            hostname: own.hostname.or(base.hostname),
                            path: own.path.or(base.path),
                        }),
                        (base, own) => own.or(base),
                    },
                    cors: base.cors,
                    mirrors,
                    action: Action::Respond(StatusCode::INTERNAL_SERVER_ERROR),
                    request_timeout,
                    backend_timeout,
                }));
            }
            compiled_backends.push(backend);
        }
        let failure = failure_status
            .map(|s| status(&format!("{at}.failureStatus"), s))
            .transpose()?;
        let action = if let Some(status) = failure {
            Action::Respond(status)
        } else if let Some(redirect) = filters.redirect {
            Action::Redirect(redirect)
        } else {
            match WeightedChoice::new(backends.iter().map(|b| b.weight)) {
                // The specification: nothing to forward to (no backends, or all weights 0) is 500.
                None => Action::Respond(StatusCode::INTERNAL_SERVER_ERROR),
                Some(choice) => Action::Forward {
                    choice,
                    backends: compiled_backends,
                },
            }
        };
        Ok(Rule {
            route: route.clone(),
            grpc,
            request_headers: filters.request_headers,
            response_headers: filters.response_headers,
            rewrite: filters.rewrite,
            cors: filters.cors,
            mirrors: filters.mirrors,
            action,
            request_timeout,
            backend_timeout,
        })
    }

    fn backend(
        &mut self,
        at: &str,
        b: &config::Backend,
    ) -> Result<Backend<B::Upstream>, CompileError> {
        if b.weight > MAX_WEIGHT {
            return Err(err(
                format!("{at}.weight"),
                format!("must be at most {MAX_WEIGHT}"),
            ));
        }
        let fail = b
            .failure_status
            .map(|s| status(&format!("{at}.failureStatus"), s))
            .transpose()?;
        let target = match fail {
            Some(status) => Target::Fail(status),
            // A backend with no ready endpoint is unavailable, not misconfigured.
            None if b.endpoints.is_empty() => Target::Fail(StatusCode::SERVICE_UNAVAILABLE),
            None => Target::Upstream(Box::new(
                self.build
                    .upstream(&b.endpoints, b.protocol, b.tls.as_ref())
                    .map_err(|e| match e {
                        UpstreamError::Endpoint(e) => {
                            err(format!("{at}.endpoints[{}]", e.index), e)
                        }
                        UpstreamError::Tls(e) => err(format!("{at}.tls"), e),
                    })?,
            )),
        };
        Ok(Backend {
            name: Arc::from(b.name.as_str()),
            target,
            filtered: None,
        })
    }

    fn filters(
        &mut self,
        at: &str,
        filters: &[config::Filter],
        grpc: bool,
    ) -> Result<Filters<B::Upstream>, CompileError> {
        let mut out = Filters {
            request_headers: None,
            response_headers: None,
            redirect: None,
            rewrite: None,
            cors: None,
            mirrors: Vec::new(),
        };
        for (i, f) in filters.iter().enumerate() {
            let at = format!("{at}.filters[{i}]");
            let dup = || err(at.clone(), "this filter type may appear only once per rule");
            let http_only = || err(at.clone(), "this filter is not valid on a GRPCRoute rule");
            match f {
                config::Filter::RequestHeaderModifier(m) => {
                    if out
                        .request_headers
                        .replace(header_modifier(&at, m)?)
                        .is_some()
                    {
                        return Err(dup());
                    }
                }
                config::Filter::ResponseHeaderModifier(m) => {
                    if out
                        .response_headers
                        .replace(header_modifier(&at, m)?)
                        .is_some()
                    {
                        return Err(dup());
                    }
                }
                config::Filter::RequestRedirect(r) => {
                    if grpc {
                        return Err(http_only());
                    }
                    if out.redirect.replace(redirect(&at, r)?).is_some() {
                        return Err(dup());
                    }
                }
                config::Filter::UrlRewrite(r) => {
                    if grpc {
                        return Err(http_only());
                    }
                    if out.rewrite.replace(url_rewrite(&at, r)?).is_some() {
                        return Err(dup());
                    }
                }
                config::Filter::Cors(c) => {
                    if grpc {
                        return Err(http_only());
                    }
                    if out.cors.replace(Arc::new(cors(&at, c)?)).is_some() {
                        return Err(dup());
                    }
                }
                config::Filter::RequestMirror(m) => {
                    let percent = m.percent.unwrap_or(100);
                    if percent > 100 {
                        return Err(err(format!("{at}.percent"), "must be between 0 and 100"));
                    }
                    if !m.backend.filters.is_empty() {
                        return Err(err(
                            format!("{at}.backend.filters"),
                            "a mirror's backend has no filters",
                        ));
                    }
                    out.mirrors.push(Mirror {
                        backend: self.backend(&format!("{at}.backend"), &m.backend)?,
                        percent,
                    });
                }
            }
        }
        if out.redirect.is_some() && out.rewrite.is_some() {
            return Err(err(
                format!("{at}.filters"),
                "RequestRedirect and URLRewrite cannot be used together",
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
