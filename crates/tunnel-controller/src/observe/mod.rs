//! The first stage: what the cluster holds. [`world`] keeps a reflector of every watched kind,
//! the journal of their changes, and the [`world::Snapshot`] a round reads; nothing here
//! decides anything.

pub mod world;
