//! Gateway API request matching: which rule serves a request. Pure: no I/O, no async.
//!
//! The table is generic over the rule payload so this module knows nothing about backends or
//! filters. Candidates are grouped by the route hostname they came from (one bucket per
//! hostname pattern) and each bucket is sorted once, at build time, by the precedence the
//! Gateway API prescribes; a lookup walks the buckets from the most specific hostname to the
//! least and returns the first candidate that matches.
//!
//! HTTPRoute precedence (after hostname): Exact path, then RegularExpression path
//! (implementation-specific: we rank it between Exact and PathPrefix, longer patterns first),
//! then the longest PathPrefix; a method match; the most header matches; the most query
//! parameter matches; then route order in the document (the controller sorts routes oldest
//! first, then by `{namespace}/{name}`); then rule order, then match order.
//!
//! GRPCRoute precedence (after hostname): the most characters of an exact service, then of an
//! exact method (a regular expression ranks below any exact value), then the most header
//! matches, then route, rule and match order. A gRPC request (`content-type: application/grpc*`)
//! is offered to the GRPCRoute candidates of a bucket before its HTTPRoute candidates; other
//! requests never match a GRPCRoute.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use http::{HeaderMap, HeaderName, Method};
use regex::Regex;

// === hostnames ===

/// FNV-1a: host-name keyed maps are looked up once or twice per request, and SipHash costs
/// more than the rest of the lookup. Flooding is not a concern: the keys in the map come
/// from the config, a request only looks one up.
#[derive(Default)]
pub struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A map keyed by host names or hostname labels, see [`Fnv1a`].
pub type HostMap<V> = HashMap<String, V, BuildHasherDefault<Fnv1a>>;

/// A route or listener hostname.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Lower-case exact name.
    Exact(String),
    /// `*.example.com`, stored as the suffix `.example.com`: matches one or more labels in
    /// front of it, never the apex `example.com`.
    Wildcard(String),
    /// No hostname: every host.
    Any,
}

/// Why a hostname was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    #[error("hostname is empty")]
    Empty,
    #[error("a wildcard is only allowed as the whole first label (`*.example.com`)")]
    MisplacedWildcard,
    #[error("hostname has an empty label or an invalid character")]
    Invalid,
    #[error("hostnames must not be IP addresses")]
    IpAddress,
}

impl HostPattern {
    /// Parses a Gateway API hostname: a DNS name, optionally with a leading `*.` label.
    pub fn parse(s: &str) -> Result<Self, HostnameError> {
        if s.is_empty() {
            return Err(HostnameError::Empty);
        }
        let lower = s.to_ascii_lowercase();
        let (wild, rest) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        if rest.contains('*') {
            return Err(HostnameError::MisplacedWildcard);
        }
        if rest.parse::<std::net::IpAddr>().is_ok() {
            return Err(HostnameError::IpAddress);
        }
        let valid_label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if rest.len() > 253 || !rest.split('.').all(valid_label) {
            return Err(HostnameError::Invalid);
        }
        Ok(if wild {
            Self::Wildcard(format!(".{rest}"))
        } else {
            Self::Exact(rest.to_owned())
        })
    }

    /// `host` must already be normalised with [`normalize_host`].
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(h) => h == host,
            Self::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
            Self::Any => true,
        }
    }

    /// Whether every host `other` matches, this one matches too.
    pub fn contains(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (Self::Any, _) => true,
            (_, Self::Any) => false,
            (Self::Exact(a), Self::Exact(b)) => a == b,
            (Self::Exact(_), Self::Wildcard(_)) => false,
            (Self::Wildcard(_), Self::Exact(h)) => self.matches(h),
            (Self::Wildcard(a), Self::Wildcard(b)) => b.ends_with(a.as_str()),
        }
    }

    /// The pattern as written in the Gateway API (`*.example.com`), or `*` for any host.
    pub fn label(&self) -> String {
        match self {
            Self::Exact(h) => h.clone(),
            Self::Wildcard(suffix) => format!("*{suffix}"),
            Self::Any => "*".to_owned(),
        }
    }
}

