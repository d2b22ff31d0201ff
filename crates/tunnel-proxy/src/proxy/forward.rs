//! The hyper path's exchange with a backend: the request's headers prepared, the first chunk
//! of a chunked body awaited ([`Peeked`]), the body teed to the rule's mirrors, sent with the
//! rule's timeout, an upgrade joined end to end, and the answer's hop-by-hop fields removed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
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
        // An HTTP/1.1 request body of unknown length is chunked. Its first chunk is read
        // before anything is sent, so that a body malformed from its start reaches no backend
        // (nor mirror). HTTP/2 bodies are not waited for: a bidirectional stream's client may
        // send nothing before the response headers. An upgrade's request has no body.
        let peek =
            !upgrade && parts.version == Version::HTTP_11 && body.size_hint().exact().is_none();
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
        let endpoint = self.routed.upstream.next_endpoint();
        let mirror_target = (!self.routed.rule.mirrors.is_empty()).then(|| path_and_query.clone());
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
        let exchange = async {
            let body = if peek {
                Peeked::read(body).await?
            } else {
                Peeked::unread(body)
            };
            let body = body.map_err(|e| BoxError::from(ClientBodyError(e)));
            let senders = match &mirror_target {
                Some(target) => mirror::start(self.routed.rule, &parts, target),
                None => Vec::new(),
            };
            let body: ProxyBody = if senders.is_empty() {
                body.boxed_unsync()
            } else {
                Tee::new(body, senders).boxed_unsync()
            };
            let request = Request::from_parts(parts, body);
            Ok::<_, hyper::Error>(self.routed.upstream.send(endpoint, request).await)
        };
        let result = match self.routed.rule.response_timeout() {
            Some(d) => match tokio::time::timeout(d, exchange).await {
                Ok(r) => r,
                Err(_) => {
                    warn!(route = %self.routed.rule.route, backend = %self.routed.backend.name, %endpoint,
                        reason = "timeout", timeout_ms = d.as_millis() as u64, "backend request failed");
                    self.host_metrics.backend_error(BackendErrorReason::Timeout);
                    return backend_failure(BackendErrorReason::Timeout).into_response();
                }
            },
            None => exchange.await,
        };
        let mut resp = match result {
            Ok(Ok(resp)) => resp,
            Err(e) => {
                // The first chunk failed: nothing was sent to any backend.
                debug!(route = %self.routed.rule.route, error = %error_chain(&e),
                    "the client's request body failed before it was forwarded; answering 400");
                return bad_request("invalid request body\n").into_response();
            }
            Ok(Err(e)) if client_body_failed(&e) => {
                // The client's mistake (or departure), not the backend's: no backend error.
                debug!(route = %self.routed.rule.route, error = %error_chain(&e),
                    "the client's request body failed; answering 400");
                return bad_request("invalid request body\n").into_response();
            }
            Ok(Err(e)) => {
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

/// A request body whose first frame may have been read ahead: yields that frame, then the
/// rest. Its length hint and end are those of the whole body, so the forwarded request keeps
/// the framing (chunked) it would have had unread.
struct Peeked<B> {
    first: Option<Frame<Bytes>>,
    /// The body ended when it was read ahead; it is not polled again.
    ended: bool,
    rest: B,
}

impl<B: Body<Data = Bytes> + Unpin> Peeked<B> {
    /// `body`, nothing read.
    fn unread(body: B) -> Self {
        Self {
            first: None,
            ended: false,
            rest: body,
        }
    }

    /// Waits for `body`'s first frame, its end or its error. Over HTTP/1.1 this is when hyper
    /// sends `100 Continue` to a client that asked for it.
    async fn read(mut body: B) -> Result<Self, B::Error> {
        let first = body.frame().await.transpose()?;
        Ok(Self {
            ended: first.is_none(),
            first,
            rest: body,
        })
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Peeked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.size_hint();
        let Some(first) = self.first.as_ref().and_then(Frame::data_ref) else {
            return rest;
        };
        let n = first.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(n));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(n));
        }
        hint
    }
}
