//! Owner labels on every write (RP-6).
//!
//! Every create, update and patch that reaches the target carries
//! `vcluster.com/owner-vcluster=<client name>` and `vcluster.com/owner-project=<client project
//! name>`. Values a caller writes for these keys are overwritten, and no patch can remove or
//! change them. [`inject`] rewrites a request body by content type:
//!
//! | Content type | Used for | What happens |
//! |---|---|---|
//! | `application/json` (or none) | create, update | labels set in `metadata.labels` |
//! | `application/yaml` | create, update | same; the body is sent as JSON (`application/json`) |
//! | `application/merge-patch+json` | patch | labels set in the patch; a `null` for `metadata` or `metadata.labels` (which would delete them) is replaced by the owner labels, so the object's other labels stay |
//! | `application/json-patch+json` | patch | ops appended after the caller's that leave both labels in place (see below) |
//! | `application/apply-patch+yaml` | server-side apply | labels set in the applied configuration, sent as JSON (valid YAML) |
//! | `application/strategic-merge-patch+json` | patch | 415: custom resources do not support it |
//! | `application/apply-patch+cbor`, `application/cbor`, protobuf, anything else | | 415: not rewritable, so refused rather than written unlabelled |
//!
//! JSON patch: RFC 6902 has no "add if absent", so the appended ops depend on whether
//! `metadata.labels` exists when they run. The caller's ops are read in order: an op that
//! removes, moves away, or replaces `/metadata/labels`, `/metadata` or the whole document with a
//! value without a labels map leaves the map absent, and `add /metadata/labels {owner labels}`
//! (or `add /metadata {...}`) is appended; otherwise per-key `add /metadata/labels/<key>` ops
//! are. Whether the map exists before the patch comes from the caller ([`LabelsBefore`]): the
//! proxy reads the object before every named patch, so it knows. With
//! [`LabelsBefore::Unknown`] the map is assumed present (an object written through the proxy
//! always has it); if it is not, the target rejects the whole patch (422) and nothing is
//! written. A patch therefore either ends with both labels correct or fails.
//!
//! A body that is valid for its content type but where the labels cannot be placed (a `List`
//! kind, `metadata` or `metadata.labels` that is not an object) is returned unchanged with the
//! reason, so the HTTP layer forwards it (the target rejects such a body), counts and logs it.
//! Bodies over [`MAX_BODY_BYTES`] are refused with 413, malformed ones with 400.

use serde_json::{Map, Value, json};

use crate::api::request_info::Verb;
use crate::api::status::Status;
use crate::config::ClientIdentity;

/// Label naming the client (virtual cluster) that owns an object.
pub const OWNER_VCLUSTER_LABEL: &str = "vcluster.com/owner-vcluster";

/// Label naming the client's project (the project name, not its namespace).
pub const OWNER_PROJECT_LABEL: &str = "vcluster.com/owner-project";

/// The API server's request body limit (3 MiB); larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

const ACCEPTED_OBJECT_TYPES: &[&str] = &["application/json", "application/yaml"];
const ACCEPTED_PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// The owner label values of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLabels {
    /// Value of [`OWNER_VCLUSTER_LABEL`]: the client's name.
    pub vcluster: String,
    /// Value of [`OWNER_PROJECT_LABEL`]: the client's project name.
    pub project: String,
}

impl OwnerLabels {
    /// The owner labels of a configured client.
    pub fn for_client(client: &ClientIdentity) -> Self {
        OwnerLabels {
            vcluster: client.name.clone(),
            project: client.project.clone(),
        }
    }

    /// The owner labels the unit tests use: client `client-a` of project `default`.
    #[cfg(test)]
    pub(crate) fn of_test_client() -> Self {
        OwnerLabels {
            vcluster: "client-a".into(),
            project: "default".into(),
        }
    }

    fn pairs(&self) -> [(&'static str, &str); 2] {
        [
            (OWNER_VCLUSTER_LABEL, &self.vcluster),
            (OWNER_PROJECT_LABEL, &self.project),
        ]
    }

    fn as_map(&self) -> Map<String, Value> {
        self.pairs()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
            .collect()
    }

    fn set_in(&self, labels: &mut Map<String, Value>) {
        for (k, v) in self.pairs() {
            labels.insert(k.to_owned(), Value::String(v.to_owned()));
        }
    }
}

/// How a write body is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A whole object: create (POST) or update (PUT).
    Object,
    /// A patch (PATCH), including server-side apply.
    Patch,
}

