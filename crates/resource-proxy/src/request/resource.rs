//! A request for a resource of the listener's group/version, in the steps it takes:
//!
//! 1. `refuse_unsupported` methods; `read_body` (at most [`MAX_BODY_BYTES`]);
//! 2. the namespace of a namespaced write ([`super::namespace`], RP-8);
//! 3. `scope`: collections in `owned` mode get the owner selector (RP-7);
//! 4. a named GET in `owned` mode is answered by [`super::owned_get`] in one target request;
//! 5. `read_first`: the object a named request is about, read when ownership must be checked
//!    (RP-7) or the write needs to know what is there;
//! 6. `rewrite_body`: owner labels (RP-6) and owner references (RP-8) in write bodies, the
//!    checked uid as a delete's precondition;
//! 7. `send_on`: to the target ([`super::forward`]), a create with its create id
//!    ([`super::create`]); a list or delete-collection the target could not answer in a
//!    namespace terminating in the client gets an empty list ([`super::namespace`]).
//!
//! Each step either passes the request on or answers it (`Step`).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use super::context::ListenerContext;
use super::create::{forward_create, with_create_id};
use super::forward::{forward, target_request};
use super::headers::header_str;
use super::lookup::LookupError;
use super::namespace;
use super::outcome::{Outcome, Step, unavailable};
use super::owned_get::{asks_for_yaml, owned_get};
use crate::api::request_info::{RequestInfo, Verb};
use crate::api::status::Status;
use crate::config::AccessMode;
use crate::listen::body::CallerBody;
use crate::metrics::GroupVersionReasonLabels;
use crate::tenancy::labels::{self, BodyKind, Injection, LabelsBefore, MAX_BODY_BYTES};
use crate::tenancy::owner_refs;
use crate::tenancy::selector::{is_owned_object, scope_query};

/// Answers a request for a resource of the listener's group/version (RP-5 to RP-8).
pub(super) async fn resource_request(
    ctx: &ListenerContext,
    info: RequestInfo,
    req: Request<CallerBody>,
) -> Outcome {
    let verb = info.verb.as_str().to_owned();
    match steps(ctx, &info, &verb, req).await {
        Ok(outcome) => outcome,
        Err(answered) => *answered,
    }
}

/// The steps in order; the first that answers ends the request.
async fn steps(
    ctx: &ListenerContext,
    info: &RequestInfo,
    verb: &str,
    req: Request<CallerBody>,
) -> Step<Outcome> {
    refuse_unsupported(ctx, info, verb)?;
    let (parts, body) = req.into_parts();
    let body = read_body(body, verb).await?;
    namespace::require_and_mirror(ctx, info, verb).await?;
    let query = scope(ctx, info, parts.uri.query(), verb)?;
    let body_type = BodyType::of(&parts.headers, info);
    // A named GET checks ownership on its own answer: one target request.
    if ctx.listener.access == AccessMode::Owned
        && info.verb == Verb::Get
        && info.subresource.is_none()
        && parts.method == Method::GET
        && !asks_for_yaml(&parts.headers)
        && let Some(name) = info.name.as_deref()
    {
        return Ok(owned_get(ctx, info, name, &parts.headers, query.as_deref()).await);
    }
    let current = read_first(ctx, info, &body_type, verb).await?;
    let (body, content_type) = rewrite_body(ctx, info, body, &body_type, &current, verb)?;
    let accept = namespace::accept(&parts.headers);
    let outcome = send_on(ctx, info, parts, query, body, content_type, verb).await;
    Ok(namespace::answer_terminating(ctx, info, accept.as_deref(), outcome).await)
}

/// A method the API server does not serve for the resource: 405.
fn refuse_unsupported(ctx: &ListenerContext, info: &RequestInfo, verb: &str) -> Step<()> {
    if let Verb::Unsupported(method) = &info.verb {
        return Err(Outcome::status(
            Status::method_not_supported(
                &info.resource,
                &ctx.listener.group,
                &method.to_ascii_lowercase(),
            ),
            verb,
            "method_not_allowed",
        )
        .into());
    }
    Ok(())
}

/// The caller's whole body: 413 over [`MAX_BODY_BYTES`].
async fn read_body(body: CallerBody, verb: &str) -> Step<Bytes> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Outcome::status(
            Status::request_entity_too_large(MAX_BODY_BYTES),
            verb,
            "body_too_large",
        )
        .into()),
        Err(e) => {
            tracing::info!(error = %e, "the caller's request body broke off");
            Err(Outcome::status(
                Status::bad_request(format!("reading the request body: {e}")),
                verb,
                "canceled",
            )
            .into())
        }
    }
}

