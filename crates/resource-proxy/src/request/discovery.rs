//! Discovery of the listener's group/version: `/apis` (aggregated discovery v2, or the legacy
//! APIGroupList), `/apis/<group>` and `/apis/<group>/<version>`, plus the OpenAPI v3 root
//! filtered to the own group/version.
//!
//! `/apis/<group>/<version>` comes from the target; when the target cannot answer (unreachable,
//! 401, 404, 5xx) it is served from the last good answer, else synthesized from the configured
//! resources (RP-13), so the APIService stays Available and `kubectl api-resources` keeps working.

use std::sync::{PoisonError, RwLock};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

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
    last_good: RwLock<Option<Bytes>>,
}

impl Discovery {
    pub fn new(listener: &GroupVersionListener) -> Self {
        Self {
            group: listener.group.clone(),
            version: listener.version.clone(),
            resources: listener.resources.clone(),
            last_good: RwLock::new(None),
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
                    let body = body.to_bytes();
                    if serde_json::from_slice::<Value>(&body).is_ok() {
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

    /// A resource list made from the configuration alone: each named resource namespaced, verb
    /// `get` only; a wildcard entry lists nothing. Kinds are guessed from the plural.
    fn synthesized(&self) -> Value {
        let resources: Vec<Value> = match &self.resources {
            Resources::Wildcard => Vec::new(),
            Resources::Named(names) => names
                .iter()
                .map(|plural| {
                    json!({
                        "name": plural,
                        "singularName": singular(plural),
                        "namespaced": true,
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
            paths.insert(key, entry.clone());
        }
        json!({"paths": paths})
    }
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
        assert_eq!(
            discovery(Resources::Wildcard).synthesized()["resources"],
            serde_json::json!([])
        );
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
