//! Answers the proxy makes itself (no route, redirects, configured statuses, refusals), the
//! answer to a failed backend exchange and its log line, and the metrics of each request
//! ([`Completion`]). Shared by both paths.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use http1_wire::{End, Guard};
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{BackendErrorReason, HostMetrics};
use crate::state::State;
use crate::upstream::{ConnectError, ProxyBody, SendError};

/// Metrics bookkeeping of one request; finishes when dropped: by the response body as it ends,
/// fails or is dropped (hyper path), or when the exchange is over (fast path).
pub(crate) struct Completion {
    start: Instant,
    in_flight: Gauge,
    /// The matched route's metrics (the unmatched series until a route matched).
    pub host: Arc<HostMetrics>,
}

impl Completion {
    /// Counts a request in flight from now, for the series of `host`.
    pub(crate) fn begin(state: &State, host: Arc<HostMetrics>) -> Self {
        let in_flight = state.metrics().in_flight().clone();
        in_flight.inc();
        Self {
            start: Instant::now(),
            in_flight,
            host,
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.in_flight.dec();
        self.host.duration(self.start.elapsed().as_secs_f64());
    }
}

impl Guard for Completion {
    /// Dropping ends the request's metrics.
    fn finish(self, _: End) {}
}

/// A response the proxy makes itself.
pub(crate) struct Local {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: &'static str,
}

impl Local {
    pub(crate) fn into_response(self) -> Response<ProxyBody> {
        let mut resp = Response::new(
            Full::new(Bytes::from_static(self.body.as_bytes()))
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }
}

/// 400 and close: after a request we refuse to interpret, the connection's framing cannot be
/// trusted either.
pub(crate) fn bad_request(why: &'static str) -> Local {
    let mut answer = local(StatusCode::BAD_REQUEST, why);
    answer
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// 431 and close: the request head is longer than `--max-request-head`.
pub(crate) fn head_too_large() -> Local {
    let mut answer = local(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "request head too large\n",
    );
    answer
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

pub(crate) fn local(status: StatusCode, body: &'static str) -> Local {
    let mut headers = HeaderMap::new();
    if !body.is_empty() {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    Local {
        status,
        headers,
        body,
    }
}

pub(crate) fn not_found(grpc: bool) -> Local {
    if !grpc {
        return local(StatusCode::NOT_FOUND, "no matching route\n");
    }
    // gRPC trailers-only response: UNIMPLEMENTED.
    let mut answer = local(StatusCode::OK, "");
    let h = &mut answer.headers;
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from_static("12"));
    h.insert(
        "grpc-message",
        HeaderValue::from_static("no matching route"),
    );
    answer
}

/// The answer to a request whose backend exchange failed: 503 when no connection could be
/// made (the backend is unavailable), 504 when the response head did not arrive in time, 502
/// for a failed TLS handshake, a broken exchange or a refused upgrade.
pub(crate) fn backend_failure(reason: BackendErrorReason) -> Local {
    match reason {
        BackendErrorReason::Connect => {
            local(StatusCode::SERVICE_UNAVAILABLE, "backend unavailable\n")
        }
        BackendErrorReason::Timeout => local(StatusCode::GATEWAY_TIMEOUT, "backend timeout\n"),
        BackendErrorReason::Tls | BackendErrorReason::Protocol => {
            local(StatusCode::BAD_GATEWAY, "backend unavailable\n")
        }
        BackendErrorReason::Upgrade => local(StatusCode::BAD_GATEWAY, "backend cannot upgrade\n"),
    }
}

pub(crate) fn classify(e: &SendError) -> BackendErrorReason {
    let e = match e {
        SendError::Connect(c) => return connect_reason(c),
        SendError::Http1(_) => return BackendErrorReason::Protocol,
        SendError::Http2(e) => e,
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return connect_reason(c);
        }
        source = s.source();
    }
    if e.is_connect() {
        BackendErrorReason::Connect
    } else {
        BackendErrorReason::Protocol
    }
}

pub(crate) fn connect_reason(e: &ConnectError) -> BackendErrorReason {
    match e {
        ConnectError::Tcp(_) => BackendErrorReason::Connect,
        ConnectError::Tls(_) => BackendErrorReason::Tls,
    }
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
