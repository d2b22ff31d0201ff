//! Where requests come in: the TLS listeners ([`server`]), one per group/version, with the
//! serving certificate every replica shares ([`serving`]), and the check that only the client
//! cluster's aggregator calls them ([`caller_auth`], RP-4). A listener hands each request to the
//! request path of its group/version ([`crate::request`]).

pub mod caller_auth;
pub mod server;
pub mod serving;
