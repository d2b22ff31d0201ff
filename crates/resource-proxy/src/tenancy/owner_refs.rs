//! Cross-cluster owner references (RP-8): an object's owners live in the client cluster, whose
//! UIDs mean nothing to the target. Stored as `metadata.ownerReferences` in the target, the
//! target's garbage collector would find no such owner and delete the object.
//!
//! So on the way in, the caller's `ownerReferences` are moved into the annotation
//! [`ANNOTATION`]; on the way out the annotation becomes `ownerReferences` again, and the target's
//! own owner references (which name target UIDs) are never shown to the client. The client's
//! garbage collector, which watches the proxied resources through the aggregator, then deletes
//! dependents of deleted client objects as it would for local resources.

use serde_json::{Map, Value};

/// Where the client's owner references are kept in the target.
pub const ANNOTATION: &str = "resource-proxy.vcluster.loft.sh/owner-references";

/// A write the proxy refuses because it would change owner references in a way it cannot map.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "JSON patch operations on /metadata/ownerReferences are not supported through the resource proxy; use a merge patch or an update"
)]
pub struct UnsupportedPatch;

/// Rewrites a create/update/apply body (a whole object, JSON): `ownerReferences` move into the
/// annotation; `target_refs` (the target object's own references, from an earlier read) stay.
pub fn stash_object(obj: &mut Value, target_refs: Option<&Value>) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let client_refs = meta
        .remove("ownerReferences")
        .filter(|r| r.as_array().is_some_and(|a| !a.is_empty()));
    set_annotation(meta, client_refs.map(|r| Value::String(r.to_string())));
    if let Some(refs) = target_refs.filter(|r| r.as_array().is_some_and(|a| !a.is_empty())) {
        meta.insert("ownerReferences".into(), refs.clone());
    }
}

/// Rewrites a merge patch: a `metadata.ownerReferences` key becomes the annotation (null or an
/// empty list removes it).
pub fn stash_merge_patch(patch: &mut Value) {
    let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(refs) = meta.remove("ownerReferences") {
        let value = match refs.as_array() {
            Some(a) if !a.is_empty() => Value::String(refs.to_string()),
            _ => Value::Null,
        };
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(ANNOTATION.into(), value);
        }
    }
}

/// Refuses JSON patches that touch owner references (the proxy cannot map their paths).
pub fn check_json_patch(ops: &Value) -> Result<(), UnsupportedPatch> {
    let touches = |p: Option<&str>| {
        p.is_some_and(|p| p == "/metadata" || p.starts_with("/metadata/ownerReferences"))
    };
    let bad = ops.as_array().is_some_and(|ops| {
        ops.iter().any(|op| {
            (touches(op["path"].as_str()) && op["op"] != "test")
                || (touches(op["from"].as_str()) && op["op"] == "move")
        })
    });
    if bad { Err(UnsupportedPatch) } else { Ok(()) }
}

/// The client's view of an object from the target: the annotation becomes `ownerReferences`;
/// the target's own owner references are dropped. Returns whether anything changed.
pub fn restore_object(obj: &mut Value) -> bool {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = meta.remove("ownerReferences").is_some();
    let stashed = meta
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove(ANNOTATION));
    if let Some(Value::String(s)) = stashed {
        changed = true;
        if let Ok(refs) = serde_json::from_str::<Value>(&s) {
            meta.insert("ownerReferences".into(), refs);
        }
    }
    if meta
        .get("annotations")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
    changed
}

/// Restores every object in a response body: a single object, a `*List`, a `Table` (rows carry
/// objects), or a watch event. `None` when nothing needed changing (the body is sent as it is).
pub fn restore_body(body: &[u8]) -> Option<Vec<u8>> {
    if !mentions_owner_refs(body) {
        return None;
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let mut changed = false;
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            changed |= restore_object(item);
        }
    }
    if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(o) = row.get_mut("object") {
                changed |= restore_object(o);
            }
        }
    }
    if v.get("type").is_some()
        && let Some(o) = v.get_mut("object")
    {
        changed |= restore_body_value(o);
    }
    changed |= restore_object(&mut v);
    changed.then(|| serde_json::to_vec(&v).unwrap_or_default())
}

fn restore_body_value(o: &mut Value) -> bool {
    // A watch event's object may itself be a Table (kubectl get -w asks for tables).
    let mut changed = false;
    if let Some(rows) = o.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(obj) = row.get_mut("object") {
                changed |= restore_object(obj);
            }
        }
    }
    changed | restore_object(o)
}

/// Cheap pre-check: only bodies that mention owner references (the field `"ownerReferences"` or
/// the annotation key [`ANNOTATION`]) are parsed. Both names end in `eferences`, so one pass of
/// one searcher finds every candidate and each is checked in place: a second searcher for the
/// annotation doubled the cost, which grows with the body (a LIST answer). `eferences` has no
/// proper prefix that is also its suffix, so its occurrences never overlap and none is
/// skipped. The searcher is built once (building one costs about as much as searching a small
/// answer).
pub fn mentions_owner_refs(body: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    const TAIL: &[u8] = b"eferences";
    const FIELD_HEAD: &[u8] = b"\"ownerR";
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(TAIL));
    let annotation_head = &ANNOTATION.as_bytes()[..ANNOTATION.len() - TAIL.len()];
    FINDER.find_iter(body).any(|at| {
        let (before, after) = (&body[..at], &body[at + TAIL.len()..]);
        (before.ends_with(FIELD_HEAD) && after.starts_with(b"\""))
            || before.ends_with(annotation_head)
    })
}

