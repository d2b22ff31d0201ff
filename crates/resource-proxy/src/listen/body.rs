//! The caller's request body as the request path reads it ([`CallerBody`]).
//!
//! The request path may answer before it has read the whole body: 401 before reading anything,
//! 413 after the first 3 MiB, 404 or 405 for a path or method it does not serve. A caller that
//! is still sending must still receive that answer. Left to itself, the HTTP/1.1 server stops
//! reading and closes the connection once the answer is written, and the caller's unsent bytes
//! make the kernel reset it: the caller sees a broken pipe and may lose the answer. Over HTTP/2
//! the stream is reset, which some clients (curl) report as a stream error instead of the
//! answer. So the rest of an unread body is read and discarded, up to [`DRAIN_LIMIT_BYTES`]
//! within [`DRAIN_TIME`] (nginx's lingering close, bounded in bytes as well): the caller
//! finishes its request, reads the answer, and the connection stays usable. Past either bound
//! the body is dropped and the server resets as before.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// At most this much of an unread body is read after an early answer.
pub const DRAIN_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// For at most this long.
pub const DRAIN_TIME: Duration = Duration::from_secs(10);

/// A request body that drains what is left of it when dropped unread (see the module docs).
#[derive(Debug)]
pub struct CallerBody {
    inner: Option<Incoming>,
}

impl CallerBody {
    /// Wraps the body of a request as the server received it.
    pub fn new(body: Incoming) -> Self {
        Self { inner: Some(body) }
    }
}

impl Body for CallerBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for CallerBody {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body));
        }
    }
}

/// Reads and discards the rest of `body` within the bounds.
async fn drain(mut body: Incoming) {
    let mut read = 0usize;
    let drained = tokio::time::timeout(DRAIN_TIME, async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                // The caller went away: nothing left to protect.
                return true;
            };
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > DRAIN_LIMIT_BYTES {
                return false;
            }
        }
        true
    })
    .await;
    if drained != Ok(true) {
        tracing::info!(
            read,
            "stopped reading a request body after an early answer: the caller may see a reset"
        );
    }
}
