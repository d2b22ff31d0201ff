//! ReferenceGrant checks (Gateway API): a route may reference a backend in another namespace only
//! when a ReferenceGrant in the backend's namespace lets routes of that kind from the route's
//! namespace reference that kind (and, when the grant names one, that object).

use gateway_api::apis::standard::referencegrants::ReferenceGrant;
use kube::ResourceExt;

/// The referencing side: a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct From<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
}

/// The referenced side: a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct To<'a> {
    /// `""` for the core group (Services).
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// Whether the reference is allowed: always within one namespace; across namespaces only by a
/// grant that lives in the referenced namespace.
pub fn permits(grants: &[ReferenceGrant], from: From<'_>, to: To<'_>) -> bool {
    if from.namespace == to.namespace {
        return true;
    }
    grants
        .iter()
        .filter(|g| g.namespace().as_deref() == Some(to.namespace))
        .any(|g| {
            g.spec.from.iter().any(|f| {
                f.group == from.group && f.kind == from.kind && f.namespace == from.namespace
            }) && g.spec.to.iter().any(|t| {
                t.group == to.group
                    && t.kind == to.kind
                    && t.name
                        .as_deref()
                        .is_none_or(|n| n.is_empty() || n == to.name)
            })
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ROUTES: &str = "gateway.networking.k8s.io";

    fn grant(
        ns: &str,
        from_ns: &str,
        from_kind: &str,
        to_kind: &str,
        to_name: Option<&str>,
    ) -> ReferenceGrant {
        let mut to = json!({"group": "", "kind": to_kind});
        if let Some(n) = to_name {
            to["name"] = n.into();
        }
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
            "metadata": {"name": "g", "namespace": ns},
            "spec": {"from": [{"group": ROUTES, "kind": from_kind, "namespace": from_ns}], "to": [to]}
        }))
        .unwrap()
    }

    fn from(ns: &str) -> From<'_> {
        From {
            group: ROUTES,
            kind: "HTTPRoute",
            namespace: ns,
        }
    }

    fn svc<'a>(ns: &'a str, name: &'a str) -> To<'a> {
        To {
            group: "",
            kind: "Service",
            namespace: ns,
            name,
        }
    }

    #[test]
    fn same_namespace_references_need_no_grant() {
        assert!(permits(&[], from("app"), svc("app", "web")));
    }

    #[test]
    fn cross_namespace_references_are_refused_without_a_grant() {
        assert!(!permits(&[], from("app"), svc("backend", "web")));
    }

    #[test]
    fn a_grant_in_the_backends_namespace_allows_the_routes_namespace() {
        let g = [grant("backend", "app", "HTTPRoute", "Service", None)];
        assert!(permits(&g, from("app"), svc("backend", "web")));
        assert!(
            permits(&g, from("app"), svc("backend", "any-other")),
            "no name = every Service"
        );
    }

    #[test]
    fn a_grant_is_only_valid_in_the_referenced_namespace() {
        let g = [grant("app", "app", "HTTPRoute", "Service", None)];
        assert!(
            !permits(&g, from("app"), svc("backend", "web")),
            "a grant in the route's own namespace grants nothing"
        );
    }

    #[test]
    fn a_grant_names_the_namespace_kind_and_optionally_the_object() {
        let named = [grant("backend", "app", "HTTPRoute", "Service", Some("web"))];
        assert!(permits(&named, from("app"), svc("backend", "web")));
        assert!(!permits(&named, from("app"), svc("backend", "db")));
        assert!(
            !permits(&named, from("other"), svc("backend", "web")),
            "another namespace"
        );
        let grpc_only = [grant("backend", "app", "GRPCRoute", "Service", None)];
        assert!(
            !permits(&grpc_only, from("app"), svc("backend", "web")),
            "another route kind"
        );
        let secrets = [grant("backend", "app", "HTTPRoute", "Secret", None)];
        assert!(
            !permits(&secrets, from("app"), svc("backend", "web")),
            "another target kind"
        );
    }
}
