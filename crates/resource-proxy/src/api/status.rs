//! Kubernetes `metav1.Status` bodies for the answers the proxy gives itself.
//!
//! A caller (kubectl, client-go, a controller) must not be able to tell a proxy answer from one
//! the Kubernetes API server gives: the builders here produce the same JSON shape and, where the
//! API server has one, the same message as `k8s.io/apimachinery/pkg/api/errors` (`NewNotFound`,
//! `NewBadRequest`, `NewForbidden`, ...). Field order follows the Go struct order, as the API
//! server emits it.

use serde::Serialize;

/// Seconds a caller should wait before retrying a `503 ServiceUnavailable` (sent as the
/// `Retry-After` header by the HTTP layer; client-go retries on it).
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// Media type of every Status body built here.
pub const CONTENT_TYPE: &str = "application/json";

/// The `reason` field of a Status (`metav1.StatusReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StatusReason {
    /// 400
    BadRequest,
    /// 401
    Unauthorized,
    /// 403
    Forbidden,
    /// 404
    NotFound,
    /// 405
    MethodNotAllowed,
    /// 413
    RequestEntityTooLarge,
    /// 415
    UnsupportedMediaType,
    /// 422
    Invalid,
    /// 503
    ServiceUnavailable,
    /// No Kubernetes reason fits (the field is omitted, as for `StatusReasonUnknown`).
    #[serde(rename = "")]
    Unknown,
}

impl StatusReason {
    fn is_unknown(&self) -> bool {
        *self == StatusReason::Unknown
    }
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCause {
    /// Machine-readable cause, e.g. `NamespaceTerminating`.
    #[serde(rename = "reason", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Human-readable description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Field path the cause refers to.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// `metav1.StatusDetails`. `kind` carries the resource plural, as the API server does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group (empty for the core group).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Resource plural (the API server puts the resource, not the kind, here).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Individual causes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct EmptyListMeta {}

/// A failure `metav1.Status` with its HTTP code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    kind: &'static str,
    api_version: &'static str,
    metadata: EmptyListMeta,
    status: &'static str,
    message: String,
    #[serde(skip_serializing_if = "StatusReason::is_unknown")]
    reason: StatusReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<StatusDetails>,
    code: u16,
}

/// `schema.GroupResource.String()`: `resource.group`, or `resource` for the core group.
fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// Go's `%q` for the strings that appear in these messages.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

impl Status {
    fn new(code: u16, reason: StatusReason, message: String) -> Self {
        Status {
            kind: "Status",
            api_version: "v1",
            metadata: EmptyListMeta {},
            status: "Failure",
            message,
            reason,
            details: None,
            code,
        }
    }

    fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 for a missing object, as `NewNotFound`: `widgets.example.com "foo" not found`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        Status::new(
            404,
            StatusReason::NotFound,
            format!("{} {} not found", qualified(resource, group), quoted(name)),
        )
        .with_details(StatusDetails {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            causes: Vec::new(),
        })
    }

    /// 404 for a namespace that does not exist (in the client cluster).
    pub fn namespace_not_found(namespace: &str) -> Self {
        Status::not_found("namespaces", "", namespace)
    }

    /// 404 for a path the server does not serve at all, as the API server answers an unknown
    /// group/version (`NewGenericServerResponse(404, ...)`, with empty details).
    pub fn path_not_found() -> Self {
        Status::new(
            404,
            StatusReason::NotFound,
            "the server could not find the requested resource".to_owned(),
        )
        .with_details(StatusDetails::default())
    }

