//! AccessPolicies' ancestor statuses: `Accepted` as [`crate::model::access`] decided it, and
//! `Programmed` from the Cloudflare side's reports ([`crate::publish::cloudflare::access`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};

use super::{Notice, PolicyAncestorStatus, Write};
use crate::conditions::{Verdict, merge};
use crate::keys::{ObjKey, ParentRef};
use crate::model::access::{AncestorState, Decision};
use crate::publish::cloudflare::access::{AccessReport, AppVerdict};

/// Programmed reason: an application the controller did not make covers a destination.
pub const DOMAIN_OWNED_ELSEWHERE: &str = "DomainOwnedElsewhere";
/// Programmed reason: the Access API failed; retried.
pub const ACCESS_API_ERROR: &str = "AccessAPIError";
/// Programmed reason: the targets serve no hostname through this ancestor.
pub const NO_HOSTNAMES: &str = "NoHostnames";

/// `Programmed` of one ancestor.
fn programmed(
    policy: &ObjKey,
    state: &AncestorState,
    decision: &Decision,
    reports: &BTreeMap<String, AccessReport>,
) -> Verdict {
    let Some(skey) = &state.scope else {
        return Verdict::fail(
            "Programmed",
            "Pending",
            "the Gateway's class has no Cloudflare credentials yet",
        );
    };
    let held: BTreeSet<String> = decision
        .scopes
        .get(skey)
        .and_then(|(_, apps)| apps.get(policy))
        .map(|a| a.uris.clone())
        .unwrap_or_default();
    if state.offered.is_empty() {
        return Verdict::fail(
            "Programmed",
            NO_HOSTNAMES,
            "the targets serve no hostname through this Gateway (a route without hostnames cannot have an Access application)",
        );
    }
    let mine: BTreeSet<&String> = state.offered.intersection(&held).collect();
    if mine.is_empty() {
        return Verdict::ok(
            "Programmed",
            "every destination is covered by a policy on a more specific target",
        );
    }
    match reports.get(skey).and_then(|r| r.apps.get(policy)) {
        None => Verdict::fail(
            "Programmed",
            "Pending",
            "the Access application is being written",
        ),
        Some(AppVerdict::Failed(e)) => Verdict::fail(
            "Programmed",
            ACCESS_API_ERROR,
            format!("the Cloudflare Access API failed (retrying): {e}"),
        ),
        Some(AppVerdict::Ready { taken }) => {
            let lost: Vec<String> = mine
                .iter()
                .filter_map(|u| taken.get(*u).map(|n| format!("{u} (application {n:?})")))
                .collect();
            if lost.is_empty() {
                Verdict::ok(
                    "Programmed",
                    format!(
                        "the Access application covers {}",
                        mine.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            } else {
                Verdict::fail(
                    "Programmed",
                    DOMAIN_OWNED_ELSEWHERE,
                    format!(
                        "Access applications this controller did not make cover {}; they are left as they are and those destinations are not in this policy's application",
                        lost.join(", ")
                    ),
                )
            }
        }
    }
}

/// The status writes and Warning Events of every policy, given the scopes' reports.
pub fn status_writes(
    decision: &Decision,
    reports: &BTreeMap<String, AccessReport>,
    controller_name: &str,
    now: &Time,
) -> (Vec<Write>, Vec<Notice>) {
    let mut writes = Vec::new();
    let mut notices = Vec::new();
    for d in &decision.policies {
        let policy = &d.policy;
        let pkey = ObjKey::of(policy.as_ref());
        let current: Vec<(ParentRef, String, Vec<Condition>)> = policy
            .status
            .iter()
            .flat_map(|s| &s.ancestors)
            .map(|a| {
                (
                    ParentRef::from(&a.ancestor_ref),
                    a.controller_name.clone(),
                    a.conditions.clone(),
                )
            })
            .collect();
        let mut ancestors: Vec<(ParentRef, String, Vec<Condition>)> = current
            .iter()
            .filter(|a| a.1 != controller_name)
            .cloned()
            .collect();
        for (aref, state) in &d.ancestors {
            let before: Vec<Condition> = current
                .iter()
                .find(|a| a.1 == controller_name && a.0 == *aref)
                .map(|a| a.2.clone())
                .unwrap_or_default();
            let programmed = if state.accepted.status {
                programmed(&pkey, state, decision, reports)
            } else {
                Verdict::fail(
                    "Programmed",
                    state.accepted.reason.clone(),
                    "the policy is not accepted for this ancestor",
                )
            };
            let verdicts = [state.accepted.clone(), programmed];
            let after = merge(&before, &verdicts, policy.metadata.generation, now);
            // One Event per failure: Programmed repeats a refusal Accepted already reports.
            let reported = if state.accepted.status {
                &after[..]
            } else {
                &after[..1]
            };
            for c in reported {
                let was = before.iter().find(|b| b.type_ == c.type_);
                if c.status == "False"
                    && c.reason != "Pending"
                    && was.is_none_or(|w| w.status != c.status || w.reason != c.reason)
                {
                    notices.push(Notice {
                        object: policy.object_ref(&()),
                        warning: true,
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    });
                }
            }
            ancestors.push((aref.clone(), controller_name.to_owned(), after));
        }
        if ancestors == current {
            continue;
        }
        writes.push(Write::AccessPolicy {
            key: pkey,
            resource_version: policy.resource_version(),
            ancestors: ancestors
                .into_iter()
                .map(
                    |(ancestor_ref, controller_name, conditions)| PolicyAncestorStatus {
                        ancestor_ref,
                        controller_name,
                        conditions,
                    },
                )
                .collect(),
        });
    }
    (writes, notices)
}
