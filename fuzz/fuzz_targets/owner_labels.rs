//! The owner-label body rewriting (`resource_proxy::tenancy::labels::inject`) for every content type it
//! takes (JSON and YAML objects, merge patch, JSON patch, server-side apply): never a panic; a
//! rewritten body is JSON that carries the owner labels, as the module documents it:
//! - an object (create, update, apply) has both labels in `metadata.labels` and keeps its other
//!   fields; an apply body, sent as YAML, reads back as the same document;
//! - a merge patch applied to any stored object leaves both labels in place;
//! - a JSON patch applied to any object either fails or leaves both labels in place;
//! - a body forwarded unchanged is one where the labels cannot be placed (a `List`, `metadata`
//!   or `metadata.labels` not an object), and a JSON body refused as malformed is not a JSON
//!   object.
//!
//! The first byte picks the content type (and, for JSON patches, what the proxy knows of the
//! labels before the patch); the rest is the body.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use resource_proxy::tenancy::labels::{
    BodyKind, Injection, LabelError, LabelsBefore, OwnerLabels, Unrewritable, inject,
};
use resource_proxy::tenancy::selector::is_owned_object;
use serde_json::{Value, json};

const TYPES: &[(BodyKind, Option<&str>)] = &[
    (BodyKind::Object, Some("application/json")),
    (BodyKind::Object, Some("application/yaml")),
    (BodyKind::Object, None),
    (BodyKind::Object, Some("Application/JSON; charset=utf-8")),
    (BodyKind::Patch, Some("application/merge-patch+json")),
    (BodyKind::Patch, Some("application/json-patch+json")),
    (BodyKind::Patch, Some("application/apply-patch+yaml")),
    (
        BodyKind::Patch,
        Some("application/strategic-merge-patch+json"),
    ),
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let (kind, content_type) = TYPES[usize::from(selector) % TYPES.len()];
    let before = [
        LabelsBefore::Present,
        LabelsBefore::Absent,
        LabelsBefore::Unknown,
    ][usize::from(selector / 16) % 3];
    let owner = OwnerLabels {
        vcluster: "client-a".into(),
        project: "default".into(),
    };
    let result = inject(kind, content_type, body, &owner, before);
    let shown = String::from_utf8_lossy(body);
    let media = content_type.map(|c| c.split(';').next().unwrap_or("").to_ascii_lowercase());
    let json_in = serde_json::from_slice::<Value>(body).ok();
    match result {
        Err(LabelError::TooLarge { .. }) => panic!("a fuzz input is never 3 MiB"),
        Err(LabelError::UnsupportedMediaType { .. }) => {
            assert_eq!(
                media.as_deref(),
                Some("application/strategic-merge-patch+json")
            );
        }
        Err(LabelError::Malformed(_)) => {
            // JSON refused as malformed: not JSON, or not the JSON the content type needs.
            let json_fits = match media.as_deref() {
                None | Some("application/json") | Some("application/merge-patch+json") => {
                    json_in.as_ref().is_some_and(Value::is_object)
                }
                Some("application/json-patch+json") => json_in
                    .as_ref()
                    .and_then(Value::as_array)
                    .is_some_and(|ops| ops.iter().all(Value::is_object)),
                _ => false,
            };
            assert!(!json_fits, "{content_type:?} refused {shown:?}");
        }
        Ok(Injection::Unchanged(reason)) => {
            assert_ne!(media.as_deref(), Some("application/json-patch+json"));
            // For JSON bodies, the reason is true of the body.
            if let Some(Value::Object(object)) = &json_in {
                let metadata = object.get("metadata");
                let labels = metadata.and_then(|m| m.get("labels"));
                let holds = match &reason {
                    Unrewritable::ListKind(k) => {
                        k.ends_with("List") && object.get("kind") == Some(&json!(k))
                    }
                    Unrewritable::MetadataNotAnObject => {
                        metadata.is_some_and(|m| !m.is_object() && !m.is_null())
                    }
                    Unrewritable::LabelsNotAnObject => {
                        labels.is_some_and(|l| !l.is_object() && !l.is_null())
                    }
                };
                assert!(holds, "{content_type:?} {shown:?}: {reason:?}");
            }
        }
        Ok(Injection::Rewritten {
            body: out,
            content_type: out_type,
        }) => {
            let value: Value = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{shown:?} rewritten as invalid JSON ({e})"));
            match media.as_deref() {
                Some("application/merge-patch+json") => {
                    assert_eq!(out_type, "application/merge-patch+json");
                    for mut stored in stored_objects() {
                        json_patch::merge(&mut stored, &value);
                        assert!(is_owned_object(&stored, &owner), "{shown:?} -> {value}");
                    }
                }
                Some("application/json-patch+json") => {
                    assert_eq!(out_type, "application/json-patch+json");
                    // Ops the target cannot read fail the whole patch there.
                    let Ok(patch) = serde_json::from_value::<json_patch::Patch>(value.clone())
                    else {
                        return;
                    };
                    if moves_onto_an_ancestor(&value) {
                        return;
                    }
                    for mut stored in stored_objects() {
                        if json_patch::patch(&mut stored, &patch).is_ok() {
                            assert!(
                                is_owned_object(&stored, &owner),
                                "{shown:?} ({before:?}) -> {value} -> {stored}"
                            );
                        }
                    }
                }
                apply_or_object => {
                    let apply = apply_or_object == Some("application/apply-patch+yaml");
                    let expected_type = if apply {
                        "application/apply-patch+yaml"
                    } else {
                        "application/json"
                    };
                    assert_eq!(out_type, expected_type);
                    assert!(is_owned_object(&value, &owner), "{shown:?} -> {value}");
                    // Nothing but metadata.labels changed.
                    if let (Some(Value::Object(input)), Some(output)) =
                        (&json_in, value.as_object())
                    {
                        let mut keys: BTreeSet<&str> = input.keys().map(String::as_str).collect();
                        keys.insert("metadata");
                        let out_keys: BTreeSet<&str> = output.keys().map(String::as_str).collect();
                        assert_eq!(keys, out_keys, "{shown:?} -> {value}");
                    }
                    // Sent as YAML: it reads back (by this proxy's YAML reader) as the JSON. Not
                    // when a key is over YAML's 1024-character limit for implicit keys, which
                    // the API server's YAML reader (libyaml's) enforces as well.
                    if apply && longest_key(&value) <= 1024 {
                        let yaml: Value = serde_saphyr::from_slice(&out)
                            .unwrap_or_else(|e| panic!("{shown:?} -> {value}: not YAML: {e}"));
                        assert!(same(&yaml, &value), "{shown:?} -> {value}, as YAML {yaml}");
                    }
                }
            }
        }
    }
});

