//! Cloudflare Access on routes: AccessPolicy objects (GEP-713 policy attachment) → one Access
//! application per policy and Cloudflare account scope, covering the targets' hostnames (and an
//! HTTPRoute's path prefixes), with the policy's rules as the application's policies.
//!
//! [`decide`] is the pure decision: policies, routes and the model → the applications each scope
//! should hold and each policy's `Accepted` per ancestor. Precedence (GEP-713): every
//! destination (`host` or `host/path`) goes to one policy, the one on the most specific target
//! (an HTTPRoute rule, then an HTTPRoute, then a Gateway listener, then a Gateway), then the
//! oldest, then by namespace/name; two policies on the same target: the older wins and the other
//! is `Conflicted`. A Gateway target covers the hostnames of the routes attached to it (through
//! the named listener with a sectionName), whole hostnames.
//!
//! [`plan_changes`] is the pure reconciliation against the applications that exist: an
//! application is the controller's when its name is [`app_name`] of its owner ID; any other
//! application is never changed, and a destination it covers is left out of ours and reported.
//! [`AccessSync`] is the effect part: it lists the applications, applies the changes with the
//! client's retry, counts them, and remembers the last report so a steady cluster costs no
//! calls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use cloudflare_api::{
    AccessApp, AccessDestination, AccessPolicyRule, Client, NewAccessApp, RetryPolicy, retry,
};
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteRulesMatchesPathType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::api::{
    AccessDecision, AccessPolicy, AccessRule, AccessSubjects, AccessTargetKind, AccessTargetRef,
    IdpProvider,
};
use crate::conditions::{Verdict, merge};
use crate::credentials::Credentials;
use crate::ingress::rule_hostname;
use crate::keys::{GATEWAY_GROUP, ObjKey, ParentRef, RouteKind};
use crate::model::Model;
use crate::names::sha256_hex;
use crate::status::{Notice, Write};

/// Reason: another AccessPolicy on the same target is older.
pub const CONFLICTED: &str = "Conflicted";
/// Reason: the policy's rules cannot be expressed (see the message).
pub const INVALID: &str = "Invalid";
/// Reason: the target (or its sectionName) does not exist.
pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
/// Programmed reason: an application the controller did not make covers a destination.
pub const DOMAIN_OWNED_ELSEWHERE: &str = "DomainOwnedElsewhere";
/// Programmed reason: the Access API failed; retried.
pub const ACCESS_API_ERROR: &str = "AccessAPIError";
/// Programmed reason: the targets serve no hostname through this ancestor.
pub const NO_HOSTNAMES: &str = "NoHostnames";

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

/// The Cloudflare side applications are written with: the class's owner ID and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub owner: String,
    pub credentials: Credentials,
}

impl Scope {
    /// A stable key (the token hashed, never shown).
    pub fn key(&self) -> String {
        sha256_hex(&format!(
            "access\n{}\n{}\n{:?}",
            self.owner, self.credentials.api_token, self.credentials.account_id
        ))
    }
}

/// An application as a policy wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredApp {
    /// `host` or `host/path`, sorted.
    pub uris: BTreeSet<String>,
    pub session_duration: Option<String>,
    pub rules: Vec<AccessPolicyRule>,
}

/// One ancestor of a policy: `Accepted`, and where its applications live.
#[derive(Debug, Clone, PartialEq)]
pub struct AncestorState {
    pub accepted: Verdict,
    /// The ancestor Gateway's scope key (none: not found, or no credentials).
    pub scope: Option<String>,
    /// Destinations the policy's targets offered through this ancestor (before precedence).
    pub offered: BTreeSet<String>,
}

/// One policy's decision.
#[derive(Debug, Clone)]
pub struct PolicyDecision {
    pub policy: Arc<AccessPolicy>,
    pub ancestors: BTreeMap<ParentRef, AncestorState>,
}

/// Everything [`decide`] says.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// By scope key: the scope and its applications by policy.
    pub scopes: BTreeMap<String, (Scope, BTreeMap<ObjKey, DesiredApp>)>,
    pub policies: Vec<PolicyDecision>,
}

mod apply;
mod decision;
mod reconcile;

pub use apply::*;
pub use decision::*;
pub use reconcile::*;

#[cfg(test)]
mod tests;