/// The query to forward: in `owned` mode, collections are scoped by the owner selector (RP-7).
fn scope(
    ctx: &ListenerContext,
    info: &RequestInfo,
    query: Option<&str>,
    verb: &str,
) -> Step<Option<String>> {
    if ctx.listener.access == AccessMode::Owned
        && matches!(info.verb, Verb::List | Verb::Watch | Verb::DeleteCollection)
    {
        return match scope_query(query, &ctx.owner) {
            Ok(q) => Ok(Some(q)),
            Err(e) => Err(Outcome::status(e.status(), verb, "bad_request").into()),
        };
    }
    Ok(query.map(str::to_owned))
}

/// The caller's `Content-Type`, and what it says about the body.
struct BodyType {
    content_type: Option<String>,
    json_patch: bool,
    apply: bool,
}

impl BodyType {
    fn of(headers: &HeaderMap, info: &RequestInfo) -> Self {
        let content_type = header_str(headers, &header::CONTENT_TYPE).map(str::to_owned);
        let json_patch = content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json-patch+json"));
        let apply = info.verb == Verb::Patch
            && content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("application/apply-patch"));
        BodyType {
            content_type,
            json_patch,
            apply,
        }
    }
}

/// What the target holds under a named request's name, as far as the write needs it.
struct Current {
    labels_before: LabelsBefore,
    uid: Option<String>,
    owner_refs: Option<Value>,
}

/// The object is read first when ownership must be checked, when a JSON patch needs to know
/// whether labels exist, and before an update (to keep the target's own owner references). In
/// `owned` mode a missing object, or one this client does not own, is answered with 404.
async fn read_first(
    ctx: &ListenerContext,
    info: &RequestInfo,
    body_type: &BodyType,
    verb: &str,
) -> Step<Current> {
    let owned = ctx.listener.access == AccessMode::Owned;
    let mut current = Current {
        labels_before: LabelsBefore::Unknown,
        uid: None,
        owner_refs: None,
    };
    if !(info.is_named_object_request()
        && (owned || body_type.json_patch || info.verb == Verb::Update))
    {
        return Ok(current);
    }
    match read_object(ctx, info).await {
        Ok(Some(obj)) if !owned || is_owned_object(&obj, &ctx.owner) => {
            current.labels_before = if obj["metadata"]["labels"].is_object() {
                LabelsBefore::Present
            } else {
                LabelsBefore::Absent
            };
            current.uid = obj["metadata"]["uid"].as_str().map(str::to_owned);
            current.owner_refs = obj["metadata"].get("ownerReferences").cloned();
        }
        // Server-side apply creates a missing object: nothing to mask. (The read and the
        // apply are two requests; a same-named object created between them by another
        // client would be patched, which the docs name as a known window.)
        Ok(None) if body_type.apply => {
            current.labels_before = LabelsBefore::Absent;
        }
        Ok(found) if owned => {
            let name = info.name.as_deref().unwrap_or_default();
            let reason = if found.is_some() {
                tracing::info!(resource = %info.resource, namespace = ?info.namespace, name, "masked an object this client does not own");
                "ownership_masked"
            } else {
                tracing::debug!(resource = %info.resource, namespace = ?info.namespace, name, "no such object in the target (or not readable with the proxy's identity)");
                "not_found"
            };
            return Err(Outcome::status(
                Status::not_found(&info.resource, &ctx.listener.group, name),
                verb,
                reason,
            )
            .into());
        }
        Ok(_) => {}
        Err(e) => {
            tracing::error!(error = %e, resource = %info.resource, name = ?info.name, "ownership read failed");
            return Err(unavailable(
                verb,
                "ownership_check_failed",
                "the target could not confirm who owns the object",
            )
            .into());
        }
    }
    Ok(current)
}

/// The body to forward and its content type (`None`: the caller's): owner labels on every write
/// body (RP-6) with the caller's owner references moved into the annotation (RP-8); a delete
/// carries the uid of the object checked for ownership.
fn rewrite_body(
    ctx: &ListenerContext,
    info: &RequestInfo,
    body: Bytes,
    body_type: &BodyType,
    current: &Current,
    verb: &str,
) -> Step<(Bytes, Option<String>)> {
    let mut body = body;
    let mut forward_content_type = body_type.content_type.clone();
    if let Some(kind) = BodyKind::for_verb(&info.verb) {
        match labels::inject(
            kind,
            body_type.content_type.as_deref(),
            &body,
            &ctx.owner,
            current.labels_before,
        ) {
            Ok(Injection::Rewritten {
                body: b,
                content_type: ct,
            }) => {
                match stash_owner_refs(kind, ct, b, current.owner_refs.as_ref()) {
                    Ok(b) => body = b,
                    Err(e) => {
                        return Err(Outcome::status(
                            Status::unprocessable(
                                &info.resource,
                                &ctx.listener.group,
                                info.name.as_deref().unwrap_or_default(),
                                &e.to_string(),
                            ),
                            verb,
                            "bad_request",
                        )
                        .into());
                    }
                }
                forward_content_type = Some(ct.to_owned());
            }
            Ok(Injection::Unchanged(why)) => {
                ctx.metrics
                    .unlabelled_writes
                    .get_or_create(&GroupVersionReasonLabels {
                        target: ctx.target.name().to_owned(),
                        group_version: ctx.listener.group_version(),
                        reason: why.as_str().to_owned(),
                    })
                    .inc();
                tracing::warn!(reason = why.as_str(), resource = %info.resource, "forwarding a write without owner labels");
            }
            Err(e) => {
                tracing::info!(error = %e, resource = %info.resource, "refused a write body");
                return Err(Outcome::status(e.status(), verb, "bad_request").into());
            }
        }
    } else if info.verb == Verb::Delete
        && let Some(uid) = &current.uid
    {
        body = with_uid_precondition(&body, uid);
        forward_content_type = Some("application/json".into());
    }
    Ok((body, forward_content_type))
}

