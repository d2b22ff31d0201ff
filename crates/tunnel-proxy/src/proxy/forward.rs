//! The hyper path's exchange with a backend: the request's headers prepared, its body
//! teed to the rule's mirrors, sent with the rule's timeout, an upgrade joined end to end,
//! and the answer's hop-by-hop fields removed.

use http::header::HeaderValue;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tracing::{debug, warn};

use super::answer::{backend_failure, bad_request, classify, error_chain, local};
use super::headers::{prepare_request_headers, strip_hop_by_hop, upstream_target};
use super::mirror::{self, Tee};
use super::route::Routed;
use crate::metrics::{BackendErrorReason, HostMetrics};
use crate::upstream::{BoxError, ProxyBody};

/// The client's request body failed while it was being forwarded (invalid chunked framing,
/// a connection or stream that ended early). Marks the error so that the failed exchange is
/// answered 400 and not counted as the backend's.
#[derive(Debug, thiserror::Error)]
#[error("the client's request body failed")]
struct ClientBodyError(#[source] hyper::Error);

/// Whether `e` (or an error it was caused by) is a [`ClientBodyError`].
fn client_body_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| e.is::<ClientBodyError>())
}

/// The hyper path's exchange with a backend.
pub(crate) struct Forward<'a> {
    pub routed: &'a Routed<'a>,
    pub host_metrics: &'a HostMetrics,
    pub peer_ip: &'a HeaderValue,
}

impl Forward<'_> {
    pub(crate) async fn run(
        self,
        req: Request<Incoming>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
        let upgrade = client_upgrade.is_some();
        if upgrade && self.routed.upstream.protocol != tunnel_config::config::BackendProtocol::Http1
        {
            warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, "upgrade request to an HTTP/2 backend refused");
            self.host_metrics.backend_error(BackendErrorReason::Upgrade);
            return backend_failure(BackendErrorReason::Upgrade).into_response();
        }
        prepare_request_headers(
            &mut parts.headers,
            self.routed.rule,
            &self.routed.authority,
            self.peer_ip,
            upgrade,
        );
        let Some(path_and_query) =
            upstream_target(self.routed.rule, &parts.uri, self.routed.matched_prefix)
        else {
            return local(StatusCode::BAD_REQUEST, "invalid request target\n").into_response();
        };
        let body = body.map_err(|e| BoxError::from(ClientBodyError(e)));
        let body: ProxyBody = if self.routed.rule.mirrors.is_empty() {
            body.boxed_unsync()
        } else {
            let senders = mirror::start(self.routed.rule, &parts, &path_and_query);
            if senders.is_empty() {
                body.boxed_unsync()
            } else {
                Tee::new(body, senders).boxed_unsync()
            }
        };
        let endpoint = self.routed.upstream.next_endpoint();
        let uri = match self.routed.upstream.uri(endpoint, path_and_query) {
            Ok(uri) => uri,
            Err(e) => {
                warn!(route = %self.routed.rule.route, error = %e, "cannot build the upstream URI");
                return local(StatusCode::BAD_REQUEST, "invalid request target\n").into_response();
            }
        };
        parts.uri = uri;
        parts.version = match self.routed.upstream.protocol {
            tunnel_config::config::BackendProtocol::Http1 => Version::HTTP_11,
            tunnel_config::config::BackendProtocol::Http2 => Version::HTTP_2,
        };
        let request = self
            .routed
            .upstream
            .send(endpoint, Request::from_parts(parts, body));
        let deadline = match (
            self.routed.rule.request_timeout,
            self.routed.rule.backend_timeout,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let result = match deadline {
            Some(d) => match tokio::time::timeout(d, request).await {
                Ok(r) => r,
                Err(_) => {
                    warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, %endpoint,
                        reason = "timeout", timeout_ms = d.as_millis() as u64, "backend request failed");
                    self.host_metrics.backend_error(BackendErrorReason::Timeout);
                    return backend_failure(BackendErrorReason::Timeout).into_response();
                }
            },
            None => request.await,
        };
        let mut resp = match result {
            Ok(resp) => resp,
            Err(e) if client_body_failed(&e) => {
                // The client's mistake (or departure), not the backend's: no backend error.
                debug!(route = %self.routed.rule.route, error = %error_chain(&e),
                    "the client's request body failed; answering 400");
                return bad_request("invalid request body\n").into_response();
            }
            Err(e) => {
                let reason = classify(&e);
                warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, %endpoint,
                    reason = reason.as_str(), error = %error_chain(&e), "backend request failed");
                self.host_metrics.backend_error(reason);
                return backend_failure(reason).into_response();
            }
        };
        if let Some(client_upgrade) = client_upgrade
            && resp.status() == StatusCode::SWITCHING_PROTOCOLS
        {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            let route = self.routed.rule.route.clone();
            let backend = self.routed.backend.name.clone();
            tokio::spawn(async move {
                match tokio::try_join!(client_upgrade, upstream_upgrade) {
                    Ok((client, upstream)) => {
                        let mut client = TokioIo::new(client);
                        let mut upstream = TokioIo::new(upstream);
                        if let Err(e) =
                            tokio::io::copy_bidirectional(&mut client, &mut upstream).await
                        {
                            debug!(%route, %backend, error = %e, "upgraded connection ended with an error");
                        }
                    }
                    Err(e) => {
                        warn!(%route, %backend, reason = "upgrade", error = %e, "upgrade failed")
                    }
                }
            });
            let (mut parts, _) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers, true);
            return Response::from_parts(
                parts,
                Empty::new().map_err(|never| match never {}).boxed_unsync(),
            );
        }
        strip_hop_by_hop(resp.headers_mut(), false);
        resp
    }
}
