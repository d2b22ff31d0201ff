//! Beside the request path: the client's namespaces in the target, with no orphans after an
//! outage. [`mark`] decides from the UID the proxy records on each mirrored namespace whether
//! the client's objects there belong to a client namespace that still exists; [`namespaces`]
//! does the mirroring for the request path and the leader's sweep that deletes what a deleted
//! (or deleted and recreated) client namespace left in the target.

pub mod mark;
pub mod namespaces;
