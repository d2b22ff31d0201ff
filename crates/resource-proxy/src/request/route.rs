//! Routing: the caller is authenticated (RP-4), connection upgrades are refused, and the request
//! is classified (RP-5): discovery and the OpenAPI documents are answered here
//! ([`super::discovery`], RP-13), resource requests go on to [`super::resource`].

use bytes::Bytes;
use http::header;
use http::{Request, StatusCode};
use hyper::body::Incoming;

use super::context::ListenerContext;
use super::discovery::{self, Source};
use super::forward::forward;
use super::headers::{header_str, is_upgrade};
use super::outcome::{Outcome, bytes_response, json_response};
use super::resource::resource_request;
use crate::api::request_info::{Route, classify};
use crate::api::status::Status;
use crate::listen::caller_auth::PeerChain;
use crate::metrics::GroupVersionReasonLabels;

/// Answers one request of the listener; `peer` is the client certificate chain of the
/// connection.
pub(super) async fn route(
    ctx: &ListenerContext,
    peer: Option<&PeerChain>,
    req: Request<Incoming>,
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
        Route::Outside | Route::OpenApiV2 => {
            Outcome::status(Status::path_not_found(), "get", "not_found")
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
