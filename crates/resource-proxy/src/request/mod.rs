//! The request path of one listener, in the order a request meets it:
//!
//! 1. [`handler`]: [`handle`](handler::handle), which accounts for every request (metrics, the
//!    log line, callers that leave), with the listener's
//!    [`ListenerContext`](context::ListenerContext) that every step reads;
//! 2. [`route`]: caller authentication (RP-4), classification (RP-5), and the answers to
//!    discovery and the OpenAPI documents ([`discovery`], RP-13);
//! 3. [`resource`]: a resource request in named steps: the namespace ([`namespace`], RP-8), the
//!    owner selector (RP-7), the ownership check ([`owned_get`] for a named GET), owner labels and
//!    owner references in the body (RP-6, RP-8);
//! 4. [`forward`]: to the target and back (RP-12, RP-14), creates resolved by their create id
//!    ([`create`]), with the headers [`headers`] lets through; the proxy's own requests in the
//!    target fail with a [`lookup`] error;
//! 5. [`outcome`]: the answer and its metric labels, and the answers the proxy gives itself.

pub mod context;
pub mod create;
pub mod discovery;
pub mod forward;
pub mod handler;
pub mod headers;
pub mod lookup;
pub mod namespace;
pub mod outcome;
pub mod owned_get;
pub mod resource;
pub mod route;
