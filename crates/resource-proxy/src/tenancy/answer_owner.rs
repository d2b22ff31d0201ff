//! Whether a GET answer belongs to this client (RP-7), read in one pass over the body.
//!
//! Every named GET in `owned` mode is answered only after this check, so it sits on the critical
//! path of the most common request. It reads the JSON once, without building it: the fields that
//! decide are `kind`, `metadata.labels` and, for a `Table`, each row's `object.metadata.labels`;
//! everything else is validated and skipped. The check fails closed: a body that is not one
//! well-formed JSON object (RFC 8259, UTF-8), a duplicate decisive field or a label value that is
//! not a string make the answer not owned.
//!
//! It accepts exactly what the serde model it replaced accepted (the tests hold the two side by
//! side), except that it is stricter in two places no API server produces: invalid UTF-8 in a
//! skipped string, and a struct written as a JSON array.

use std::borrow::Cow;

use crate::tenancy::labels::{OWNER_PROJECT_LABEL, OWNER_VCLUSTER_LABEL, OwnerLabels};

/// Whether a GET answer shows this client's owner labels: an object or a
/// `PartialObjectMetadata` (its `metadata.labels`), or a `Table` whose every row (at least one)
/// carries such an object (`includeObject` `Metadata` or `Object`). Anything else, unparsable
/// JSON included, is not owned.
pub fn is_owned_answer(body: &[u8], owner: &OwnerLabels) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let mut scan = Scanner {
        text,
        at: 0,
        nesting: Vec::new(),
    };
    scan.answer(owner) == Some(true) && scan.end()
}

/// An answer's decisive fields, as read.
#[derive(Default)]
struct Answer {
    table: Option<bool>,
    metadata: Option<Option<bool>>,
    rows: Option<Option<bool>>,
}

/// The owner labels of one label map (the last of duplicate keys wins, as in a map).
#[derive(Default)]
struct OwnerValues<'a> {
    project: Option<Cow<'a, str>>,
    vcluster: Option<Cow<'a, str>>,
}

impl OwnerValues<'_> {
    fn are(&self, owner: &OwnerLabels) -> bool {
        self.project.as_deref() == Some(owner.project.as_str())
            && self.vcluster.as_deref() == Some(owner.vcluster.as_str())
    }
}