/// The routed host from a `Host` header value or an `:authority`: port removed, lower-cased,
/// one trailing dot removed. `None` when it is empty or not a plausible host.
pub fn normalize_host(authority: &str) -> Option<std::borrow::Cow<'_, str>> {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        // IPv6 literal: keep the brackets off, drop the port.
        let end = rest.find(']')?;
        &rest[..end]
    } else {
        match authority.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            Some(_) => return None,
            None => authority,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    let mut upper = false;
    for b in host.bytes() {
        match HOST_BYTES[usize::from(b)] {
            HOST_OK => {}
            HOST_UPPER => upper = true,
            _ => return None,
        }
    }
    Some(if upper {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    })
}

const HOST_BAD: u8 = 0;
const HOST_OK: u8 = 1;
const HOST_UPPER: u8 = 2;
/// Class of each byte in a routed host: letters, digits, `-`, `.`, `_`, `:` are allowed.
const HOST_BYTES: [u8; 256] = {
    let mut t = [HOST_BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_uppercase() {
            HOST_UPPER
        } else if c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(c, b'-' | b'.' | b'_' | b':')
        {
            HOST_OK
        } else {
            HOST_BAD
        };
        b += 1;
    }
    t
};

// === matchers ===

/// A compiled HTTP path match.
#[derive(Debug, Clone)]
pub enum PathMatcher {
    Exact(String),
    /// Segment-wise prefix, stored without its trailing `/` (`/` becomes the empty string).
    Prefix(String),
    /// Anchored: must match the whole path.
    Regex(Regex),
}

impl PathMatcher {
    /// A PathPrefix; a trailing `/` in the value is ignored as the specification says.
    pub fn prefix(value: &str) -> Self {
        Self::Prefix(value.trim_end_matches('/').to_owned())
    }

    /// Compiles a path regular expression anchored at both ends.
    pub fn regex(pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self::Regex(anchored(pattern)?))
    }

    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => p == path,
            Self::Prefix(p) => {
                path.starts_with(p.as_str())
                    && (path.len() == p.len() || path.as_bytes()[p.len()] == b'/')
            }
            Self::Regex(re) => re.is_match(path),
        }
    }

    fn rank(&self) -> (u8, usize) {
        match self {
            Self::Exact(p) => (3, p.len()),
            Self::Regex(re) => (2, re.as_str().len()),
            Self::Prefix(p) => (1, p.len()),
        }
    }
}

/// Compiles `^(?:pattern)$`.
pub fn anchored(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

/// Exact or regular-expression value match (headers, query parameters, gRPC names).
#[derive(Debug, Clone)]
pub enum ValueMatcher {
    Exact(String),
    Regex(Regex),
}

impl ValueMatcher {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(v) => v == value,
            Self::Regex(re) => re.is_match(value),
        }
    }

    fn rank(&self) -> (u8, usize) {
        match self {
            Self::Exact(v) => (2, v.len()),
            Self::Regex(_) => (1, 0),
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeaderMatcher {
    pub name: HeaderName,
    pub value: ValueMatcher,
}

impl HeaderMatcher {
    /// A request header matches when any of its values matches (repeated headers are not
    /// joined), so a client cannot dodge a match by repeating a header.
    fn matches(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(&self.name)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| self.value.matches(v)))
    }
}

/// Query parameter names are case-sensitive; the first occurrence of a repeated parameter is
/// the one matched, after percent-decoding.
#[derive(Debug, Clone)]
pub struct QueryMatcher {
    pub name: String,
    pub value: ValueMatcher,
}

/// One HTTPRouteMatch: every present condition must hold.
#[derive(Debug, Clone)]
pub struct HttpMatcher {
    pub path: PathMatcher,
    pub headers: Vec<HeaderMatcher>,
    pub query: Vec<QueryMatcher>,
    pub method: Option<Method>,
}

impl Default for HttpMatcher {
    fn default() -> Self {
        Self {
            path: PathMatcher::prefix("/"),
            headers: Vec::new(),
            query: Vec::new(),
            method: None,
        }
    }
}

impl HttpMatcher {
    fn matches(&self, req: &RequestView<'_>) -> bool {
        self.method.as_ref().is_none_or(|m| m == req.method)
            && self.path.matches(req.path)
            && self.headers.iter().all(|h| h.matches(req.headers))
            && self.query.iter().all(|q| {
                req.query.is_some_and(|query| {
                    form_urlencoded::parse(query.as_bytes())
                        .find(|(k, _)| k == q.name.as_str())
                        .is_some_and(|(_, v)| q.value.matches(&v))
                })
            })
    }

    /// The PathPrefix value a match through this matcher reports.
    fn matched_prefix(&self) -> Option<&str> {
        match &self.path {
            PathMatcher::Prefix(p) => Some(p.as_str()),
            _ => None,
        }
    }

