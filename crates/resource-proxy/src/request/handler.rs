//! Where a listener's requests enter the request path ([`handle`]), and the accounting of every
//! request: the request metrics, the log line, and the requests whose caller went away.

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::context::ListenerContext;
use super::outcome::ProxyBody;
use super::route::route;
use crate::api::request_info::{Route, classify};
use crate::listen::caller_auth::PeerChain;
use crate::listen::server::Handler;
use crate::metrics::ReasonLabels;

/// Answers one request. `peer` is the client certificate chain of the connection.
pub async fn handle(
    ctx: Arc<ListenerContext>,
    peer: Option<Arc<PeerChain>>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let inflight = ctx.series.inflight().clone();
    inflight.inc();
    // Counts the request as `canceled` if the caller goes away before it is answered (the
    // server then drops this future).
    let mut guard = RequestGuard {
        ctx: &ctx,
        inflight,
        method: req.method().clone(),
        uri: req.uri().clone(),
        answered: false,
    };
    let outcome = route(&ctx, peer.as_deref(), req).await;
    guard.answered = true;

    let code = outcome.response.status().as_u16();
    ctx.series.count(&outcome.verb, code, outcome.reason);
    if outcome.verb != "watch" {
        ctx.series
            .observe_duration(&outcome.verb, started.elapsed().as_secs_f64());
    }
    tracing::debug!(method = %guard.method, path = guard.uri.path(), verb = %outcome.verb, code, reason = outcome.reason, "request");
    outcome.response
}

/// Keeps `vcluster_proxy_inflight_requests` right and counts requests whose caller left.
struct RequestGuard<'a> {
    ctx: &'a ListenerContext,
    inflight: prometheus_client::metrics::gauge::Gauge,
    method: Method,
    uri: http::Uri,
    answered: bool,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        self.inflight.dec();
        if self.answered {
            return;
        }
        let l = &self.ctx.listener;
        let verb = match classify(
            &l.group,
            &l.version,
            self.method.as_str(),
            self.uri.path(),
            self.uri.query(),
        ) {
            Route::Resource(info) => info.verb.as_str().to_owned(),
            _ => "get".to_owned(),
        };
        self.ctx
            .metrics
            .request_terminations
            .get_or_create(&ReasonLabels {
                target: self.ctx.target.name().to_owned(),
                reason: "canceled".into(),
            })
            .inc();
        // nginx's "client closed request": no answer was sent.
        self.ctx.series.count(&verb, 499, "canceled");
        tracing::info!(method = %self.method, path = self.uri.path(), verb, reason = "canceled", "the caller went away before the answer");
    }
}

impl Handler for ListenerContext {
    type Body = ProxyBody;

    fn handle(
        self: Arc<Self>,
        peer: Option<Arc<PeerChain>>,
        req: Request<Incoming>,
    ) -> impl Future<Output = Response<ProxyBody>> + Send {
        handle(self, peer, req)
    }
}