/// Sends the request on to the target with the forwarded query, body and content type. A create
/// carries a fresh create id, so an ambiguous failure can be resolved by looking for it.
async fn send_on(
    ctx: &ListenerContext,
    info: &RequestInfo,
    parts: http::request::Parts,
    query: Option<String>,
    body: Bytes,
    content_type: Option<String>,
    verb: &str,
) -> Outcome {
    let mut body = body;
    let create_id = if info.verb == Verb::Create
        && !info.dry_run
        && content_type.as_deref() == Some("application/json")
    {
        with_create_id(&body).map(|(b, id)| {
            body = b;
            id
        })
    } else {
        None
    };

    let path = match &query {
        Some(q) if !q.is_empty() => format!("{}?{q}", info.forward_path()),
        _ => info.forward_path().to_owned(),
    };
    let mut headers = parts.headers;
    if let Some(ct) = content_type {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(&ct).unwrap_or(HeaderValue::from_static("application/json")),
        );
    }
    let watch = info.verb == Verb::Watch;
    if let Some(id) = create_id {
        let req = target_request(parts.method, &path, &headers, body);
        return forward_create(ctx, req, &path, info.forward_path(), &id, verb).await;
    }
    forward(ctx, parts.method, &path, &headers, body, verb, watch).await
}

/// Reads the object a named request is about (without subresource), as JSON. `Ok(None)` when
/// the target says it does not exist or the proxy may not read it.
async fn read_object(
    ctx: &ListenerContext,
    info: &RequestInfo,
) -> Result<Option<Value>, LookupError> {
    let req = Request::get(info.object_path())
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(req).await?;
    match resp.status() {
        StatusCode::OK => {
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(LookupError::Body)?
                .to_bytes();
            Ok(Some(serde_json::from_slice(&body)?))
        }
        StatusCode::NOT_FOUND | StatusCode::FORBIDDEN => Ok(None),
        status => Err(LookupError::Answered {
            doing: "reading the object",
            status,
        }),
    }
}

/// Moves the caller's owner references into the annotation (see [`owner_refs`]).
fn stash_owner_refs(
    kind: BodyKind,
    content_type: &str,
    body: Vec<u8>,
    target_refs: Option<&Value>,
) -> Result<Bytes, owner_refs::UnsupportedPatch> {
    if !owner_refs::mentions_owner_refs(&body) && target_refs.is_none() {
        return Ok(Bytes::from(body));
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return Ok(Bytes::from(body));
    };
    match (kind, content_type) {
        (BodyKind::Patch, ct) if ct.starts_with("application/json-patch+json") => {
            owner_refs::check_json_patch(&v)?;
            return Ok(Bytes::from(body));
        }
        (BodyKind::Patch, ct) if ct.starts_with("application/merge-patch+json") => {
            owner_refs::stash_merge_patch(&mut v)
        }
        (BodyKind::Patch, _) => owner_refs::stash_object(&mut v, None),
        (BodyKind::Object, _) => owner_refs::stash_object(&mut v, target_refs),
    }
    Ok(Bytes::from(v.to_string()))
}

/// DeleteOptions with `preconditions.uid` set, so the delete hits exactly the object that was
/// checked for ownership (a same-named object created meanwhile is not deleted).
fn with_uid_precondition(body: &[u8], uid: &str) -> Bytes {
    let mut opts: Value = serde_json::from_slice(body).unwrap_or_else(|_| serde_json::json!({}));
    if !opts.is_object() {
        opts = serde_json::json!({});
    }
    if opts.get("kind").is_none() {
        opts["kind"] = "DeleteOptions".into();
        opts["apiVersion"] = "v1".into();
    }
    if !opts["preconditions"].is_object() {
        opts["preconditions"] = serde_json::json!({});
    }
    opts["preconditions"]["uid"] = uid.into();
    Bytes::from(opts.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_carries_the_uid_of_the_object_checked_for_ownership() {
        let body = with_uid_precondition(b"", "u-1");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["preconditions"]["uid"], "u-1");
        assert_eq!(v["kind"], "DeleteOptions");
        let body = with_uid_precondition(
            br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#,
            "u-2",
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["propagationPolicy"], "Foreground");
        assert_eq!(v["preconditions"]["uid"], "u-2");
    }
}