/// Objects as the target may store them: with labels (other than the owner's too), without
/// labels, without metadata, with labels that are not a map.
/// Whether the patch moves a value onto one of its own ancestors (`"path"` a proper prefix of
/// `"from"`, the root included). The reference implementation (json-patch 4.2) panics on such a
/// patch when a later operation fails: undoing the move would move a value inside itself, which
/// it treats as unreachable. The target (kube-apiserver) refuses those patches whole, as every
/// failing patch, so there is nothing to check against.
fn moves_onto_an_ancestor(patch: &Value) -> bool {
    patch.as_array().into_iter().flatten().any(|op| {
        let field = |name: &str| op.get(name).and_then(Value::as_str);
        match (field("op"), field("from"), field("path")) {
            (Some("move"), Some(from), Some(path)) => {
                from.len() > path.len()
                    && from.starts_with(path)
                    && from.as_bytes()[path.len()] == b'/'
            }
            _ => false,
        }
    })
}

fn stored_objects() -> [Value; 4] {
    [
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"app": "web",
                "vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}},
            "spec": {"size": 1, "labels": {"k": "v"}, "list": [1, 2]}}),
        json!({"kind": "Widget", "metadata": {"name": "w"}, "spec": {}}),
        json!({"kind": "Widget"}),
        json!({"kind": "Widget", "metadata": {"name": "w", "labels": "x"}}),
    ]
}

/// The longest object key in `value`, as JSON writes it (quotes and escapes included).
fn longest_key(value: &Value) -> usize {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                serde_json::to_string(k)
                    .map_or(0, |k| k.len())
                    .max(longest_key(v))
            })
            .max()
            .unwrap_or(0),
        Value::Array(items) => items.iter().map(longest_key).max().unwrap_or(0),
        _ => 0,
    }
}

/// Equal documents; numbers equal as values, floats to the last bit but one (serde_json reads
/// floats fast, not always correctly rounded).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y
                || x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| {
                    (x - y).abs() <= 2.0 * f64::EPSILON * x.abs().max(y.abs())
                })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
