//! Error classification for Cloudflare API calls.
//!
//! Every failed call becomes one [`Error`] variant, and [`Error::kind`] gives the low-cardinality
//! label the controller uses for `cftunnel_cloudflare_api_errors_total{error_type}`.
//!
//! Classification rules (HTTP status first, then the envelope's error codes):
//! - 401 and 403, or a 400 whose `errors[].code` is one of [`AUTH_ERROR_CODES`], are `auth`.
//!   The codes come from responses quoted in public issue threads: 6003/6111 "Invalid request
//!   headers / Invalid format for Authorization header", 9106/9109 (token lacks user scope /
//!   invalid access token) and 10000 "Authentication error". ("Invalid API Token", code 1000,
//!   arrives with status 401; 1000 alone is too generic to mean auth.)
//! - 429 is `rate_limited`, carrying `Retry-After` (seconds, per
//!   <https://developers.cloudflare.com/fundamentals/api/reference/limits/>).
//! - 5xx is `server`; 404 is `not_found`; any other 4xx is `invalid` (validation errors such as
//!   code 1056 "Bad Configuration: Validation failed: ..." keep their code and message).
//! - Connection, TLS and timeout failures are `network`; a body that is not the documented
//!   envelope is `decode`.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// One entry of the envelope's `errors` or `messages` array.
///
/// Source: the response schema on every endpoint page of
/// <https://developers.cloudflare.com/api/> (`code` is a number, minimum 1000; `message` a string).
/// Some errors carry an `error_chain` of nested entries (e.g. code 6003 wrapping 6111).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct ApiMessage {
    /// Numeric error code; 0 when the API omitted it.
    #[serde(default)]
    pub code: i64,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// Nested causes, when the API gives them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_chain: Vec<ApiMessage>,
}

impl fmt::Display for ApiMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message.trim_end(), self.code)?;
        for cause in &self.error_chain {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

/// Error codes that mean "the credentials are wrong or not allowed here", whatever the status.
pub const AUTH_ERROR_CODES: &[i64] = &[6003, 6111, 9106, 9109, 10000];

/// Low-cardinality error class, usable as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Credentials missing, invalid, or not allowed on the resource.
    Auth,
    /// HTTP 429.
    RateLimited,
    /// HTTP 5xx.
    Server,
    /// Connect, TLS or timeout failure; no HTTP response.
    Network,
    /// HTTP 404.
    NotFound,
    /// Any other 4xx, or `success: false` on a 2xx.
    Invalid,
    /// The response was not the documented envelope.
    Decode,
}

impl ErrorKind {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Server => "server",
            ErrorKind::Network => "network",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Decode => "decode",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Renders an `errors` array for `Display`.
struct Messages<'a>(&'a [ApiMessage]);

impl fmt::Display for Messages<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no error details");
        }
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

/// A failed Cloudflare API call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Credentials missing, invalid, or not allowed on this resource.
    #[error(
        "Cloudflare API refused the credentials (HTTP {status}): {}",
        Messages(errors)
    )]
    Auth {
        /// HTTP status.
        status: u16,
        /// The envelope's errors.
        errors: Vec<ApiMessage>,
    },
    /// HTTP 429; `retry_after` is the `Retry-After` header when present.
    #[error(
        "Cloudflare API rate limit reached (retry after {retry_after:?}): {}",
        Messages(errors)
    )]
    RateLimited {
        /// Parsed `Retry-After` (seconds).
        retry_after: Option<Duration>,
        /// The envelope's errors.
        errors: Vec<ApiMessage>,
    },
    /// HTTP 5xx.
    #[error("Cloudflare API server error (HTTP {status}): {}", Messages(errors))]
    Server {
        /// HTTP status.
        status: u16,
        /// The envelope's errors (often empty: 5xx bodies may be HTML).
        errors: Vec<ApiMessage>,
    },
    /// No HTTP response: connect, TLS, or timeout failure.
    #[error("Cloudflare API unreachable{}: {source}", if *.timeout { " (timeout)" } else { "" })]
    Network {
        /// True when the request timed out.
        timeout: bool,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// HTTP 404.
    #[error("Cloudflare API resource not found: {}", Messages(errors))]
    NotFound {
        /// The envelope's errors.
        errors: Vec<ApiMessage>,
    },
    /// Any other 4xx (validation errors, bad identifiers), or `success: false` on a 2xx.
    #[error(
        "Cloudflare API rejected the request (HTTP {status}): {}",
        Messages(errors)
    )]
    Invalid {
        /// HTTP status.
        status: u16,
        /// The envelope's errors, e.g. code 1056 with the validation message.
        errors: Vec<ApiMessage>,
    },
    /// The body was not the documented envelope or its `result` had an unexpected shape.
    #[error("Cloudflare API response could not be decoded (HTTP {status}): {detail}")]
    Decode {
        /// HTTP status.
        status: u16,
        /// What was wrong.
        detail: String,
    },
}

