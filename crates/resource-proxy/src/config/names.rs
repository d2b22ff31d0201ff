//! Names of the objects that wire a group/version into the client cluster (RP-3).
//!
//! For group `example.com`, version `v1`: APIService `v1.example.com`, ExternalName Service
//! `kube-system/proxy-example-com-v1`, serving-certificate SAN
//! `proxy-example-com-v1.kube-system.svc`. A Service name over 63 characters (the DNS label
//! limit) is cut and given a hash suffix of the full name, so it stays unique, deterministic
//! across replicas and restarts, and a valid DNS-1035 label.

use sha2::{Digest, Sha256};

/// Namespace of the proxy Services.
pub const SERVICE_NAMESPACE: &str = "kube-system";

/// Label that marks the APIService and Service as protected from deletion.
pub const PROTECTED_LABEL: &str = "vcluster.loft.sh/protected";

/// Value of [`PROTECTED_LABEL`] on this proxy's objects.
pub const PROTECTED_VALUE: &str = "resource-proxy";

/// Label the kube-aggregator puts on APIServices it manages for local CRDs; ours must not have it.
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// ValidatingAdmissionPolicy that denies deleting protected objects.
pub const PROTECTION_POLICY_NAME: &str = "vcluster-protected-apiservices";

/// Its binding for this proxy's objects.
pub const PROTECTION_BINDING_NAME: &str = "vcluster-protected-resource-proxy";

/// The denial message the policy returns.
pub const PROTECTION_MESSAGE: &str = "deletion of vCluster-protected resources is denied; remove \
     the corresponding entry from your vCluster configuration";

/// Longest valid DNS label, and so Service name.
pub const MAX_SERVICE_NAME_LEN: usize = 63;

/// Hex characters of the SHA-256 of the full name appended to a shortened name.
const HASH_SUFFIX_LEN: usize = 10;

/// Label on the APIService and Service naming the client (`client.name`) whose proxy wired them,
/// so a proxy removes only its own stale wiring.
pub const CLIENT_LABEL: &str = "resource-proxy.vcluster.loft.sh/client";

/// Field manager of the proxy's server-side applies.
pub const FIELD_MANAGER: &str = "resource-proxy";

/// `<version>.<group>`.
pub fn api_service_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// `proxy-<group with dots as dashes>-<version>`, shortened with a hash suffix when it would be
/// longer than 63 characters.
pub fn service_name(group: &str, version: &str) -> String {
    shorten(format!("proxy-{}-{version}", group.replace('.', "-")))
}

/// Lease of the client's proxy replicas (in `kube-system` of the client cluster):
/// `resource-proxy-<client>`, shortened like [`service_name`].
pub fn lease_name(client: &str) -> String {
    shorten(format!("resource-proxy-{client}"))
}

/// Secret holding the generated serving CA and certificate (in `kube-system` of the client
/// cluster): `resource-proxy-serving-<client>`, shortened like [`service_name`].
pub fn serving_secret_name(client: &str) -> String {
    shorten(format!("resource-proxy-serving-{client}"))
}

/// Name of the protection policy's `matchConditions` entry that exempts this client's proxy
/// identity: `exempt-<client>`, shortened like [`service_name`].
pub fn exemption_condition_name(client: &str) -> String {
    shorten(format!("exempt-{client}"))
}

/// Field manager for the protection policy: one per client, so each proxy owns its own
/// exemption entry and a proxy's apply never removes another client's entry.
pub fn policy_field_manager(client: &str) -> String {
    format!("{FIELD_MANAGER}-{client}")
}

/// `full` when it fits a DNS label, else its first 52 characters (without a trailing dash), `-`,
/// and the first 10 hex digits of its SHA-256.
fn shorten(full: String) -> String {
    if full.len() <= MAX_SERVICE_NAME_LEN {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(HASH_SUFFIX_LEN)
        .map(|n| char::from_digit(u32::from(n), 16).unwrap_or('0'))
        .collect();
    let keep = MAX_SERVICE_NAME_LEN - HASH_SUFFIX_LEN - 1;
    // The names are ASCII (validated groups, versions and client names), so byte slicing is on
    // char boundaries.
    let prefix = full[..keep].trim_end_matches('-');
    format!("{prefix}-{hash}")
}

/// DNS name the aggregator verifies the serving certificate against: `<service>.kube-system.svc`.
pub fn serving_cert_san(group: &str, version: &str) -> String {
    format!("{}.{SERVICE_NAMESPACE}.svc", service_name(group, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_dns1035_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn api_service_is_version_dot_group() {
        assert_eq!(api_service_name("example.com", "v1"), "v1.example.com");
    }

    #[test]
    fn service_name_replaces_dots_with_dashes() {
        assert_eq!(service_name("example.com", "v1"), "proxy-example-com-v1");
        assert_eq!(
            service_name("stable.example.com", "v1beta1"),
            "proxy-stable-example-com-v1beta1"
        );
    }

    #[test]
    fn service_name_of_exactly_63_characters_is_kept_and_64_is_shortened() {
        // "proxy-" (6) + 51 + "-io" (3) + "-v1" (3) = 63.
        let group = format!("{}.io", "a".repeat(51));
        assert_eq!(
            service_name(&group, "v1"),
            format!("proxy-{}-io-v1", "a".repeat(51))
        );
        let group = format!("{}.io", "a".repeat(52));
        let name = service_name(&group, "v1");
        assert_eq!(name.len(), 63);
        assert!(!name.ends_with("-io-v1"), "{name}");
    }

    #[test]
    fn long_service_name_is_shortened_to_a_valid_deterministic_label() {
        let group = "very-long-organisation-name.platform-engineering.example.com";
        let name = service_name(group, "v1alpha1");
        assert!(name.len() <= 63, "{name} is {} long", name.len());
        assert!(is_dns1035_label(&name), "{name}");
        assert!(name.starts_with("proxy-very-long-organisation-name-"));
        assert_eq!(name, service_name(group, "v1alpha1"));
    }

    #[test]
    fn shortened_names_of_different_group_versions_differ() {
        let group = "very-long-organisation-name.platform-engineering.example.com";
        assert_ne!(
            service_name(group, "v1alpha1"),
            service_name(group, "v1alpha2")
        );
    }

    #[test]
    fn shortened_name_does_not_keep_a_dash_before_the_suffix() {
        // Cut point (52 chars) falls right after a dash of "proxy-aaa...-".
        let group = format!("{}.{}.io", "a".repeat(45), "b".repeat(30));
        let name = service_name(&group, "v1");
        assert!(!name.contains("--"), "{name}");
        assert!(is_dns1035_label(&name), "{name}");
    }

    #[test]
    fn per_client_names_fit_a_dns_label() {
        assert_eq!(lease_name("client-a"), "resource-proxy-client-a");
        assert_eq!(
            serving_secret_name("client-a"),
            "resource-proxy-serving-client-a"
        );
        assert_eq!(exemption_condition_name("client-a"), "exempt-client-a");
        let long = "c".repeat(63);
        for name in [
            lease_name(&long),
            serving_secret_name(&long),
            exemption_condition_name(&long),
        ] {
            assert!(is_dns1035_label(&name), "{name}");
        }
        assert_ne!(lease_name(&long), lease_name(&"d".repeat(63)));
    }

    #[test]
    fn serving_cert_san_is_service_dns_name() {
        assert_eq!(
            serving_cert_san("example.com", "v1"),
            "proxy-example-com-v1.kube-system.svc"
        );
    }
}
