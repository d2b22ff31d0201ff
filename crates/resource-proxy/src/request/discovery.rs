//! Discovery of the listener's group/version: `/apis` (aggregated discovery v2, or the legacy
//! APIGroupList), `/apis/<group>` and `/apis/<group>/<version>`, plus the OpenAPI v3 root
//! filtered to the own group/version, and the OpenAPI v2 document cut down to it.
//!
//! `/apis/<group>/<version>` comes from the target, with only the resources the entries route
//! (all for a wildcard entry, else the named ones and their subresources); when the target cannot answer (unreachable,
//! 401, 404, 5xx) it is served from the last good answer, else synthesized from the configured
//! resources (RP-13), so the APIService stays Available and `kubectl api-resources` keeps working.
//! The OpenAPI v3 documents of a named entry hold only its resources ([`crate::api::openapi_v3`]).
//! `/openapi/v2` follows the same rule as the resource list: the target's document filtered to the group/version
//! ([`crate::api::openapi_v2`]), revalidated with the target's ETag, the last good one while the
//! target cannot answer, an empty document before there is one; the aggregator asks every
//! minute and must not see a failure.

use std::sync::{PoisonError, RwLock};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::api::{openapi_v2, openapi_v3};
use crate::config::{GroupVersionListener, Resources};
use crate::target::TargetClient;

/// The media type of aggregated discovery v2.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Where a resource list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Target,
    LastGood,
    Synthesized,
}

/// Discovery state of one listener.
pub struct Discovery {
    group: String,
    version: String,
    resources: Resources,
    cluster_scoped: Vec<String>,
    last_good: RwLock<Option<Bytes>>,
    /// The cluster-scoped resources of the target's last good resource list; `None` before it.
    scopes_seen: RwLock<Option<Vec<String>>>,
    openapi_v2: RwLock<Option<OpenApiV2>>,
}

/// The last good OpenAPI v2 document (filtered) and the target's ETag for it.
#[derive(Clone)]
struct OpenApiV2 {
    etag: Option<http::HeaderValue>,
    document: Bytes,
}

impl Discovery {
    pub fn new(listener: &GroupVersionListener) -> Self {
        Self {
            group: listener.group.clone(),
            version: listener.version.clone(),
            resources: listener.resources.clone(),
            cluster_scoped: listener.cluster_scoped.clone(),
            last_good: RwLock::new(None),
            scopes_seen: RwLock::new(None),
            openapi_v2: RwLock::new(None),
        }
    }

    /// The APIResourceList of the group/version and where it came from; `Err` carries why the
    /// target's answer was not used (for the fallback metric and log).
    pub async fn resource_list(&self, target: &TargetClient) -> (Bytes, Source, Option<String>) {
        let path = format!("/apis/{}/{}", self.group, self.version);
        let req = Request::get(path.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(Bytes::new())
            .expect("static request");
        let why = match target.send(req).await {
            Ok(resp) if resp.status() == StatusCode::OK => match resp.into_body().collect().await {
                Ok(body) => {
                    if let Some(body) = self.routed_only(body.to_bytes()) {
                        *self
                            .scopes_seen
                            .write()
                            .unwrap_or_else(PoisonError::into_inner) =
                            Some(cluster_scoped_of(&body));
                        *self
                            .last_good
                            .write()
                            .unwrap_or_else(PoisonError::into_inner) = Some(body.clone());
                        return (body, Source::Target, None);
                    }
                    "the target's answer is not JSON".to_owned()
                }
                Err(e) => format!("reading the target's answer: {e}"),
            },
            Ok(resp) => format!("the target answered {}", resp.status().as_u16()),
            Err(e) => e.to_string(),
        };
        if let Some(body) = self
            .last_good
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return (body, Source::LastGood, Some(why));
        }
        (
            Bytes::from(self.synthesized().to_string()),
            Source::Synthesized,
            Some(why),
        )
    }

    /// The target's APIResourceList with only the routed resources (and their subresources);
    /// `None` when it is not JSON. A wildcard keeps the target's bytes.
    fn routed_only(&self, body: Bytes) -> Option<Bytes> {
        let mut list: Value = serde_json::from_slice(&body).ok()?;
        if self.resources == Resources::Wildcard {
            return Some(body);
        }
        if let Some(resources) = list["resources"].as_array_mut() {
            resources.retain(|r| {
                r["name"]
                    .as_str()
                    .is_some_and(|name| self.resources.routes(name))
            });
        }
        Some(Bytes::from(list.to_string()))
    }

