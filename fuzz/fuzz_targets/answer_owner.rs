//! The answer-ownership scanner (`resource_proxy::tenancy::answer_owner`) against the serde model it
//! replaced (its test oracle): both give the same verdict on any body, except where the module
//! documents the scanner as stricter (invalid UTF-8, a struct written as a JSON array), and
//! there the scanner refuses.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use resource_proxy::tenancy::answer_owner::{is_owned_answer, reference::is_owned_answer_serde};
use resource_proxy::tenancy::labels::OwnerLabels;
use serde_json::value::RawValue;

fuzz_target!(|body: &[u8]| {
    let owner = OwnerLabels {
        vcluster: "client-a".into(),
        project: "default".into(),
    };
    let ours = is_owned_answer(body, &owner);
    let theirs = is_owned_answer_serde(body, &owner);
    if ours == theirs {
        return;
    }
    let text = String::from_utf8_lossy(body);
    assert!(
        !ours,
        "the scanner owns what the serde model refuses: {text:?}"
    );
    let documented = match std::str::from_utf8(body) {
        Err(_) => true,
        Ok(text) => struct_as_array(text),
    };
    assert!(
        documented,
        "the scanner refuses what the serde model owns: {text:?}"
    );
});

/// Whether one of the structs the serde model reads (the answer, its `metadata`, a Table row,
/// the row's `object` or that object's `metadata`) is written as a JSON array, which serde
/// reads field by field and the scanner refuses. Only asked of bodies the serde model read, so
/// every decisive member is present at most once.
fn struct_as_array(body: &str) -> bool {
    fn is_array(raw: &RawValue) -> bool {
        raw.get().trim_start().starts_with('[')
    }
    fn members(raw: &RawValue) -> BTreeMap<String, &RawValue> {
        serde_json::from_str(raw.get()).unwrap_or_default()
    }
    let Ok(answer) = serde_json::from_str::<&RawValue>(body) else {
        return false;
    };
    if is_array(answer) {
        return true;
    }
    let answer = members(answer);
    if answer.get("metadata").is_some_and(|m| is_array(m)) {
        return true;
    }
    let rows: Vec<&RawValue> = answer
        .get("rows")
        .and_then(|rows| serde_json::from_str(rows.get()).ok())
        .unwrap_or_default();
    rows.into_iter().any(|row| {
        if is_array(row) {
            return true;
        }
        members(row).get("object").is_some_and(|object| {
            is_array(object) || members(object).get("metadata").is_some_and(|m| is_array(m))
        })
    })
}
