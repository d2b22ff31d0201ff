//! Cloudflare Access on routes, decided: AccessPolicy objects (GEP-713 policy attachment) → one
//! Access application per policy and Cloudflare account scope, covering the targets' hostnames
//! (and an HTTPRoute's path prefixes), with the policy's rules as the application's policies.
//!
//! [`decide`] is the pure decision: policies, routes and the model → the applications each scope
//! should hold and each policy's `Accepted` per ancestor. Precedence (GEP-713): every
//! destination (`host` or `host/path`) goes to one policy, the one on the most specific target
//! (an HTTPRoute rule, then an HTTPRoute, then a Gateway listener, then a Gateway), then the
//! oldest, then by namespace/name; two policies on the same target: the older wins and the other
//! is `Conflicted`. A Gateway target covers the hostnames of the routes attached to it (through
//! the named listener with a sectionName), whole hostnames.
//!
//! The applications are reconciled with what exists by [`crate::publish::cloudflare::access`],
//! and each policy's `Programmed` is written by [`crate::status::access`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cloudflare_api::AccessPolicyRule;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteRulesMatchesPathType};
use serde_json::{Value, json};

use crate::api::{
    AccessDecision, AccessPolicy, AccessRule, AccessSubjects, AccessTargetKind, AccessTargetRef,
    IdpProvider,
};
use crate::conditions::Verdict;
use crate::credentials::Credentials;
use crate::keys::{GATEWAY_GROUP, ObjKey, ParentRef, RouteKind};
use crate::model::Model;
use crate::model::rules::hostnames::normalize;
use crate::names::sha256_hex;

/// Reason: another AccessPolicy on the same target is older.
pub const CONFLICTED: &str = "Conflicted";
/// Reason: the policy's rules cannot be expressed (see the message).
pub const INVALID: &str = "Invalid";
/// Reason: the target (or its sectionName) does not exist.
pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
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

mod decision;

pub use decision::*;

#[cfg(test)]
mod tests;
