//! The effect part: applying the plan through the Cloudflare client, and the policies'
//! ancestor statuses.

use super::*;

/// Labels of `cftunnel_access_application_changes_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OpLabel {
    /// `created`, `updated`, `deleted`, `failed` (refused or unanswered), `refused` (a
    /// destination another application covers: left out).
    pub op: &'static str,
}

/// A policy's application after a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppVerdict {
    /// In place; `taken`: destinations left out because another application covers them.
    Ready {
        taken: BTreeMap<String, String>,
    },
    Failed(String),
}

/// One scope's outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessReport {
    pub apps: BTreeMap<ObjKey, AppVerdict>,
    pub incomplete: bool,
}

struct Last {
    scope: Scope,
    desired: BTreeMap<ObjKey, DesiredApp>,
    at: Instant,
    report: AccessReport,
}

/// Applies [`plan_changes`] through the Cloudflare API; remembers each scope's last report.
pub struct AccessSync {
    retry: RetryPolicy,
    changes: Family<OpLabel, Counter>,
    last: Mutex<BTreeMap<String, Last>>,
    /// Scopes looked at once since this process started (see [`AccessSync::sweep`]).
    swept: Mutex<BTreeSet<String>>,
}

impl AccessSync {
    pub fn new(retry: RetryPolicy, changes: Family<OpLabel, Counter>) -> AccessSync {
        AccessSync {
            retry,
            changes,
            last: Mutex::default(),
            swept: Mutex::default(),
        }
    }

    /// The first time this process sees the scope `key` with no policy wanting an
    /// application, lists the scope's applications once: ours left by policies deleted while no
    /// replica led (the memory of what was made is this process's) are then removed through
    /// [`AccessSync::sync`], whose report is returned. `None`: already swept, or nothing of
    /// ours is there. A failed listing is logged and not retried (a token without Access
    /// permission must not fail every round of a cluster that does not use Access).
    pub async fn sweep(
        &self,
        key: &str,
        scope: &Scope,
        client: &Client,
        account: &str,
    ) -> Option<AccessReport> {
        if !self.swept.lock().await.insert(key.to_owned()) {
            return None;
        }
        let sleep = tokio::time::sleep;
        let existing = match retry(&self.retry, sleep, || client.list_access_apps(account)).await {
            Ok(apps) => apps,
            Err(e) => {
                tracing::warn!(owner = scope.owner, error = %e, "listing Access applications to remove those of policies deleted while no replica led failed; not retried");
                return None;
            }
        };
        let ours = existing
            .iter()
            .any(|app| parse_app_name(&app.name).is_some_and(|(owner, _)| owner == scope.owner));
        if !ours {
            return None;
        }
        tracing::info!(
            owner = scope.owner,
            "removing Access applications of policies that no longer exist"
        );
        Some(
            self.sync(key, scope, client, account, &BTreeMap::new())
                .await,
        )
    }

    fn count(&self, op: &'static str) {
        self.changes.get_or_create(&OpLabel { op }).inc();
    }

    /// Whether `key` was synced before (its applications may need removing).
    pub async fn known(&self, key: &str) -> bool {
        self.last.lock().await.contains_key(key)
    }

    /// Scopes whose last sync left applications in place or failed: synced again (with nothing
    /// desired) even when no Gateway uses them any more, so their applications go.
    pub async fn pending(&self) -> Vec<(String, Scope)> {
        self.last
            .lock()
            .await
            .iter()
            .filter(|(_, l)| !l.desired.is_empty() || l.report.incomplete)
            .map(|(k, l)| (k.clone(), l.scope.clone()))
            .collect()
    }

