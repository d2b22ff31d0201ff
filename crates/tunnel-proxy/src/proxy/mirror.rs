//! Request mirroring: the selected mirrors get a copy of the request, and its body through a
//! [`Tee`] that never waits for them; their answers are read and dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tracing::debug;

use super::answer::error_chain;
use crate::table::{Mirror, Rule, Target};
use crate::upstream::{BoxError, Endpoint, ProxyBody, Upstream};
use tunnel_config::filters;

/// Frames a mirror may lag behind the primary request before it is cut off.
const MIRROR_QUEUE_FRAMES: usize = 16;
/// A mirror without a configured timeout gives up after this long.
const MIRROR_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts the selected mirrors; returns the senders feeding their bodies.
pub(crate) fn start(
    rule: &Rule,
    parts: &Parts,
    path_and_query: &PathAndQuery,
) -> Vec<MirrorSender> {
    let mut senders = Vec::new();
    for mirror in &rule.mirrors {
        if !filters::mirror_selected(mirror.percent, rand::random_range(0..100)) {
            continue;
        }
        let Target::Upstream(upstream) = &mirror.backend.target else {
            continue;
        };
        let endpoint = upstream.next_endpoint();
        let Ok(uri) = upstream.uri(endpoint, path_and_query.clone()) else {
            continue;
        };
        let (tx, rx) = mpsc::channel(MIRROR_QUEUE_FRAMES);
        let cut = Arc::new(AtomicBool::new(false));
        let mut req = Request::new(
            MirrorBody {
                rx,
                cut: cut.clone(),
            }
            .boxed_unsync(),
        );
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = parts.headers.clone();
        *req.version_mut() = match upstream.protocol {
            tunnel_config::config::BackendProtocol::Http1 => Version::HTTP_11,
            tunnel_config::config::BackendProtocol::Http2 => Version::HTTP_2,
        };
        if parts.method == Method::GET || parts.method == Method::HEAD {
            req.headers_mut().remove(header::CONTENT_LENGTH);
        }
        spawn_mirror(mirror, upstream, endpoint, req, rule.backend_timeout);
        senders.push(MirrorSender { tx, cut });
    }
    senders
}

fn spawn_mirror(
    mirror: &Mirror,
    upstream: &Upstream,
    endpoint: &Endpoint,
    req: Request<ProxyBody>,
    timeout: Option<Duration>,
) {
    let name = mirror.backend.name.clone();
    let fut = upstream.send(endpoint, req);
    tokio::spawn(async move {
        match tokio::time::timeout(timeout.unwrap_or(MIRROR_TIMEOUT), fut).await {
            Ok(Ok(resp)) => {
                // Read the body so the connection goes back to the pool.
                let _ = resp.into_body().collect().await;
            }
            Ok(Err(e)) => debug!(mirror = %name, error = %error_chain(&e), "mirror request failed"),
            Err(_) => debug!(mirror = %name, "mirror request timed out"),
        }
    });
}

pub(crate) struct MirrorSender {
    tx: mpsc::Sender<Frame<Bytes>>,
    cut: Arc<AtomicBool>,
}

pin_project_lite::pin_project! {
    /// The primary request body, copying each frame to the mirrors without ever waiting for
    /// them: a mirror whose queue is full is cut off (its request fails) and the primary
    /// carries on.
    pub(crate) struct Tee<B> {
        #[pin]
        inner: B,
        mirrors: Vec<MirrorSender>,
    }
}

impl<B> Tee<B> {
    pub(crate) fn new(inner: B, mirrors: Vec<MirrorSender>) -> Self {
        Self { inner, mirrors }
    }
}

impl<B: Body<Data = Bytes, Error = BoxError>> Body for Tee<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let copy = || {
                    if let Some(data) = frame.data_ref() {
                        Some(Frame::data(data.clone()))
                    } else {
                        frame.trailers_ref().map(|t| Frame::trailers(t.clone()))
                    }
                };
                this.mirrors
                    .retain(|m| match copy().map(|f| m.tx.try_send(f)) {
                        None | Some(Ok(())) => true,
                        Some(Err(_)) => {
                            m.cut.store(true, Ordering::Relaxed);
                            false
                        }
                    });
            }
            Poll::Ready(Some(Err(_))) => {
                for m in this.mirrors.drain(..) {
                    m.cut.store(true, Ordering::Relaxed);
                }
            }
            Poll::Ready(None) => this.mirrors.clear(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A mirror's request body: the frames the [`Tee`] copied.
struct MirrorBody {
    rx: mpsc::Receiver<Frame<Bytes>>,
    cut: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("mirror fell behind the primary request and was cut off")]
struct MirrorCut;

impl Body for MirrorBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(None) if self.cut.load(Ordering::Relaxed) => {
                Poll::Ready(Some(Err(MirrorCut.into())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
