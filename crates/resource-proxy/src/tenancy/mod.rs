//! The rules that keep clients apart in a shared target, free of I/O: owner labels on every write
//! ([`labels`], RP-6); the owner selector on collections ([`selector`]) and the ownership of a
//! GET answer ([`answer_owner`]) for visibility (RP-7); the caller's owner references kept out
//! of the target's garbage collector ([`owner_refs`], RP-8).

pub mod answer_owner;
pub mod labels;
pub mod owner_refs;
pub mod selector;