impl BodyKind {
    /// The body kind of a verb that writes a body (create, update, patch); `None` otherwise
    /// (delete bodies are DeleteOptions, not objects, and get no labels).
    pub fn for_verb(verb: &Verb) -> Option<BodyKind> {
        match verb {
            Verb::Create | Verb::Update => Some(BodyKind::Object),
            Verb::Patch => Some(BodyKind::Patch),
            _ => None,
        }
    }
}

/// Whether the object's `metadata.labels` map exists before a JSON patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelsBefore {
    /// It exists (e.g. the ownership read found an owned object).
    Present,
    /// It does not.
    Absent,
    /// Not known; treated as present.
    Unknown,
}

/// Why a body was forwarded without the owner labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrewritable {
    /// A `List` kind (`kind` ending in `List`): not a write of one object.
    ListKind(String),
    /// `metadata` is present but not an object.
    MetadataNotAnObject,
    /// `metadata.labels` is present but neither an object nor null.
    LabelsNotAnObject,
}

impl Unrewritable {
    /// Short reason for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Unrewritable::ListKind(_) => "list kind",
            Unrewritable::MetadataNotAnObject => "metadata is not an object",
            Unrewritable::LabelsNotAnObject => "metadata.labels is not an object",
        }
    }
}

/// Result of [`inject`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// Send this body with this `Content-Type` (and a new `Content-Length`).
    Rewritten {
        /// The new body.
        body: Vec<u8>,
        /// Its media type.
        content_type: &'static str,
    },
    /// Send the original body as it was; count and log the reason.
    Unchanged(Unrewritable),
}

/// A body the proxy refuses, with the Status the API server would give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// Over [`MAX_BODY_BYTES`].
    #[error("request body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Body size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A media type the proxy cannot rewrite or custom resources do not accept.
    #[error("unsupported media type {content_type:?}")]
    UnsupportedMediaType {
        /// The request's media type (empty when absent).
        content_type: String,
        /// What is accepted.
        accepted: &'static [&'static str],
    },
    /// Not valid JSON/YAML, or not the expected structure.
    #[error("{0}")]
    Malformed(String),
}

impl LabelError {
    /// The Status to answer with (413, 415 or 400).
    pub fn status(&self) -> Status {
        match self {
            LabelError::TooLarge { limit, .. } => Status::request_entity_too_large(*limit),
            LabelError::UnsupportedMediaType { accepted, .. } => {
                Status::unsupported_media_type(accepted)
            }
            LabelError::Malformed(message) => Status::bad_request(message.clone()),
        }
    }
}

/// The media type without parameters.
fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("")
}

fn unsupported(content_type: Option<&str>, accepted: &'static [&'static str]) -> LabelError {
    LabelError::UnsupportedMediaType {
        content_type: content_type.unwrap_or("").to_owned(),
        accepted,
    }
}

fn parse_json(body: &[u8], what: &str) -> Result<Value, LabelError> {
    serde_json::from_slice(body)
        .map_err(|e| LabelError::Malformed(format!("{what}: json parse error: {e}")))
}

fn parse_yaml(body: &[u8], what: &str) -> Result<Value, LabelError> {
    // YAML 1.1 integers like the API server's YAML decoder; duplicate keys are errors there too.
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
    };
    serde_saphyr::from_slice_with_options(body, options)
        .map_err(|e| LabelError::Malformed(format!("{what}: error converting YAML to JSON: {e}")))
}

