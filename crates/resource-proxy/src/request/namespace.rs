//! Namespaces of namespaced writes (RP-8): the namespace must exist in the client cluster, and
//! it is mirrored to the target. Cluster-scoped resources have none: nothing is mirrored for
//! them, and a namespaced path to one is the API server's 404.

use bytes::Bytes;
use http::header;
use http::{Request, StatusCode};
use k8s_openapi::api::core::v1::Namespace;

use super::context::ListenerContext;
use super::lookup::LookupError;
use super::outcome::{Outcome, Step, unavailable};
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
    match client_namespace(ctx, ns).await {
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
        Ok(Some(_)) => {}
        Err(e) => {
            tracing::error!(namespace = %ns, error = %e, "cannot read the namespace in the client cluster");
            return Err(unavailable(
                verb,
                "error",
                "the client cluster could not be asked about the namespace",
            )
            .into());
        }
    }
    if !info.dry_run
        && let Err(e) = ensure_target_namespace(ctx, ns).await
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

/// Creates the namespace in the target unless it exists.
async fn ensure_target_namespace(ctx: &ListenerContext, ns: &str) -> Result<(), LookupError> {
    let get = Request::get(format!("/api/v1/namespaces/{ns}"))
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(get).await?;
    match resp.status() {
        StatusCode::OK => return Ok(()),
        StatusCode::NOT_FOUND => {}
        status => {
            return Err(LookupError::Answered {
                doing: "reading the namespace",
                status,
            });
        }
    }
    let body =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let post = Request::post("/api/v1/namespaces")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Bytes::from(body.to_string()))
        .expect("valid request");
    let resp = ctx.target.send(post).await?;
    match resp.status() {
        s if s.is_success() || s == StatusCode::CONFLICT => {
            tracing::info!(
                namespace = ns,
                target = ctx.target.name(),
                "created the namespace in the target"
            );
            Ok(())
        }
        status => Err(LookupError::Answered {
            doing: "creating the namespace",
            status,
        }),
    }
}
