//! The HTTPRoute `CORS` filter (Gateway API v1.5.1, GEP-1767) as a pure decision: which
//! headers a preflight answer carries and which an actual response gains. No I/O; the proxy
//! answers preflights itself with [`Cors::preflight`] and adds [`Cors::actual`] to responses.
//!
//! Decisions where the specification leaves a choice (see docs/tunnel-gateway.md):
//! - A matching origin is always echoed in `Access-Control-Allow-Origin`, never `*` (the
//!   field documentation allows either when the request is not credentialed), with
//!   `Vary: Origin` on every response of the rule so that a cache never serves one origin's
//!   answer to another.
//! - `*` in `allowMethods` / `allowHeaders` echoes the preflight's
//!   `Access-Control-Request-Method` / `-Headers` (allowed in every case; required when
//!   credentialed); the header is left out when the request did not send them.
//! - "Credentialed" is `allowCredentials: true`: a preflight never carries credentials, so the
//!   gateway cannot tell otherwise. `*` in `exposeHeaders` is then left out of
//!   `Access-Control-Expose-Headers` (only the named headers are listed).
//! - A preflight from an origin that does not match is answered 204 without CORS headers, and
//!   is not forwarded either.
//! - The origin `null` and any origin that is not `http(s)://host[:port]` matches nothing, not
//!   even `*`.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// `maxAge` when the filter does not set it: "the gateway sets the response header
/// `Access-Control-Max-Age: 5` by default".
pub const DEFAULT_MAX_AGE: u32 = 5;

/// One `allowOrigins` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `*`: every origin.
    Any,
    /// `scheme://host[:port]` where `host` is exact or `*` / `*.suffix`.
    Pattern {
        scheme: String,
        /// Lower-case; `None` for a host of `*` alone.
        host: Option<HostPart>,
        port: u16,
    },
}

/// The host of an origin pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPart {
    Exact(String),
    /// `*.suffix`: one or more labels to the left of `.suffix` (kept with its leading dot).
    Suffix(String),
}

/// Why an `allowOrigins` entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error(
        "must be `*` or `<scheme>://<host>[:<port>]` with scheme http or https and a port in 1..=65535"
    )]
    Form,
    #[error("`*` may only stand first in the host, alone or followed by `.`")]
    Wildcard,
}

/// A parsed serialized origin: scheme, lower-case host, port (the scheme's default when left
/// out).
fn split_origin(s: &str) -> Option<(String, &str, u16)> {
    let (scheme, rest) = s.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = match rest.rsplit_once(':') {
        // A bracketed IPv6 host: the colon belongs to the port only after `]`.
        Some((h, p)) if !p.contains(']') => {
            let port: u16 = p.parse().ok().filter(|&p| p != 0)?;
            (h, port)
        }
        _ => (rest, default),
    };
    let ipv6 = host.len() > 2
        && host.starts_with('[')
        && host.ends_with(']')
        && host[1..host.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    let name = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'*'));
    if !(ipv6 || name) {
        return None;
    }
    Some((scheme, host, port))
}

impl OriginPattern {
    pub fn parse(s: &str) -> Result<Self, OriginError> {
        if s == "*" {
            return Ok(Self::Any);
        }
        let (scheme, host, port) = split_origin(s).ok_or(OriginError::Form)?;
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            None
        } else if let Some(suffix) = host.strip_prefix('*') {
            if !suffix.starts_with('.') || suffix.len() < 2 || suffix.contains('*') {
                return Err(OriginError::Wildcard);
            }
            Some(HostPart::Suffix(suffix.to_owned()))
        } else if host.contains('*') {
            return Err(OriginError::Wildcard);
        } else {
            Some(HostPart::Exact(host))
        };
        Ok(Self::Pattern { scheme, host, port })
    }

    /// Whether the serialized origin `origin` (an `Origin` header value) matches.
    pub fn matches(&self, origin: &str) -> bool {
        let Some((scheme, host, port)) = split_origin(origin) else {
            return false;
        };
        if host.contains('*') {
            return false;
        }
        match self {
            Self::Any => true,
            Self::Pattern {
                scheme: s,
                host: h,
                port: p,
            } => {
                if *s != scheme || *p != port {
                    return false;
                }
                let host = host.to_ascii_lowercase();
                match h {
                    None => true,
                    Some(HostPart::Exact(e)) => *e == host,
                    Some(HostPart::Suffix(suffix)) => {
                        host.len() > suffix.len() && host.ends_with(suffix.as_str())
                    }
                }
            }
        }
    }
}

