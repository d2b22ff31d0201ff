//! The request to the target and the caller's answer from the target's: non-watch requests get
//! [`REQUEST_DEADLINE`] end to end (RP-12) and every failure of the target becomes a 503 with
//! `Retry-After` (RP-14); JSON answers get the caller's owner references back (RP-8), watches
//! stream event by event.

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};

use super::context::ListenerContext;
use super::headers::{RetainEndToEnd, forwardable, is_json, json_only_accept};
use super::outcome::{Outcome, ProxyBody, unavailable};
use crate::metrics::{ReasonLabels, TargetLabels};
use crate::target::{TargetBody, TargetError};
use crate::tenancy::owner_refs;

/// The request to send to the target: the caller's method, path and forwardable headers (JSON
/// answers only), and `body`.
pub(super) fn target_request(
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Request<Bytes> {
    let mut builder = Request::builder().method(method).uri(path_and_query);
    let listed = http1_wire::connection_names(headers);
    for (name, value) in headers {
        if name == header::ACCEPT {
            builder = builder.header(name, json_only_accept(value));
        } else if forwardable(name) && !listed.contains(name) {
            builder = builder.header(name, value);
        }
    }
    builder.body(body).expect("valid request parts")
}

/// Sends a request to the target and streams its answer back.
#[allow(clippy::too_many_arguments)]
pub(super) async fn forward(
    ctx: &ListenerContext,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
    verb: &str,
    watch: bool,
) -> Outcome {
    let req = target_request(method, path_and_query, headers, body);
    if watch {
        let req = req.map(Full::new);
        return answer(ctx, ctx.target.watch(req).await, path_and_query, verb, true).await;
    }
    // RP-12: a non-watch request and its response get 60 s end to end.
    match tokio::time::timeout(REQUEST_DEADLINE, async {
        answer(ctx, ctx.target.send(req).await, path_and_query, verb, false).await
    })
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::error!(path = %path_and_query, target = ctx.target.name(), reason = "deadline", "request cut at the {REQUEST_DEADLINE:?} deadline");
            terminated(ctx, "deadline");
            target_unavailable(ctx, verb, "deadline")
        }
    }
}

/// Counts a request ended before its answer was complete.
pub(super) fn terminated(ctx: &ListenerContext, reason: &str) {
    ctx.metrics
        .request_terminations
        .get_or_create(&ReasonLabels {
            target: ctx.target.name().to_owned(),
            reason: reason.to_owned(),
        })
        .inc();
}

/// The longest a non-watch request may take, end to end.
pub const REQUEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// The 503 every non-watch failure of the target answers (RP-14).
pub(super) fn target_unavailable(
    ctx: &ListenerContext,
    verb: &str,
    reason: &'static str,
) -> Outcome {
    unavailable(
        verb,
        reason,
        &format!(
            "target tenant cluster {:?} for {} is unavailable",
            ctx.target.name(),
            ctx.listener.group_version()
        ),
    )
}

/// Logs a 5xx answer of the target with the start of its body (the caller gets a 503).
pub(super) async fn log_server_error(
    ctx: &ListenerContext,
    path: &str,
    resp: Response<TargetBody>,
    what: &str,
) {
    let code = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    tracing::error!(
        path, target = ctx.target.name(), status = code.as_u16(),
        answer = %String::from_utf8_lossy(&body[..body.len().min(512)]),
        "{what}"
    );
}

