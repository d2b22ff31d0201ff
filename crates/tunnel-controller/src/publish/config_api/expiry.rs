//! Whether a plane's config API certificates are there and far enough from expiry, as the
//! controller's leader sees them each round: the CAs the plane trusts, the serving certificate
//! in the plane's TLS Secret and the controller's client certificates. The decision is
//! [`verdict`] (pure); the controller exports the dates as
//! `cftunnel_config_tls_expiry_timestamp_seconds{plane,kind}` and puts the verdict on the
//! dedicated plane's Gateway, or on every GatewayClass of the controller for the shared plane.
//!
//! Everything here is renewed at two thirds of its life ([`crate::publish::config_api::pki`]), so a
//! certificate within [`WARN_BEFORE`] of its end means renewal has been failing for weeks.
//! What a pod actually serves (the kubelet's copy of the Secret) is the proxy's own
//! `cftunnel_proxy_config_tls_expiry_timestamp_seconds`.

use std::time::Duration;

use crate::conditions::Verdict;
use crate::keys::PartitionKey;

/// The condition type on the Gateway (dedicated plane) or the GatewayClasses (shared plane).
pub const CONDITION: &str = "cf.k8s.lex.la/ConfigAPITLS";
/// Reasons of [`CONDITION`].
pub const VALID: &str = "CertificatesValid";
pub const MISSING: &str = "CertificateMissing";
pub const EXPIRING: &str = "CertificateExpiring";
pub const EXPIRED: &str = "CertificateExpired";
/// How long before its end a certificate makes the condition False (the proxy's alert uses the
/// same 14 days).
pub const WARN_BEFORE: Duration = Duration::from_secs(14 * 24 * 3600);

/// The `plane` label and the name in messages: `shared` or `<namespace>/<gateway>`.
pub fn plane_label(key: &PartitionKey) -> String {
    match key {
        PartitionKey::Shared => "shared".to_owned(),
        PartitionKey::Dedicated(gw) => gw.to_string(),
    }
}

/// A plane's certificates this round: each one's end (Unix seconds; `None`: there is none), or
/// why they could not be had at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaneCerts {
    /// The earliest end among the CAs the plane trusts.
    pub ca: Option<i64>,
    /// The serving certificate of the plane's TLS Secret.
    pub serving: Option<i64>,
    /// The earliest end among the controller's client certificates.
    pub client: Option<i64>,
    /// The CA or the plane's Secret is unavailable (a foreign Secret at the plane's name, a
    /// write refused, no CA yet): the plane is not pushed to.
    pub problem: Option<String>,
}

impl PlaneCerts {
    /// Nothing could be had: `problem` says why.
    pub fn unavailable(problem: &str) -> Self {
        Self {
            problem: Some(problem.to_owned()),
            ..Self::default()
        }
    }