/// A list field of the filter: names, and whether `*` was among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed<T> {
    pub any: bool,
    pub named: Vec<T>,
}

impl<T> Default for Allowed<T> {
    fn default() -> Self {
        Self {
            any: false,
            named: Vec::new(),
        }
    }
}

/// A compiled CORS filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    pub origins: Vec<OriginPattern>,
    pub methods: Allowed<Method>,
    pub headers: Allowed<HeaderName>,
    pub expose: Allowed<HeaderName>,
    pub credentials: bool,
    pub max_age: u32,
}

static VARY_ORIGIN: HeaderValue = HeaderValue::from_static("Origin");
static VARY_PREFLIGHT: HeaderValue = HeaderValue::from_static(
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
);
static TRUE: HeaderValue = HeaderValue::from_static("true");

/// Joins names with `, ` into one header value.
fn join<'a>(names: impl Iterator<Item = &'a str>) -> Option<HeaderValue> {
    let joined = names.collect::<Vec<_>>().join(", ");
    (!joined.is_empty())
        .then(|| HeaderValue::from_str(&joined).ok())
        .flatten()
}

/// A preflight request: `OPTIONS` with `Origin` and `Access-Control-Request-Method`.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

impl Cors {
    /// The request's single `Origin`, when it is allowed.
    fn allowed_origin<'h>(&self, headers: &'h HeaderMap) -> Option<&'h HeaderValue> {
        let mut all = headers.get_all(header::ORIGIN).iter();
        let origin = all.next()?;
        if all.next().is_some() {
            return None;
        }
        let s = origin.to_str().ok()?;
        self.origins.iter().any(|p| p.matches(s)).then_some(origin)
    }

    /// The answer to a preflight (see [`is_preflight`]): always 204; the CORS headers only
    /// when the origin is allowed.
    pub fn preflight(&self, headers: &HeaderMap) -> (StatusCode, HeaderMap) {
        let mut out = HeaderMap::new();
        out.insert(header::VARY, VARY_PREFLIGHT.clone());
        let Some(origin) = self.allowed_origin(headers) else {
            return (StatusCode::NO_CONTENT, out);
        };
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        if self.credentials {
            out.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE.clone());
        }
        let methods = if self.methods.any {
            headers
                .get(header::ACCESS_CONTROL_REQUEST_METHOD)
                .filter(|v| Method::from_bytes(v.as_bytes()).is_ok())
                .cloned()
        } else {
            join(self.methods.named.iter().map(Method::as_str))
        };
        if let Some(v) = methods {
            out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        let allow_headers = if self.headers.any {
            let requested: Vec<&str> = headers
                .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|n| HeaderName::from_bytes(n.as_bytes()).is_ok())
                .collect();
            join(requested.into_iter())
        } else {
            join(self.headers.named.iter().map(HeaderName::as_str))
        };
        if let Some(v) = allow_headers {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
        if let Some(v) = self.expose_headers() {
            out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
        out.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from(self.max_age),
        );
        (StatusCode::NO_CONTENT, out)
    }

    /// `Access-Control-Expose-Headers`: `*` only without credentials, else the named headers.
    /// Sent on actual responses, where browsers read it, and on preflights too, as the Gateway
    /// API conformance suite expects (browsers ignore it there).
    fn expose_headers(&self) -> Option<HeaderValue> {
        if self.expose.any && !self.credentials {
            Some(HeaderValue::from_static("*"))
        } else {
            join(self.expose.named.iter().map(HeaderName::as_str))
        }
    }

    /// The headers a response to an actual (non-preflight) request gains: set, replacing the
    /// backend's, except `Vary`, which is appended. Only `Vary: Origin` when the origin is
    /// absent or not allowed.
    pub fn actual(&self, headers: &HeaderMap) -> ActualHeaders {
        let mut set = Vec::new();
        if let Some(origin) = self.allowed_origin(headers) {
            set.push((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()));
            if self.credentials {
                set.push((header::ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE.clone()));
            }
            if let Some(v) = self.expose_headers() {
                set.push((header::ACCESS_CONTROL_EXPOSE_HEADERS, v));
            }
        }
        ActualHeaders {
            set,
            vary: VARY_ORIGIN.clone(),
        }
    }
}

/// What [`Cors::actual`] adds to a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActualHeaders {
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub vary: HeaderValue,
}

impl ActualHeaders {
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (n, v) in &self.set {
            headers.insert(n.clone(), v.clone());
        }
        headers.append(header::VARY, self.vary.clone());
    }
}

#[cfg(test)]
mod tests;
