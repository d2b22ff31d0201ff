//! Routing: the caller is authenticated (RP-4), connection upgrades are refused, and the request
//! is classified (RP-5): discovery and the OpenAPI documents (v3, and v2 filtered as v3 is) are
//! answered here ([`super::discovery`], RP-13), resource requests of the routed resources go on
//! to [`super::resource`], the others are 404 as for a resource the API server does not serve.

use bytes::Bytes;
use http::header;
use http::{Request, StatusCode};

use super::context::ListenerContext;
use super::discovery::{self, Source};
use super::forward::forward;
use super::headers::{header_str, is_upgrade};
use super::outcome::{Outcome, bytes_response, json_response, unavailable};
use super::resource::resource_request;
use crate::api::request_info::{Route, classify};
use crate::api::status::Status;
use crate::listen::body::CallerBody;
use crate::listen::caller_auth::PeerChain;
use crate::metrics::GroupVersionReasonLabels;

/// Answers one request of the listener; `peer` is the client certificate chain of the
/// connection.
pub(super) async fn route(
    ctx: &ListenerContext,
    peer: Option<&PeerChain>,
    req: Request<CallerBody>,
) -> Outcome {
    if let Err(e) = ctx.auth.check(peer, req.headers()) {
        tracing::warn!(reason = %e, path = %req.uri().path(), "refused an unauthenticated request");
        return Outcome::status(Status::unauthorized(), "unknown", "unauthenticated");
    }
    if is_upgrade(req.headers()) {
        tracing::info!(path = %req.uri().path(), "refused a connection upgrade (exec, attach, port-forward and websockets are not proxied)");
        return Outcome::status(
            Status::upgrade_not_supported(),
            "unknown",
            "upgrade_rejected",
        );
    }
    let l = &ctx.listener;
    let route = classify(
        &l.group,
        &l.version,
        req.method().as_str(),
        req.uri().path(),
        req.uri().query(),
    );
    match route {
        Route::Outside => Outcome::status(Status::path_not_found(), "get", "not_found"),
        Route::OpenApiV2 => {
            let document = match ctx.discovery.openapi_v2(&ctx.target).await {
                Ok(document) => document,
                Err((document, why)) => {
                    tracing::warn!(group_version = %ctx.listener.group_version(), target = ctx.target.name(), cause = %why, "OpenAPI v2 served locally: the target could not answer");
                    document
                }
            };
            Outcome {
                response: bytes_response(StatusCode::OK, "application/json", document),
                verb: "get".into(),
                reason: "discovery",
            }
        }
        Route::DiscoveryRoot => {
            let (list, _) = resource_list(ctx).await;
            let outcome = if discovery::wants_aggregated(header_str(req.headers(), &header::ACCEPT))
            {
                json_response(
                    StatusCode::OK,
                    discovery::AGGREGATED_V2,
                    &ctx.discovery.aggregated(&list),
                )
            } else {
                json_response(
                    StatusCode::OK,
                    "application/json",
                    &ctx.discovery.api_group_list(),
                )
            };
            Outcome {
                response: outcome,
                verb: "get".into(),
                reason: "discovery",
            }
        }
        Route::DiscoveryGroup => Outcome {
            response: json_response(
                StatusCode::OK,
                "application/json",
                &ctx.discovery.api_group(),
            ),
            verb: "get".into(),
            reason: "discovery",
        },
        Route::DiscoveryGroupVersion => {
            let (list, _) = resource_list(ctx).await;
            Outcome {
                response: bytes_response(StatusCode::OK, "application/json", list),
                verb: "get".into(),
                reason: "discovery",
            }
        }
        Route::OpenApiV3Root => Outcome {
            response: json_response(
                StatusCode::OK,
                "application/json",
                &ctx.discovery.openapi_v3_root(&ctx.target).await,
            ),
            verb: "get".into(),
            reason: "discovery",
        },
        Route::OpenApiV3GroupVersion if !ctx.discovery.openapi_v3_whole() => {
            match ctx.discovery.openapi_v3_routed(&ctx.target).await {
                Ok(document) => Outcome {
                    response: json_response(StatusCode::OK, "application/json", &document),
                    verb: "get".into(),
                    reason: "discovery",
                },
                Err(why) => {
                    tracing::warn!(group_version = %ctx.listener.group_version(), target = ctx.target.name(), cause = %why, "OpenAPI v3 not served: the target could not answer");
                    unavailable(
                        "get",
                        "upstream_error",
                        "the target could not serve the OpenAPI v3 document",
                    )
                }
            }
        }
        Route::OpenApiV3GroupVersion => {
            let path_and_query = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            forward(
                ctx,
                req.method().clone(),
                &path_and_query,
                req.headers(),
                Bytes::new(),
                "get",
                false,
            )
            .await
        }
        // A kind of the group/version no entry names is unknown to the client, as the API
        // server answers for a resource it does not serve; the target is not asked.
        Route::Resource(info) if !l.resources.routes(&info.resource) => {
            tracing::debug!(resource = %info.resource, verb = info.verb.as_str(), "refused a resource no customResources entry routes");
            Outcome::status(Status::path_not_found(), info.verb.as_str(), "not_routed")
        }
        Route::Resource(info) => resource_request(ctx, info, req).await,
    }
}

