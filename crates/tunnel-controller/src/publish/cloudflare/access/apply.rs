//! The effect part: applying the plan through the Cloudflare client, counting the changes,
//! and remembering each scope's last report.

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

/// A scope, with the applications desired → the report.
struct Last {
    scope: Scope,
    synced: Synced<BTreeMap<ObjKey, DesiredApp>, AccessReport>,
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
            .filter(|(_, l)| !l.synced.input.is_empty() || l.synced.result.incomplete)
            .map(|(k, l)| (k.clone(), l.scope.clone()))
            .collect()
    }

    /// Brings `owner`'s applications in `account` to `desired`; an unchanged `desired` is not
    /// looked at again until [`super::super::memo::RESYNC_AFTER`] has passed, unless the last
    /// sync failed.
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
            && !l.synced.result.incomplete
            && l.synced.stands_for(desired)
        {
            return l.synced.result.clone();
        }
        let report = self.run(client, account, &scope.owner, desired).await;
        let synced = Synced::new(desired.clone(), report.clone());
        last.insert(
            key.to_owned(),
            Last {
                scope: scope.clone(),
                synced,
            },
        );
        report
    }

    /// Forgets scopes not in `keys` whose applications are all gone.
    pub async fn retain(&self, keys: &BTreeSet<String>) {
        self.last.lock().await.retain(|k, l| {
            keys.contains(k) || !l.synced.input.is_empty() || l.synced.result.incomplete
        });
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
