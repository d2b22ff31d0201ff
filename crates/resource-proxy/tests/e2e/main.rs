//! End-to-end tests of the resource proxy: real kube-apiservers from `test-cluster`, the built
//! `resource-proxy` binary between them, and the built kubectl as the user's client.
//!
//! One control plane per test binary: a `target` cluster holding the CRDs, and tenant clusters
//! whose proxies forward `widgets.example.test/v1` (and more) to it, and `route.test/v1` with
//! a sibling kind no entry names and a cluster-scoped kind (`routing`). Tests work in their own
//! namespaces.

mod boundaries;
#[path = "../common/mod.rs"]
mod common;
mod field_selectors;
mod fixture;
mod informer;
mod isolation;
#[path = "../support/kubectl.rs"]
mod kubectl_support;
mod kubectl_verbs;
mod monitoring;
mod openapi;
mod outage;
mod owner_references;
mod routing;
mod topologies;
mod watches;

pub use fixture::*;
pub use kubectl_support::*;
