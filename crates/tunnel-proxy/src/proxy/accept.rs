//! The listener: accepts connections, starts each on the HTTP/1.1 fast path, and drains them
//! when the server stops.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::conn::Stop;
use super::{h1, service};
use crate::state::State;

/// Accepts connections until `shutdown` resolves, then stops accepting, asks every
/// connection to finish (HTTP/1.1 closes after the response in flight, HTTP/2 sends GOAWAY)
/// and returns once all of them have.
///
/// Each connection starts on the HTTP/1.1 fast path (`h1`); hyper takes over a
/// connection at the first request the fast path does not handle itself (HTTP/2, upgrades,
/// streamed or chunked request bodies, backends over HTTP/2, mirrors, malformed requests).
pub async fn serve(listener: TcpListener, state: Arc<State>, shutdown: impl Future<Output = ()>) {
    let hyper = Arc::new(service::hyper_server(state.max_request_head()));
    let (live_tx, live) = watch::channel(());
    let stop = Arc::new(Stop::new(live));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "set_nodelay failed");
        }
        tokio::spawn(h1::serve_connection(
            stream,
            peer,
            state.clone(),
            hyper.clone(),
            stop.handle(),
        ));
    }
    drop(listener);
    stop.raise();
    // The server's own receiver is the one in `stop`.
    info!(
        connections = live_tx.receiver_count() - 1,
        "stopped accepting; finishing in-flight requests"
    );
    drop(stop);
    live_tx.closed().await;
}
