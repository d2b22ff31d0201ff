//! The data plane: an HTTP/1.1 + h2c server that routes each request with the live table and
//! forwards it, streaming, to a backend.
//!
//! Status codes the proxy produces itself: 400 for requests it refuses to interpret (no or
//! conflicting host, `Content-Length` with `Transfer-Encoding`, a request body that failed,
//! such as invalid chunked framing), 431 for request heads over `--max-request-head`, 404
//! when no route matches (gRPC: 200 with `grpc-status: 12`), 500 for rules with nothing to
//! forward to, the rule's or
//! backend's configured failure status, 503 when no connection to the chosen endpoint could be
//! made, 502 when the TLS handshake failed or the backend broke the exchange, 504 when the
//! response headers did not arrive within the request/backend timeout.
//!
//! A request's way through the stages (private modules under `src/proxy/`), each importing
//! only stages listed after it:
//!
//! - `accept`: the listener; every connection starts on the fast path;
//! - `h1`: the HTTP/1.1 fast path, which parses, routes and forwards in the connection's
//!   task, or hands the connection to
//! - `service`: hyper's server (HTTP/2, upgrades, streamed bodies, mirrors), behind the
//!   `smuggling` guard and the `rewind` of bytes the fast path already read;
//! - `forward`: the hyper path's exchange with a backend, and `mirror`, the copies of a
//!   request that go beside it;
//! - `route`: the live table's decision for a request head;
//! - `headers`: what a request loses (hop-by-hop fields) and gains (forwarding fields, the
//!   rule's changes) on its way to a backend;
//! - `answer`: answers the proxy makes itself, failures as status codes, and the metrics of
//!   each request;
//! - `conn`: what every connection shares with the server (the stop signal, timeouts).

mod accept;
pub(crate) mod answer;
pub(crate) mod conn;
mod forward;
mod h1;
pub(crate) mod headers;
mod mirror;
mod rewind;
pub(crate) mod route;
mod service;
pub mod smuggling;

pub use accept::serve;