    fn precedence(&self) -> Precedence {
        let (class, len) = self.path.rank();
        Precedence::Http {
            path_class: class,
            path_len: len,
            method: self.method.is_some(),
            headers: self.headers.len(),
            query: self.query.len(),
        }
    }
}

/// One GRPCRouteMatch.
#[derive(Debug, Clone, Default)]
pub struct GrpcMatcher {
    pub service: Option<ValueMatcher>,
    pub method: Option<ValueMatcher>,
    pub headers: Vec<HeaderMatcher>,
}

impl GrpcMatcher {
    fn matches(&self, req: &RequestView<'_>) -> bool {
        let Some((service, method)) = grpc_path(req.path) else {
            return false;
        };
        self.service.as_ref().is_none_or(|s| s.matches(service))
            && self.method.as_ref().is_none_or(|m| m.matches(method))
            && self.headers.iter().all(|h| h.matches(req.headers))
    }

    fn precedence(&self) -> Precedence {
        let rank = |v: &Option<ValueMatcher>| v.as_ref().map_or((0, 0), ValueMatcher::rank);
        Precedence::Grpc {
            service: rank(&self.service),
            method: rank(&self.method),
            headers: self.headers.len(),
        }
    }
}

/// Splits `/package.Service/Method`.
fn grpc_path(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    (!service.is_empty() && !method.is_empty() && !method.contains('/'))
        .then_some((service, method))
}

/// Match specificity within one hostname bucket; greater wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Precedence {
    Grpc {
        service: (u8, usize),
        method: (u8, usize),
        headers: usize,
    },
    Http {
        path_class: u8,
        path_len: usize,
        method: bool,
        headers: usize,
        query: usize,
    },
}

// === the table ===

/// What the caller knows about a request. `host` must come from `Host`/`:authority` only,
/// normalised with [`normalize_host`].
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    pub host: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub grpc: bool,
}

/// The matches of one rule.
#[derive(Debug, Clone)]
pub enum Matchers {
    /// Empty = the default match (PathPrefix `/`).
    Http(Vec<HttpMatcher>),
    /// Empty = every gRPC request.
    Grpc(Vec<GrpcMatcher>),
}

#[derive(Debug, Clone)]
pub struct RuleSpec<T> {
    pub matchers: Matchers,
    pub payload: T,
}

#[derive(Debug, Clone)]
pub struct RouteSpec<T> {
    /// Empty = any host.
    pub hostnames: Vec<HostPattern>,
    /// Per entry of `hostnames` (one entry for any host when it is empty; missing = none): hosts
    /// the route does not serve through it (listener isolation).
    pub excluded: Vec<Vec<HostPattern>>,
    pub rules: Vec<RuleSpec<T>>,
}

#[derive(Debug)]
struct Candidate {
    precedence: Precedence,
    /// The tie-break among equal precedence, and where the rule and its matcher are found.
    order: Position,
    /// The route hostname this candidate came through (index into the route's `excluded`).
    host: usize,
}

#[derive(Debug, Default)]
struct Bucket {
    http: Vec<Candidate>,
    grpc: Vec<Candidate>,
}

impl Bucket {
    fn sort(&mut self) {
        let key = |c: &Candidate| (Reverse(c.precedence), c.order);
        self.http.sort_by_key(key);
        self.grpc.sort_by_key(key);
    }
}

/// The match a rule without matches has: PathPrefix `/`.
static DEFAULT_HTTP: HttpMatcher = HttpMatcher {
    path: PathMatcher::Prefix(String::new()),
    headers: Vec::new(),
    query: Vec::new(),
    method: None,
};

/// The match a GRPCRoute rule without matches has: every gRPC request.
static DEFAULT_GRPC: GrpcMatcher = GrpcMatcher {
    service: None,
    method: None,
    headers: Vec::new(),
};

impl Matchers {
    /// How many candidates the rule makes (a rule without matches has the default one).
    fn count(&self) -> usize {
        match self {
            Self::Http(ms) => ms.len().max(1),
            Self::Grpc(ms) => ms.len().max(1),
        }
    }

    fn http(&self, i: usize) -> Option<&HttpMatcher> {
        match self {
            Self::Http(ms) if ms.is_empty() => Some(&DEFAULT_HTTP),
            Self::Http(ms) => ms.get(i),
            Self::Grpc(_) => None,
        }
    }