    /// 400, as `NewBadRequest(message)`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Status::new(400, StatusReason::BadRequest, message.into())
    }

    /// 401 for a caller that could not be authenticated; the API server's message is
    /// `Unauthorized`.
    pub fn unauthorized() -> Self {
        Status::new(401, StatusReason::Unauthorized, "Unauthorized".to_owned())
    }

    /// 403, as `NewForbidden(resource.group, name, reason)`.
    pub fn forbidden(resource: &str, group: &str, name: &str, reason: &str) -> Self {
        let subject = qualified(resource, group);
        let message = if subject.is_empty() {
            format!("forbidden: {reason}")
        } else if name.is_empty() {
            format!("{subject} is forbidden: {reason}")
        } else {
            format!("{subject} {} is forbidden: {reason}", quoted(name))
        };
        Status::new(403, StatusReason::Forbidden, message).with_details(StatusDetails {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            causes: Vec::new(),
        })
    }

    /// 403 for a write into a terminating namespace, as the NamespaceLifecycle admission plugin
    /// answers it (including its `NamespaceTerminating` cause).
    pub fn namespace_terminating(resource: &str, group: &str, name: &str, namespace: &str) -> Self {
        let mut status = Status::forbidden(
            resource,
            group,
            name,
            &format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        );
        if let Some(details) = status.details.as_mut() {
            details.causes.push(StatusCause {
                kind: "NamespaceTerminating".to_owned(),
                message: format!("namespace {namespace} is being terminated"),
                field: "metadata.namespace".to_owned(),
            });
        }
        status
    }

    /// 405, as `NewMethodNotSupported(resource.group, action)`, for methods the API has no verb
    /// for.
    pub fn method_not_supported(resource: &str, group: &str, action: &str) -> Self {
        Status::new(
            405,
            StatusReason::MethodNotAllowed,
            format!(
                "{action} is not supported on resources of kind {}",
                quoted(&qualified(resource, group))
            ),
        )
        .with_details(StatusDetails {
            group: group.to_owned(),
            kind: resource.to_owned(),
            ..StatusDetails::default()
        })
    }

    /// 501 for connection upgrades (exec, attach, port-forward, websocket watches). The API
    /// server has no reason for 501, so the reason is omitted as for `StatusReasonUnknown`.
    pub fn upgrade_not_supported() -> Self {
        Status::new(
            501,
            StatusReason::Unknown,
            "resource proxy does not support connection upgrades".to_owned(),
        )
    }

    /// 413, as the API server answers a body over its limit: `Request entity too large: limit
    /// is 3145728`.
    pub fn request_entity_too_large(limit: usize) -> Self {
        Status::new(
            413,
            StatusReason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415, as `negotiation.NewUnsupportedMediaTypeError(accepted)`.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Status::new(
            415,
            StatusReason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 503, as `NewServiceUnavailable(message)`; send with `Retry-After: 1`.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Status::new(503, StatusReason::ServiceUnavailable, message.into())
    }

    /// 422 Invalid for a write the proxy cannot carry out as asked, as the API server words a
    /// rejected object: `<resource>.<group> "<name>" is invalid: <why>`.
    pub fn unprocessable(resource: &str, group: &str, name: &str, why: &str) -> Self {
        Status::new(
            422,
            StatusReason::Invalid,
            format!(
                "{} {} is invalid: {why}",
                qualified(resource, group),
                quoted(name)
            ),
        )
        .with_details(StatusDetails {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            causes: Vec::new(),
        })
    }

    /// 503 with the message operators know from the original product:
    /// `target tenant cluster "<name>" for <group>/<version> is unavailable`.
    pub fn target_unavailable(target_name: &str, group: &str, version: &str) -> Self {
        Status::service_unavailable(format!(
            "target tenant cluster {} for {group}/{version} is unavailable",
            quoted(target_name)
        ))
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The reason.
    pub fn reason(&self) -> StatusReason {
        self.reason
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&StatusDetails> {
        self.details.as_ref()
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn body(status: &Status) -> Value {
        serde_json::from_slice(&status.to_json()).unwrap()
    }

    #[test]
    fn not_found_matches_the_api_server_body_for_a_missing_custom_resource() {
        let status = Status::not_found("widgets", "example.com", "w1");
        assert_eq!(
            String::from_utf8(status.to_json()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"widgets.example.com \"w1\" not found","reason":"NotFound","details":{"name":"w1","group":"example.com","kind":"widgets"},"code":404}"#
        );
        assert_eq!(status.code(), 404);
    }

    #[test]
    fn not_found_for_the_core_group_has_no_group_in_message_or_details() {
        let status = Status::namespace_not_found("team-a");
        assert_eq!(status.message(), r#"namespaces "team-a" not found"#);
        assert_eq!(
            body(&status)["details"],
            json!({"name": "team-a", "kind": "namespaces"})
        );
    }

    #[test]
    fn not_found_quotes_names_like_go() {
        let status = Status::not_found("widgets", "example.com", "a\"b");
        assert_eq!(status.message(), r#"widgets.example.com "a\"b" not found"#);
    }

    #[test]
    fn path_not_found_has_empty_details_like_the_generic_server_response() {
        assert_eq!(
            body(&Status::path_not_found()),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"the server could not find the requested resource","reason":"NotFound",
                "details":{},"code":404})
        );
    }

    #[test]
    fn bad_request_has_no_details() {
        let value = body(&Status::bad_request("nope"));
        assert_eq!(value["code"], 400);
        assert_eq!(value["reason"], "BadRequest");
        assert_eq!(value["message"], "nope");
        assert!(value.get("details").is_none());
    }

    #[test]
    fn unauthorized_matches_the_api_server_message() {
        let value = body(&Status::unauthorized());
        assert_eq!(
            value,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"Unauthorized","reason":"Unauthorized","code":401})
        );
    }

    #[test]
    fn forbidden_message_depends_on_name() {
        let named = Status::forbidden("widgets", "example.com", "w1", "no");
        assert_eq!(
            named.message(),
            r#"widgets.example.com "w1" is forbidden: no"#
        );
        let unnamed = Status::forbidden("widgets", "example.com", "", "no");
        assert_eq!(unnamed.message(), "widgets.example.com is forbidden: no");
        assert_eq!(
            body(&unnamed)["details"],
            json!({"group":"example.com","kind":"widgets"})
        );
        assert_eq!(unnamed.code(), 403);
    }

    #[test]
    fn namespace_terminating_carries_the_admission_cause() {
        let status = Status::namespace_terminating("widgets", "example.com", "w1", "team-a");
        assert_eq!(
            status.message(),
            "widgets.example.com \"w1\" is forbidden: unable to create new content in namespace \
             team-a because it is being terminated"
        );
        assert_eq!(
            body(&status)["details"]["causes"],
            json!([{"reason":"NamespaceTerminating","message":"namespace team-a is being terminated",
                "field":"metadata.namespace"}])
        );
    }

    #[test]
    fn method_not_supported_matches_new_method_not_supported() {
        let status = Status::method_not_supported("widgets", "example.com", "options");
        assert_eq!(
            body(&status),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"options is not supported on resources of kind \"widgets.example.com\"",
                "reason":"MethodNotAllowed","details":{"group":"example.com","kind":"widgets"},
                "code":405})
        );
    }

    #[test]
    fn upgrade_not_supported_is_501_without_reason() {
        let value = body(&Status::upgrade_not_supported());
        assert_eq!(value["code"], 501);
        assert!(value.get("reason").is_none());
        assert_eq!(
            value["message"],
            "resource proxy does not support connection upgrades"
        );
    }

    #[test]
    fn request_entity_too_large_names_the_limit() {
        let status = Status::request_entity_too_large(3 * 1024 * 1024);
        assert_eq!(status.code(), 413);
        assert_eq!(status.reason(), StatusReason::RequestEntityTooLarge);
        assert_eq!(
            status.message(),
            "Request entity too large: limit is 3145728"
        );
    }

    #[test]
    fn unsupported_media_type_lists_accepted_types() {
        let status = Status::unsupported_media_type(&["application/json", "application/yaml"]);
        assert_eq!(status.code(), 415);
        assert_eq!(
            status.message(),
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml"
        );
    }

    #[test]
    fn target_unavailable_is_503_with_the_documented_message() {
        let status = Status::target_unavailable("target", "example.com", "v1");
        assert_eq!(status.code(), 503);
        assert_eq!(body(&status)["reason"], "ServiceUnavailable");
        assert_eq!(
            status.message(),
            r#"target tenant cluster "target" for example.com/v1 is unavailable"#
        );
    }
}
