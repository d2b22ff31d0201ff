//! What one match, filter or value of the document compiles to: matchers, header and path
//! modifiers, redirects, rewrites, status codes and durations, each failing with its JSON path.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, StatusCode};

use super::{CompileError, err};
use crate::config::{self, PathMatchType, PathModifier, ValueMatchType};
use crate::cors::{Allowed, Cors, DEFAULT_MAX_AGE, OriginPattern};
use crate::filters::{HeaderModifier, PathRewrite, Redirect, UrlRewrite};
use crate::routing::{
    self, GrpcMatcher, HeaderMatcher, HostPattern, HttpMatcher, PathMatcher, QueryMatcher,
    ValueMatcher,
};

/// `first` then `second`.
pub(super) fn chain(
    first: Option<HeaderModifier>,
    second: Option<HeaderModifier>,
) -> Option<HeaderModifier> {
    match (first, second) {
        (Some(a), Some(b)) => Some(a.then(&b)),
        (a, b) => a.or(b),
    }
}

pub(super) fn http_match(at: &str, m: &config::HttpMatch) -> Result<HttpMatcher, CompileError> {
    let path = match &m.path {
        None => PathMatcher::prefix("/"),
        Some(p) => {
            let vat = format!("{at}.path.value");
            match p.kind {
                PathMatchType::Exact | PathMatchType::PathPrefix if !p.value.starts_with('/') => {
                    return Err(err(vat, "must start with `/`"));
                }
                PathMatchType::Exact => PathMatcher::Exact(p.value.clone()),
                PathMatchType::PathPrefix => PathMatcher::prefix(&p.value),
                PathMatchType::RegularExpression => {
                    PathMatcher::regex(&p.value).map_err(|e| err(vat, e))?
                }
            }
        }
    };
    let headers = headers(&format!("{at}.headers"), &m.headers)?;
    let query = m
        .query_params
        .iter()
        .enumerate()
        .filter(|(i, q)| first_of_its_name(&m.query_params, *i, |a| a == q.name.as_str()))
        .map(|(i, q)| {
            let at = format!("{at}.queryParams[{i}]");
            if q.name.is_empty() {
                return Err(err(format!("{at}.name"), "must not be empty"));
            }
            Ok(QueryMatcher {
                name: q.name.clone(),
                value: value_matcher(&format!("{at}.value"), q.kind, &q.value)?,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let method = m
        .method
        .as_ref()
        .map(|s| Method::from_bytes(s.as_bytes()).map_err(|e| err(format!("{at}.method"), e)))
        .transpose()?;
    Ok(HttpMatcher {
        path,
        headers,
        query,
        method,
    })
}

pub(super) fn grpc_match(at: &str, m: &config::GrpcMatch) -> Result<GrpcMatcher, CompileError> {
    let (service, method) = match &m.method {
        None => (None, None),
        Some(mm) => {
            if mm.service.is_none() && mm.method.is_none() {
                return Err(err(
                    format!("{at}.method"),
                    "one of service and method is required",
                ));
            }
            let one =
                |field: &str, v: &Option<String>| -> Result<Option<ValueMatcher>, CompileError> {
                    let Some(v) = v else { return Ok(None) };
                    let fat = format!("{at}.method.{field}");
                    if mm.kind == ValueMatchType::Exact && (v.is_empty() || v.contains('/')) {
                        return Err(err(fat, "must be non-empty and contain no `/`"));
                    }
                    value_matcher(&fat, mm.kind, v).map(Some)
                };
            (one("service", &mm.service)?, one("method", &mm.method)?)
        }
    };
    Ok(GrpcMatcher {
        service,
        method,
        headers: headers(&format!("{at}.headers"), &m.headers)?,
    })
}

/// Whether entry `i` is the first of `entries` whose name is equivalent (`same`) to its own.
/// The specification, for header and query parameter matches alike: "If multiple entries
/// specify equivalent ... names, only the first entry with an equivalent name MUST be
/// considered for a match. Subsequent entries with an equivalent ... name MUST be ignored."
/// Ignored entries are not validated either: they are not part of the match.
pub(super) fn first_of_its_name(
    entries: &[config::ValueMatch],
    i: usize,
    same: impl Fn(&str) -> bool,
) -> bool {
    !entries[..i].iter().any(|e| same(&e.name))
}

/// Header matches; header names are equivalent when equal ignoring ASCII case.
pub(super) fn headers(
    at: &str,
    hs: &[config::ValueMatch],
) -> Result<Vec<HeaderMatcher>, CompileError> {
    hs.iter()
        .enumerate()
        .filter(|(i, h)| first_of_its_name(hs, *i, |n| n.eq_ignore_ascii_case(&h.name)))
        .map(|(i, h)| {
            let at = format!("{at}[{i}]");
            Ok(HeaderMatcher {
                name: header_name(&format!("{at}.name"), &h.name)?,
                value: value_matcher(&format!("{at}.value"), h.kind, &h.value)?,
            })
        })
        .collect()
}

pub(super) fn value_matcher(
    at: &str,
    kind: ValueMatchType,
    v: &str,
) -> Result<ValueMatcher, CompileError> {
    Ok(match kind {
        ValueMatchType::Exact => ValueMatcher::Exact(v.to_owned()),
        ValueMatchType::RegularExpression => {
            ValueMatcher::Regex(routing::anchored(v).map_err(|e| err(at, e))?)
        }
    })
}

pub(super) fn header_name(at: &str, name: &str) -> Result<HeaderName, CompileError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|e| err(at, e))
}

pub(super) fn header_modifier(
    at: &str,
    m: &config::HeaderModifier,
) -> Result<HeaderModifier, CompileError> {
    let pairs = |field: &str, hs: &[config::Header]| {
        hs.iter()
            .enumerate()
            .map(|(i, h)| {
                let at = format!("{at}.{field}[{i}]");
                Ok((
                    header_name(&format!("{at}.name"), &h.name)?,
                    HeaderValue::from_str(&h.value).map_err(|e| err(format!("{at}.value"), e))?,
                ))
            })
            .collect::<Result<Vec<_>, CompileError>>()
    };
    Ok(HeaderModifier {
        set: pairs("set", &m.set)?,
        add: pairs("add", &m.add)?,
        remove: m
            .remove
            .iter()
            .enumerate()
            .map(|(i, n)| header_name(&format!("{at}.remove[{i}]"), n))
            .collect::<Result<_, _>>()?,
    })
}

pub(super) fn path_modifier(at: &str, p: &PathModifier) -> Result<PathRewrite, CompileError> {
    let at = format!("{at}.path.value");
    match p {
        PathModifier::ReplaceFullPath(v) => {
            if !v.starts_with('/') {
                return Err(err(at, "must start with `/`"));
            }
            Ok(PathRewrite::Full(v.clone()))
        }
        PathModifier::ReplacePrefixMatch(v) => {
            if !v.is_empty() && !v.starts_with('/') {
                return Err(err(at, "must be empty or start with `/`"));
            }
            Ok(PathRewrite::Prefix(v.clone()))
        }
    }
    .and_then(|r| {
        let v = match &r {
            PathRewrite::Full(v) | PathRewrite::Prefix(v) => v,
        };
        // The value ends up in a request target or a Location header.
        if v.bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'?' || b == b'#')
        {
            return Err(err(
                at.clone(),
                "must be a path without query, fragment, spaces or control characters",
            ));
        }
        Ok(r)
    })
}

pub(super) fn exact_hostname(at: &str, h: &str) -> Result<String, CompileError> {
    match HostPattern::parse(h).map_err(|e| err(at, e))? {
        HostPattern::Exact(h) => Ok(h),
        _ => Err(err(at, "must be an exact hostname")),
    }
}

pub(super) fn redirect(at: &str, r: &config::RequestRedirect) -> Result<Redirect, CompileError> {
    let code = r.status_code.unwrap_or(302);
    if !Redirect::valid_status(code) {
        return Err(err(
            format!("{at}.statusCode"),
            "must be 301, 302, 303, 307 or 308",
        ));
    }
    if let Some(s) = &r.scheme
        && s != "http"
        && s != "https"
    {
        return Err(err(format!("{at}.scheme"), "must be `http` or `https`"));
    }
    if r.port == Some(0) {
        return Err(err(format!("{at}.port"), "must be between 1 and 65535"));
    }
    if r.listener_port == Some(0) {
        return Err(err(
            format!("{at}.listenerPort"),
            "must be between 1 and 65535",
        ));
    }
    Ok(Redirect {
        scheme: r.scheme.clone(),
        hostname: r
            .hostname
            .as_ref()
            .map(|h| exact_hostname(&format!("{at}.hostname"), h))
            .transpose()?,
        port: r.port,
        listener_port: r.listener_port,
        path: r.path.as_ref().map(|p| path_modifier(at, p)).transpose()?,
        status: StatusCode::from_u16(code).map_err(|e| err(format!("{at}.statusCode"), e))?,
    })
}

pub(super) fn url_rewrite(at: &str, r: &config::UrlRewrite) -> Result<UrlRewrite, CompileError> {
    Ok(UrlRewrite {
        hostname: r
            .hostname
            .as_ref()
            .map(|h| {
                let h = exact_hostname(&format!("{at}.hostname"), h)?;
                HeaderValue::from_str(&h).map_err(|e| err(format!("{at}.hostname"), e))
            })
            .transpose()?,
        path: r.path.as_ref().map(|p| path_modifier(at, p)).transpose()?,
    })
}

pub(super) fn status(at: &str, code: u16) -> Result<StatusCode, CompileError> {
    match StatusCode::from_u16(code) {
        Ok(s) if (400..=599).contains(&code) => Ok(s),
        _ => Err(err(at, "must be an HTTP error status between 400 and 599")),
    }
}

pub(super) fn timeout(at: &str, v: &Option<String>) -> Result<Option<Duration>, CompileError> {
    match v {
        None => Ok(None),
        Some(s) => match parse_duration(s) {
            Some(d) if d.is_zero() => Ok(None),
            Some(d) => Ok(Some(d)),
            None => Err(err(
                at,
                "must be a Gateway API duration such as `10s`, `1m30s`, `500ms`",
            )),
        },
    }
}

/// Gateway API duration: `^([0-9]{1,5}(h|m|s|ms)){1,4}$`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut total = Duration::ZERO;
    let mut groups = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=5).contains(&digits) {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else {
            return None;
        };
        rest = &rest[len..];
        total += unit * u32::try_from(n).ok()?;
        groups += 1;
        if groups > 4 {
            return None;
        }
    }
    (groups > 0).then_some(total)
}