    fn grpc(&self, i: usize) -> Option<&GrpcMatcher> {
        match self {
            Self::Grpc(ms) if ms.is_empty() => Some(&DEFAULT_GRPC),
            Self::Grpc(ms) => ms.get(i),
            Self::Http(_) => None,
        }
    }

    fn precedence(&self, i: usize) -> Option<Precedence> {
        match self {
            Self::Http(_) => self.http(i).map(HttpMatcher::precedence),
            Self::Grpc(_) => self.grpc(i).map(GrpcMatcher::precedence),
        }
    }
}

/// Where a rule and its match lie in a table: (route, rule, match) indices. What a caller keeps
/// to find a lookup's result again in the same table without matching ([`Table::at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position(usize, usize, usize);

/// The result of a lookup.
#[derive(Debug)]
pub struct RouteMatch<'t, T> {
    pub rule: &'t T,
    /// Where `rule` and the match that won lie in the table.
    pub position: Position,
    /// The route hostname pattern that matched (`*` for a route without hostnames); bounded
    /// cardinality, used as the metrics label.
    pub hostname: &'t str,
    /// The PathPrefix value (without trailing `/`) when the winning match was a PathPrefix;
    /// URLRewrite and RequestRedirect `ReplacePrefixMatch` replace it.
    pub matched_prefix: Option<&'t str>,
}

/// An immutable routing table.
///
/// The routes are kept as given, behind `Arc`: a table is built from routes another table
/// holds too (a delta's table shares every route it did not change with the one before), and
/// building it allocates only its buckets, never a copy of a route.
#[derive(Debug)]
pub struct Table<T> {
    listeners: Arc<[HostPattern]>,
    exact: HostMap<(String, Bucket)>,
    /// Sorted by suffix length, longest first.
    wildcards: Vec<(HostPattern, String, Bucket)>,
    any: Bucket,
    routes: Vec<Arc<RouteSpec<T>>>,
}

impl<T> Table<T> {
    /// `listeners` empty = no listener gate. Routes are given in precedence order.
    pub fn new<R: Into<Arc<RouteSpec<T>>>>(
        listeners: impl Into<Arc<[HostPattern]>>,
        routes: impl IntoIterator<Item = R>,
    ) -> Self {
        let mut table = Self {
            listeners: listeners.into(),
            exact: HostMap::default(),
            wildcards: Vec::new(),
            any: Bucket::default(),
            routes: routes.into_iter().map(Into::into).collect(),
        };
        for (route_idx, route) in table.routes.iter().enumerate() {
            let hostnames = if route.hostnames.is_empty() {
                std::slice::from_ref(&HostPattern::Any)
            } else {
                &route.hostnames[..]
            };
            for (rule_idx, rule) in route.rules.iter().enumerate() {
                let grpc = matches!(rule.matchers, Matchers::Grpc(_));
                for (host_idx, host) in hostnames.iter().enumerate() {
                    let bucket =
                        bucket_mut(&mut table.exact, &mut table.wildcards, &mut table.any, host);
                    let list = if grpc {
                        &mut bucket.grpc
                    } else {
                        &mut bucket.http
                    };
                    for match_idx in 0..rule.matchers.count() {
                        if let Some(precedence) = rule.matchers.precedence(match_idx) {
                            list.push(Candidate {
                                precedence,
                                order: Position(route_idx, rule_idx, match_idx),
                                host: host_idx,
                            });
                        }
                    }
                }
            }
        }
        table
            .wildcards
            .sort_by_key(|(_, label, _)| Reverse(label.len()));
        for (_, bucket) in table.exact.values_mut() {
            bucket.sort();
        }
        for (_, _, bucket) in &mut table.wildcards {
            bucket.sort();
        }
        table.any.sort();
        table
    }

    /// Every rule payload, in document order.
    pub fn rules(&self) -> impl Iterator<Item = &T> {
        self.routes
            .iter()
            .flat_map(|route| route.rules.iter().map(|rule| &rule.payload))
    }

