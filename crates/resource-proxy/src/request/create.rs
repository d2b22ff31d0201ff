//! Creates whose fate is unknown (RP-14): every create carries a fresh create id, so after an
//! ambiguous failure the proxy can look the object up instead of inviting a duplicate.

use bytes::Bytes;
use http::header;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use super::context::ListenerContext;
use super::forward::{REQUEST_DEADLINE, answer, log_server_error, target_unavailable, terminated};
use super::lookup::LookupError;
use super::outcome::{Outcome, bytes_response};
use crate::tenancy::owner_refs;

/// The label a create carries so that its outcome can be looked up after an ambiguous failure.
pub const CREATE_ID_LABEL: &str = "resource-proxy.vcluster.loft.sh/create-id";
/// Time kept from a create's 60 s for looking it up after an ambiguous failure.
pub const CREATE_LOOKUP_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// Adds a fresh [`CREATE_ID_LABEL`] to a JSON object body; `None` if it is not one.
pub(super) fn with_create_id(body: &[u8]) -> Option<(Bytes, String)> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let metadata = v.get_mut("metadata")?.as_object_mut()?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}));
    let id = new_create_id();
    labels
        .as_object_mut()?
        .insert(CREATE_ID_LABEL.into(), id.clone().into());
    Some((Bytes::from(v.to_string()), id))
}

/// A unique label value (20 hex digits from the time, the process and a counter).
fn new_create_id() -> String {
    use sha2::Digest;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = sha2::Sha256::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(now.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.finalize()[..10]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Forwards a create (RP-14, retried POSTs). client-go retries a 5xx that carries Retry-After
/// with the same body, so the answer to an ambiguous failure (the request was sent, but the
/// deadline passed, the connection broke, or the target answered 5xx) must not invite a
/// duplicate nor hide a write: the proxy looks the object up by its create id; found, the
/// caller gets 201 with it; not found, 503 (the create did not happen, a retry is safe).
pub(super) async fn forward_create(
    ctx: &ListenerContext,
    req: Request<Bytes>,
    path: &str,
    collection: &str,
    id: &str,
    verb: &str,
) -> Outcome {
    let attempt = tokio::time::timeout(REQUEST_DEADLINE - CREATE_LOOKUP_BUDGET, async {
        match ctx.target.send(req).await {
            Ok(resp) if resp.status().is_server_error() => {
                log_server_error(
                    ctx,
                    path,
                    resp,
                    "the target answered a create with a server error",
                )
                .await;
                Err("upstream_error")
            }
            Err(e) if e.may_have_been_sent() => {
                tracing::error!(error = %e, path, "a create broke off after it was sent");
                Err(e.reason())
            }
            result => Ok(answer(ctx, result, path, verb, false).await),
        }
    })
    .await;
    let reason = match attempt {
        Ok(Ok(outcome)) => return outcome,
        Ok(Err(reason)) => reason,
        Err(_) => {
            tracing::error!(
                path,
                target = ctx.target.name(),
                "create cut at the deadline"
            );
            terminated(ctx, "deadline");
            "deadline"
        }
    };
    match tokio::time::timeout(CREATE_LOOKUP_BUDGET, find_created(ctx, collection, id)).await {
        Ok(Ok(Some(object))) => {
            tracing::info!(
                path,
                create_id = id,
                failure = reason,
                "the create reached the target despite the failure; answering 201 with the object"
            );
            Outcome {
                response: bytes_response(StatusCode::CREATED, "application/json", object),
                verb: verb.to_owned(),
                reason: "create_confirmed",
            }
        }
        Ok(Ok(None)) => {
            tracing::warn!(
                path,
                create_id = id,
                reason,
                "the create did not happen; answering 503 (a retry cannot duplicate it)"
            );
            target_unavailable(ctx, verb, reason)
        }
        Ok(Err(e)) => {
            tracing::error!(path, create_id = id, reason, error = %e, "could not tell whether the create happened; answering 503");
            target_unavailable(ctx, verb, reason)
        }
        Err(_) => {
            tracing::error!(
                path,
                create_id = id,
                reason,
                "looking up the create timed out; answering 503"
            );
            target_unavailable(ctx, verb, reason)
        }
    }
}

/// The object created with `id` in `collection`, as the body of a 201 (owner references
/// restored), if it exists.
async fn find_created(
    ctx: &ListenerContext,
    collection: &str,
    id: &str,
) -> Result<Option<Bytes>, LookupError> {
    let selector: String =
        form_urlencoded::byte_serialize(format!("{CREATE_ID_LABEL}={id}").as_bytes()).collect();
    let req = Request::get(format!("{collection}?labelSelector={selector}"))
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(req).await?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(LookupError::Body)?
        .to_bytes();
    if !status.is_success() {
        return Err(LookupError::Answered {
            doing: "looking up the create",
            status,
        });
    }
    let list: Value = serde_json::from_slice(&body)?;
    let Some(mut item) = list["items"].as_array().and_then(|i| i.first()).cloned() else {
        return Ok(None);
    };
    if item.get("kind").is_none()
        && let Some(kind) = list["kind"].as_str().and_then(|k| k.strip_suffix("List"))
    {
        item["kind"] = kind.into();
        item["apiVersion"] = list["apiVersion"].clone();
    }
    let bytes = serde_json::to_vec(&item)?;
    Ok(Some(Bytes::from(
        owner_refs::restore_body(&bytes).unwrap_or(bytes),
    )))
}