fn to_json(value: &Value) -> Vec<u8> {
    // A Value built from parsed input always serializes.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Rewrites a write body so it carries the owner labels.
///
/// `content_type` is the request's `Content-Type` header; `labels_before` matters only for
/// JSON patches.
pub fn inject(
    kind: BodyKind,
    content_type: Option<&str>,
    body: &[u8],
    owner: &OwnerLabels,
    labels_before: LabelsBefore,
) -> Result<Injection, LabelError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(LabelError::TooLarge {
            size: body.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    match kind {
        BodyKind::Object => {
            // The create/update handlers parse the media type (case-insensitive) and default to
            // JSON when there is none.
            let media = content_type
                .map(|c| media_type(c).trim().to_ascii_lowercase())
                .unwrap_or_default();
            let value = match media.as_str() {
                "" | "application/json" => parse_json(body, OBJECT_UNRECOGNIZED)?,
                "application/yaml" => parse_yaml(body, OBJECT_UNRECOGNIZED)?,
                _ => return Err(unsupported(content_type, ACCEPTED_OBJECT_TYPES)),
            };
            label_object(value, owner, "application/json")
        }
        BodyKind::Patch => {
            // The patch handler compares the media type exactly, as written.
            match content_type.map(media_type) {
                Some("application/merge-patch+json") => {
                    merge_patch(parse_json(body, "error decoding patch")?, owner)
                }
                Some("application/json-patch+json") => json_patch(
                    parse_json(body, "error decoding patch")?,
                    owner,
                    labels_before,
                ),
                Some("application/apply-patch+yaml") => label_object(
                    parse_yaml(body, "error decoding YAML")?,
                    owner,
                    "application/apply-patch+yaml",
                ),
                _ => Err(unsupported(content_type, ACCEPTED_PATCH_TYPES)),
            }
        }
    }
}

const OBJECT_UNRECOGNIZED: &str = "the object provided is unrecognized";

/// Sets the owner labels in `metadata.labels`, creating `metadata` and `labels` when they are
/// missing or null.
fn set_owner_labels(
    object: &mut Map<String, Value>,
    owner: &OwnerLabels,
) -> Result<(), Unrewritable> {
    let metadata = object.entry("metadata").or_insert(Value::Null);
    if metadata.is_null() {
        *metadata = json!({});
    }
    let metadata = metadata
        .as_object_mut()
        .ok_or(Unrewritable::MetadataNotAnObject)?;
    let labels = metadata.entry("labels").or_insert(Value::Null);
    if labels.is_null() {
        *labels = json!({});
    }
    let labels = labels
        .as_object_mut()
        .ok_or(Unrewritable::LabelsNotAnObject)?;
    owner.set_in(labels);
    Ok(())
}

fn rewritten_or_unchanged(
    placed: Result<(), Unrewritable>,
    value: &Value,
    content_type: &'static str,
) -> Injection {
    match placed {
        Ok(()) => Injection::Rewritten {
            body: to_json(value),
            content_type,
        },
        Err(reason) => Injection::Unchanged(reason),
    }
}

/// A whole object (create, update, server-side apply).
fn label_object(
    mut value: Value,
    owner: &OwnerLabels,
    content_type: &'static str,
) -> Result<Injection, LabelError> {
    let Some(object) = value.as_object_mut() else {
        return Err(LabelError::Malformed(format!(
            "{OBJECT_UNRECOGNIZED}: the body is not an object"
        )));
    };
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind.ends_with("List")
    {
        return Ok(Injection::Unchanged(Unrewritable::ListKind(
            kind.to_owned(),
        )));
    }
    let placed = set_owner_labels(object, owner);
    Ok(rewritten_or_unchanged(placed, &value, content_type))
}

/// A JSON merge patch: the patch sets the labels; a `null` that would delete `metadata` or
/// `metadata.labels` becomes a map holding the owner labels.
fn merge_patch(mut patch: Value, owner: &OwnerLabels) -> Result<Injection, LabelError> {
    let Some(object) = patch.as_object_mut() else {
        return Err(LabelError::Malformed(
            "error decoding patch: a merge patch must be a JSON object".to_owned(),
        ));
    };
    let placed = set_owner_labels(object, owner);
    Ok(rewritten_or_unchanged(
        placed,
        &patch,
        "application/merge-patch+json",
    ))
}

/// State of a map (`metadata` or `metadata.labels`) as the caller's JSON patch ops leave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MapState {
    /// Untouched by the ops: as it was before the patch.
    Before,
    /// Known to be an object.
    Present,
    /// Known to be missing (or not an object).
    Absent,
    /// Set to a value the proxy cannot see (move/copy); assumed present.
    Unknown,
}

const ROOT: &str = "";
const METADATA: &str = "/metadata";
const LABELS: &str = "/metadata/labels";

/// Escapes a JSON pointer token (RFC 6901).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn has_object(value: Option<&Value>) -> MapState {
    if value.is_some_and(Value::is_object) {
        MapState::Present
    } else {
        MapState::Absent
    }
}

