//! The target namespaces of one client and its objects in them: mirroring with the client
//! namespace's UID recorded ([`NamespaceCleaner::ensure`], RP-8), and deleting what a deleted
//! client namespace left behind ([`NamespaceCleaner::sweep`], run by [`run`] while this replica
//! leads). The decisions are [`super::mark`]'s.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::mark::{self, BeforeWrite, ClientNamespace, Reason, Sweep};
use crate::config::{GroupVersionListener, Resources};
use crate::metrics::{GroupVersionLabels, Metrics, ReasonLabels, TargetLabels};
use crate::target::{TargetClient, TargetError};
use crate::tenancy::labels::OwnerLabels;
use crate::tenancy::selector::scope_query;

/// How often the leader sweeps the target's namespaces.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Why a request of the cleaner in the target failed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("the target's answer broke off: {0}")]
    Body(String),
    #[error("the target's answer is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{doing}: the target answered {status}")]
    Answered { doing: String, status: StatusCode },
    #[error("reading the client's namespace: {0}")]
    Client(#[from] kube::Error),
}

/// One group/version of the client served by the target.
#[derive(Debug, Clone)]
struct GroupVersion {
    group: String,
    version: String,
    resources: Resources,
}

/// A client's namespaces in one target.
pub struct NamespaceCleaner {
    target: TargetClient,
    owner: OwnerLabels,
    key: String,
    group_versions: Vec<GroupVersion>,
    metrics: Metrics,
}