/// A cursor over the body. `None` from any method means malformed: the caller stops.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
    /// Open containers of the value being skipped (`true`: object).
    nesting: Vec<bool>,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.at) {
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left.
    fn end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// `null`, consumed if it is next.
    fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal("null")?;
            return Some(true);
        }
        Some(false)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes().get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    /// The members of an object, each handed to `member` with its (unescaped) key; `member`
    /// must consume the value.
    fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>,
    ) -> Option<()> {
        let mut more = self.open(b'{', b'}')?;
        while more {
            let key = self.string()?;
            self.eat(b':')?;
            member(self, key)?;
            more = self.next_or_close(b'}')?;
        }
        Some(())
    }

    /// The elements of an array, each handed to `element`, which must consume it.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        let mut more = self.open(b'[', b']')?;
        while more {
            element(self)?;
            more = self.next_or_close(b']')?;
        }
        Some(())
    }

    /// Consumes a container's opening byte; whether an item follows (`false`: it was empty and
    /// is closed).
    fn open(&mut self, open: u8, close: u8) -> Option<bool> {
        self.eat(open)?;
        if self.peek()? == close {
            self.at += 1;
            return Some(false);
        }
        Some(true)
    }

    /// After an item: `true` when a comma announces another, `false` when `close` ends the
    /// container (both consumed).
    fn next_or_close(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(true)
            }
            c if c == close => {
                self.at += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// A string, borrowed when it has no escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.peek()?;
        let start = self.at;
        let escaped = self.skip_string()?;
        let raw = &self.text[start..self.at];
        if !escaped {
            return Some(Cow::Borrowed(&raw[1..raw.len() - 1]));
        }
        // Rare (label keys and values need no escapes): serde_json decodes, surrogates included.
        serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
    }

    /// Consumes a string (checking its escapes and that it has no control characters); whether it
    /// had escapes.
    fn skip_string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let b = self.bytes();
        let mut escaped = false;
        loop {
            self.at += special_offset(&b[self.at..])?;
            match b[self.at] {
                b'"' => {
                    self.at += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match *b.get(self.at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                        b'u' => {
                            let hex = b.get(self.at + 2..self.at + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 6;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    fn skip_number(&mut self) -> Option<()> {
        let b = self.bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while b.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            (*at > start).then_some(())
        };
        let mut at = self.at;
        if b.get(at) == Some(&b'-') {
            at += 1;
        }
        if b.get(at) == Some(&b'0') {
            at += 1;
        } else {
            digits(&mut at)?;
        }
        if b.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at)?;
        }
        if matches!(b.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(b.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            digits(&mut at)?;
        }
        self.at = at;
        Some(())
    }

    /// Consumes any value. Iterative, so deep nesting costs no stack (as serde_json's skipping).
    fn skip_value(&mut self) -> Option<()> {
        self.nesting.clear();
        loop {
            // A value starts here.
            match self.peek()? {
                b'{' | b'[' => {
                    let object = self.bytes()[self.at] == b'{';
                    self.at += 1;
                    let close = if object { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.at += 1;
                    } else {
                        self.nesting.push(object);
                        if object {
                            self.skip_string()?;
                            self.eat(b':')?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.skip_string()?;
                }
                b't' => self.literal("true")?,
                b'f' => self.literal("false")?,
                b'n' => self.literal("null")?,
                b'-' | b'0'..=b'9' => self.skip_number()?,
                _ => return None,
            }
            // A value ended: close the containers it ends, or move to the next member.
            loop {
                let Some(&object) = self.nesting.last() else {
                    return Some(());
                };
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.skip_string()?;
                            self.eat(b':')?;
                        }
                        break;
                    }
                    b'}' if object => {
                        self.at += 1;
                        self.nesting.pop();
                    }
                    b']' if !object => {
                        self.at += 1;
                        self.nesting.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The top-level object; its verdict.
    fn answer(&mut self, owner: &OwnerLabels) -> Option<bool> {
        let mut answer = Answer::default();
        self.object(|s, key| {
            match &*key {
                "kind" => {
                    once(&answer.table)?;
                    answer.table = Some(if s.null()? {
                        false
                    } else {
                        s.string()? == "Table"
                    });
                }
                "metadata" => {
                    once(&answer.metadata)?;
                    answer.metadata = Some(s.metadata(owner)?);
                }
                "rows" => {
                    once(&answer.rows)?;
                    answer.rows = Some(s.rows(owner)?);
                }
                _ => s.skip_value()?,
            }
            Some(())
        })?;
        Some(if answer.table == Some(true) {
            answer.rows.flatten() == Some(true)
        } else {
            answer.metadata.flatten() == Some(true)
        })
    }

    /// A `metadata` field: `None` inside when it is null; whether its labels are this client's.
    fn metadata(&mut self, owner: &OwnerLabels) -> Option<Option<bool>> {
        if self.null()? {
            return Some(None);
        }
        let labels = self.only_member("labels", Self::labels)?;
        Some(Some(
            labels.flatten().is_some_and(|values| values.are(owner)),
        ))
    }

    /// A `metadata.labels` field: `None` inside when it is null.
    fn labels(&mut self) -> Option<Option<OwnerValues<'a>>> {
        if self.null()? {
            return Some(None);
        }
        let mut values = OwnerValues::default();
        self.object(|s, key| {
            let value = s.string()?;
            match &*key {
                OWNER_PROJECT_LABEL => values.project = Some(value),
                OWNER_VCLUSTER_LABEL => values.vcluster = Some(value),
                _ => {}
            }
            Some(())
        })?;
        Some(Some(values))
    }

    /// A Table's `rows`: `None` inside when null; whether there is at least one and every row's
    /// object is this client's.
    fn rows(&mut self, owner: &OwnerLabels) -> Option<Option<bool>> {
        if self.null()? {
            return Some(None);
        }
        let (mut any, mut all) = (false, true);
        self.array(|s| {
            let object = s.only_member("object", |s| s.row_object(owner))?;
            any = true;
            all &= object.flatten() == Some(true);
            Some(())
        })?;
        Some(Some(any && all))
    }

    /// A row's `object`: `None` inside when null; whether its metadata's labels are this client's.
    fn row_object(&mut self, owner: &OwnerLabels) -> Option<Option<bool>> {
        if self.null()? {
            return Some(None);
        }
        let metadata = self.only_member("metadata", |s| s.metadata(owner))?;
        Some(Some(metadata.flatten() == Some(true)))
    }

    /// An object of which one member decides: its value as `read` reads it (`None` when the
    /// member is absent). The other members are skipped.
    fn only_member<T>(
        &mut self,
        name: &str,
        mut read: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        let mut found = None;
        self.object(|s, key| {
            if key == name {
                once(&found)?;
                found = Some(read(s)?);
            } else {
                s.skip_value()?;
            }
            Some(())
        })?;
        Some(found)
    }
}

/// A decisive field may appear once: a second one is malformed (as a struct field is to serde).
fn once<T>(seen: &Option<T>) -> Option<()> {
    seen.is_none().then_some(())
}

/// The offset of the first `"`, `\` or control character in `b`, eight bytes at a time.
fn special_offset(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut at = 0;
    while let Some(chunk) = b.get(at..at + 8) {
        let x = u64::from_le_bytes(chunk.try_into().ok()?);
        // The lowest flagged byte is exact for each test, so is the lowest of their union.
        let hits = zero_byte(x ^ (ONES * u64::from(b'"')))
            | zero_byte(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGHS);
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    b[at..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|i| at + i)
}

#[cfg(any(test, feature = "fuzzing"))]
pub mod reference {
    //! The serde model the scanner replaced: the oracle of the differential tests and of the
    //! `answer_owner` fuzz target (`fuzz/`, through the `fuzzing` feature).
    use std::fmt;

    use crate::tenancy::labels::{OWNER_PROJECT_LABEL, OWNER_VCLUSTER_LABEL, OwnerLabels};

    pub fn is_owned_answer_serde(body: &[u8], owner: &OwnerLabels) -> bool {
        #[derive(serde::Deserialize)]
        struct Meta<'a> {
            #[serde(default, borrow)]
            labels: Option<OwnerLabelValues<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Object<'a> {
            #[serde(borrow)]
            metadata: Option<Meta<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Row<'a> {
            #[serde(borrow)]
            object: Option<Object<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            kind: Option<JsonStr<'a>>,
            #[serde(borrow)]
            metadata: Option<Meta<'a>>,
            #[serde(borrow)]
            rows: Option<Vec<Row<'a>>>,
        }
        let owned = |meta: Option<&Meta<'_>>| {
            meta.and_then(|m| m.labels.as_ref()).is_some_and(|labels| {
                labels.project.as_deref() == Some(owner.project.as_str())
                    && labels.vcluster.as_deref() == Some(owner.vcluster.as_str())
            })
        };
        let Ok(answer) = serde_json::from_slice::<Answer<'_>>(body) else {
            return false;
        };
        if answer.kind.as_deref() == Some("Table") {
            return answer.rows.as_ref().is_some_and(|rows| {
                !rows.is_empty()
                    && rows
                        .iter()
                        .all(|r| owned(r.object.as_ref().and_then(|o| o.metadata.as_ref())))
            });
        }
        owned(answer.metadata.as_ref())
    }

    /// A JSON string, borrowed from the body unless it had escapes.
    struct JsonStr<'a>(std::borrow::Cow<'a, str>);

    impl std::ops::Deref for JsonStr<'_> {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    impl<'de: 'a, 'a> serde::Deserialize<'de> for JsonStr<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
                type Value = JsonStr<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(JsonStr(std::borrow::Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(JsonStr(std::borrow::Cow::Owned(v.to_owned())))
                }
                fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                    Ok(JsonStr(std::borrow::Cow::Owned(v)))
                }
            }
            d.deserialize_str(V(std::marker::PhantomData))
        }
    }

    /// The owner labels of a `metadata.labels` map (string to string; the last of duplicate keys
    /// wins, as in a map). Other labels are checked to be strings and dropped.
    #[derive(Default)]
    struct OwnerLabelValues<'a> {
        project: Option<JsonStr<'a>>,
        vcluster: Option<JsonStr<'a>>,
    }

    impl<'de: 'a, 'a> serde::Deserialize<'de> for OwnerLabelValues<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
                type Value = OwnerLabelValues<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a map of label keys to values")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Self::Value, A::Error> {
                    let mut out = OwnerLabelValues::default();
                    while let Some(key) = map.next_key::<JsonStr<'_>>()? {
                        let value = map.next_value::<JsonStr<'_>>()?;
                        match &*key {
                            OWNER_PROJECT_LABEL => out.project = Some(value),
                            OWNER_VCLUSTER_LABEL => out.vcluster = Some(value),
                            _ => {}
                        }
                    }
                    Ok(out)
                }
            }
            d.deserialize_map(V(std::marker::PhantomData))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn owner() -> OwnerLabels {
        OwnerLabels::of_test_client()
    }

    #[test]
    fn a_get_answer_is_owned_only_when_its_object_or_every_table_row_carries_both_labels() {
        let o = owner();
        let mine = json!({"vcluster.com/owner-vcluster": "client-a",
                          "vcluster.com/owner-project": "default", "app": "x"});
        let theirs = json!({"vcluster.com/owner-vcluster": "client-b",
                            "vcluster.com/owner-project": "default"});
        let owned = |v: Value| is_owned_answer(v.to_string().as_bytes(), &o);
        // A full object and PartialObjectMetadata.
        assert!(owned(
            json!({"kind": "Widget", "metadata": {"name": "w", "labels": mine}, "spec": {"a": [1, {"b": null}]}})
        ));
        assert!(owned(
            json!({"kind": "PartialObjectMetadata", "metadata": {"labels": mine}})
        ));
        assert!(!owned(
            json!({"kind": "Widget", "metadata": {"labels": theirs}})
        ));
        assert!(!owned(
            json!({"kind": "Widget", "metadata": {"labels": null}})
        ));
        assert!(!owned(json!({"kind": "Widget", "metadata": {}})));
        assert!(!owned(json!({"kind": "Widget"})));
        // Tables: every row's object decides; a row without object (includeObject=None) or
        // no rows at all is not owned.
        let row = |labels: &Value| json!({"cells": ["w"], "object": {"kind": "PartialObjectMetadata", "metadata": {"labels": labels}}});
        assert!(owned(
            json!({"kind": "Table", "metadata": {}, "rows": [row(&mine)]})
        ));
        assert!(!owned(json!({"kind": "Table", "rows": [row(&theirs)]})));
        assert!(!owned(
            json!({"kind": "Table", "rows": [row(&mine), row(&theirs)]})
        ));
        assert!(!owned(json!({"kind": "Table", "rows": [{"cells": ["w"]}]})));
        assert!(!owned(json!({"kind": "Table", "rows": []})));
        // A Table's own metadata never counts.
        assert!(!owned(
            json!({"kind": "Table", "metadata": {"labels": mine}, "rows": []})
        ));
        // Not JSON, label values that are not strings: not owned.
        assert!(!is_owned_answer(b"kind: Widget", &o));
        assert!(!owned(
            json!({"metadata": {"labels": {"vcluster.com/owner-vcluster": ["client-a"], "vcluster.com/owner-project": "default"}}})
        ));
        assert!(!owned(
            json!({"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default", "app": 1}}})
        ));
        // JSON escapes are read as the text they stand for; the last of duplicate keys wins.
        assert!(is_owned_answer(
            br#"{"metadata": {"labels": {"vcluster.com\/owner-vcluster": "client\u002da", "vcluster.com/owner-project": "default"}}}"#,
            &o
        ));
        assert!(!is_owned_answer(
            br#"{"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default", "vcluster.com/owner-vcluster": "client-b"}}}"#,
            &o
        ));
    }

    /// Answers of every shape the check meets, owned and not, compact and pretty-printed.
    fn corpus() -> Vec<Vec<u8>> {
        let mine = json!({"vcluster.com/owner-vcluster": "client-a",
                          "vcluster.com/owner-project": "default", "app": "x"});
        let theirs = json!({"vcluster.com/owner-vcluster": "client-b",
                            "vcluster.com/owner-project": "default"});
        let widget = |labels: &Value| {
            json!({
                "apiVersion": "example.test/v1", "kind": "Widget",
                "metadata": {
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                        "{\"apiVersion\":\"example.test/v1\",\"kind\":\"Widget\",\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"},
                    "creationTimestamp": "2026-11-30T16:14:22Z", "generation": 1,
                    "labels": labels,
                    "managedFields": [{"fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
                                       "manager": "kubectl", "operation": "Update"}],
                    "name": "w0", "resourceVersion": "410"
                },
                "spec": {"size": -0.5e+3, "n": [0, 1, -2, 3.25, 1E-2, true, false, null],
                         "text": "tab\t quote\" slash\\ \u{e9} \u{1F600}"}
            })
        };
        let row = |object: Value| json!({"cells": ["w", 1, null], "object": object});
        let values = [
            widget(&mine),
            widget(&theirs),
            widget(&Value::Null),
            json!({"kind": "PartialObjectMetadata", "metadata": {"labels": mine}}),
            json!({"kind": null, "metadata": {"labels": mine}}),
            json!({"kind": "Table", "metadata": {"labels": mine}, "rows": [
                row(widget(&mine)),
                row(json!({"kind": "PartialObjectMetadata", "metadata": {"labels": mine}})),
            ]}),
            json!({"kind": "Table", "rows": [row(widget(&mine)), row(widget(&theirs))]}),
            json!({"kind": "Table", "rows": [row(Value::Null)]}),
            json!({"kind": "Table", "rows": []}),
            json!({"kind": "Table", "rows": null, "metadata": {"labels": mine}}),
        ];
        let mut bodies = Vec::new();
        for v in &values {
            bodies.push(v.to_string().into_bytes());
        }
        for v in [&values[0], &values[5]] {
            bodies.push(serde_json::to_vec_pretty(v).unwrap());
        }
        // What serde_json never writes: escapes in decisive strings, odd whitespace, duplicates,
        // lone surrogates in skipped strings, deep nesting.
        for raw in [
            r#"{"metadata": {"labels": {"vcluster.com\/owner-vcluster": "client\u002da", "vcluster.com/owner-project": "default"}}}"#,
            "\t{\r\n\"kind\" :\"Widget\" , \"metadata\":{ \"labels\" :{\"vcluster.com/owner-vcluster\":\"client-a\",\"vcluster.com/owner-project\":\"default\"} } }\n",
            r#"{"kind": "T\u0061ble", "rows": [{"object": {"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}}]}"#,
            r#"{"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}, "metadata": null}"#,
            r#"{"kind": null, "kind": "Widget", "metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}"#,
            r#"{"metadata": {"labels": null, "labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}"#,
            r#"{"kind": "Table", "rows": [{"object": null, "object": {"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}}]}"#,
            r#"{"note": "\ud800 \udc00 \uDBFF", "metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}"#,
            r#"{"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "\ud800"}}}"#,
            r#"{"metadata": {"labels": {"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default", "vcluster.com/owner-project": "other"}}}"#,
        ] {
            bodies.push(raw.as_bytes().to_vec());
        }
        let deep = format!(
            r#"{{"spec": {}1{}, "metadata": {{"labels": {{"vcluster.com/owner-vcluster": "client-a", "vcluster.com/owner-project": "default"}}}}}}"#,
            "[{\"a\": ".repeat(300),
            "}]".repeat(300)
        );
        bodies.push(deep.into_bytes());
        bodies
    }

    /// The scanner's verdict is the serde model's, except that it also refuses invalid UTF-8.
    fn agrees(body: &[u8]) -> Result<bool, String> {
        let theirs =
            reference::is_owned_answer_serde(body, &owner()) && std::str::from_utf8(body).is_ok();
        let ours = is_owned_answer(body, &owner());
        if ours == theirs {
            Ok(ours)
        } else {
            Err(format!(
                "scanner says {ours}, serde model {theirs}: {}",
                String::from_utf8_lossy(body)
            ))
        }
    }

    #[test]
    fn the_scanner_agrees_with_the_serde_model_on_every_shape_of_answer() {
        let verdicts: Vec<bool> = corpus().iter().map(|b| agrees(b).unwrap()).collect();
        // Both verdicts occur, so the agreement is not that of two constant functions.
        assert!(verdicts.iter().filter(|v| **v).count() >= 6, "{verdicts:?}");
        assert!(
            verdicts.iter().filter(|v| !**v).count() >= 6,
            "{verdicts:?}"
        );
    }

    #[test]
    fn the_scanner_agrees_with_the_serde_model_on_every_mutation_of_an_answer() {
        // Every cut, every byte replaced by a JSON-significant one, every byte inserted: the
        // malformed bodies a broken or hostile target could send.
        const BYTES: &[u8] = b"\"\\{}[],:0-.en \x01\xff";
        let (mut owned, mut checked) = (0, 0);
        for body in corpus() {
            for i in 0..=body.len() {
                let mut variants = vec![body[..i].to_vec()];
                for &b in BYTES {
                    if i < body.len() {
                        let mut replaced = body.clone();
                        replaced[i] = b;
                        variants.push(replaced);
                    }
                    let mut inserted = body.clone();
                    inserted.insert(i, b);
                    variants.push(inserted);
                }
                for v in variants {
                    owned += usize::from(agrees(&v).unwrap());
                    checked += 1;
                }
            }
        }
        assert!(checked > 50_000 && owned > 1_000, "{owned} of {checked}");
    }

    #[test]
    fn string_skipping_finds_the_first_special_byte_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut b = vec![b'a'; len];
                    b[at] = special;
                    // Bytes just above the specials never stop the scan.
                    if at + 1 < len {
                        b[at + 1] = 0x20;
                    }
                    assert_eq!(special_offset(&b), Some(at), "{b:?}");
                }
            }
            let plain: Vec<u8> = (0..len)
                .map(|i| [b' ', b'#', b']', 0x80, 0xff][i % 5])
                .collect();
            assert_eq!(special_offset(&plain), None, "{plain:?}");
        }
    }
}
