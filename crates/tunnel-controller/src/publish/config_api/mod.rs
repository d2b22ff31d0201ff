//! The config API's mutual TLS (TG-10): the controller's CA and the certificates issued from it
//! ([`pki`], pure), the CA's Secret read and written ([`ca`]), each plane's TLS Secret and how a
//! round pushes to it ([`tls`], [`plane`]), and whether a plane's certificates are missing or
//! near their end ([`expiry`]).

pub mod ca;
pub mod expiry;
pub mod pki;
pub mod plane;
pub mod tls;
