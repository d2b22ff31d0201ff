//! What a round writes through the Cloudflare API: each tunnel's ingress document ([`tunnels`],
//! planned by [`ingress`]), the opt-in DNS records ([`dns`]), Access applications ([`access`]),
//! and the verification of dedicated Gateways' tunnel claims ([`verify`]). [`memo`] is what lets
//! an unchanged input skip its calls.

pub mod access;
pub mod dns;
pub mod ingress;
pub mod memo;
pub mod tunnels;
pub mod verify;