impl NamespaceCleaner {
    /// The cleaner of `owner`'s objects of `listeners` (those served by `target`).
    pub fn new<'a>(
        target: TargetClient,
        owner: OwnerLabels,
        listeners: impl IntoIterator<Item = &'a GroupVersionListener>,
        metrics: Metrics,
    ) -> Self {
        NamespaceCleaner {
            key: mark::client_key(&owner),
            group_versions: listeners
                .into_iter()
                .map(|l| GroupVersion {
                    group: l.group.clone(),
                    version: l.version.clone(),
                    resources: l.resources.clone(),
                })
                .collect(),
            target,
            owner,
            metrics,
        }
    }

    /// Before a write into `ns` of the client namespace `client_uid`: creates the namespace in
    /// the target when missing, recording the UID; when another incarnation is recorded, deletes
    /// its objects first.
    pub async fn ensure(&self, ns: &str, client_uid: &str) -> Result<(), CleanupError> {
        let (status, found) = self
            .call(Method::GET, &format!("/api/v1/namespaces/{ns}"), None)
            .await?;
        match status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return self.create(ns, client_uid).await,
            status => {
                return Err(CleanupError::Answered {
                    doing: "reading the namespace".into(),
                    status,
                });
            }
        }
        match mark::on_write(mark::recorded_uid(&found, &self.key), client_uid) {
            BeforeWrite::Nothing => return Ok(()),
            BeforeWrite::Record => {}
            BeforeWrite::CleanThenRecord => {
                self.clean(ns, Reason::NamespaceRecreated).await?;
            }
        }
        self.record_for_write(ns, client_uid).await;
        Ok(())
    }

    /// Records the UID before a write; a failure (say, RBAC without `patch` on namespaces) does
    /// not fail the write: the namespace then goes without a record, so nothing left in it is
    /// cleaned up, which is what happened before records existed.
    async fn record_for_write(&self, ns: &str, client_uid: &str) {
        if let Err(e) = self.record(ns, Some(client_uid)).await {
            tracing::warn!(
                namespace = ns, target = self.target.name(), error = %e,
                "could not record the client namespace's UID on the target's namespace; what this namespace leaves behind when deleted will not be cleaned up"
            );
        }
    }

    async fn create(&self, ns: &str, client_uid: &str) -> Result<(), CleanupError> {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": ns,
            "annotations": {mark::MIRRORED_ANNOTATION: "true", self.key.clone(): client_uid},
        }});
        let (status, _) = self
            .call(Method::POST, "/api/v1/namespaces", Some(body))
            .await?;
        match status {
            s if s.is_success() => {
                tracing::info!(
                    namespace = ns,
                    target = self.target.name(),
                    "created the namespace in the target"
                );
                Ok(())
            }
            // Created meanwhile by another request: record the UID there.
            StatusCode::CONFLICT => {
                self.record_for_write(ns, client_uid).await;
                Ok(())
            }
            status => Err(CleanupError::Answered {
                doing: "creating the namespace".into(),
                status,
            }),
        }
    }

    /// Sets (or with `None` removes) this client's recorded UID on the target namespace.
    async fn record(&self, ns: &str, uid: Option<&str>) -> Result<(), CleanupError> {
        let patch = json!({"metadata": {"annotations": {self.key.clone(): uid}}});
        let (status, _) = self
            .call(
                Method::PATCH,
                &format!("/api/v1/namespaces/{ns}"),
                Some(patch),
            )
            .await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(CleanupError::Answered {
                doing: "recording the client namespace's UID".into(),
                status,
            })
        }
    }

    /// Deletes this client's objects in `ns` (every proxied resource), counts and logs the
    /// cleanup, and returns how many objects were deleted.
    async fn clean(&self, ns: &str, reason: Reason) -> Result<u64, CleanupError> {
        let selector = scope_query(None, &self.owner).expect("the owner selector is valid");
        let mut deleted = 0;
        for gv in &self.group_versions {
            let mut in_gv = 0;
            for resource in self.resources(gv).await? {
                let path = format!(
                    "/apis/{}/{}/namespaces/{ns}/{resource}?{selector}",
                    gv.group, gv.version
                );
                let (status, answer) = self.call(Method::DELETE, &path, None).await?;
                match status {
                    s if s.is_success() => {
                        in_gv += answer["items"].as_array().map_or(0, Vec::len) as u64;
                    }
                    StatusCode::NOT_FOUND => {}
                    status => {
                        return Err(CleanupError::Answered {
                            doing: format!("deleting {resource} in {ns}"),
                            status,
                        });
                    }
                }
            }
            self.metrics
                .namespace_cleanup_objects
                .get_or_create(&GroupVersionLabels {
                    target: self.target.name().to_owned(),
                    group_version: format!("{}/{}", gv.group, gv.version),
                })
                .inc_by(in_gv);
            deleted += in_gv;
        }
        self.metrics
            .namespace_cleanups
            .get_or_create(&ReasonLabels {
                target: self.target.name().to_owned(),
                reason: reason.as_str().to_owned(),
            })
            .inc();
        tracing::info!(
            namespace = ns,
            target = self.target.name(),
            reason = reason.as_str(),
            deleted,
            "deleted the client's objects of a namespace the client no longer has"
        );
        Ok(deleted)
    }

    /// The resources of a group/version to clean: the configured ones, or for a wildcard entry
    /// every namespaced resource the target serves there that can be deleted by collection.
    async fn resources(&self, gv: &GroupVersion) -> Result<Vec<String>, CleanupError> {
        if let Resources::Named(names) = &gv.resources {
            return Ok(names.clone());
        }
        let (status, list) = self
            .call(
                Method::GET,
                &format!("/apis/{}/{}", gv.group, gv.version),
                None,
            )
            .await?;
        match status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(Vec::new()),
            status => {
                return Err(CleanupError::Answered {
                    doing: "reading discovery".into(),
                    status,
                });
            }
        }
        Ok(list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["namespaced"].as_bool() == Some(true)
                    && r["verbs"]
                        .as_array()
                        .is_some_and(|v| v.iter().any(|v| v == "deletecollection"))
            })
            .filter_map(|r| r["name"].as_str())
            .filter(|n| !n.contains('/'))
            .map(str::to_owned)
            .collect())
    }

    /// Whether any object of the proxied resources is left in `ns`: with `owned`, only this
    /// client's.
    async fn any_left(&self, ns: &str, owned: bool) -> Result<bool, CleanupError> {
        let query = if owned {
            scope_query(Some("limit=1"), &self.owner).expect("the owner selector is valid")
        } else {
            "limit=1".to_owned()
        };
        for gv in &self.group_versions {
            for resource in self.resources(gv).await? {
                let path = format!(
                    "/apis/{}/{}/namespaces/{ns}/{resource}?{query}",
                    gv.group, gv.version
                );
                let (status, list) = self.call(Method::GET, &path, None).await?;
                match status {
                    StatusCode::OK => {
                        if list["items"].as_array().is_some_and(|i| !i.is_empty()) {
                            return Ok(true);
                        }
                    }
                    StatusCode::NOT_FOUND => {}
                    status => {
                        return Err(CleanupError::Answered {
                            doing: format!("listing {resource} in {ns}"),
                            status,
                        });
                    }
                }
            }
        }
        Ok(false)
    }

    /// One pass over the target's namespaces: every one with this client's record whose client
    /// namespace is gone or another is cleaned up; a namespace the proxy created and nothing
    /// proxied is left in is deleted.
    pub async fn sweep(&self, client: &kube::Client) -> Result<(), CleanupError> {
        let (status, list) = self.call(Method::GET, "/api/v1/namespaces", None).await?;
        if status != StatusCode::OK {
            return Err(CleanupError::Answered {
                doing: "listing namespaces".into(),
                status,
            });
        }
        // One list of the client's namespaces per sweep, not a read per mirrored namespace.
        let client_uids: BTreeMap<String, String> = kube::Api::<Namespace>::all(client.clone())
            .list_metadata(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|n| Some((n.metadata.name?, n.metadata.uid?)))
            .collect();
        for ns in list["items"].as_array().into_iter().flatten() {
            let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let Some(recorded) = mark::recorded_uid(ns, &self.key) else {
                continue;
            };
            // Being deleted already (by this sweep or anyone): its objects go with it.
            if ns.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let found = client_uids.get(name);
            let client_ns = match found {
                Some(uid) => ClientNamespace::Present { uid },
                None => ClientNamespace::Missing,
            };
            match mark::on_sweep(Some(recorded), client_ns) {
                Sweep::Nothing => {}
                Sweep::CleanThenRecord => {
                    self.clean(name, Reason::NamespaceRecreated).await?;
                    self.record(name, found.map(String::as_str)).await?;
                }
                Sweep::CleanThenRelease => {
                    self.clean(name, Reason::NamespaceDeleted).await?;
                    // Objects with finalizers are still there: come back on the next sweep.
                    if self.any_left(name, true).await? {
                        continue;
                    }
                    self.release(name, ns, client).await?;
                }
            }
        }
        Ok(())
    }

    /// Drops this client's record from a namespace whose client namespace is gone, or deletes
    /// the namespace when the proxy created it, no other client recorded one there, nothing
    /// proxied is left in it, and the client still has no namespace of that name.
    async fn release(
        &self,
        name: &str,
        ns: &Value,
        client: &kube::Client,
    ) -> Result<(), CleanupError> {
        let annotations = ns
            .pointer("/metadata/annotations")
            .and_then(Value::as_object);
        if mark::may_delete_namespace(annotations, &self.key)
            && !self.any_left(name, false).await?
            && kube::Api::<Namespace>::all(client.clone())
                .get_opt(name)
                .await?
                .is_none()
        {
            let uid = ns.pointer("/metadata/uid").and_then(Value::as_str);
            let body = json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": uid}});
            let (status, _) = self
                .call(
                    Method::DELETE,
                    &format!("/api/v1/namespaces/{name}"),
                    Some(body),
                )
                .await?;
            if status.is_success() || status == StatusCode::NOT_FOUND {
                self.metrics
                    .mirrored_namespaces_deleted
                    .get_or_create(&TargetLabels {
                        target: self.target.name().to_owned(),
                    })
                    .inc();
                tracing::info!(
                    namespace = name,
                    target = self.target.name(),
                    "deleted the mirrored namespace: the client no longer has it and nothing proxied is left in it"
                );
                return Ok(());
            }
            tracing::warn!(
                namespace = name,
                status = status.as_u16(),
                "could not delete the mirrored namespace; dropping this client's record only"
            );
        }
        self.record(name, None).await
    }

    /// One request of the cleaner's own, its answer read as JSON (`Null` when empty or not
    /// JSON: only successful answers are read).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value), CleanupError> {
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, content_type)
            .body(body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string())))
            .expect("valid request");
        let resp = self.target.send(req).await?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CleanupError::Body(e.to_string()))?
            .to_bytes();
        let value = if status.is_success() {
            serde_json::from_slice(&bytes)?
        } else {
            Value::Null
        };
        Ok((status, value))
    }
}

/// Sweeps every [`SWEEP_INTERVAL`] while this replica leads (and at once when it becomes
/// leader); a failed sweep is logged (at debug level while the target is unreachable) and
/// retried on the next tick. Returns when `leader`'s sender is gone.
pub async fn run(
    cleaners: Vec<std::sync::Arc<NamespaceCleaner>>,
    client: kube::Client,
    mut leader: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(SWEEP_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = leader.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if !*leader.borrow_and_update() {
            continue;
        }
        for cleaner in &cleaners {
            match cleaner.sweep(&client).await {
                Ok(()) => {}
                // Unreachable (an outage): the usual case this sweep is for; not worth a warning.
                Err(e @ CleanupError::Target(_)) => {
                    tracing::debug!(target = cleaner.target.name(), error = %e, "sweeping the target's namespaces failed; retrying");
                }
                Err(e) => {
                    tracing::warn!(target = cleaner.target.name(), error = %e, "sweeping the target's namespaces failed; retrying");
                }
            }
        }
    }
}
