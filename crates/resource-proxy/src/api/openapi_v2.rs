//! The OpenAPI v2 (Swagger) document of one group/version, cut out of the target's whole
//! `/openapi/v2`: the paths under `/apis/<group>/<version>/` of the routed resources
//! ([`routed_path`]), the definitions and parameters they refer to (transitively), and the
//! document's frame (`swagger`, `info`, security). The client cluster's aggregator merges it into
//! the client's `/openapi/v2`, which is what `kubectl explain --output=plaintext-openapiv2` and
//! older clients read.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::config::Resources;

/// Whether an OpenAPI path belongs to the routed resources of `group`/`version`: the
/// group/version's own path (`/apis/<group>/<version>/`), or a path whose resource (after an
/// optional `watch/` and `namespaces/{namespace}/`) is routed. Paths are the templates of the
/// documents (`/apis/g/v1/namespaces/{namespace}/widgets/{name}/status`).
pub fn routed_path(path: &str, group: &str, version: &str, resources: &Resources) -> bool {
    let Some(rest) = path.strip_prefix(&format!("/apis/{group}/{version}")) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('/') else {
        // `/apis/g/v1` itself, not `/apis/g/v10`.
        return rest.is_empty();
    };
    if rest.is_empty() {
        return true;
    }
    let rest = rest.strip_prefix("watch/").unwrap_or(rest);
    let segments: Vec<&str> = rest.split('/').collect();
    let resource = match segments.as_slice() {
        ["namespaces", _, resource, ..] => resource,
        [resource, ..] => resource,
        [] => return false,
    };
    resources.routes(resource)
}

/// What is left of `doc` for the routed `resources` of `group`/`version`.
pub fn filter(doc: &Value, group: &str, version: &str, resources: &Resources) -> Value {
    let paths = routed_paths(doc, group, version, resources);
    let kept = reachable(&paths, refs, |(section, name): &(Section, String)| {
        doc[section.key()].get(name)
    });
    let section = |s: Section| -> Map<String, Value> {
        kept.iter()
            .filter(|(k, _)| *k == s)
            .map(|(_, name)| (name.clone(), doc[s.key()][name].clone()))
            .collect()
    };

    let mut out = json!({
        "swagger": doc.get("swagger").cloned().unwrap_or_else(|| "2.0".into()),
        "info": doc.get("info").cloned().unwrap_or_else(|| json!({"title": "Kubernetes", "version": "unversioned"})),
        "paths": paths,
        "definitions": section(Section::Definitions),
    });
    let parameters = section(Section::Parameters);
    if !parameters.is_empty() {
        out["parameters"] = Value::Object(parameters);
    }
    for key in ["securityDefinitions", "security"] {
        if let Some(v) = doc.get(key) {
            out[key] = v.clone();
        }
    }
    out
}

/// The entries of `doc["paths"]` that address the routed `resources` of `group`/`version` (the
/// same in OpenAPI v2 and v3).
pub(super) fn routed_paths(
    doc: &Value,
    group: &str,
    version: &str,
    resources: &Resources,
) -> Map<String, Value> {
    doc["paths"]
        .as_object()
        .map(|paths| {
            paths
                .iter()
                .filter(|(path, _)| routed_path(path, group, version, resources))
                .map(|(path, item)| (path.clone(), item.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Every reference reachable from `paths`: `refs` collects the references one value makes,
/// `lookup` finds what a reference names; followed until no new one turns up. A reference to
/// nothing is not kept.
pub(super) fn reachable<'a, K: Ord + Clone>(
    paths: &Map<String, Value>,
    refs: fn(&Value, &mut Vec<K>),
    lookup: impl Fn(&K) -> Option<&'a Value>,
) -> BTreeSet<K> {
    let mut wanted: Vec<K> = Vec::new();
    for item in paths.values() {
        refs(item, &mut wanted);
    }
    let mut kept = BTreeSet::new();
    while let Some(reference) = wanted.pop() {
        if kept.contains(&reference) {
            continue;
        }
        if let Some(found) = lookup(&reference) {
            refs(found, &mut wanted);
            kept.insert(reference);
        }
    }
    kept
}

/// The document served when the target's cannot be had and none was seen before: valid and
/// empty, so the aggregator merges nothing rather than logging a failure.
pub fn empty() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": {},
        "definitions": {},
    })
}

/// The top-level sections a `$ref` can point into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    Definitions,
    Parameters,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::Definitions => "definitions",
            Section::Parameters => "parameters",
        }
    }
}