    /// A resource list made from the configuration alone: each named resource with its configured
    /// scope (namespaced unless `scope: Cluster`), verb `get` only; a wildcard entry lists nothing. Kinds are guessed from the plural.
    fn synthesized(&self) -> Value {
        let resources: Vec<Value> = match &self.resources {
            Resources::Wildcard => Vec::new(),
            Resources::Named(names) => names
                .iter()
                .map(|plural| {
                    json!({
                        "name": plural,
                        "singularName": singular(plural),
                        "namespaced": !self.cluster_scoped.contains(plural),
                        "kind": kind_guess(plural),
                        "verbs": ["get"],
                    })
                })
                .collect(),
        };
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": format!("{}/{}", self.group, self.version),
            "resources": resources,
        })
    }

    /// Whether `resource` is cluster-scoped: as the target's last good resource list says, or
    /// before there is one, as configured (`scope: Cluster`).
    pub fn is_cluster_scoped(&self, resource: &str) -> bool {
        match &*self
            .scopes_seen
            .read()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(seen) => seen.iter().any(|r| r == resource),
            None => self.cluster_scoped.iter().any(|r| r == resource),
        }
    }

    /// The APIGroup of `/apis/<group>`.
    pub fn api_group(&self) -> Value {
        let gv = json!({"groupVersion": format!("{}/{}", self.group, self.version), "version": self.version});
        json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": self.group,
            "versions": [gv.clone()],
            "preferredVersion": gv,
        })
    }

    /// `/apis` as the legacy APIGroupList.
    pub fn api_group_list(&self) -> Value {
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [self.api_group()]})
    }

    /// `/apis` as aggregated discovery v2, built from an APIResourceList.
    pub fn aggregated(&self, resource_list: &[u8]) -> Value {
        let list: Value = serde_json::from_slice(resource_list).unwrap_or(Value::Null);
        let empty = Vec::new();
        let entries = list["resources"].as_array().unwrap_or(&empty);
        let kind_of = |v: &Value| {
            json!({
                "group": v.get("group").and_then(Value::as_str).unwrap_or(&self.group),
                "version": v.get("version").and_then(Value::as_str).unwrap_or(&self.version),
                "kind": v["kind"].as_str().unwrap_or_default(),
            })
        };
        let mut resources: Vec<Value> = Vec::new();
        for r in entries
            .iter()
            .filter(|r| !r["name"].as_str().unwrap_or("/").contains('/'))
        {
            let name = r["name"].as_str().unwrap_or_default();
            let subresources: Vec<Value> = entries
                .iter()
                .filter_map(|s| {
                    let (parent, sub) = s["name"].as_str()?.split_once('/')?;
                    (parent == name).then(|| {
                        json!({"subresource": sub, "responseKind": kind_of(s), "verbs": s["verbs"]})
                    })
                })
                .collect();
            let mut entry = json!({
                "resource": name,
                "responseKind": kind_of(r),
                "scope": if r["namespaced"].as_bool().unwrap_or(true) { "Namespaced" } else { "Cluster" },
                "singularResource": r["singularName"],
                "verbs": r["verbs"],
            });
            for key in ["shortNames", "categories"] {
                if let Some(v) = r.get(key) {
                    entry[key] = v.clone();
                }
            }
            if !subresources.is_empty() {
                entry["subresources"] = Value::Array(subresources);
            }
            resources.push(entry);
        }
        json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": [{
                "metadata": {"name": self.group, "creationTimestamp": null},
                "versions": [{"version": self.version, "resources": resources, "freshness": "Current"}],
            }],
        })
    }

    /// The OpenAPI v3 root of the target, reduced to this group/version's path.
    pub async fn openapi_v3_root(&self, target: &TargetClient) -> Value {
        let key = format!("apis/{}/{}", self.group, self.version);
        let req = Request::get("/openapi/v3")
            .header(http::header::ACCEPT, "application/json")
            .body(Bytes::new())
            .expect("static request");
        let mut paths = serde_json::Map::new();
        if let Ok(resp) = target.send(req).await
            && resp.status() == StatusCode::OK
            && let Ok(body) = resp.into_body().collect().await
            && let Ok(root) = serde_json::from_slice::<Value>(&body.to_bytes())
            && let Some(entry) = root["paths"].get(&key)
        {
            let mut entry = entry.clone();
            if self.resources != Resources::Wildcard
                && let Some(url) = entry["serverRelativeURL"].as_str()
                && let Some((path, hash)) = url.split_once("?hash=")
            {
                entry["serverRelativeURL"] = format!(
                    "{path}?hash={}",
                    openapi_v3::routed_hash(hash, &self.resources)
                )
                .into();
            }
            paths.insert(key, entry);
        }
        json!({"paths": paths})
    }

    /// The target's OpenAPI v3 document of the group/version with only the routed resources
    /// (for a named entry; a wildcard's is forwarded as it is). The target is asked without the
    /// caller's hash, which is [`openapi_v3::routed_hash`]'s, not the target's.
    pub async fn openapi_v3_routed(&self, target: &TargetClient) -> Result<Value, String> {
        let req = Request::get(format!("/openapi/v3/apis/{}/{}", self.group, self.version))
            .header(http::header::ACCEPT, "application/json")
            .body(Bytes::new())
            .expect("valid request");
        let resp = target.send(req).await.map_err(|e| e.to_string())?;
        if resp.status() != StatusCode::OK {
            return Err(format!("the target answered {}", resp.status().as_u16()));
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the target's answer: {e}"))?
            .to_bytes();
        let doc: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the target's answer is not JSON: {e}"))?;
        Ok(openapi_v3::filter(
            &doc,
            &self.group,
            &self.version,
            &self.resources,
        ))
    }

    /// Whether requests for the OpenAPI v3 document are forwarded as they are (a wildcard entry).
    pub fn openapi_v3_whole(&self) -> bool {
        self.resources == Resources::Wildcard
    }

    /// The OpenAPI v2 document of the group/version (see the module docs); `Err` carries why
    /// the target's answer was not used, with the document served instead.
    pub async fn openapi_v2(&self, target: &TargetClient) -> Result<Bytes, (Bytes, String)> {
        let cached = self
            .openapi_v2
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut req = Request::get("/openapi/v2").header(http::header::ACCEPT, "application/json");
        if let Some(etag) = cached.as_ref().and_then(|c| c.etag.clone()) {
            req = req.header(http::header::IF_NONE_MATCH, etag);
        }
        let req = req.body(Bytes::new()).expect("static request");
        let why = match target.send(req).await {
            Ok(resp) if resp.status() == StatusCode::NOT_MODIFIED && cached.is_some() => {
                return Ok(cached.map(|c| c.document).unwrap_or_default());
            }
            Ok(resp) if resp.status() == StatusCode::OK => {
                let etag = resp.headers().get(http::header::ETAG).cloned();
                match resp.into_body().collect().await {
                    Ok(body) => match serde_json::from_slice::<Value>(&body.to_bytes()) {
                        Ok(doc) => {
                            let document = Bytes::from(
                                openapi_v2::filter(
                                    &doc,
                                    &self.group,
                                    &self.version,
                                    &self.resources,
                                )
                                .to_string(),
                            );
                            *self
                                .openapi_v2
                                .write()
                                .unwrap_or_else(PoisonError::into_inner) = Some(OpenApiV2 {
                                etag,
                                document: document.clone(),
                            });
                            return Ok(document);
                        }
                        Err(e) => format!("the target's answer is not JSON: {e}"),
                    },
                    Err(e) => format!("reading the target's answer: {e}"),
                }
            }
            Ok(resp) => format!("the target answered {}", resp.status().as_u16()),
            Err(e) => e.to_string(),
        };
        let document = cached
            .map(|c| c.document)
            .unwrap_or_else(|| Bytes::from(openapi_v2::empty().to_string()));
        Err((document, why))
    }
}