/// The group/version's resource list (RP-13), counted and logged when it was served locally.
async fn resource_list(ctx: &ListenerContext) -> (Bytes, Source) {
    let (list, source, why) = ctx.discovery.resource_list(&ctx.target).await;
    if let Some(why) = why {
        let reason = match source {
            Source::LastGood => "last_good",
            _ => "synthesized",
        };
        ctx.metrics
            .discovery_fallbacks
            .get_or_create(&GroupVersionReasonLabels {
                target: ctx.target.name().to_owned(),
                group_version: ctx.listener.group_version(),
                reason: reason.to_owned(),
            })
            .inc();
        tracing::warn!(group_version = %ctx.listener.group_version(), target = ctx.target.name(), cause = %why, answer = reason, "discovery served locally: the target could not answer");
    }
    (list, source)
}

#[cfg(test)]
mod tests {
    use crate::api::request_info::{Route, classify};
    use crate::config::Resources;

    /// Whether a request reaches the target under a named `parcels` entry of `g/v1`: `None` when
    /// it is not a resource request at all (404 before routing).
    fn routed(method: &str, path: &str, query: Option<&str>) -> Option<bool> {
        match classify("g", "v1", method, path, query) {
            Route::Resource(info) => {
                Some(Resources::Named(vec!["parcels".into()]).routes(&info.resource))
            }
            _ => None,
        }
    }

    #[test]
    fn no_spelling_of_a_path_reaches_a_kind_no_entry_names() {
        for (method, path, query, expected) in [
            ("GET", "/apis/g/v1/namespaces/n/parcels", None, Some(true)),
            ("GET", "/apis/g/v1/parcels", Some("watch=1"), Some(true)),
            (
                "PATCH",
                "/apis/g/v1/namespaces/n/parcels/p/status",
                None,
                Some(true),
            ),
            (
                "PUT",
                "/apis/g/v1/namespaces/n/parcels/p/scale",
                None,
                Some(true),
            ),
            (
                "GET",
                "/apis/g/v1/watch/namespaces/n/parcels",
                None,
                Some(true),
            ),
            ("GET", "/apis/g/v1/namespaces/n/gadgets", None, Some(false)),
            ("GET", "/apis/g/v1/gadgets", Some("watch=true"), Some(false)),
            (
                "GET",
                "/apis/g/v1/watch/namespaces/n/gadgets",
                None,
                Some(false),
            ),
            ("POST", "/apis/g/v1/namespaces/n/gadgets", None, Some(false)),
            (
                "DELETE",
                "/apis/g/v1/namespaces/n/gadgets",
                None,
                Some(false),
            ),
            ("DELETE", "/apis/g/v1/gadgets/x", None, Some(false)),
            // Percent-encoded and case variants of a sibling are the sibling (or nothing).
            (
                "GET",
                "/apis/g/v1/namespaces/n/%67adgets",
                None,
                Some(false),
            ),
            ("GET", "/apis/g/v1/namespaces/n/Parcels", None, Some(false)),
            // A routed plural as a namespace, a name or a subresource routes nothing.
            (
                "GET",
                "/apis/g/v1/namespaces/parcels/gadgets",
                None,
                Some(false),
            ),
            (
                "GET",
                "/apis/g/v1/namespaces/n/gadgets/parcels",
                None,
                Some(false),
            ),
            (
                "PATCH",
                "/apis/g/v1/gadgets/parcels/status",
                None,
                Some(false),
            ),
            ("GET", "/apis/g/v1/namespaces/n", None, Some(false)),
            (
                "GET",
                "/apis/g/v1/namespaces/n/parcels",
                Some("fieldSelector=metadata.name%3Dgadgets"),
                Some(true),
            ),
            // Traversal and encoded separators never become a resource request.
            (
                "GET",
                "/apis/g/v1/namespaces/n/parcels/../gadgets",
                None,
                None,
            ),
            (
                "GET",
                "/apis/g/v1/namespaces/n/parcels/%2e%2e/gadgets",
                None,
                None,
            ),
            (
                "GET",
                "/apis/g/v1/namespaces/n/parcels%2F..%2Fgadgets",
                None,
                None,
            ),
            ("GET", "/apis/g/v1/proxy/gadgets", None, None),
        ] {
            assert_eq!(
                routed(method, path, query),
                expected,
                "{method} {path} {query:?}"
            );
        }
    }
}
