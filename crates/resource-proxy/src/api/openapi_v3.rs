//! The OpenAPI v3 document of one group/version with only the routed resources of a named entry:
//! the target's `/openapi/v3/apis/<group>/<version>` keeps the paths of the routed resources
//! ([`super::openapi_v2::routed_path`]) and the components they refer to (transitively), so a
//! sibling kind's schema is not served. The root listing's hash is the target's, mixed with the
//! routed resources, so a client's cache of a document filtered for other resources is not used.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::openapi_v2::{reachable, routed_paths};
use crate::config::Resources;

/// What is left of the group/version document `doc` for the routed `resources`.
pub fn filter(doc: &Value, group: &str, version: &str, resources: &Resources) -> Value {
    let mut out = doc.clone();
    let paths = routed_paths(doc, group, version, resources);
    let kept = reachable(&paths, refs, |(section, name): &(String, String)| {
        doc["components"][section].get(name)
    });
    if let Some(components) = doc["components"].as_object() {
        let filtered: Map<String, Value> = components
            .iter()
            .map(|(section, entries)| {
                // Security schemes are named by `security`, not by `$ref`: kept whole.
                if section == "securitySchemes" {
                    return (section.clone(), entries.clone());
                }
                let entries: Map<String, Value> = entries
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(name, _)| kept.contains(&(section.clone(), (*name).clone())))
                    .map(|(name, v)| (name.clone(), v.clone()))
                    .collect();
                (section.clone(), Value::Object(entries))
            })
            .collect();
        out["components"] = Value::Object(filtered);
    }
    out["paths"] = Value::Object(paths);
    out
}

/// The hash published for the filtered document in the root listing: the target's hash mixed
/// with the routed resources, upper-case hex like the API server's.
pub fn routed_hash(target_hash: &str, resources: &Resources) -> String {
    let mut h = Sha256::new();
    h.update(target_hash.as_bytes());
    if let Resources::Named(names) = resources {
        for name in names {
            h.update(b"\n");
            h.update(name.as_bytes());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02X}")).collect()
}

/// Every local `#/components/<section>/<name>` reference inside `v`.
fn refs(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref"
                    && let Some((section, name)) = v
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/"))
                        .and_then(|r| r.split_once('/'))
                {
                    out.push((section.to_owned(), name.to_owned()));
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
    use serde_json::json;

    use super::*;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    fn doc() -> Value {
        json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.36.0"},
            "paths": {
                "/apis/g/v1/": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/meta.APIResourceList"}}}}}}},
                "/apis/g/v1/clusterthings/{name}/status": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/g.v1.ClusterThing"}}}}}}},
                "/apis/g/v1/namespaces/{namespace}/widgets": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/g.v1.WidgetList"}}}}}}},
                "/apis/g/v1/namespaces/{namespace}/gadgets/{name}": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/g.v1.Gadget"}}}}}}},
                "/apis/g/v1/watch/gadgets": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/meta.WatchEvent"}}}}}}},
            },
            "components": {
                "schemas": {
                    "meta.APIResourceList": {"type": "object"},
                    "meta.WatchEvent": {"type": "object"},
                    "meta.ObjectMeta": {"type": "object"},
                    "meta.ListMeta": {"type": "object"},
                    "g.v1.ClusterThing": {"properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/meta.ObjectMeta"}]}}},
                    "g.v1.WidgetList": {"properties": {"items": {"items": {"$ref": "#/components/schemas/g.v1.Widget"}},
                        "metadata": {"$ref": "#/components/schemas/meta.ListMeta"}}},
                    "g.v1.Widget": {"properties": {"metadata": {"$ref": "#/components/schemas/meta.ObjectMeta"}}},
                    "g.v1.Gadget": {"properties": {"spec": {"$ref": "#/components/schemas/g.v1.GadgetSpec"}}},
                    "g.v1.GadgetSpec": {"type": "object"},
                },
                "securitySchemes": {"BearerToken": {"type": "apiKey"}},
            },
        })
    }

    #[test]
    fn named_resources_keep_their_paths_and_the_schemas_they_refer_to() {
        let routed = Resources::Named(vec!["clusterthings".into(), "widgets".into()]);
        let out = filter(&doc(), "g", "v1", &routed);
        assert_eq!(
            keys(&out["paths"]),
            [
                "/apis/g/v1/",
                "/apis/g/v1/clusterthings/{name}/status",
                "/apis/g/v1/namespaces/{namespace}/widgets",
            ]
        );
        assert_eq!(
            keys(&out["components"]["schemas"]),
            [
                "g.v1.ClusterThing",
                "g.v1.Widget",
                "g.v1.WidgetList",
                "meta.APIResourceList",
                "meta.ListMeta",
                "meta.ObjectMeta",
            ]
        );
        assert_eq!(keys(&out["components"]["securitySchemes"]), ["BearerToken"]);
        assert_eq!(out["openapi"], "3.0.0");
        assert_eq!(out["info"]["version"], "v1.36.0");
    }

    #[test]
    fn a_wildcard_keeps_the_whole_group_version() {
        assert_eq!(filter(&doc(), "g", "v1", &Resources::Wildcard), doc());
    }

    #[test]
    fn the_published_hash_changes_with_the_routed_resources_and_the_target_document() {
        let widgets = Resources::Named(vec!["widgets".into()]);
        let both = Resources::Named(vec!["gadgets".into(), "widgets".into()]);
        let h = routed_hash("ABC", &widgets);
        assert_eq!(h, routed_hash("ABC", &widgets));
        assert_eq!(h.len(), 64);
        assert!(
            h.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        );
        assert_ne!(h, routed_hash("ABD", &widgets));
        assert_ne!(h, routed_hash("ABC", &both));
    }
}