    /// Brings `owner`'s applications in `account` to `desired`; an unchanged `desired` is not
    /// looked at again until [`crate::tunnels::RESYNC_AFTER`] has passed, unless the last sync
    /// failed.
    pub async fn sync(
        &self,
        key: &str,
        scope: &Scope,
        client: &Client,
        account: &str,
        desired: &BTreeMap<ObjKey, DesiredApp>,
    ) -> AccessReport {
        let mut last = self.last.lock().await;
        if let Some(l) = last.get(key)
            && l.desired == *desired
            && !l.report.incomplete
            && l.at.elapsed() < crate::tunnels::RESYNC_AFTER
        {
            return l.report.clone();
        }
        let report = self.run(client, account, &scope.owner, desired).await;
        last.insert(
            key.to_owned(),
            Last {
                scope: scope.clone(),
                desired: desired.clone(),
                at: Instant::now(),
                report: report.clone(),
            },
        );
        report
    }

    /// Forgets scopes not in `keys` whose applications are all gone.
    pub async fn retain(&self, keys: &BTreeSet<String>) {
        self.last
            .lock()
            .await
            .retain(|k, l| keys.contains(k) || !l.desired.is_empty() || l.report.incomplete);
    }

    async fn run(
        &self,
        client: &Client,
        account: &str,
        owner: &str,
        desired: &BTreeMap<ObjKey, DesiredApp>,
    ) -> AccessReport {
        let sleep = tokio::time::sleep;
        let existing = match retry(&self.retry, sleep, || client.list_access_apps(account)).await {
            Ok(apps) => apps,
            Err(e) => {
                tracing::warn!(owner, error = %e, "listing Access applications failed; retrying next round");
                return AccessReport {
                    apps: desired
                        .keys()
                        .map(|p| {
                            (
                                p.clone(),
                                AppVerdict::Failed(format!("listing Access applications: {e}")),
                            )
                        })
                        .collect(),
                    incomplete: true,
                };
            }
        };
        let (changes, foreign) = plan_changes(owner, desired, &existing);
        let mut report = AccessReport {
            apps: foreign
                .into_iter()
                .map(|(p, f)| {
                    if !f.taken.is_empty() {
                        self.count("refused");
                    }
                    (p, AppVerdict::Ready { taken: f.taken })
                })
                .collect(),
            incomplete: false,
        };
        for change in &changes {
            let (policy, result, op) = match change {
                Change::Create { policy, app } => (
                    policy,
                    retry(&self.retry, sleep, || {
                        client.create_access_app(account, app)
                    })
                    .await
                    .map(drop),
                    "created",
                ),
                Change::Update { policy, id, app } => (
                    policy,
                    retry(&self.retry, sleep, || {
                        client.update_access_app(account, id, app)
                    })
                    .await
                    .map(drop),
                    "updated",
                ),
                Change::Delete { policy, id } => (
                    policy,
                    retry(&self.retry, sleep, || client.delete_access_app(account, id)).await,
                    "deleted",
                ),
            };
            match result {
                Ok(()) => {
                    self.count(op);
                    tracing::info!(policy = %policy, op, "Access application {op}");
                }
                Err(e) => {
                    self.count("failed");
                    tracing::warn!(policy = %policy, op, error = %e, "Access application change failed; retrying next round");
                    report.incomplete = true;
                    if desired.contains_key(policy) {
                        report
                            .apps
                            .insert(policy.clone(), AppVerdict::Failed(e.to_string()));
                    }
                }
            }
        }
        report
    }
}

/// `Programmed` of one ancestor.
pub(super) fn programmed(
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
                let r = &a.ancestor_ref;
                (
                    ParentRef {
                        group: r.group.clone(),
                        kind: r.kind.clone(),
                        namespace: r.namespace.clone(),
                        name: r.name.clone(),
                        section_name: r.section_name.clone(),
                        port: r.port,
                    },
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
                .map(|(ancestor_ref, controller_name, conditions)| {
                    crate::status::PolicyAncestorStatus {
                        ancestor_ref,
                        controller_name,
                        conditions,
                    }
                })
                .collect(),
        });
    }
    (writes, notices)
}
