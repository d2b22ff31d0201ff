//! Namespaces of namespaced writes (RP-8): the namespace must exist in the client cluster, and
//! it is mirrored to the target ([`crate::reconcile::namespaces`], which first deletes what an
//! earlier client namespace of that name left there). Cluster-scoped resources have none:
//! nothing is mirrored for them, and a namespaced path to one is the API server's 404.
//!
//! While the target is unreachable, a list or delete-collection in a namespace that is
//! terminating in the client is answered locally with an empty list
//! ([`answer_terminating`]): the client's namespace controller can finish, and the sweep deletes
//! the objects from the target once it is back.

use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;

use super::context::ListenerContext;
use super::outcome::{Outcome, Step, json_response, unavailable};
use crate::api::request_info::{RequestInfo, Verb};
use crate::api::status::Status;

/// A namespaced write needs its namespace in the client cluster (missing: 404; terminating: a
/// create is refused as the API server refuses it); unless it is a dry run, the namespace is
/// then created in the target if it is not there.
pub(super) async fn require_and_mirror(
    ctx: &ListenerContext,
    info: &RequestInfo,
    verb: &str,
) -> Step<()> {
    let (Some(ns), true) = (&info.namespace, info.verb.writes_body()) else {
        return Ok(());
    };
    // A cluster-scoped resource has no namespaced path: the API server's 404, and no namespace
    // is mirrored for it.
    if ctx.discovery.is_cluster_scoped(&info.resource) {
        return Err(Outcome::status(Status::path_not_found(), verb, "not_found").into());
    }
    let group = ctx.listener.group.as_str();
    let uid = match client_namespace(ctx, ns).await {
        Ok(None) => {
            return Err(Outcome::status(
                Status::namespace_not_found(ns),
                verb,
                "namespace_missing",
            )
            .into());
        }
        Ok(Some(n)) if info.verb == Verb::Create && is_terminating(&n) => {
            let name = info.name.clone().unwrap_or_default();
            return Err(Outcome::status(
                Status::namespace_terminating(&info.resource, group, &name, ns),
                verb,
                "namespace_terminating",
            )
            .into());
        }
        Ok(Some(n)) => n.metadata.uid.unwrap_or_default(),
        Err(e) => {
            tracing::error!(namespace = %ns, error = %e, "cannot read the namespace in the client cluster");
            return Err(unavailable(
                verb,
                "error",
                "the client cluster could not be asked about the namespace",
            )
            .into());
        }
    };
    if !info.dry_run
        && let Err(e) = ctx.namespaces.ensure(ns, &uid).await
    {
        tracing::error!(namespace = %ns, target = ctx.target.name(), error = %e, "cannot create the namespace in the target");
        return Err(unavailable(
            verb,
            "upstream_error",
            &format!("creating namespace {ns} in the target failed"),
        )
        .into());
    }
    Ok(())
}

async fn client_namespace(
    ctx: &ListenerContext,
    ns: &str,
) -> Result<Option<Namespace>, kube::Error> {
    kube::Api::<Namespace>::all(ctx.client_cluster.clone())
        .get_opt(ns)
        .await
}

fn is_terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// The answer to a list or delete-collection the target could not answer (`outcome` is the
/// 503) in a namespace that is terminating in the client: an empty list, so the namespace
/// controller finishes; the objects are deleted from the target by the sweep once it is back.
/// Any other request keeps its 503.
pub(super) async fn answer_terminating(
    ctx: &ListenerContext,
    info: &RequestInfo,
    accept: Option<&str>,
    outcome: Outcome,
) -> Outcome {
    let (Some(ns), true, StatusCode::SERVICE_UNAVAILABLE) = (
        &info.namespace,
        matches!(info.verb, Verb::List | Verb::DeleteCollection),
        outcome.response.status(),
    ) else {
        return outcome;
    };
    match client_namespace(ctx, ns).await {
        Ok(Some(n)) if is_terminating(&n) => {}
        _ => return outcome,
    }
    tracing::info!(
        namespace = %ns, resource = %info.resource, verb = outcome.verb,
        target = ctx.target.name(),
        "the target is unavailable; answered an empty list for a terminating namespace (its objects are deleted from the target once it is back)"
    );
    let (content_type, list) = empty_list(accept);
    Outcome {
        response: json_response(StatusCode::OK, content_type, &list),
        verb: outcome.verb,
        reason: "terminating_namespace",
    }
}

/// An empty list in the form `accept` asks for: metadata-only (the namespace controller's
/// client) or a plain list.
fn empty_list(accept: Option<&str>) -> (&'static str, serde_json::Value) {
    const PARTIAL: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let metadata = json!({"resourceVersion": ""});
    if accept.is_some_and(|a| a.replace(' ', "").contains("as=PartialObjectMetadataList")) {
        let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata, "items": []});
        return (PARTIAL, list);
    }
    let list = json!({"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": []});
    ("application/json", list)
}

/// The caller's `Accept`.
pub(super) fn accept(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_empty_list_has_the_form_the_caller_asks_for() {
        let (ct, list) = empty_list(Some(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
        ));
        assert!(ct.starts_with("application/json;as=PartialObjectMetadataList"));
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(list["items"], json!([]));
        let (ct, list) = empty_list(Some("application/json"));
        assert_eq!(ct, "application/json");
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"], json!([]));
    }
}
