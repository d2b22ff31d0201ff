//! `http1-wire`: the HTTP/1.1 wire rules of the workspace, in one place and without I/O.
//!
//! Both proxies speak HTTP/1.1 on some leg: the tunnel-proxy's fast path reads client requests
//! and backend responses itself and watches the bytes hyper reads for request smuggling; the
//! resource proxy reads its target's answers itself. They share:
//!
//! - [`head`]: request and response heads parsed (with `httparse`) under explicit [`Limits`],
//!   the fields as spans of the caller's buffer, and a [`FieldSummary`] of what the fields say
//!   about the body and the connection;
//! - [`framing`]: how long a message body is (RFC 9112 §6.3), with the request-smuggling rules
//!   as typed errors;
//! - [`chunked`]: the one chunked decoder (RFC 9112 §7.1), fed arbitrary pieces of input,
//!   bounded in its size line and trailer section;
//! - [`hop`]: which fields a proxy never passes on (RFC 9110 §7.6.1);
//! - [`guard`]: a body that runs a guard once when it ends, fails or is dropped.
//!
//! Every function is pure: the crate is what the fuzz targets feed
//! ([`parse_request_head`], [`parse_response_head`], [`ChunkedDecoder::decode`]).
//!
//! # Hop-by-hop fields
//!
//! RFC 9110 §7.6.1 makes `Connection` and every field it names hop-by-hop, and lists
//! `Proxy-Connection`, `Keep-Alive`, `TE`, `Transfer-Encoding` and `Upgrade` as fields a proxy
//! removes or replaces. This crate adds three:
//!
//! - `Trailer`: neither proxy forwards trailer fields over HTTP/1.1 (the fast path passes a
//!   chunked body through unchanged but states framing itself; the resource proxy drops
//!   trailers), so announcing them would be a lie;
//! - `Proxy-Authorization` and `Proxy-Authenticate` (RFC 9110 §11.7.1, §11.7.2): they are for
//!   the proxy the client chose, and neither proxy here authenticates clients as a proxy: a
//!   client's proxy credentials must not reach a backend, and a backend's proxy challenge is
//!   not addressed to the client.
//!
//! `TE: trailers` may be kept on request ([`hop::Keep::te_trailers`]): gRPC needs it, and
//! the tunnel proxy keeps it for that. An upgrade may keep `Upgrade` and `Connection: upgrade`
//! ([`hop::Keep::upgrade`]).
#![forbid(unsafe_code)]

pub mod chunked;
pub mod framing;
pub mod guard;
pub mod head;
pub mod hop;

pub use chunked::{ChunkedDecoder, ChunkedError, ChunkedLimits, Step};
pub use framing::{Framing, FramingError, ResponseFraming, request_framing, response_framing};
pub use guard::{End, Guard, GuardedBody};
pub use head::{
    ContentLength, Field, FieldSummary, HeadError, Limits, RequestHead, ResponseHead, Span,
    TransferCoding, parse_request_head, parse_response_head,
};
pub use hop::{Keep, connection_names, is_hop_by_hop, strip_hop_by_hop};