    /// The best rule for the request, or `None` (404 / gRPC Unimplemented).
    pub fn lookup(&self, req: &RequestView<'_>) -> Option<RouteMatch<'_, T>> {
        if !self.listeners.is_empty() && !self.listeners.iter().any(|l| l.matches(req.host)) {
            return None;
        }
        if let Some((label, bucket)) = self.exact.get(req.host)
            && let Some(m) = self.lookup_bucket(bucket, label, req)
        {
            return Some(m);
        }
        for (pattern, label, bucket) in &self.wildcards {
            if pattern.matches(req.host)
                && let Some(m) = self.lookup_bucket(bucket, label, req)
            {
                return Some(m);
            }
        }
        self.lookup_bucket(&self.any, "*", req)
    }

    /// The rule at `p` (a lookup's [`RouteMatch::position`] in this table) and its
    /// [`RouteMatch::matched_prefix`], as the lookup returned them.
    pub fn at(&self, p: Position) -> (&T, Option<&str>) {
        let rule = &self.routes[p.0].rules[p.1];
        let prefix = rule
            .matchers
            .http(p.2)
            .and_then(HttpMatcher::matched_prefix);
        (&rule.payload, prefix)
    }

    /// The rule of a candidate, when its route serves `host` (no listener isolation excludes
    /// it).
    fn serving(&self, c: &Candidate, host: &str) -> Option<&RuleSpec<T>> {
        let route = &self.routes[c.order.0];
        let excluded = route
            .excluded
            .get(c.host)
            .is_some_and(|list| list.iter().any(|p| p.matches(host)));
        (!excluded).then(|| &route.rules[c.order.1])
    }

    fn lookup_bucket<'t>(
        &'t self,
        bucket: &'t Bucket,
        hostname: &'t str,
        req: &RequestView<'_>,
    ) -> Option<RouteMatch<'t, T>> {
        if req.grpc
            && let Some((rule, position)) = bucket.grpc.iter().find_map(|c| {
                self.serving(c, req.host)
                    .filter(|rule| {
                        rule.matchers
                            .grpc(c.order.2)
                            .is_some_and(|m| m.matches(req))
                    })
                    .map(|rule| (rule, c.order))
            })
        {
            return Some(RouteMatch {
                rule: &rule.payload,
                position,
                hostname,
                matched_prefix: None,
            });
        }
        bucket.http.iter().find_map(|c| {
            let rule = self.serving(c, req.host)?;
            let m = rule.matchers.http(c.order.2)?;
            m.matches(req).then_some(RouteMatch {
                rule: &rule.payload,
                position: c.order,
                hostname,
                matched_prefix: m.matched_prefix(),
            })
        })
    }
}

/// The bucket of a route hostname, made on first use. The exact map is probed before a key is
/// made: most hostnames have a bucket already.
fn bucket_mut<'b>(
    exact: &'b mut HostMap<(String, Bucket)>,
    wildcards: &'b mut Vec<(HostPattern, String, Bucket)>,
    any: &'b mut Bucket,
    host: &HostPattern,
) -> &'b mut Bucket {
    match host {
        HostPattern::Exact(h) => {
            if !exact.contains_key(h.as_str()) {
                exact.insert(h.clone(), (h.clone(), Bucket::default()));
            }
            &mut exact
                .get_mut(h.as_str())
                .expect("the bucket was made above")
                .1
        }
        HostPattern::Wildcard(_) => {
            let pos = match wildcards.iter().position(|(p, _, _)| p == host) {
                Some(pos) => pos,
                None => {
                    wildcards.push((host.clone(), host.label(), Bucket::default()));
                    wildcards.len() - 1
                }
            };
            &mut wildcards[pos].2
        }
        HostPattern::Any => any,
    }
}

// === weighted choice ===

/// Weighted choice among backends, from a caller-supplied random number so it stays pure and
/// testable with a deterministic sequence.
#[derive(Debug, Clone)]
pub struct WeightedChoice {
    cumulative: Vec<u64>,
}

impl WeightedChoice {
    /// `None` when every weight is zero (no backend takes traffic).
    pub fn new(weights: impl IntoIterator<Item = u32>) -> Option<Self> {
        let mut total = 0u64;
        let cumulative: Vec<u64> = weights
            .into_iter()
            .map(|w| {
                total += u64::from(w);
                total
            })
            .collect();
        (total > 0).then_some(Self { cumulative })
    }

    pub fn total(&self) -> u64 {
        *self.cumulative.last().unwrap_or(&0)
    }

    /// `roll` is uniform in `0..total()`; returns the chosen index.
    pub fn pick(&self, roll: u64) -> usize {
        self.cumulative.partition_point(|&c| c <= roll)
    }
}

#[cfg(test)]
mod tests;