/// Every local `$ref` inside `v`.
fn refs(v: &Value, out: &mut Vec<(Section, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref"
                    && let Some(r) = v.as_str()
                {
                    if let Some(name) = r.strip_prefix("#/definitions/") {
                        out.push((Section::Definitions, name.to_owned()));
                    } else if let Some(name) = r.strip_prefix("#/parameters/") {
                        out.push((Section::Parameters, name.to_owned()));
                    }
                } else {
                    refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.36.0"},
            "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}],
            "paths": {
                "/apis/example.test/v1/": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.meta.APIResourceList"}}}}},
                "/apis/example.test/v1/namespaces/{namespace}/widgets": {
                    "parameters": [{"$ref": "#/parameters/namespace-vgWSWtn3"}],
                    "get": {"responses": {"200": {"schema": {"$ref": "#/definitions/test.example.v1.WidgetList"}}}},
                },
                "/apis/example.test/v10/gizmos": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/test.example.v10.Gizmo"}}}}},
                "/apis/other.test/v1/things": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/test.other.v1.Thing"}}}}},
                "/api/v1/pods": {"get": {}},
            },
            "parameters": {
                "namespace-vgWSWtn3": {"name": "namespace", "in": "path", "type": "string"},
                "unused": {"name": "x", "in": "query", "type": "string"},
            },
            "definitions": {
                "io.k8s.meta.APIResourceList": {"type": "object"},
                "test.example.v1.WidgetList": {"properties": {
                    "items": {"type": "array", "items": {"$ref": "#/definitions/test.example.v1.Widget"}},
                    "metadata": {"$ref": "#/definitions/io.k8s.meta.ListMeta"},
                }},
                "test.example.v1.Widget": {"properties": {"metadata": {"$ref": "#/definitions/io.k8s.meta.ObjectMeta"}}},
                "io.k8s.meta.ObjectMeta": {"properties": {"managedFields": {"items": {"$ref": "#/definitions/io.k8s.meta.ManagedFieldsEntry"}}}},
                "io.k8s.meta.ManagedFieldsEntry": {"type": "object"},
                "io.k8s.meta.ListMeta": {"type": "object"},
                "test.example.v10.Gizmo": {"type": "object"},
                "test.other.v1.Thing": {"type": "object"},
                "io.k8s.api.core.v1.Pod": {"type": "object"},
            },
        })
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[test]
    fn only_the_group_versions_paths_and_what_they_refer_to_are_kept() {
        let out = filter(&doc(), "example.test", "v1", &Resources::Wildcard);
        assert_eq!(
            keys(&out["paths"]),
            [
                "/apis/example.test/v1/",
                "/apis/example.test/v1/namespaces/{namespace}/widgets"
            ]
        );
        assert_eq!(
            keys(&out["definitions"]),
            [
                "io.k8s.meta.APIResourceList",
                "io.k8s.meta.ListMeta",
                "io.k8s.meta.ManagedFieldsEntry",
                "io.k8s.meta.ObjectMeta",
                "test.example.v1.Widget",
                "test.example.v1.WidgetList",
            ]
        );
        assert_eq!(keys(&out["parameters"]), ["namespace-vgWSWtn3"]);
        assert_eq!(out["swagger"], "2.0");
        assert_eq!(out["info"]["version"], "v1.36.0");
        assert_eq!(out["security"], doc()["security"]);
        assert_eq!(out["securityDefinitions"], doc()["securityDefinitions"]);
    }

    #[test]
    fn a_group_version_the_target_does_not_serve_leaves_an_empty_document() {
        let out = filter(&doc(), "absent.test", "v1", &Resources::Wildcard);
        assert_eq!(out["paths"], json!({}));
        assert_eq!(out["definitions"], json!({}));
        assert!(out.get("parameters").is_none());
        assert_eq!(empty()["paths"], json!({}));
        assert_eq!(empty()["swagger"], "2.0");
    }

    fn widgets_only() -> Resources {
        Resources::Named(vec!["widgets".into()])
    }

    #[test]
    fn routed_paths_are_those_of_the_routed_resources() {
        let wildcard = Resources::Wildcard;
        for (path, named, all) in [
            ("/apis/g/v1", true, true),
            ("/apis/g/v1/", true, true),
            ("/apis/g/v1/widgets", true, true),
            ("/apis/g/v1/widgets/{name}", true, true),
            ("/apis/g/v1/widgets/{name}/status", true, true),
            ("/apis/g/v1/namespaces/{namespace}/widgets", true, true),
            (
                "/apis/g/v1/namespaces/{namespace}/widgets/{name}/scale",
                true,
                true,
            ),
            ("/apis/g/v1/watch/widgets", true, true),
            (
                "/apis/g/v1/watch/namespaces/{namespace}/widgets/{name}",
                true,
                true,
            ),
            ("/apis/g/v1/gadgets", false, true),
            ("/apis/g/v1/gadgets/{name}/status", false, true),
            ("/apis/g/v1/namespaces/{namespace}/gadgets", false, true),
            (
                "/apis/g/v1/watch/namespaces/{namespace}/gadgets",
                false,
                true,
            ),
            ("/apis/g/v1/watch/gadgets", false, true),
            ("/apis/g/v1/widgetsx", false, true),
            // Another group/version is never routed.
            ("/apis/g/v10/widgets", false, false),
            ("/apis/g/v2/widgets", false, false),
            ("/apis/gg/v1/widgets", false, false),
            ("/apis/h/v1/widgets", false, false),
            ("/api/v1/pods", false, false),
        ] {
            assert_eq!(
                routed_path(path, "g", "v1", &widgets_only()),
                named,
                "{path}"
            );
            assert_eq!(
                routed_path(path, "g", "v1", &wildcard),
                all,
                "wildcard {path}"
            );
        }
    }

    #[test]
    fn a_named_entry_keeps_only_its_kinds_paths_and_definitions() {
        let doc = json!({
            "paths": {
                "/apis/g/v1/": {"get": {"schema": {"$ref": "#/definitions/meta.APIResourceList"}}},
                "/apis/g/v1/namespaces/{namespace}/widgets/{name}": {"get": {"schema": {"$ref": "#/definitions/g.v1.Widget"}}},
                "/apis/g/v1/watch/namespaces/{namespace}/widgets": {"get": {"schema": {"$ref": "#/definitions/meta.WatchEvent"}}},
                "/apis/g/v1/namespaces/{namespace}/gadgets/{name}": {"get": {"schema": {"$ref": "#/definitions/g.v1.Gadget"}}},
                "/apis/g/v1/watch/gadgets": {"get": {"schema": {"$ref": "#/definitions/meta.WatchEvent"}}},
            },
            "definitions": {
                "meta.APIResourceList": {"type": "object"},
                "meta.WatchEvent": {"type": "object"},
                "meta.ObjectMeta": {"type": "object"},
                "g.v1.Widget": {"properties": {"metadata": {"$ref": "#/definitions/meta.ObjectMeta"}}},
                "g.v1.Gadget": {"properties": {"metadata": {"$ref": "#/definitions/meta.ObjectMeta"},
                    "spec": {"$ref": "#/definitions/g.v1.GadgetSpec"}}},
                "g.v1.GadgetSpec": {"type": "object"},
            },
        });
        let out = filter(&doc, "g", "v1", &widgets_only());
        assert_eq!(
            keys(&out["paths"]),
            [
                "/apis/g/v1/",
                "/apis/g/v1/namespaces/{namespace}/widgets/{name}",
                "/apis/g/v1/watch/namespaces/{namespace}/widgets",
            ]
        );
        assert_eq!(
            keys(&out["definitions"]),
            [
                "g.v1.Widget",
                "meta.APIResourceList",
                "meta.ObjectMeta",
                "meta.WatchEvent"
            ]
        );
        // The wildcard keeps the sibling kind.
        let all = filter(&doc, "g", "v1", &Resources::Wildcard);
        assert!(all["definitions"].get("g.v1.GadgetSpec").is_some());
        assert_eq!(all["paths"].as_object().unwrap().len(), 5);
    }

    #[test]
    fn reference_cycles_end() {
        let doc = json!({
            "paths": {"/apis/g/v1/xs": {"get": {"schema": {"$ref": "#/definitions/a"}}}},
            "definitions": {
                "a": {"properties": {"b": {"$ref": "#/definitions/b"}}},
                "b": {"properties": {"a": {"$ref": "#/definitions/a"}, "missing": {"$ref": "#/definitions/gone"}}},
            },
        });
        assert_eq!(
            keys(&filter(&doc, "g", "v1", &Resources::Wildcard)["definitions"]),
            ["a", "b"]
        );
    }
}
