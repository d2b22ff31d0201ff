//! Cloudflare Access applications brought to the decision of [`crate::model::access`].
//!
//! [`plan_changes`] is the pure reconciliation against the applications that exist: an
//! application is the controller's when its name is [`app_name`] of its owner ID; any other
//! application is never changed, and a destination it covers is left out of ours and reported.
//! [`AccessSync`] is the effect part: it lists the applications, applies the changes with the
//! client's retry, counts them, and remembers the last report so a steady cluster costs no
//! calls.

use std::collections::{BTreeMap, BTreeSet};

use cloudflare_api::{
    AccessApp, AccessDestination, AccessPolicyRule, Client, NewAccessApp, RetryPolicy, retry,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Mutex;

use super::memo::Synced;
use crate::keys::ObjKey;
use crate::model::access::{DesiredApp, Scope};

const NAME_PREFIX: &str = "tunnel-gateway/";

/// The name of the application of `policy` made by the installation `owner`: the ownership
/// mark (the controller touches only applications named so with its own owner ID).
pub fn app_name(owner: &str, policy: &ObjKey) -> String {
    format!("{NAME_PREFIX}{owner}: {policy}")
}

/// The owner and policy of an application name made by [`app_name`].
pub fn parse_app_name(name: &str) -> Option<(String, ObjKey)> {
    let (owner, policy) = name.strip_prefix(NAME_PREFIX)?.split_once(": ")?;
    let (namespace, name) = policy.split_once('/')?;
    (!owner.is_empty() && !namespace.is_empty() && !name.is_empty()).then(|| {
        (
            owner.to_owned(),
            ObjKey {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
        )
    })
}

mod apply;
mod reconcile;

pub use apply::*;
pub use reconcile::*;

#[cfg(test)]
mod tests;