    /// The `kind` label of `cftunnel_config_tls_expiry_timestamp_seconds` with each end (`None`:
    /// no series).
    pub fn series(&self) -> [(&'static str, Option<i64>); 3] {
        [
            ("ca", self.ca),
            ("serving", self.serving),
            ("client", self.client),
        ]
    }
}

/// The condition for the plane `plane` at `now` (Unix seconds): False when a certificate is
/// missing, expired or within [`WARN_BEFORE`] of its end (the earliest one is named), else True.
pub fn verdict(plane: &str, certs: &PlaneCerts, now: i64) -> Verdict {
    if let Some(problem) = &certs.problem {
        return Verdict::fail(
            CONDITION,
            MISSING,
            format!(
                "the config API certificates of the {plane} data plane are unavailable: {problem}"
            ),
        );
    }
    let mut earliest = ("CA", i64::MAX);
    for (kind, at) in [
        ("CA", certs.ca),
        ("serving", certs.serving),
        ("client", certs.client),
    ] {
        let Some(at) = at else {
            return Verdict::fail(
                CONDITION,
                MISSING,
                format!("the {plane} data plane's config API has no {kind} certificate yet"),
            );
        };
        if at < earliest.1 {
            earliest = (kind, at);
        }
    }
    let (kind, at) = earliest;
    let when = rfc3339(at);
    let warn = i64::try_from(WARN_BEFORE.as_secs()).unwrap_or(i64::MAX);
    if at <= now {
        Verdict::fail(
            CONDITION,
            EXPIRED,
            format!(
                "the {kind} certificate of the {plane} data plane's config API expired at {when}: pushes to it fail; see the controller's logs for why it was not renewed"
            ),
        )
    } else if at - now < warn {
        Verdict::fail(
            CONDITION,
            EXPIRING,
            format!(
                "the {kind} certificate of the {plane} data plane's config API expires at {when}, within {} days; it should have been renewed at two thirds of its life: see the controller's logs",
                warn / 86_400
            ),
        )
    } else {
        Verdict::new(
            CONDITION,
            true,
            VALID,
            format!(
                "the {plane} data plane's config API certificates are valid for more than {} days",
                warn / 86_400
            ),
        )
    }
}

fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .map_or_else(|_| format!("{unix} (Unix seconds)"), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;

    fn certs(ca: Option<i64>, serving: Option<i64>, client: Option<i64>) -> PlaneCerts {
        PlaneCerts {
            ca,
            serving,
            client,
            problem: None,
        }
    }

    #[test]
    fn the_verdict_names_the_first_certificate_missing_expired_or_near_its_end() {
        let far = Some(NOW + 60 * DAY);
        let cases: &[(&str, PlaneCerts, bool, &str, &str)] = &[
            (
                "all far",
                certs(Some(NOW + 1800 * DAY), far, far),
                true,
                VALID,
                "valid for more than 14 days",
            ),
            (
                "exactly 14 days left is still valid",
                certs(far, Some(NOW + 14 * DAY), far),
                true,
                VALID,
                "",
            ),
            (
                "a second short of 14 days",
                certs(far, Some(NOW + 14 * DAY - 1), far),
                false,
                EXPIRING,
                "the serving certificate of the shared data plane's config API expires at 2027-01-29T07:59:59Z, within 14 days",
            ),
            (
                "the earliest of two near ones is named",
                certs(Some(NOW + 3 * DAY), far, Some(NOW + 2 * DAY)),
                false,
                EXPIRING,
                "the client certificate",
            ),
            (
                "ended now",
                certs(far, far, Some(NOW)),
                false,
                EXPIRED,
                "the client certificate of the shared data plane's config API expired at 2027-01-15T08:00:00Z",
            ),
            (
                "expired wins over expiring",
                certs(Some(NOW - DAY), Some(NOW + DAY), far),
                false,
                EXPIRED,
                "the CA certificate",
            ),
            (
                "no serving certificate",
                certs(far, None, far),
                false,
                MISSING,
                "has no serving certificate yet",
            ),
            (
                "missing wins over expired",
                certs(Some(NOW - DAY), far, None),
                false,
                MISSING,
                "no client certificate",
            ),
        ];
        for (name, certs, status, reason, message) in cases {
            let v = verdict("shared", certs, NOW);
            assert_eq!(v.type_, CONDITION, "{name}");
            assert_eq!(v.status, *status, "{name}: {v:?}");
            assert_eq!(v.reason, *reason, "{name}: {v:?}");
            assert!(v.message.contains(message), "{name}: {}", v.message);
        }
    }

    #[test]
    fn a_problem_is_missing_whatever_the_dates_say() {
        let v = verdict(
            "shop/web",
            &PlaneCerts {
                ca: Some(NOW + 1000 * DAY),
                serving: None,
                client: Some(NOW + 60 * DAY),
                problem: Some("Secret shop/cf-proxy-web-config-tls exists and was not written by the controller".into()),
            },
            NOW,
        );
        assert!(!v.status);
        assert_eq!(v.reason, MISSING);
        assert_eq!(
            v.message,
            "the config API certificates of the shop/web data plane are unavailable: Secret shop/cf-proxy-web-config-tls exists and was not written by the controller"
        );
    }

    #[test]
    fn the_plane_label_is_shared_or_the_gateways_namespace_and_name() {
        assert_eq!(plane_label(&PartitionKey::Shared), "shared");
        let gw = crate::keys::ObjKey {
            namespace: "shop".into(),
            name: "web".into(),
        };
        assert_eq!(plane_label(&PartitionKey::Dedicated(gw)), "shop/web");
    }
}