impl Error {
    /// The error class, for metrics and retry decisions.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Auth { .. } => ErrorKind::Auth,
            Error::RateLimited { .. } => ErrorKind::RateLimited,
            Error::Server { .. } => ErrorKind::Server,
            Error::Network { .. } => ErrorKind::Network,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Invalid { .. } => ErrorKind::Invalid,
            Error::Decode { .. } => ErrorKind::Decode,
        }
    }

    /// The API's error entries (empty for network and decode errors).
    pub fn api_errors(&self) -> &[ApiMessage] {
        match self {
            Error::Auth { errors, .. }
            | Error::RateLimited { errors, .. }
            | Error::Server { errors, .. }
            | Error::NotFound { errors }
            | Error::Invalid { errors, .. } => errors,
            Error::Network { .. } | Error::Decode { .. } => &[],
        }
    }

    /// True when any API error entry (or nested cause) has this code.
    pub fn has_code(&self, code: i64) -> bool {
        fn walk(ms: &[ApiMessage], code: i64) -> bool {
            ms.iter()
                .any(|m| m.code == code || walk(&m.error_chain, code))
        }
        walk(self.api_errors(), code)
    }

    /// Whether repeating the same request may succeed (rate limit, server or network error).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Network
        )
    }

    /// Builds the error for a non-success HTTP response.
    pub(crate) fn from_status(
        status: u16,
        retry_after: Option<Duration>,
        errors: Vec<ApiMessage>,
    ) -> Error {
        let auth_code = errors.iter().any(|m| AUTH_ERROR_CODES.contains(&m.code));
        match status {
            401 | 403 => Error::Auth { status, errors },
            429 => Error::RateLimited {
                retry_after,
                errors,
            },
            404 => Error::NotFound { errors },
            500..=599 => Error::Server { status, errors },
            _ if auth_code => Error::Auth { status, errors },
            _ => Error::Invalid { status, errors },
        }
    }
}

/// The client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The base URL does not parse or cannot carry path segments.
    #[error("invalid Cloudflare API base URL {url:?}: {reason}")]
    BaseUrl {
        /// The URL given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The API token is empty or not a valid header value.
    #[error("invalid Cloudflare API token: {0}")]
    Token(&'static str),
    /// No rustls crypto provider is installed (install ring's before building the client).
    #[error(
        "no rustls crypto provider installed: call rustls::crypto::ring::default_provider().install_default() first"
    )]
    NoCryptoProvider,
    /// reqwest refused the configuration.
    #[error("HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(code: i64) -> ApiMessage {
        ApiMessage {
            code,
            message: format!("m{code}"),
            error_chain: vec![],
        }
    }

    #[test]
    fn status_classification() {
        let cases: &[(u16, Vec<ApiMessage>, ErrorKind)] = &[
            (401, vec![], ErrorKind::Auth),
            (403, vec![msg(10000)], ErrorKind::Auth),
            (400, vec![msg(6003)], ErrorKind::Auth),
            (400, vec![msg(1056)], ErrorKind::Invalid),
            (400, vec![msg(7003), msg(7000)], ErrorKind::Invalid),
            (404, vec![], ErrorKind::NotFound),
            (409, vec![], ErrorKind::Invalid),
            (429, vec![msg(10100)], ErrorKind::RateLimited),
            (500, vec![], ErrorKind::Server),
            (503, vec![msg(1000)], ErrorKind::Server),
        ];
        for (status, errors, want) in cases {
            let e = Error::from_status(*status, None, errors.clone());
            assert_eq!(e.kind(), *want, "status {status} errors {errors:?}");
        }
    }

    #[test]
    fn labels_and_retryability() {
        let kinds = [
            (ErrorKind::Auth, "auth", false),
            (ErrorKind::RateLimited, "rate_limited", true),
            (ErrorKind::Server, "server", true),
            (ErrorKind::Network, "network", true),
            (ErrorKind::NotFound, "not_found", false),
            (ErrorKind::Invalid, "invalid", false),
            (ErrorKind::Decode, "decode", false),
        ];
        for (kind, label, _) in kinds {
            assert_eq!(kind.as_str(), label);
        }
        assert!(Error::from_status(502, None, vec![]).is_retryable());
        assert!(!Error::from_status(403, None, vec![]).is_retryable());
        assert!(!Error::from_status(400, None, vec![msg(1056)]).is_retryable());
    }

    #[test]
    fn has_code_walks_error_chain() {
        let e = Error::from_status(
            400,
            None,
            vec![ApiMessage {
                code: 6003,
                message: "Invalid request headers".into(),
                error_chain: vec![msg(6111)],
            }],
        );
        assert!(e.has_code(6111));
        assert!(!e.has_code(1056));
        assert!(e.to_string().contains("m6111 (code 6111)"), "{e}");
    }
}