fn set_annotation(meta: &mut Map<String, Value>, value: Option<Value>) {
    match value {
        Some(v) => {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !annotations.is_object() {
                *annotations = Value::Object(Map::new());
            }
            annotations
                .as_object_mut()
                .expect("just made an object")
                .insert(ANNOTATION.into(), v);
        }
        None => {
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                a.remove(ANNOTATION);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn owner() -> Value {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "client-uid"}])
    }

    #[test]
    fn owner_references_travel_in_the_annotation_and_come_back() {
        let mut obj = json!({"metadata": {"name": "w", "ownerReferences": owner()}});
        stash_object(&mut obj, None);
        assert!(obj["metadata"].get("ownerReferences").is_none());
        let stored = obj["metadata"]["annotations"][ANNOTATION].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(stored).unwrap(), owner());

        let restored = restore_body(&serde_json::to_vec(&obj).unwrap()).unwrap();
        let restored: Value = serde_json::from_slice(&restored).unwrap();
        assert_eq!(restored["metadata"]["ownerReferences"], owner());
        assert!(restored["metadata"].get("annotations").is_none());
    }

    #[test]
    fn the_targets_own_owner_references_are_kept_in_the_target_and_hidden_from_the_client() {
        let target_refs =
            json!([{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "target-uid"}]);
        let mut update = json!({"metadata": {"name": "w", "ownerReferences": owner()}});
        stash_object(&mut update, Some(&target_refs));
        assert_eq!(update["metadata"]["ownerReferences"], target_refs);

        let from_target = json!({"metadata": {"name": "w", "ownerReferences": target_refs}});
        let shown: Value = serde_json::from_slice(
            &restore_body(&serde_json::to_vec(&from_target).unwrap()).unwrap(),
        )
        .unwrap();
        assert!(shown["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn removing_owner_references_removes_the_annotation() {
        let mut update = json!({"metadata": {"name": "w", "annotations": {ANNOTATION: "[]", "keep": "x"}, "ownerReferences": []}});
        stash_object(&mut update, None);
        assert_eq!(update["metadata"]["annotations"], json!({"keep": "x"}));

        let mut patch = json!({"metadata": {"ownerReferences": null}});
        stash_merge_patch(&mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {ANNOTATION: null}}})
        );
        let mut patch = json!({"metadata": {"ownerReferences": owner()}});
        stash_merge_patch(&mut patch);
        assert!(patch["metadata"]["annotations"][ANNOTATION].is_string());
    }

    #[test]
    fn lists_tables_and_watch_events_are_restored() {
        let stored = json!({"name": "w", "annotations": {ANNOTATION: owner().to_string()}});
        for body in [
            json!({"kind": "WidgetList", "items": [{"metadata": stored}]}),
            json!({"kind": "Table", "rows": [{"object": {"metadata": stored}}]}),
            json!({"type": "ADDED", "object": {"metadata": stored}}),
            json!({"type": "MODIFIED", "object": {"kind": "Table", "rows": [{"object": {"metadata": stored}}]}}),
        ] {
            let out = String::from_utf8(restore_body(&serde_json::to_vec(&body).unwrap()).unwrap())
                .unwrap();
            assert!(
                out.contains("client-uid") && !out.contains(ANNOTATION),
                "{out}"
            );
        }
        assert_eq!(restore_body(br#"{"metadata":{"name":"plain"}}"#), None);
    }

    /// The one-pass pre-check says what searching for each name separately says.
    #[test]
    fn the_pre_check_finds_either_name_and_nothing_else() {
        let field = r#""ownerReferences""#;
        let cases = [
            (r#"{"metadata":{"ownerReferences":[]}}"#.to_owned(), true),
            (
                format!(r#"{{"metadata":{{"annotations":{{"{ANNOTATION}":"[]"}}}}}}"#),
                true,
            ),
            // Escaped inside a string (kubectl's last-applied-configuration) still counts.
            (format!(r#"{{"a":"{{\"{ANNOTATION}\":1}}"}}"#), true),
            (field.to_owned(), true),
            // The field name must be a whole JSON string.
            (r#"{"a":"x\"ownerReferences\""}"#.to_owned(), false),
            (format!("eferences{field}eferences"), true),
            (ANNOTATION.to_owned(), true),
            (
                r#"{"references":"myownerReferences","preferences":1}"#.to_owned(),
                false,
            ),
            (
                r#"{"ownerReferences ":1,"x-owner-references":2}"#.to_owned(),
                false,
            ),
            ("ownerReferences\"".to_owned(), false),
            (ANNOTATION[1..].to_owned(), false),
            (ANNOTATION[..ANNOTATION.len() - 1].to_owned(), false),
            ("eferences".to_owned(), false),
            (String::new(), false),
        ];
        for (body, expected) in cases {
            let separately = body.contains(field) || body.contains(ANNOTATION);
            assert_eq!(separately, expected, "case itself: {body}");
            assert_eq!(mentions_owner_refs(body.as_bytes()), expected, "{body}");
        }
    }

    #[test]
    fn json_patches_on_owner_references_are_refused() {
        assert!(
            check_json_patch(
                &json!([{"op": "add", "path": "/metadata/ownerReferences", "value": []}])
            )
            .is_err()
        );
        assert!(
            check_json_patch(&json!([{"op": "replace", "path": "/metadata", "value": {}}]))
                .is_err()
        );
        assert!(
            check_json_patch(
                &json!([{"op": "move", "from": "/metadata/ownerReferences/0", "path": "/spec/x"}])
            )
            .is_err()
        );
        assert!(
            check_json_patch(&json!([{"op": "replace", "path": "/spec/size", "value": 2}])).is_ok()
        );
    }
}
