//! The hostname rules the model applies: listener and route hostname intersection
//! ([`hostnames`]), which namespaces may serve which hostnames ([`ownership`]), and routes of
//! different namespaces losing requests to each other in one table ([`shadowing`]).

pub mod hostnames;
pub mod ownership;
pub mod shadowing;
