//! What a request ends with: the answer and the labels of its metric and log line
//! (`Outcome`), and the answers the proxy gives itself.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::api::status::{RETRY_AFTER_SECONDS, Status};

/// Errors of a body stream: the target's, or ours.
pub use crate::target::conn::BoxError;
/// The body of every response the proxy sends.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// The outcome of one request, for the metric and the log line.
pub(super) struct Outcome {
    pub(super) response: Response<ProxyBody>,
    pub(super) verb: String,
    pub(super) reason: &'static str,
}

impl Outcome {
    pub(super) fn status(status: Status, verb: &str, reason: &'static str) -> Self {
        Outcome {
            response: status_response(&status),
            verb: verb.to_owned(),
            reason,
        }
    }
}

/// A step of a request that may answer it early: `Err` is that answer (boxed: an answer is
/// large, and most steps pass the request on).
pub(super) type Step<T> = Result<T, Box<Outcome>>;

pub(super) fn unavailable(verb: &str, reason: &'static str, message: &str) -> Outcome {
    let mut response = status_response(&Status::service_unavailable(message));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    Outcome {
        response,
        verb: verb.to_owned(),
        reason,
    }
}

/// A `Status` as a response.
pub fn status_response(status: &Status) -> Response<ProxyBody> {
    bytes_response(
        StatusCode::from_u16(status.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        crate::api::status::CONTENT_TYPE,
        Bytes::from(status.to_json()),
    )
}

pub(super) fn json_response(
    code: StatusCode,
    content_type: &str,
    value: &Value,
) -> Response<ProxyBody> {
    bytes_response(code, content_type, Bytes::from(value.to_string()))
}

pub(super) fn bytes_response(
    code: StatusCode,
    content_type: &str,
    body: Bytes,
) -> Response<ProxyBody> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type)
        .body(
            Full::new(body)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("valid response parts")
}
