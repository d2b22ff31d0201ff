//! Which client namespace a mirrored namespace in the target belongs to, and what to do about it
//! (pure).
//!
//! The proxy records, on the target namespace it mirrors (RP-8), the UID of the client
//! namespace it mirrored, one annotation per client:
//! `<client name>.<client project>.clients.resource-proxy.vcluster.loft.sh/namespace-uid`. A
//! namespace the proxy created also carries `resource-proxy.vcluster.loft.sh/mirrored: "true"`.
//! UIDs, not creation times: the two clusters' clocks are not comparable, and a namespace deleted
//! and recreated within a second has a new UID but maybe the same creation time.
//!
//! Comparing the recorded UID with the client's namespace of that name tells which objects the
//! client's objects in the target belong to: the recorded incarnation. When the client's
//! namespace is gone, or has another UID (deleted and recreated, e.g. during an outage of the
//! target), those objects are orphans and are deleted before anything of the new incarnation is
//! written ([`on_write`]) or by the sweep ([`on_sweep`]).

use serde_json::{Map, Value};

use crate::tenancy::labels::OwnerLabels;

/// On a target namespace the proxy created: it may delete it once no client's objects are left.
pub const MIRRORED_ANNOTATION: &str = "resource-proxy.vcluster.loft.sh/mirrored";

/// The common end of every client's namespace-UID annotation key.
const CLIENT_KEY_SUFFIX: &str = "clients.resource-proxy.vcluster.loft.sh/namespace-uid";

/// The annotation key holding this client's namespace UID on a mirrored namespace. Client name and
/// project are DNS labels (validated), so the prefix is a DNS subdomain.
pub fn client_key(owner: &OwnerLabels) -> String {
    format!("{}.{}.{CLIENT_KEY_SUFFIX}", owner.vcluster, owner.project)
}

/// Why a namespace's objects are cleaned up (the metric's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The client's namespace no longer exists.
    NamespaceDeleted,
    /// The client's namespace of that name is another one (deleted and recreated).
    NamespaceRecreated,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NamespaceDeleted => "namespace_deleted",
            Reason::NamespaceRecreated => "namespace_recreated",
        }
    }
}

/// What a write into an existing target namespace must do first.
#[derive(Debug, PartialEq, Eq)]
pub enum BeforeWrite {
    /// The recorded UID is the client namespace's: nothing.
    Nothing,
    /// Nothing recorded for this client (a namespace mirrored before the record existed, or by
    /// another client): record the UID.
    Record,
    /// Another incarnation is recorded: delete its objects, then record the UID.
    CleanThenRecord,
}

/// The step before a write into `namespace` of the client namespace with `client_uid`.
pub fn on_write(recorded: Option<&str>, client_uid: &str) -> BeforeWrite {
    match recorded {
        None => BeforeWrite::Record,
        Some(uid) if uid == client_uid => BeforeWrite::Nothing,
        Some(_) => BeforeWrite::CleanThenRecord,
    }
}

/// What the sweep found about the client's namespace of a name.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientNamespace<'a> {
    Missing,
    Present { uid: &'a str },
}

/// What the sweep does with one target namespace.
#[derive(Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Not this client's, or the recorded incarnation still exists.
    Nothing,
    /// Delete this client's objects, then drop this client's record (and the namespace, see
    /// [`may_delete_namespace`]).
    CleanThenRelease,
    /// Delete this client's objects, then record the new incarnation's UID.
    CleanThenRecord,
}

/// The sweep's decision for a target namespace with `recorded` (this client's annotation).
pub fn on_sweep(recorded: Option<&str>, client: ClientNamespace<'_>) -> Sweep {
    match (recorded, client) {
        (None, _) => Sweep::Nothing,
        (Some(_), ClientNamespace::Missing) => Sweep::CleanThenRelease,
        (Some(r), ClientNamespace::Present { uid }) if r == uid => Sweep::Nothing,
        (Some(_), ClientNamespace::Present { .. }) => Sweep::CleanThenRecord,
    }
}

