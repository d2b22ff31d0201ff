//! The identities the controller's decisions are keyed by: objects (`namespace/name`),
//! Gateways in the oldest-first order of claims and the cap, data-plane partitions, routes, and
//! the parent references that key a route's (or a policy's) status entries.

use std::fmt;

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicyStatusAncestorsAncestorRef;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::{
    GrpcRouteParentRefs, GrpcRouteStatusParentsParentRef,
};
use gateway_api::apis::standard::httproutes::{
    HttpRouteParentRefs, HttpRouteStatusParentsParentRef,
};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// `namespace/name` of an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub fn of<K: ResourceExt>(o: &K) -> ObjKey {
        ObjKey {
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Gateway's namespace and name; displays as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GatewayKey {
    pub namespace: String,
    pub name: String,
}

impl GatewayKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn of(gateway: &Gateway) -> Self {
        Self::new(
            gateway.metadata.namespace.clone().unwrap_or_default(),
            gateway.metadata.name.clone().unwrap_or_default(),
        )
    }
}

impl fmt::Display for GatewayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which proxies serve a Gateway, and with which token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartitionKey {
    /// The plane deployed with the controller (Gateways without parametersRef, TG-2).
    Shared,
    /// A Gateway's own plane (TG-7).
    Dedicated(ObjKey),
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionKey::Shared => f.write_str("shared"),
            PartitionKey::Dedicated(k) => write!(f, "gateway:{k}"),
        }
    }
}

/// HTTPRoute or GRPCRoute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
}

impl RouteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
        }
    }
}

/// A route's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteId {
    pub kind: RouteKind,
    pub key: ObjKey,
}

/// A reference to a route's parent (or a policy's ancestor), as Gateway API's
/// `ParentReference`: unset `group` and `kind` mean a Gateway, an unset `namespace` the
/// referrer's own. Serialized as in the API (camelCase, unset fields left out).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

impl ParentRef {
    /// A reference to the Gateway `gw` with group, kind and namespace spelled out, as status
    /// entries carry it.
    pub fn to_gateway(gw: &ObjKey, section_name: Option<String>, port: Option<i32>) -> Self {
        Self {
            group: Some(GATEWAY_GROUP.to_owned()),
            kind: Some("Gateway".to_owned()),
            namespace: Some(gw.namespace.clone()),
            name: gw.name.clone(),
            section_name,
            port,
        }
    }

    /// A reference to the ListenerSet `ls`, spelled out as [`ParentRef::to_gateway`].
    pub fn to_listener_set(ls: &ObjKey, section_name: Option<String>, port: Option<i32>) -> Self {
        Self {
            kind: Some("ListenerSet".to_owned()),
            ..Self::to_gateway(ls, section_name, port)
        }
    }

    /// The ListenerSet this names, if it names one; `namespace` is the referrer's.
    pub fn listener_set(&self, namespace: &str) -> Option<ObjKey> {
        let group = self.group.as_deref().unwrap_or(GATEWAY_GROUP);
        (group == GATEWAY_GROUP && self.kind.as_deref() == Some("ListenerSet")).then(|| ObjKey {
            namespace: self.namespace.as_deref().unwrap_or(namespace).to_owned(),
            name: self.name.clone(),
        })
    }

    /// The Gateway this names, if it names a Gateway; `namespace` is the referrer's.
    pub fn gateway(&self, namespace: &str) -> Option<ObjKey> {
        let group = self.group.as_deref().unwrap_or(GATEWAY_GROUP);
        let kind = self.kind.as_deref().unwrap_or("Gateway");
        (group == GATEWAY_GROUP && kind == "Gateway").then(|| ObjKey {
            namespace: self.namespace.as_deref().unwrap_or(namespace).to_owned(),
            name: self.name.clone(),
        })
    }
}

/// The generated parent reference types (spec and status of each route kind, and policy
/// ancestors) share field names, not a type.
macro_rules! parent_ref_from {
    ($($t:ty),*) => {$(
        impl From<&$t> for ParentRef {
            fn from(r: &$t) -> Self {
                Self {
                    group: r.group.clone(),
                    kind: r.kind.clone(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    section_name: r.section_name.clone(),
                    port: r.port,
                }
            }
        }
    )*};
}

parent_ref_from!(
    HttpRouteParentRefs,
    GrpcRouteParentRefs,
    HttpRouteStatusParentsParentRef,
    GrpcRouteStatusParentsParentRef,
    BackendTlsPolicyStatusAncestorsAncestorRef,
    crate::api::AncestorRef
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_displays_as_namespace_slash_name() {
        assert_eq!(
            GatewayKey::new("tenant-a", "edge").to_string(),
            "tenant-a/edge"
        );
    }

    #[test]
    fn a_parent_ref_names_a_gateway_by_default_in_the_referrers_namespace() {
        let r = ParentRef {
            group: None,
            kind: None,
            namespace: None,
            name: "edge".into(),
            section_name: Some("http".into()),
            port: None,
        };
        let gw = r.gateway("shop").unwrap();
        assert_eq!(gw.to_string(), "shop/edge");
        assert_eq!(r.listener_set("shop"), None);
        let set = ParentRef {
            group: Some(GATEWAY_GROUP.into()),
            kind: Some("ListenerSet".into()),
            ..r.clone()
        };
        assert_eq!(set.gateway("shop"), None);
        assert_eq!(set.listener_set("shop").unwrap().to_string(), "shop/edge");
        let service = ParentRef {
            kind: Some("Service".into()),
            ..r.clone()
        };
        assert_eq!(service.gateway("shop"), None);
        assert_eq!(
            serde_json::to_value(ParentRef::to_gateway(&gw, r.section_name.clone(), Some(80)))
                .unwrap(),
            serde_json::json!({
                "group": GATEWAY_GROUP, "kind": "Gateway", "namespace": "shop", "name": "edge",
                "sectionName": "http", "port": 80,
            })
        );
    }
}
