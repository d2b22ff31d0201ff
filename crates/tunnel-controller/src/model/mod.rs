//! The controller's decisions for one snapshot, computed without I/O: which GatewayClasses,
//! Gateways and listeners are accepted, which route parents attach (allowedRoutes, sectionName,
//! port, hostname intersection), the route table of each data-plane partition, and the
//! hostnames of each tunnel's ingress document in priority order.
//!
//! Outcomes of I/O (a tunnel's Cloudflare sync, a partition's pushes) are applied afterwards by
//! [`crate::status`]; this module only says what the cluster asks for.
//!
//! - `types`: the settings and the outcome types ([`Model`] and its parts), re-exported here.
//! - `classes`: GatewayClasses and their GatewayClassConfigs; the shared plane's tunnel.
//! - `gateways`: Gateways and listeners, with the dedicated-plane decisions of
//!   [`crate::model::dedicated`].
//! - `listener_sets`: ListenerSets attached to those Gateways, their listeners merged after the
//!   Gateway's own.
//! - `attachment`: every route attached in order, BackendTLSPolicies in use, partitions' route
//!   tables and listeners, tunnels' hostnames, shadowing between routes.
//! - `route`: one route against the Gateways and ListenerSets: its parents, the verdicts about
//!   its rules, its table entries in each partition.
//! - `selector`: the label selectors of allowedRoutes and allowedListeners against a namespace.
//! - [`lane`]: routes changed since a model's snapshot, decided against that model alone and
//!   spliced into the proxies' tables (the fast way of a route change).
//!
//! The golden tests in `tests/model/` run snapshots through [`compute`] and the status writer.

pub mod access;
mod attachment;
mod classes;
pub mod dedicated;
mod gateways;
pub mod lane;
mod listener_sets;
mod route;
pub mod rules;
mod selector;
mod types;

use std::collections::BTreeMap;

pub use attachment::RouteContext;
pub use types::*;

use crate::model::dedicated::Verification;
use crate::observe::world::Snapshot;
use crate::translate::BackendIndex;

/// The decisions for `snap`; `verifications` are the Cloudflare API's answers about dedicated
/// Gateways' tunnel claims so far (claims not in it are listed in `Model::verify_requests`).
pub fn compute(
    snap: &Snapshot,
    settings: &Settings,
    verifications: &BTreeMap<String, Verification>,
) -> Model {
    compute_with_context(snap, settings, verifications).0
}

/// [`compute`], with what attaching routes read (for [`lane`]).
pub fn compute_with_context(
    snap: &Snapshot,
    settings: &Settings,
    verifications: &BTreeMap<String, Verification>,
) -> (Model, RouteContext) {
    let mut model = Model::default();
    let classes = classes::decide(snap, settings, &mut model);
    let idx = BackendIndex::new(
        snap.services.iter().cloned(),
        snap.endpoint_slices.iter().cloned(),
        snap.reference_grants.iter().cloned(),
        snap.backend_tls_policies.iter().cloned(),
        snap.config_maps.iter().cloned(),
        snap.secrets.iter().cloned(),
    );
    gateways::decide(snap, &classes, verifications, &idx, &mut model);
    listener_sets::decide(snap, &idx, &mut model);
    let ctx = RouteContext::new(snap, idx, &model);
    attachment::routes(snap, settings, &ctx, &mut model);
    listener_sets::partition_listeners(&mut model);
    attachment::partitions(&mut model);
    attachment::shadows(&mut model);
    (model, ctx)
}
