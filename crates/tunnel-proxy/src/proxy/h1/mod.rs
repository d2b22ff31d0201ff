//! The HTTP/1.1 fast path of the data plane.
//!
//! Most traffic is keep-alive HTTP/1.1 with small or no request bodies, routed to HTTP/1.1
//! backends. For that case one task per client connection parses the request head, routes
//! it with the live table, and drives the backend exchange over a pooled connection itself:
//! no per-request task, channel or timer, and heads are parsed once per leg. Routing,
//! filters, forwarding headers, timeouts, status codes, logs and metrics are the same
//! functions the hyper path uses ([`super::route`], [`super::headers`], [`super::answer`]).
//!
//! Everything else is handed to hyper for the rest of the connection, from the head of the
//! request the fast path declined: HTTP/2 (prior knowledge), HTTP/1.0, upgrades, `Expect`,
//! `Transfer-Encoding` and bodies over 64 KiB, routes with mirrors or HTTP/2 backends, and
//! every head `httparse` does not accept (hyper then gives its own error answer).

pub(crate) mod codec;
mod exchange;
mod server;

pub(crate) use server::serve_connection;
