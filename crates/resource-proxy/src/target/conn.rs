//! What both kinds of connection to a target share: the dial that makes one, and how a
//! request on one fails. [`super::exchange`] (HTTP/1.1, whole answers) and [`super::pool`]
//! (HTTP/2 streams) both build on this, and neither on the other's internals.

use futures::future::BoxFuture;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Why a dial failed. Nothing of any request was sent.
#[derive(Debug, Clone)]
pub struct DialError {
    /// The dial took longer than the dial timeout.
    pub timeout: bool,
    pub message: String,
}

/// A dial in progress: TCP and TLS to one peer, ALPN offered `h2` and `http/1.1`.
pub type Dial = BoxFuture<'static, Result<TlsStream<TcpStream>, DialError>>;

/// A boxed error of a body or connection.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`super::pool::Pool::send`] (or [`super::exchange::Exchanges::send`]) failed.
#[derive(Debug)]
pub enum SendError {
    /// No connection: the dial failed.
    Dial(DialError),
    /// The connections closed before the request could be written.
    NotSent(BoxError),
    /// The request was (possibly) written; the exchange then failed.
    Sent(BoxError),
}

/// What went wrong on an HTTP/1.1 connection to the target.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("the connection to the target failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the target closed the connection before its answer was complete")]
    Closed,
    #[error("the target's answer is not valid HTTP/1.1: {0}")]
    Malformed(&'static str),
    #[error("the target's answer is not valid HTTP/1.1: {0}")]
    Chunked(#[from] http1_wire::ChunkedError),
}