/// The resources (not subresources) an APIResourceList marks `namespaced: false`.
fn cluster_scoped_of(list: &[u8]) -> Vec<String> {
    let list: Value = serde_json::from_slice(list).unwrap_or(Value::Null);
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["namespaced"] == Value::Bool(false))
        .filter_map(|r| r["name"].as_str())
        .filter(|name| !name.contains('/'))
        .map(str::to_owned)
        .collect()
}

/// Whether an `Accept` header asks for aggregated discovery v2.
pub fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|t| {
            let t = t.replace(' ', "");
            t.contains("g=apidiscovery.k8s.io")
                && t.contains("v=v2")
                && t.contains("as=APIGroupDiscoveryList")
        })
    })
}

fn singular(plural: &str) -> String {
    plural.strip_suffix('s').unwrap_or(plural).to_owned()
}

fn kind_guess(plural: &str) -> String {
    let s = singular(plural);
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AccessMode, TargetRef};

    fn discovery(resources: Resources) -> Discovery {
        Discovery::new(&GroupVersionListener {
            group: "example.test".into(),
            version: "v1".into(),
            port: 9100,
            resources,
            cluster_scoped: vec!["regions".into()],
            target: TargetRef {
                project: "p".into(),
                name: "t".into(),
            },
            access: AccessMode::Owned,
            entries: vec![],
        })
    }

    #[test]
    fn synthesized_discovery_lists_the_configured_resources_with_get_only() {
        let d = discovery(Resources::Named(vec!["widgets".into()]));
        let list = d.synthesized();
        assert_eq!(list["groupVersion"], "example.test/v1");
        assert_eq!(list["resources"][0]["name"], "widgets");
        assert_eq!(list["resources"][0]["kind"], "Widget");
        assert_eq!(list["resources"][0]["namespaced"], true);
        assert_eq!(list["resources"][0]["verbs"], serde_json::json!(["get"]));
        let d = discovery(Resources::Named(vec!["regions".into(), "widgets".into()]));
        let list = d.synthesized();
        assert_eq!(list["resources"][0]["name"], "regions");
        assert_eq!(list["resources"][0]["namespaced"], false);
        assert_eq!(list["resources"][1]["namespaced"], true);
        let agg = d.aggregated(list.to_string().as_bytes());
        assert_eq!(
            agg["items"][0]["versions"][0]["resources"][0]["scope"],
            "Cluster"
        );
        assert_eq!(
            discovery(Resources::Wildcard).synthesized()["resources"],
            serde_json::json!([])
        );
    }

    #[test]
    fn the_targets_resource_list_keeps_only_the_routed_resources_and_their_subresources() {
        let target = json!({"kind": "APIResourceList", "groupVersion": "example.test/v1", "resources": [
            {"name": "widgets", "namespaced": true, "kind": "Widget", "verbs": ["get"]},
            {"name": "widgets/status", "namespaced": true, "kind": "Widget", "verbs": ["get"]},
            {"name": "widgets/scale", "namespaced": true, "kind": "Scale", "verbs": ["get"]},
            {"name": "gadgets", "namespaced": true, "kind": "Gadget", "verbs": ["get"]},
            {"name": "gadgets/status", "namespaced": true, "kind": "Gadget", "verbs": ["get"]},
            {"name": "clusterthings", "namespaced": false, "kind": "ClusterThing", "verbs": ["get"]},
        ]});
        let body = Bytes::from(target.to_string());
        let names = |d: &Discovery| -> Vec<String> {
            let out: Value = serde_json::from_slice(&d.routed_only(body.clone()).unwrap()).unwrap();
            out["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let named = discovery(Resources::Named(vec![
            "clusterthings".into(),
            "widgets".into(),
        ]));
        assert_eq!(
            names(&named),
            [
                "widgets",
                "widgets/status",
                "widgets/scale",
                "clusterthings"
            ]
        );
        // The aggregated document is built from it: no sibling kind, the scope as the target says.
        let agg = named.aggregated(&named.routed_only(body.clone()).unwrap());
        let resources = &agg["items"][0]["versions"][0]["resources"];
        assert_eq!(resources.as_array().unwrap().len(), 2);
        assert_eq!(resources[0]["resource"], "widgets");
        assert_eq!(resources[1]["resource"], "clusterthings");
        assert_eq!(resources[1]["scope"], "Cluster");
        // A wildcard keeps the target's bytes as they are.
        let wildcard = discovery(Resources::Wildcard);
        assert_eq!(wildcard.routed_only(body.clone()).unwrap(), body);
        assert_eq!(cluster_scoped_of(&body), ["clusterthings"]);
        assert!(cluster_scoped_of(b"not json").is_empty());
        assert!(named.routed_only(Bytes::from_static(b"<html>")).is_none());
    }

    #[test]
    fn aggregated_discovery_nests_subresources_under_their_resource() {
        let d = discovery(Resources::Wildcard);
        let list = json!({"resources": [
            {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
             "verbs": ["get", "list"], "shortNames": ["wd"]},
            {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget", "verbs": ["get", "patch"]},
        ]});
        let agg = d.aggregated(list.to_string().as_bytes());
        assert_eq!(agg["kind"], "APIGroupDiscoveryList");
        let v = &agg["items"][0]["versions"][0];
        assert_eq!(v["version"], "v1");
        let r = &v["resources"][0];
        assert_eq!(v["resources"].as_array().unwrap().len(), 1);
        assert_eq!(r["resource"], "widgets");
        assert_eq!(r["scope"], "Namespaced");
        assert_eq!(
            r["responseKind"],
            json!({"group": "example.test", "version": "v1", "kind": "Widget"})
        );
        assert_eq!(r["shortNames"], json!(["wd"]));
        assert_eq!(r["subresources"][0]["subresource"], "status");
    }

    #[test]
    fn the_aggregated_media_type_is_recognised_in_accept() {
        assert!(wants_aggregated(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        )));
        assert!(wants_aggregated(Some(
            "application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList"
        )));
        assert!(!wants_aggregated(Some("application/json")));
        assert!(!wants_aggregated(None));
    }
}