/// Whether the proxy may delete a target namespace once this client's record is dropped: it
/// created it, and no other client has recorded a namespace there. (Whether objects of the
/// proxied resources remain is asked of the target separately.)
pub fn may_delete_namespace(annotations: Option<&Map<String, Value>>, own_key: &str) -> bool {
    let Some(annotations) = annotations else {
        return false;
    };
    annotations.get(MIRRORED_ANNOTATION).and_then(Value::as_str) == Some("true")
        && !annotations
            .keys()
            .any(|k| k != own_key && k.ends_with(CLIENT_KEY_SUFFIX))
}

/// This client's recorded UID on a target namespace (JSON).
pub fn recorded_uid<'a>(namespace: &'a Value, own_key: &str) -> Option<&'a str> {
    namespace
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(own_key))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn owner() -> OwnerLabels {
        OwnerLabels::of_test_client()
    }

    #[test]
    fn the_key_names_the_client_and_is_a_valid_annotation_key() {
        let key = client_key(&owner());
        assert_eq!(
            key,
            "client-a.default.clients.resource-proxy.vcluster.loft.sh/namespace-uid"
        );
        let (prefix, name) = key.split_once('/').unwrap();
        assert!(crate::config::dns::is_dns1123_subdomain(prefix));
        assert!(name.len() <= 63);
    }

    #[test]
    fn a_write_cleans_up_only_another_incarnation() {
        assert_eq!(on_write(None, "u1"), BeforeWrite::Record);
        assert_eq!(on_write(Some("u1"), "u1"), BeforeWrite::Nothing);
        assert_eq!(on_write(Some("u0"), "u1"), BeforeWrite::CleanThenRecord);
    }

    #[test]
    fn the_sweep_cleans_up_deleted_and_recreated_namespaces_and_nothing_else() {
        use ClientNamespace::*;
        assert_eq!(on_sweep(None, Missing), Sweep::Nothing);
        assert_eq!(on_sweep(None, Present { uid: "u1" }), Sweep::Nothing);
        assert_eq!(on_sweep(Some("u1"), Present { uid: "u1" }), Sweep::Nothing);
        assert_eq!(on_sweep(Some("u1"), Missing), Sweep::CleanThenRelease);
        assert_eq!(
            on_sweep(Some("u0"), Present { uid: "u1" }),
            Sweep::CleanThenRecord
        );
    }

    #[test]
    fn only_a_namespace_the_proxy_created_and_no_other_client_uses_may_be_deleted() {
        let own = client_key(&owner());
        let other = client_key(&OwnerLabels {
            vcluster: "client-b".into(),
            project: "default".into(),
        });
        let ann = |v: Value| v.as_object().cloned();
        assert!(may_delete_namespace(
            ann(json!({MIRRORED_ANNOTATION: "true", own.clone(): "u1"})).as_ref(),
            &own
        ));
        assert!(may_delete_namespace(
            ann(json!({MIRRORED_ANNOTATION: "true"})).as_ref(),
            &own
        ));
        assert!(!may_delete_namespace(
            ann(json!({own.clone(): "u1"})).as_ref(),
            &own
        ));
        assert!(!may_delete_namespace(
            ann(json!({MIRRORED_ANNOTATION: "true", own.clone(): "u1", other: "u2"})).as_ref(),
            &own
        ));
        assert!(!may_delete_namespace(None, &own));
    }

    #[test]
    fn the_recorded_uid_is_read_from_the_namespace() {
        let own = client_key(&owner());
        let ns = json!({"metadata": {"name": "n", "annotations": {own.clone(): "u1"}}});
        assert_eq!(recorded_uid(&ns, &own), Some("u1"));
        assert_eq!(recorded_uid(&json!({"metadata": {}}), &own), None);
    }
}
