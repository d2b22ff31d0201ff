//! A body that runs a guard exactly once when it is over: read to its end, failed, or
//! dropped before either. What the proxies hang on a body this way: a request's metrics, a
//! connection that goes back to its pool only after a complete answer, a reserved stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

/// How a guarded body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Read to the end (also when dropped after its last frame, or empty from the start).
    Complete,
    /// A frame was an error.
    Failed,
    /// Dropped before its end.
    Dropped,
}

/// What runs when a [`GuardedBody`] ends.
pub trait Guard {
    fn finish(self, end: End);
}

impl<F: FnOnce(End)> Guard for F {
    fn finish(self, end: End) {
        self(end)
    }
}

/// No guard: the body is passed through alone.
impl<G: Guard> Guard for Option<G> {
    fn finish(self, end: End) {
        if let Some(g) = self {
            g.finish(end);
        }
    }
}

pin_project_lite::pin_project! {
    /// `inner` with `guard`, which runs once, when `inner` ends, fails or is dropped.
    pub struct GuardedBody<B: Body, G: Guard> {
        #[pin]
        inner: B,
        guard: Option<G>,
    }

    impl<B: Body, G: Guard> PinnedDrop for GuardedBody<B, G> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(guard) = this.guard.take() {
                let end = if this.inner.is_end_stream() {
                    End::Complete
                } else {
                    End::Dropped
                };
                guard.finish(end);
            }
        }
    }
}

impl<B: Body, G: Guard> GuardedBody<B, G> {
    pub fn new(inner: B, guard: G) -> Self {
        Self {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B: Body, G: Guard> Body for GuardedBody<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        let end = match &polled {
            Poll::Ready(None) => Some(End::Complete),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => Some(End::Complete),
            Poll::Ready(Some(Err(_))) => Some(End::Failed),
            _ => None,
        };
        if let Some(end) = end
            && let Some(guard) = this.guard.take()
        {
            guard.finish(end);
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

#[cfg(test)]
mod tests;
