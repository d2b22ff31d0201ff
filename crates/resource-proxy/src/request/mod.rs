//! The request path of one listener ([`handler`]): authenticate the caller, classify the
//! request, answer discovery ([`discovery`]), and forward resource requests to the target with
//! owner labels (RP-6), visibility (RP-7) and namespace mirroring (RP-8).

pub mod discovery;
pub mod handler;
