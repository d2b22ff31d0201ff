//! What every client connection shares with the server: the stop signal, the time a client
//! has to send a request head, and its address as a forwarding field.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::HeaderValue;
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};

/// Raised once, when the server stops accepting: connections finish the request in flight
/// and close. Each connection also holds a `live` token, so the server knows when all are
/// gone.
pub(crate) struct Stop {
    raised: AtomicBool,
    notify: Notify,
    live: watch::Receiver<()>,
}

impl Stop {
    /// A signal not raised yet; `live` is the receiver every connection's handle clones.
    pub(crate) fn new(live: watch::Receiver<()>) -> Self {
        Self {
            raised: AtomicBool::new(false),
            notify: Notify::new(),
            live,
        }
    }

    /// Raises the signal, for every connection and every waiter.
    pub(crate) fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Resolves when the signal is raised. Created before checking [`Stop::is_raised`], it
    /// also resolves for a signal in between (`notify_waiters` reaches every `Notified`
    /// created before it, polled or not).
    pub(crate) fn raised(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// A connection's handle: shares the signal, and counts as live while it exists.
    pub(crate) fn handle(self: &Arc<Self>) -> StopHandle {
        StopHandle {
            stop: self.clone(),
            _live: self.live.clone(),
        }
    }
}

/// What a connection holds of the [`Stop`] signal.
#[derive(Clone)]
pub(crate) struct StopHandle {
    stop: Arc<Stop>,
    _live: watch::Receiver<()>,
}

impl std::ops::Deref for StopHandle {
    type Target = Stop;

    fn deref(&self) -> &Stop {
        &self.stop
    }
}

/// How long a client may take to send a request head (slowloris protection).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The peer address as an `X-Forwarded-For` element.
pub(crate) fn peer_ip(peer: SocketAddr) -> HeaderValue {
    HeaderValue::try_from(peer.ip().to_string()).expect("an IP address is a valid header value")
}