/// Turns the target's answer (or failure) into the caller's.
pub(super) async fn answer(
    ctx: &ListenerContext,
    result: Result<Response<TargetBody>, TargetError>,
    path_and_query: &str,
    verb: &str,
    watch: bool,
) -> Outcome {
    match result {
        Ok(resp) if !watch && resp.status().is_server_error() => {
            log_server_error(
                ctx,
                path_and_query,
                resp,
                "the target answered with a server error",
            )
            .await;
            target_unavailable(ctx, verb, "upstream_error")
        }
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            parts.headers.retain_mut_hop_by_hop();
            let body: ProxyBody = if watch {
                let body = if is_json(&parts.headers) {
                    restore_watch_stream(body)
                } else {
                    body.boxed_unsync()
                };
                let label = TargetLabels {
                    target: ctx.target.name().to_owned(),
                };
                let gauge = ctx.metrics.active_watches.get_or_create(&label).clone();
                let events = ctx.metrics.watch_events.get_or_create(&label).clone();
                let broken = ctx
                    .metrics
                    .request_terminations
                    .get_or_create(&ReasonLabels {
                        target: ctx.target.name().to_owned(),
                        reason: "error".into(),
                    })
                    .clone();
                gauge.inc();
                let guard = WatchGuard(gauge);
                body.map_frame(move |f| {
                    let _ = &guard;
                    if f.is_data() {
                        events.inc();
                    }
                    f
                })
                .map_err(move |e| {
                    broken.inc();
                    tracing::warn!(error = %e, "a watch stream from the target broke off");
                    e
                })
                .boxed_unsync()
            } else if is_json(&parts.headers) {
                // Buffered (non-watch answers are bounded) so owner references can be restored.
                match body.collect().await {
                    Ok(collected) => {
                        let bytes = collected.to_bytes();
                        let bytes = match owner_refs::restore_body(&bytes) {
                            Some(restored) => {
                                parts.headers.remove(header::CONTENT_LENGTH);
                                Bytes::from(restored)
                            }
                            None => bytes,
                        };
                        Full::new(bytes)
                            .map_err(|never| match never {})
                            .boxed_unsync()
                    }
                    Err(e) => {
                        tracing::error!(error = %e, path = %path_and_query, "the target's answer broke off");
                        return unavailable(
                            verb,
                            "upstream_error",
                            "the target's answer broke off",
                        );
                    }
                }
            } else {
                body.boxed_unsync()
            };
            Outcome {
                response: Response::from_parts(parts, body),
                verb: verb.to_owned(),
                reason: "upstream",
            }
        }
        Err(e) => {
            let reason = e.reason();
            tracing::error!(error = %e, reason, path = %path_and_query, "the target could not be reached");
            target_unavailable(ctx, verb, reason)
        }
    }
}

/// A watch stream with owner references restored in each event. Events are JSON lines; each
/// complete line is passed on as soon as it arrives.
fn restore_watch_stream(body: TargetBody) -> ProxyBody {
    use bytes::BytesMut;
    use hyper::body::Frame;

    fn line(l: Bytes) -> Bytes {
        let trimmed = l.strip_suffix(b"\n").unwrap_or(&l);
        match owner_refs::restore_body(trimmed) {
            Some(mut restored) => {
                restored.push(b'\n');
                Bytes::from(restored)
            }
            None => l,
        }
    }
    let stream = futures::stream::unfold(
        (body, BytesMut::new(), false),
        |(mut body, mut buf, done)| async move {
            if done {
                return None;
            }
            loop {
                if let Some(pos) = memchr::memchr(b'\n', &buf) {
                    let l = buf.split_to(pos + 1).freeze();
                    if buf.is_empty() {
                        // An idle watch keeps no buffer: the allocation goes with the last line.
                        buf = BytesMut::new();
                    }
                    return Some((Ok(Frame::data(line(l))), (body, buf, false)));
                }
                match body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => buf.extend_from_slice(&data),
                        Err(other) => return Some((Ok(other), (body, buf, false))),
                    },
                    Some(Err(e)) => return Some((Err(e), (body, buf, true))),
                    None if buf.is_empty() => return None,
                    None => {
                        let rest = buf.split().freeze();
                        return Some((Ok(Frame::data(line(rest))), (body, buf, true)));
                    }
                }
            }
        },
    );
    http_body_util::StreamBody::new(stream).boxed_unsync()
}

struct WatchGuard(prometheus_client::metrics::gauge::Gauge);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use http::header::{HeaderName, HeaderValue};

    use super::*;

    #[test]
    fn hop_by_hop_fields_and_the_ones_connection_names_are_dropped_both_ways() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("x-end", HeaderValue::from_static("1"));
        let req = target_request(Method::GET, "/x", &headers, Bytes::new());
        let names: Vec<&str> = req.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-end"]);
        headers.insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic"),
        );
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        headers.retain_mut_hop_by_hop();
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["www-authenticate", "x-end"]);
    }
}