/// Effect on (`metadata`, `metadata.labels`) of writing `value` (None: unknown) at `path`.
fn written_at(path: &str, value: Option<&Value>, state: &mut (MapState, MapState)) {
    match (path, value) {
        (ROOT, Some(v)) => {
            *state = (has_object(v.get("metadata")), has_object(v.pointer(LABELS)));
        }
        (METADATA, Some(v)) => *state = (has_object(Some(v)), has_object(v.get("labels"))),
        (LABELS, Some(v)) => *state = (MapState::Present, has_object(Some(v))),
        (ROOT | METADATA, None) => *state = (MapState::Unknown, MapState::Unknown),
        (LABELS, None) => *state = (MapState::Present, MapState::Unknown),
        _ => {}
    }
}

/// Effect of removing the value at `path`.
fn removed_at(path: &str, state: &mut (MapState, MapState)) {
    match path {
        ROOT | METADATA => *state = (MapState::Absent, MapState::Absent),
        LABELS => state.1 = MapState::Absent,
        _ => {}
    }
}

/// A JSON patch: the caller's ops, then ops that leave both labels set (see the module doc).
fn json_patch(
    patch: Value,
    owner: &OwnerLabels,
    labels_before: LabelsBefore,
) -> Result<Injection, LabelError> {
    let Value::Array(mut ops) = patch else {
        return Err(LabelError::Malformed(
            "error decoding patch: a JSON patch must be an array of operations".to_owned(),
        ));
    };
    let mut state = (MapState::Before, MapState::Before);
    for (i, op) in ops.iter().enumerate() {
        let Some(op) = op.as_object() else {
            return Err(LabelError::Malformed(format!(
                "error decoding patch: operation {i} is not an object"
            )));
        };
        // An op without a readable kind or path fails the whole patch on the target.
        let (Some(kind), Some(path)) = (
            op.get("op").and_then(Value::as_str),
            op.get("path").and_then(Value::as_str),
        ) else {
            continue;
        };
        let from = op.get("from").and_then(Value::as_str);
        match kind {
            "add" | "replace" => written_at(path, op.get("value"), &mut state),
            "remove" => removed_at(path, &mut state),
            "move" => {
                if let Some(from) = from {
                    removed_at(from, &mut state);
                }
                written_at(path, None, &mut state);
            }
            "copy" => written_at(path, None, &mut state),
            _ => {}
        }
    }
    let labels_state = match state.1 {
        MapState::Before => match labels_before {
            LabelsBefore::Absent => MapState::Absent,
            LabelsBefore::Present | LabelsBefore::Unknown => MapState::Present,
        },
        other => other,
    };
    if state.0 == MapState::Absent {
        ops.push(json!({"op": "add", "path": METADATA, "value": {"labels": owner.as_map()}}));
    } else if labels_state == MapState::Absent {
        ops.push(json!({"op": "add", "path": LABELS, "value": owner.as_map()}));
    } else {
        for (key, value) in owner.pairs() {
            ops.push(json!({
                "op": "add",
                "path": format!("{LABELS}/{}", pointer_token(key)),
                "value": value,
            }));
        }
    }
    Ok(Injection::Rewritten {
        body: to_json(&Value::Array(ops)),
        content_type: "application/json-patch+json",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerLabels {
        OwnerLabels::of_test_client()
    }

    fn owner_labels_json() -> Value {
        json!({"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"})
    }

    fn rewritten(result: Result<Injection, LabelError>) -> (Value, &'static str) {
        match result.unwrap() {
            Injection::Rewritten { body, content_type } => {
                (serde_json::from_slice(&body).unwrap(), content_type)
            }
            other => panic!("not rewritten: {other:?}"),
        }
    }

    fn object(content_type: Option<&str>, body: &str) -> Result<Injection, LabelError> {
        inject(
            BodyKind::Object,
            content_type,
            body.as_bytes(),
            &owner(),
            LabelsBefore::Unknown,
        )
    }

    fn patch(content_type: &str, body: &str) -> Result<Injection, LabelError> {
        inject(
            BodyKind::Patch,
            Some(content_type),
            body.as_bytes(),
            &owner(),
            LabelsBefore::Unknown,
        )
    }

    fn owner_labels_of(value: &Value) -> (Option<&str>, Option<&str>) {
        let labels = value.pointer("/metadata/labels");
        (
            labels
                .and_then(|l| l.get(OWNER_VCLUSTER_LABEL))
                .and_then(Value::as_str),
            labels
                .and_then(|l| l.get(OWNER_PROJECT_LABEL))
                .and_then(Value::as_str),
        )
    }

    const CORRECT: (Option<&str>, Option<&str>) = (Some("client-a"), Some("default"));

    #[test]
    fn json_create_gets_both_labels_and_keeps_other_labels() {
        let (value, content_type) = rewritten(object(
            Some("application/json; charset=utf-8"),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","labels":{"app":"web"}},"spec":{"size":3}}"#,
        ));
        assert_eq!(content_type, "application/json");
        assert_eq!(owner_labels_of(&value), CORRECT);
        assert_eq!(value["metadata"]["labels"]["app"], "web");
        assert_eq!(value["spec"]["size"], 3);
    }

    #[test]
    fn missing_content_type_is_json_like_the_api_server() {
        let (value, _) = rewritten(object(None, r#"{"kind":"Widget","metadata":{"name":"w"}}"#));
        assert_eq!(owner_labels_of(&value), CORRECT);
    }

    #[test]
    fn caller_supplied_owner_values_are_overwritten() {
        let (value, _) = rewritten(object(
            Some("application/json"),
            r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":"client-b","vcluster.com/owner-project":null}}}"#,
        ));
        assert_eq!(owner_labels_of(&value), CORRECT);
    }

    #[test]
    fn missing_or_null_metadata_and_labels_are_created() {
        for body in [
            r#"{"kind":"Widget"}"#,
            r#"{"metadata":null}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"labels":null}}"#,
        ] {
            let (value, _) = rewritten(object(Some("application/json"), body));
            assert_eq!(owner_labels_of(&value), CORRECT, "{body}");
        }
    }

    #[test]
    fn yaml_create_is_labelled_and_sent_as_json() {
        let (value, content_type) = rewritten(object(
            Some("application/yaml"),
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  labels:\n    app: web\nspec:\n  mode: 0755\n  enabled: yes\n",
        ));
        assert_eq!(content_type, "application/json");
        assert_eq!(owner_labels_of(&value), CORRECT);
        assert_eq!(value["metadata"]["labels"]["app"], "web");
        // YAML 1.1 scalars, as the API server's YAML decoder reads them.
        assert_eq!(value["spec"]["mode"], 493);
        assert_eq!(value["spec"]["enabled"], true);
    }

    #[test]
    fn malformed_bodies_are_400() {
        for (content_type, body) in [
            ("application/json", "{\"metadata\":"),
            ("application/json", "[1,2]"),
            ("application/json", "\"x\""),
            ("application/json", ""),
            ("application/yaml", "a: [1, 2\n"),
            ("application/yaml", "a: 1\na: 2\n"),
            ("application/yaml", "a: 1\n---\nb: 2\n"),
            ("application/yaml", ""),
        ] {
            let err = object(Some(content_type), body).unwrap_err();
            assert!(
                matches!(err, LabelError::Malformed(_)),
                "{content_type} {body:?}: {err}"
            );
            let status = err.status();
            assert_eq!(status.code(), 400, "{body:?}");
            assert!(
                status
                    .message()
                    .starts_with("the object provided is unrecognized"),
                "{}",
                status.message()
            );
        }
        for (content_type, body) in [
            ("application/merge-patch+json", "{"),
            ("application/merge-patch+json", "[]"),
            ("application/json-patch+json", "{}"),
            ("application/json-patch+json", "[1]"),
            ("application/apply-patch+yaml", "a: [\n"),
        ] {
            let err = patch(content_type, body).unwrap_err();
            assert_eq!(err.status().code(), 400, "{content_type} {body:?}");
        }
    }

    #[test]
    fn bodies_over_3_mib_are_413() {
        let big = format!(
            r#"{{"metadata":{{}},"data":"{}"}}"#,
            "x".repeat(MAX_BODY_BYTES)
        );
        let err = object(Some("application/json"), &big).unwrap_err();
        assert_eq!(
            err,
            LabelError::TooLarge {
                size: big.len(),
                limit: MAX_BODY_BYTES
            }
        );
        let status = err.status();
        assert_eq!(status.code(), 413);
        assert_eq!(
            status.message(),
            "Request entity too large: limit is 3145728"
        );
        let exactly = format!(
            r#"{{"data":"{}"}}"#,
            "x".repeat(MAX_BODY_BYTES - r#"{"data":""}"#.len())
        );
        assert_eq!(exactly.len(), MAX_BODY_BYTES);
        assert!(object(Some("application/json"), &exactly).is_ok());
    }

    #[test]
    fn unsupported_object_media_types_are_415() {
        for content_type in [
            "application/vnd.kubernetes.protobuf",
            "application/cbor",
            "text/plain",
            "application/merge-patch+json",
        ] {
            let err = object(Some(content_type), "{}").unwrap_err();
            let status = err.status();
            assert_eq!(status.code(), 415, "{content_type}");
            assert_eq!(
                status.message(),
                "the body of the request was in an unknown format - accepted media types \
                 include: application/json, application/yaml"
            );
        }
    }

    #[test]
    fn strategic_merge_cbor_apply_and_unknown_patch_types_are_415() {
        for content_type in [
            "application/strategic-merge-patch+json",
            "application/apply-patch+cbor",
            "application/json",
            "",
            "application/merge-patch+json ; charset=utf-8",
        ] {
            let err = patch(content_type, "{}").unwrap_err();
            let status = err.status();
            assert_eq!(status.code(), 415, "{content_type:?}");
            assert_eq!(
                status.message(),
                "the body of the request was in an unknown format - accepted media types \
                 include: application/json-patch+json, application/merge-patch+json, \
                 application/apply-patch+yaml"
            );
        }
        let err = inject(
            BodyKind::Patch,
            None,
            b"{}",
            &owner(),
            LabelsBefore::Unknown,
        );
        assert_eq!(err.unwrap_err().status().code(), 415);
    }

    #[test]
    fn list_kind_and_non_object_metadata_are_forwarded_unchanged_with_a_reason() {
        assert_eq!(
            object(
                Some("application/json"),
                r#"{"kind":"WidgetList","items":[]}"#
            )
            .unwrap(),
            Injection::Unchanged(Unrewritable::ListKind("WidgetList".into()))
        );
        assert_eq!(
            object(Some("application/json"), r#"{"kind":"List","items":[]}"#).unwrap(),
            Injection::Unchanged(Unrewritable::ListKind("List".into()))
        );
        assert_eq!(
            object(Some("application/json"), r#"{"metadata":"x"}"#).unwrap(),
            Injection::Unchanged(Unrewritable::MetadataNotAnObject)
        );
        assert_eq!(
            object(Some("application/json"), r#"{"metadata":{"labels":["a"]}}"#).unwrap(),
            Injection::Unchanged(Unrewritable::LabelsNotAnObject)
        );
    }

    /// Applies an RFC 7386 merge patch, the way the API server applies a merge patch to a CR.
    fn apply_merge(target: &mut Value, patch: &Value) {
        json_patch::merge(target, patch);
    }

    fn stored() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"app": "web", "vcluster.com/owner-vcluster": "client-a",
                "vcluster.com/owner-project": "default"}},
            "spec": {"size": 1}})
    }

    #[test]
    fn merge_patches_can_neither_remove_nor_change_the_labels() {
        for body in [
            r#"{"spec":{"size":2}}"#,
            r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":null,"vcluster.com/owner-project":null}}}"#,
            r#"{"metadata":{"labels":{"vcluster.com/owner-vcluster":"client-b"}}}"#,
            r#"{"metadata":{"labels":null}}"#,
            r#"{"metadata":null}"#,
            r#"{"metadata":{}}"#,
        ] {
            let (patch_value, content_type) =
                rewritten(patch("application/merge-patch+json", body));
            assert_eq!(content_type, "application/merge-patch+json");
            let mut object = stored();
            apply_merge(&mut object, &patch_value);
            assert_eq!(owner_labels_of(&object), CORRECT, "{body} -> {patch_value}");
            assert_eq!(object["metadata"]["name"], "w", "{body}");
        }
    }

    #[test]
    fn merge_patch_keeps_other_changes() {
        let (patch_value, _) = rewritten(patch(
            "application/merge-patch+json",
            r#"{"kind":"Widget","metadata":{"labels":{"app":null,"tier":"db"}},"spec":{"size":2}}"#,
        ));
        let mut object = stored();
        apply_merge(&mut object, &patch_value);
        assert_eq!(object["kind"], "Widget");
        assert_eq!(object["spec"]["size"], 2);
        assert_eq!(object["metadata"]["labels"].get("app"), None);
        assert_eq!(object["metadata"]["labels"]["tier"], "db");
        assert_eq!(owner_labels_of(&object), CORRECT);
    }

    /// Applies the rewritten JSON patch to `doc` with an RFC 6902 implementation.
    fn apply_json_patch(doc: &Value, body: &str, before: LabelsBefore) -> Result<Value, String> {
        let injection = inject(
            BodyKind::Patch,
            Some("application/json-patch+json"),
            body.as_bytes(),
            &owner(),
            before,
        )
        .unwrap();
        let Injection::Rewritten { body, content_type } = injection else {
            panic!("not rewritten");
        };
        assert_eq!(content_type, "application/json-patch+json");
        let ops: json_patch::Patch = serde_json::from_slice(&body).unwrap();
        let mut out = doc.clone();
        json_patch::patch(&mut out, &ops).map_err(|e| e.to_string())?;
        Ok(out)
    }

    #[test]
    fn json_patches_end_with_the_labels_present_and_correct() {
        let cases = [
            r#"[{"op":"replace","path":"/spec/size","value":2}]"#,
            r#"[{"op":"remove","path":"/metadata/labels/vcluster.com~1owner-vcluster"}]"#,
            r#"[{"op":"replace","path":"/metadata/labels/vcluster.com~1owner-project","value":"other"}]"#,
            r#"[{"op":"add","path":"/metadata/labels/vcluster.com~1owner-vcluster","value":"client-b"}]"#,
            r#"[{"op":"move","from":"/metadata/labels/vcluster.com~1owner-vcluster","path":"/metadata/labels/x"}]"#,
            r#"[{"op":"copy","from":"/metadata/labels/app","path":"/metadata/labels/vcluster.com~1owner-project"}]"#,
            r#"[{"op":"remove","path":"/metadata/labels"}]"#,
            r#"[{"op":"replace","path":"/metadata/labels","value":{"app":"x"}}]"#,
            r#"[{"op":"replace","path":"/metadata/labels","value":null}]"#,
            r#"[{"op":"add","path":"/metadata/labels","value":{}}]"#,
            r#"[{"op":"move","from":"/metadata/labels","path":"/spec/stolen"}]"#,
            r#"[{"op":"copy","from":"/metadata/labels","path":"/spec/copy"},{"op":"remove","path":"/metadata/labels"}]"#,
            r#"[{"op":"replace","path":"/metadata","value":{"name":"w"}}]"#,
            r#"[{"op":"replace","path":"/metadata","value":{"name":"w","labels":{"a":"b"}}}]"#,
            r#"[{"op":"remove","path":"/metadata"}]"#,
            r#"[{"op":"move","from":"/metadata","path":"/spec/meta"}]"#,
            r#"[{"op":"replace","path":"","value":{"kind":"Widget","metadata":{"name":"w"}}}]"#,
            r#"[{"op":"replace","path":"","value":{"kind":"Widget"}}]"#,
            r#"[{"op":"copy","from":"/spec/labels","path":"/metadata/labels"}]"#,
            r#"[{"op":"remove","path":"/metadata/labels"},{"op":"add","path":"/metadata/labels","value":{"z":"1"}}]"#,
            r#"[{"op":"test","path":"/spec/size","value":1}]"#,
            r#"[]"#,
        ];
        for body in cases {
            let mut doc = stored();
            doc["spec"]["labels"] = json!({"k": "v"});
            let out = apply_json_patch(&doc, body, LabelsBefore::Present)
                .unwrap_or_else(|e| panic!("{body}: patch failed: {e}"));
            assert_eq!(owner_labels_of(&out), CORRECT, "{body} -> {out}");
        }
    }

    #[test]
    fn json_patch_keeps_the_callers_other_label_changes() {
        let out = apply_json_patch(
            &stored(),
            r#"[{"op":"remove","path":"/metadata/labels/app"},{"op":"add","path":"/metadata/labels/tier","value":"db"}]"#,
            LabelsBefore::Present,
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["labels"],
            json!({"tier": "db", "vcluster.com/owner-vcluster": "client-a",
                "vcluster.com/owner-project": "default"})
        );
        let out = apply_json_patch(
            &stored(),
            r#"[{"op":"replace","path":"/metadata/labels","value":{"only":"this"}}]"#,
            LabelsBefore::Present,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"]["only"], "this");
    }

    #[test]
    fn json_patch_on_an_object_without_labels_adds_the_map() {
        let doc = json!({"kind": "Widget", "metadata": {"name": "w"}, "spec": {}});
        let out = apply_json_patch(
            &doc,
            r#"[{"op":"add","path":"/spec/size","value":1}]"#,
            LabelsBefore::Absent,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], owner_labels_json());
        // The caller adding the map first is seen, so per-key ops follow.
        let out = apply_json_patch(
            &doc,
            r#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#,
            LabelsBefore::Absent,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"]["a"], "b");
        assert_eq!(owner_labels_of(&out), CORRECT);
    }

    #[test]
    fn json_patch_with_wrong_assumption_fails_instead_of_writing_unlabelled() {
        // Labels assumed present but missing: the appended add fails, so nothing is written.
        let doc = json!({"kind": "Widget", "metadata": {"name": "w"}});
        assert!(
            apply_json_patch(
                &doc,
                r#"[{"op":"add","path":"/spec","value":{}}]"#,
                LabelsBefore::Unknown
            )
            .is_err()
        );
        // A value the proxy cannot see copied onto the labels, which is not a map.
        let out = apply_json_patch(
            &stored(),
            r#"[{"op":"copy","from":"/metadata/name","path":"/metadata/labels"}]"#,
            LabelsBefore::Present,
        );
        assert!(out.is_err(), "{out:?}");
    }

    #[test]
    fn json_patch_ops_without_op_or_path_are_kept_for_the_target_to_reject() {
        let (value, _) = rewritten(patch(
            "application/json-patch+json",
            r#"[{"path":"/metadata/labels"},{"op":"remove"}]"#,
        ));
        let ops = value.as_array().unwrap();
        assert_eq!(ops.len(), 4);
        assert_eq!(ops[0], json!({"path": "/metadata/labels"}));
    }

    #[test]
    fn server_side_apply_is_labelled_and_keeps_its_content_type() {
        let (value, content_type) = rewritten(patch(
            "application/apply-patch+yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  labels:\n    vcluster.com/owner-vcluster: client-b\nspec:\n  size: 2\n",
        ));
        assert_eq!(content_type, "application/apply-patch+yaml");
        assert_eq!(owner_labels_of(&value), CORRECT);
        assert_eq!(value["spec"]["size"], 2);
        // JSON apply bodies (kubectl sends YAML, client-go may send JSON) are valid YAML.
        let (value, _) = rewritten(patch(
            "application/apply-patch+yaml",
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","labels":null}}"#,
        ));
        assert_eq!(owner_labels_of(&value), CORRECT);
    }

    #[test]
    fn only_create_update_and_patch_bodies_are_labelled() {
        assert_eq!(BodyKind::for_verb(&Verb::Create), Some(BodyKind::Object));
        assert_eq!(BodyKind::for_verb(&Verb::Update), Some(BodyKind::Object));
        assert_eq!(BodyKind::for_verb(&Verb::Patch), Some(BodyKind::Patch));
        for verb in [
            Verb::Delete,
            Verb::DeleteCollection,
            Verb::Get,
            Verb::List,
            Verb::Watch,
        ] {
            assert_eq!(BodyKind::for_verb(&verb), None, "{verb:?}");
        }
    }

    #[test]
    fn project_label_is_the_project_name_not_its_namespace() {
        let client = ClientIdentity {
            name: "client-a".into(),
            project: "default".into(),
            project_namespace: "p-default".into(),
        };
        assert_eq!(OwnerLabels::for_client(&client), owner());
    }
}
