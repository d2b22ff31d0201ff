//! Names and hashes: the controller's field manager, the names of a Gateway's plane objects,
//! label values for names of any length, the sha256 hex the token-hash annotations and caches
//! use, the labels of the controller's own Secrets, and the ownership guard for an object found
//! at a rendered name.

use std::collections::BTreeMap;

use gateway_api::apis::standard::gateways::Gateway;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

/// The field manager of every write.
pub const MANAGER: &str = "tunnel-gateway-controller";

/// The label naming what manages an object.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The labels of the Secrets the controller keeps in its own namespace (the shared plane's
/// token, the config API's CA and the shared plane's serving certificate).
pub(crate) fn own_secret_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned())])
}

/// The names of a Gateway's plane objects in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneNames {
    /// `cf-proxy-<gw>`; the HPA has the same name.
    pub deployment: String,
    /// `cf-proxy-<gw>-config`, the headless Service the pushes resolve.
    pub config_service: String,
    /// `cf-proxy-<gw>-netpol`.
    pub network_policy: String,
    /// `cf-proxy-<gw>-auth`, used only when the GatewayConfig has no `authTokenSecretRef`.
    pub auth_secret: String,
    /// `cf-proxy-<gw>-config-tls`, the config API's serving certificate and trust bundle.
    pub config_tls_secret: String,
}

impl PlaneNames {
    /// Names from the Gateway's name. A name that would not fit (the longest suffix,
    /// `-config`, must stay within the 63 characters of a Service name) or that has characters a
    /// Service name cannot have (`.`) is cut and sanitised, with 8 hex characters of its sha256
    /// appended so distinct Gateways keep distinct names.
    pub fn for_gateway(gateway_name: &str) -> Self {
        const MAX_STEM: usize = 63 - "cf-proxy-".len() - "-config".len();
        let fits = gateway_name.len() <= MAX_STEM
            && gateway_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let stem = if fits {
            gateway_name.to_owned()
        } else {
            let head: String = gateway_name
                .chars()
                .map(|c| {
                    if c.is_ascii_lowercase() || c.is_ascii_digit() {
                        c
                    } else {
                        '-'
                    }
                })
                .take(MAX_STEM - 1 - HASH_CHARS)
                .collect();
            with_hash(head.trim_end_matches('-'), gateway_name)
        };
        Self {
            deployment: format!("cf-proxy-{stem}"),
            config_service: format!("cf-proxy-{stem}-config"),
            network_policy: format!("cf-proxy-{stem}-netpol"),
            auth_secret: format!("cf-proxy-{stem}-auth"),
            config_tls_secret: format!("cf-proxy-{stem}-config-tls"),
        }
    }
}

const HASH_CHARS: usize = 8;

fn with_hash(head: &str, original: &str) -> String {
    let hash = &sha256_hex(original)[..HASH_CHARS];
    if head.is_empty() {
        hash.to_owned()
    } else {
        format!("{head}-{hash}")
    }
}

/// A label value for a name: the name itself up to 63 characters; a longer one is cut and
/// suffixed with 8 hex characters of its sha256. The `cf.k8s.lex.la/gateway` selector label and
/// both GEP-1762 labels go through this one function, so tooling matching the exact name misses
/// only for names over 63 characters.
pub fn label_value(name: &str) -> String {
    const MAX: usize = 63;
    if name.len() <= MAX {
        return name.to_owned();
    }
    let head: String = name.chars().take(MAX - 1 - HASH_CHARS).collect();
    with_hash(
        head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()),
        name,
    )
}

/// Lower-case hex sha256, as written in the token-hash annotations.
pub fn sha256_hex(value: &str) -> String {
    Sha256::digest(value.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The controller ownerReference every object of `gateway`'s plane carries (`None` before the
/// Gateway has a UID).
pub fn gateway_owner(gateway: &Gateway) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "gateway.networking.k8s.io/v1".to_owned(),
        kind: "Gateway".to_owned(),
        name: gateway.metadata.name.clone()?,
        uid: gateway.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// True when `meta` names this Gateway (by UID) as its controller: the only objects at a
/// rendered name the controller may update or delete.
pub fn owned_by_gateway(meta: &ObjectMeta, gateway: &Gateway) -> bool {
    let Some(uid) = gateway.metadata.uid.as_deref() else {
        return false;
    };
    meta.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.uid == uid
            && r.kind == "Gateway"
            && r.api_version.starts_with("gateway.networking.k8s.io/")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_to_63_characters_with_a_hash_suffix() {
        let long_a = format!("{}-a", "x".repeat(80));
        let long_b = format!("{}-b", "x".repeat(80));
        let (a, b) = (
            PlaneNames::for_gateway(&long_a),
            PlaneNames::for_gateway(&long_b),
        );
        for n in [
            &a.deployment,
            &a.config_service,
            &a.network_policy,
            &a.auth_secret,
        ] {
            assert!(n.len() <= 63, "{n} is {} long", n.len());
            assert!(n.ends_with(|c: char| c.is_ascii_alphanumeric()), "{n}");
        }
        assert_ne!(
            a.deployment, b.deployment,
            "distinct Gateways keep distinct planes"
        );
        assert_eq!(
            a.config_service,
            format!("{}-config", a.deployment),
            "the plane's objects share one stem"
        );
        // A dotted Gateway name is legal, a dotted Service name is not; and it must not collide
        // with the dashed spelling.
        let dotted = PlaneNames::for_gateway("edge.v2");
        assert!(!dotted.config_service.contains('.'));
        assert_ne!(dotted, PlaneNames::for_gateway("edge-v2"));

        let label = label_value(&long_a);
        assert_eq!(label.len(), 63);
        assert_ne!(label, label_value(&long_b));
        assert_eq!(label_value("edge"), "edge");
        assert_eq!(label_value(&"y".repeat(63)), "y".repeat(63));
    }
}