/// The CORS filter: origins parsed, methods and header names checked, `*` set apart.
pub(super) fn cors(at: &str, c: &config::Cors) -> Result<Cors, CompileError> {
    fn list<T>(
        at: &str,
        field: &str,
        values: &[String],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Allowed<T>, CompileError> {
        let mut out = Allowed::default();
        for (i, v) in values.iter().enumerate() {
            if v == "*" {
                out.any = true;
            } else {
                out.named
                    .push(parse(v).map_err(|e| err(format!("{at}.{field}[{i}]"), e))?);
            }
        }
        Ok(out)
    }
    let origins = c
        .allow_origins
        .iter()
        .enumerate()
        .map(|(i, o)| {
            OriginPattern::parse(o).map_err(|e| err(format!("{at}.allowOrigins[{i}]"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let name = |v: &str| HeaderName::from_bytes(v.as_bytes()).map_err(|e| e.to_string());
    let max_age = match c.max_age {
        None => DEFAULT_MAX_AGE,
        Some(s) => u32::try_from(s)
            .map_err(|_| err(format!("{at}.maxAge"), "must be between 0 and 4294967295"))?,
    };
    Ok(Cors {
        origins,
        methods: list(at, "allowMethods", &c.allow_methods, |v| {
            Method::from_bytes(v.as_bytes()).map_err(|e| e.to_string())
        })?,
        headers: list(at, "allowHeaders", &c.allow_headers, name)?,
        expose: list(at, "exposeHeaders", &c.expose_headers, name)?,
        credentials: c.allow_credentials,
        max_age,
    })
}
