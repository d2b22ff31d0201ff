//! A named GET in `owned` mode (RP-7), checked for ownership on the target's own answer.

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use super::context::ListenerContext;
use super::forward::{
    REQUEST_DEADLINE, log_server_error, target_request, target_unavailable, terminated,
};
use super::headers::{RetainEndToEnd, is_json};
use super::outcome::{Outcome, unavailable};
use crate::api::request_info::RequestInfo;
use crate::api::status::Status;
use crate::tenancy::answer_owner::is_owned_answer;
use crate::tenancy::owner_refs;

/// A named GET in `owned` mode (RP-7) in one target request: the target answers in the
/// representation the caller asked for (JSON object, `PartialObjectMetadata` or `Table`, all of
/// which show the owner labels), and an answer that does not show this client's labels becomes
/// the same 404 a missing object gets. The target's 404 and 403 are answered with that 404 too,
/// so hidden, missing and unreadable objects look alike: same code, same body, one request each.
pub(super) async fn owned_get(
    ctx: &ListenerContext,
    info: &RequestInfo,
    name: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Outcome {
    let verb = "get";
    // A Table without row objects would not show the labels: ask for their metadata and drop
    // it again before answering.
    let (query, strip_row_objects) = table_row_metadata(query);
    let path = match &query {
        Some(q) if !q.is_empty() => format!("{}?{q}", info.forward_path()),
        _ => info.forward_path().to_owned(),
    };
    let req = target_request(Method::GET, &path, headers, Bytes::new());
    let answered = tokio::time::timeout(REQUEST_DEADLINE, async {
        let resp = match ctx.target.send(req).await {
            Ok(resp) => resp,
            Err(e) => {
                let reason = e.reason();
                tracing::error!(error = %e, reason, path = %path, "the target could not be reached");
                return target_unavailable(ctx, verb, reason);
            }
        };
        let status = resp.status();
        if status.is_server_error() {
            log_server_error(ctx, &path, resp, "the target answered with a server error").await;
            return target_unavailable(ctx, verb, "upstream_error");
        }
        if status == StatusCode::NOT_FOUND || status == StatusCode::FORBIDDEN {
            tracing::debug!(resource = %info.resource, namespace = ?info.namespace, name, "no such object in the target (or not readable with the proxy's identity)");
            return Outcome::status(
                Status::not_found(&info.resource, &ctx.listener.group, name),
                verb,
                "not_found",
            );
        }
        let (mut parts, body) = resp.into_parts();
        if status != StatusCode::OK {
            // Answers that do not depend on the object (400 for a bad query, 406, 429) pass.
            parts.headers.retain_mut_hop_by_hop();
            return Outcome {
                response: Response::from_parts(
                    parts,
                    body.boxed_unsync(),
                ),
                verb: verb.to_owned(),
                reason: "upstream",
            };
        }
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                tracing::error!(error = %e, path = %path, "the target's answer broke off");
                return unavailable(verb, "upstream_error", "the target's answer broke off");
            }
        };
        if !is_json(&parts.headers) || !is_owned_answer(&bytes, &ctx.owner) {
            tracing::info!(resource = %info.resource, namespace = ?info.namespace, name, "masked an object this client does not own");
            return Outcome::status(
                Status::not_found(&info.resource, &ctx.listener.group, name),
                verb,
                "ownership_masked",
            );
        }
        let restored = if strip_row_objects {
            without_row_objects(&bytes)
        } else {
            owner_refs::restore_body(&bytes)
        };
        let bytes = match restored {
            Some(b) => {
                parts.headers.remove(header::CONTENT_LENGTH);
                Bytes::from(b)
            }
            None => bytes,
        };
        parts.headers.retain_mut_hop_by_hop();
        Outcome {
            response: Response::from_parts(
                parts,
                Full::new(bytes).map_err(|never| match never {}).boxed_unsync(),
            ),
            verb: verb.to_owned(),
            reason: "upstream",
        }
    })
    .await;
    answered.unwrap_or_else(|_| {
        tracing::error!(path = %path, target = ctx.target.name(), reason = "deadline", "request cut at the {REQUEST_DEADLINE:?} deadline");
        terminated(ctx, "deadline");
        target_unavailable(ctx, verb, "deadline")
    })
}

/// The query with `includeObject=None` (a Table without row objects) turned into
/// `includeObject=Metadata`, and whether the row objects must be dropped from the answer.
fn table_row_metadata(query: Option<&str>) -> (Option<String>, bool) {
    let Some(q) = query else {
        return (None, false);
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    // The API server reads the first value of a parameter.
    let first = pairs.iter().find(|(k, _)| k == "includeObject");
    if first.is_none_or(|(_, v)| v != "None") {
        return (Some(q.to_owned()), false);
    }
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &pairs {
        if k == "includeObject" {
            out.append_pair(k, "Metadata");
        } else {
            out.append_pair(k, v);
        }
    }
    (Some(out.finish()), true)
}

/// A Table answer without its rows' objects (the caller asked for `includeObject=None`).
fn without_row_objects(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    for row in v.get_mut("rows")?.as_array_mut()? {
        if let Some(row) = row.as_object_mut() {
            row.remove("object");
        }
    }
    serde_json::to_vec(&v).ok()
}

/// Whether the caller wants YAML, which the ownership check of a GET answer cannot read (such
/// GETs read the object as JSON first).
pub(super) fn asks_for_yaml(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("yaml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_without_row_objects_is_fetched_with_their_metadata_and_answered_without() {
        assert_eq!(table_row_metadata(None), (None, false));
        assert_eq!(
            table_row_metadata(Some("includeObject=Object")),
            (Some("includeObject=Object".into()), false)
        );
        assert_eq!(
            table_row_metadata(Some(
                "resourceVersion=0&includeObject=None&includeObject=Object"
            )),
            (
                Some("resourceVersion=0&includeObject=Metadata&includeObject=Metadata".into()),
                true
            )
        );
        let table = serde_json::json!({"kind": "Table", "rows": [
            {"cells": ["w"], "object": {"metadata": {"name": "w"}}}]});
        let stripped: Value =
            serde_json::from_slice(&without_row_objects(table.to_string().as_bytes()).unwrap())
                .unwrap();
        assert_eq!(
            stripped,
            serde_json::json!({"kind": "Table", "rows": [{"cells": ["w"]}]})
        );
    }
}
