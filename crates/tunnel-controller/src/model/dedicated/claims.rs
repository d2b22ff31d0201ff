//! Tunnel-claim arbitration (TG-8): which dedicated Gateways may serve the tunnel their
//! connector token names.
//!
//! A connector token proves nothing (it is base64 JSON anyone can write), so a tunnel belongs to
//! whoever already serves it:
//! - the GatewayClass tunnel belongs to the operator: a dedicated Gateway naming it is refused;
//! - possession beats age: a Gateway already advertising `<tunnel>.cfargotunnel.com` in
//!   `status.addresses` keeps the tunnel against any newcomer, however old;
//! - between claims of equal standing, the older Gateway wins ([`Seniority`]: creationTimestamp,
//!   then UID);
//! - Gateways in the holder's namespace share the tunnel (a tenant sharing with itself);
//! - `allowSharedTunnels` on the GatewayClassConfig lets everyone share, the class tunnel
//!   included.
//!
//! A Gateway whose configuration does not resolve still claims the tunnel it advertises, so
//! deleting only its GatewayConfig (or a token Secret mid-rotation) does not surrender the
//! tunnel. One that advertises nothing drops out of the arbitration until it resolves.
//!
//! A Gateway being deleted is an ordinary claimant: it holds until it is gone, because its
//! connectors may still be running. Callers pass every Gateway with a dedicated-plane request,
//! deleting or not, with one claim set feeding partitioning, status and rendering.

use std::collections::BTreeMap;

use gateway_api::apis::standard::gateways::{Gateway, GatewayStatusAddresses};

use super::seniority::Seniority;
use crate::conditions::Verdict;
use crate::keys::GatewayKey;

/// The suffix of a tunnel's public hostname, which Gateways advertise in `status.addresses`.
pub const TUNNEL_HOSTNAME_SUFFIX: &str = ".cfargotunnel.com";
/// Warning Event reason on a refused Gateway.
pub const EVENT_TUNNEL_CLAIM_REJECTED: &str = "TunnelClaimRejected";
/// Warning Event reason on the routes of Gateways sharing a tunnel.
pub const EVENT_TUNNEL_SHARED: &str = "TunnelShared";
/// The route condition raised while dedicated Gateways share a tunnel.
pub const CONDITION_TUNNEL_SHARED: &str = "cf.k8s.lex.la/TunnelShared";

/// The `status.addresses` entry advertising a tunnel.
pub fn tunnel_address(tunnel_id: &str) -> GatewayStatusAddresses {
    GatewayStatusAddresses {
        r#type: Some("Hostname".to_owned()),
        value: format!("{}{TUNNEL_HOSTNAME_SUFFIX}", tunnel_id.to_ascii_lowercase()),
    }
}

/// The tunnel a Gateway advertises in `status.addresses`, if any.
pub fn advertised_tunnel(gateway: &Gateway) -> Option<String> {
    gateway
        .status
        .as_ref()?
        .addresses
        .iter()
        .flatten()
        .find_map(|a| {
            let id = a.value.to_ascii_lowercase();
            let id = id.strip_suffix(TUNNEL_HOSTNAME_SUFFIX)?;
            cloudflare_api::is_uuid(id).then(|| id.to_owned())
        })
}

/// The `status.addresses` to write. A Gateway serving a tunnel advertises it; any other Gateway
/// (refused by this rule or by the data-plane cap, or not resolving) keeps what it already
/// published, because an address is how possession is recorded: clearing it on a refusal would
/// surrender the tunnel to any other namespace claiming it.
pub fn status_addresses(gateway: &Gateway, serving: Option<&str>) -> Vec<GatewayStatusAddresses> {
    match serving {
        Some(tunnel) => vec![tunnel_address(tunnel)],
        None => gateway
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default(),
    }
}

/// One Gateway asking for a dedicated plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    pub gateway: GatewayKey,
    pub seniority: Seniority,
    /// The tunnel parsed from its connector token; `None` while its GatewayConfig, token Secret
    /// or the credentials it falls back to cannot be read, and while the token is refused by
    /// [`crate::publish::cloudflare::verify::verify_claim`] (a token that is not the tunnel's own claims nothing).
    pub token_tunnel: Option<String>,
    /// The tunnel in its `status.addresses` ([`advertised_tunnel`]).
    pub advertised_tunnel: Option<String>,
}

impl Claimant {
    /// A claimant from the Gateway object and the tunnel of its connector token, if readable.
    pub fn new(gateway: &Gateway, token_tunnel: Option<&str>) -> Self {
        Self {
            gateway: GatewayKey::of(gateway),
            seniority: Seniority::of(&gateway.metadata),
            token_tunnel: token_tunnel.map(str::to_ascii_lowercase),
            advertised_tunnel: advertised_tunnel(gateway),
        }
    }

    /// The token's tunnel; without one, the advertised tunnel, unless that is the class tunnel
    /// (the address of a Gateway that was on the shared plane is not a dedicated claim).
    fn claimed(&self, class_tunnel: &str) -> Option<String> {
        self.token_tunnel
            .clone()
            .or_else(|| self.advertised_tunnel.clone().filter(|t| t != class_tunnel))
    }

    fn possesses(&self, tunnel: &str) -> bool {
        self.advertised_tunnel.as_deref() == Some(tunnel)
    }
}

/// The class-wide settings arbitration depends on (from the GatewayClassConfig).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimPolicy<'a> {
    /// The shared plane's tunnel: the operator's.
    pub class_tunnel: &'a str,
    /// `allowSharedTunnels`: every claimant of a tunnel serves it, routes merged.
    pub allow_shared_tunnels: bool,
}

/// Who holds a tunnel a Gateway was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// The GatewayClass tunnel: the operator's shared data plane.
    Operator,
    Gateway(GatewayKey),
}

/// The outcome for one claimant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// Serves `tunnel`; `sharing` is set when other dedicated Gateways serve it too.
    Holds {
        tunnel: String,
        sharing: Option<Sharing>,
    },
    /// Refused: no plane, no routes anywhere.
    Rejected(Rejection),
    /// No tunnel known: the configuration does not resolve and nothing is advertised. The
    /// caller reports the configuration problem.
    Unresolved,
}

impl ClaimVerdict {
    /// The tunnel this Gateway serves, if it holds one.
    pub fn serving(&self) -> Option<&str> {
        match self {
            ClaimVerdict::Holds { tunnel, .. } => Some(tunnel),
            _ => None,
        }
    }
}

/// Dedicated Gateways serving one tunnel together: their routes are merged into one ingress
/// document and pushed to every plane of the tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    pub gateway: GatewayKey,
    pub tunnel: String,
    /// The other dedicated Gateways on the tunnel, sorted.
    pub with: Vec<GatewayKey>,
    /// True when any of them is in another namespace (only possible with `allowSharedTunnels`).
    pub across_namespaces: bool,
}

impl Sharing {
    /// `TunnelSharedAcrossNamespaces`, or `TunnelSharedInNamespace` when every party is in the
    /// Gateway's own namespace.
    pub fn reason(&self) -> &'static str {
        if self.across_namespaces {
            "TunnelSharedAcrossNamespaces"
        } else {
            "TunnelSharedInNamespace"
        }
    }

    /// The `cf.k8s.lex.la/TunnelShared=True` condition for every route of the Gateway.
    pub fn route_verdict(&self) -> Verdict {
        Verdict::new(CONDITION_TUNNEL_SHARED, true, self.reason(), self.note())
    }

    /// The note of the mirrored `TunnelShared` Warning Event.
    pub fn note(&self) -> String {
        let others = join(&self.with);
        let scope = if self.across_namespaces {
            "including Gateways in other namespaces (allowSharedTunnels is set on the GatewayClassConfig)"
        } else {
            "all in this namespace"
        };
        format!(
            "Gateway {} shares tunnel {} with {others}, {scope}: their routes are merged into one ingress document and pushed to every data plane of the tunnel, so each sees the others' routes",
            self.gateway, self.tunnel
        )
    }
}

/// A refused claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub gateway: GatewayKey,
    pub tunnel: String,
    pub holder: Holder,
}

impl Rejection {
    /// The Gateway API reason on the Gateway's `Accepted=False`.
    pub const REASON: &'static str = "InvalidParameters";

    /// What the refused Gateway and its `TunnelClaimRejected` Event say.
    pub fn message(&self) -> String {
        match &self.holder {
            Holder::Operator => format!(
                "tunnel {} named by the connector token is the GatewayClass tunnel, which belongs to the operator's shared data plane; a dedicated Gateway needs a tunnel of its own. The Gateway gets no data plane and none of its routes are programmed",
                self.tunnel
            ),
            Holder::Gateway(holder) => format!(
                "tunnel {} named by the connector token is already served by Gateway {holder} in another namespace; a tunnel belongs to the Gateway already serving it. Use a tunnel of your own, or ask the operator about allowSharedTunnels. The Gateway gets no data plane and none of its routes are programmed",
                self.tunnel
            ),
        }
    }

    /// `Accepted=False`, reason `InvalidParameters`.
    pub fn gateway_verdict(&self) -> Verdict {
        Verdict::fail("Accepted", Self::REASON, self.message())
    }

    /// What each route on the refused Gateway says on that parent, so the tenant sees why.
    pub fn route_verdict(&self) -> Verdict {
        Verdict::fail(
            "Accepted",
            EVENT_TUNNEL_CLAIM_REJECTED,
            format!(
                "parent Gateway {} is refused and serves nothing: {}",
                self.gateway,
                self.message()
            ),
        )
    }
}

fn join(keys: &[GatewayKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decides every claim at once.
pub fn arbitrate(
    claimants: &[Claimant],
    policy: ClaimPolicy<'_>,
) -> BTreeMap<GatewayKey, ClaimVerdict> {
    let class_tunnel = policy.class_tunnel.to_ascii_lowercase();
    let mut verdicts = BTreeMap::new();
    let mut by_tunnel: BTreeMap<String, Vec<&Claimant>> = BTreeMap::new();
    for c in claimants {
        match c.claimed(&class_tunnel) {
            Some(tunnel) => by_tunnel.entry(tunnel).or_default().push(c),
            None => {
                verdicts.insert(c.gateway.clone(), ClaimVerdict::Unresolved);
            }
        }
    }
    for (tunnel, mut contenders) in by_tunnel {
        // Possessors first, then oldest first.
        contenders.sort_by(|a, b| {
            b.possesses(&tunnel)
                .cmp(&a.possesses(&tunnel))
                .then_with(|| a.seniority.cmp(&b.seniority))
        });
        let holders: Vec<&Claimant> = if policy.allow_shared_tunnels {
            contenders.clone()
        } else if tunnel == class_tunnel {
            Vec::new()
        } else {
            let namespace = &contenders[0].gateway.namespace;
            contenders
                .iter()
                .copied()
                .filter(|c| &c.gateway.namespace == namespace)
                .collect()
        };
        for c in &contenders {
            let verdict = if holders.iter().any(|h| h.gateway == c.gateway) {
                let mut with: Vec<GatewayKey> = holders
                    .iter()
                    .filter(|h| h.gateway != c.gateway)
                    .map(|h| h.gateway.clone())
                    .collect();
                with.sort();
                let sharing = (!with.is_empty()).then(|| Sharing {
                    gateway: c.gateway.clone(),
                    tunnel: tunnel.clone(),
                    across_namespaces: with.iter().any(|k| k.namespace != c.gateway.namespace),
                    with,
                });
                ClaimVerdict::Holds {
                    tunnel: tunnel.clone(),
                    sharing,
                }
            } else {
                ClaimVerdict::Rejected(Rejection {
                    gateway: c.gateway.clone(),
                    tunnel: tunnel.clone(),
                    holder: if tunnel == class_tunnel {
                        Holder::Operator
                    } else {
                        Holder::Gateway(contenders[0].gateway.clone())
                    },
                })
            };
            verdicts.insert(c.gateway.clone(), verdict);
        }
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    const CLASS: &str = "00000000-0000-4000-8000-000000000000";
    const T1: &str = "11111111-1111-4111-8111-111111111111";
    const T2: &str = "22222222-2222-4222-8222-222222222222";

    fn claimant(
        key: (&str, &str),
        created: i64,
        uid: &str,
        token: Option<&str>,
        advertised: Option<&str>,
    ) -> Claimant {
        Claimant {
            gateway: GatewayKey::new(key.0, key.1),
            seniority: Seniority::new(Some(Timestamp::from_second(created).unwrap()), uid),
            token_tunnel: token.map(str::to_owned),
            advertised_tunnel: advertised.map(str::to_owned),
        }
    }

    fn strict() -> ClaimPolicy<'static> {
        ClaimPolicy {
            class_tunnel: CLASS,
            allow_shared_tunnels: false,
        }
    }

    fn shared() -> ClaimPolicy<'static> {
        ClaimPolicy {
            class_tunnel: CLASS,
            allow_shared_tunnels: true,
        }
    }

    fn key(ns: &str, name: &str) -> GatewayKey {
        GatewayKey::new(ns, name)
    }

    fn rejection(v: &ClaimVerdict) -> &Rejection {
        match v {
            ClaimVerdict::Rejected(r) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    fn sharing(v: &ClaimVerdict) -> Option<&Sharing> {
        match v {
            ClaimVerdict::Holds { sharing, .. } => sharing.as_ref(),
            other => panic!("expected a holder, got {other:?}"),
        }
    }

    #[test]
    fn the_class_tunnel_belongs_to_the_operator() {
        let v = arbitrate(
            &[claimant(("tenant-a", "edge"), 1, "a", Some(CLASS), None)],
            strict(),
        );
        let r = rejection(&v[&key("tenant-a", "edge")]);
        assert_eq!(r.holder, Holder::Operator);
        let verdict = r.gateway_verdict();
        assert_eq!(
            (verdict.type_.as_str(), verdict.status),
            ("Accepted", false)
        );
        assert_eq!(verdict.reason, "InvalidParameters");
        assert!(
            verdict.message.contains("GatewayClass tunnel"),
            "{}",
            verdict.message
        );
    }

    #[test]
    fn a_gateway_naming_a_tunnel_another_namespace_serves_is_refused_and_told_who_holds_it() {
        let v = arbitrate(
            &[
                claimant(("tenant-a", "edge"), 10, "a", Some(T1), Some(T1)),
                claimant(("tenant-b", "thief"), 20, "b", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "edge")].serving(), Some(T1));
        assert_eq!(sharing(&v[&key("tenant-a", "edge")]), None);
        let r = rejection(&v[&key("tenant-b", "thief")]);
        assert_eq!(r.holder, Holder::Gateway(key("tenant-a", "edge")));
        assert!(r.message().contains("tenant-a/edge"), "{}", r.message());
        assert!(r.message().contains(T1));
        let route = r.route_verdict();
        assert_eq!((route.type_.as_str(), route.status), ("Accepted", false));
        assert_eq!(route.reason, EVENT_TUNNEL_CLAIM_REJECTED);
        assert!(route.message.contains("tenant-b/thief"));
    }

    #[test]
    fn possession_beats_age() {
        // The newcomer predates the holder, and still loses: otherwise a tenant whose Gateway
        // happens to be older could retarget its token and evict the legitimate holder.
        let v = arbitrate(
            &[
                claimant(("tenant-b", "old-newcomer"), 1, "a", Some(T1), None),
                claimant(("tenant-a", "holder"), 1_000, "z", Some(T1), Some(T1)),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "holder")].serving(), Some(T1));
        assert_eq!(
            rejection(&v[&key("tenant-b", "old-newcomer")]).holder,
            Holder::Gateway(key("tenant-a", "holder"))
        );
    }

    #[test]
    fn age_then_uid_decide_only_between_claims_of_equal_standing() {
        let v = arbitrate(
            &[
                claimant(("tenant-b", "younger"), 20, "a", Some(T1), None),
                claimant(("tenant-a", "older"), 10, "z", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "older")].serving(), Some(T1));
        assert!(matches!(
            v[&key("tenant-b", "younger")],
            ClaimVerdict::Rejected(_)
        ));

        let v = arbitrate(
            &[
                claimant(("tenant-b", "uid-b"), 10, "bbb", Some(T1), None),
                claimant(("tenant-a", "uid-a"), 10, "aaa", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(
            v[&key("tenant-a", "uid-a")].serving(),
            Some(T1),
            "same second: lower UID"
        );
        assert!(matches!(
            v[&key("tenant-b", "uid-b")],
            ClaimVerdict::Rejected(_)
        ));

        // Two possessors (a forged status, or allowSharedTunnels switched off): the older one.
        let v = arbitrate(
            &[
                claimant(("tenant-b", "forged"), 20, "a", Some(T1), Some(T1)),
                claimant(("tenant-a", "real"), 10, "b", Some(T1), Some(T1)),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "real")].serving(), Some(T1));
    }

    #[test]
    fn gateways_in_one_namespace_may_share_a_tunnel_and_the_reason_says_so() {
        let v = arbitrate(
            &[
                claimant(("tenant-a", "one"), 10, "a", Some(T1), Some(T1)),
                claimant(("tenant-a", "two"), 20, "b", Some(T1), None),
                claimant(("tenant-b", "other"), 5, "c", Some(T1), None),
            ],
            strict(),
        );
        let one = sharing(&v[&key("tenant-a", "one")]).unwrap();
        assert_eq!(one.with, vec![key("tenant-a", "two")]);
        assert!(!one.across_namespaces);
        assert_eq!(one.reason(), "TunnelSharedInNamespace");
        let verdict = one.route_verdict();
        assert_eq!(verdict.type_, "cf.k8s.lex.la/TunnelShared");
        assert!(verdict.status);
        assert!(verdict.message.contains("tenant-a/two"), "names the others");
        let two = sharing(&v[&key("tenant-a", "two")]).unwrap();
        assert_eq!(two.with, vec![key("tenant-a", "one")]);
        assert!(matches!(
            v[&key("tenant-b", "other")],
            ClaimVerdict::Rejected(_)
        ));
    }

    #[test]
    fn allow_shared_tunnels_restores_merging_across_namespaces() {
        let v = arbitrate(
            &[
                claimant(("tenant-a", "one"), 10, "a", Some(T1), Some(T1)),
                claimant(("tenant-b", "two"), 20, "b", Some(T1), None),
            ],
            shared(),
        );
        let one = sharing(&v[&key("tenant-a", "one")]).unwrap();
        assert!(one.across_namespaces);
        assert_eq!(one.reason(), "TunnelSharedAcrossNamespaces");
        assert_eq!(one.with, vec![key("tenant-b", "two")]);
        assert_eq!(v[&key("tenant-b", "two")].serving(), Some(T1));
    }

    #[test]
    fn with_allow_shared_tunnels_a_gateway_on_the_class_tunnel_is_served_and_not_flagged() {
        let v = arbitrate(
            &[claimant(("tenant-a", "edge"), 10, "a", Some(CLASS), None)],
            shared(),
        );
        assert_eq!(v[&key("tenant-a", "edge")].serving(), Some(CLASS));
        assert_eq!(
            sharing(&v[&key("tenant-a", "edge")]),
            None,
            "the shared plane is not a dedicated partition"
        );
    }

    #[test]
    fn deleting_only_the_gateway_config_does_not_release_a_claim() {
        // The holder's configuration no longer resolves (no token tunnel), but its address
        // still carries the claim.
        let v = arbitrate(
            &[
                claimant(("tenant-a", "holder"), 10, "a", None, Some(T1)),
                claimant(("tenant-b", "newcomer"), 1, "b", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "holder")].serving(), Some(T1));
        assert_eq!(
            rejection(&v[&key("tenant-b", "newcomer")]).holder,
            Holder::Gateway(key("tenant-a", "holder"))
        );
    }

    #[test]
    fn a_bootstrapping_claim_whose_configuration_is_unreadable_drops_out() {
        let v = arbitrate(
            &[
                claimant(("tenant-a", "bootstrapping"), 1, "a", None, None),
                claimant(("tenant-b", "competitor"), 10, "b", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(
            v[&key("tenant-a", "bootstrapping")],
            ClaimVerdict::Unresolved
        );
        assert_eq!(v[&key("tenant-b", "competitor")].serving(), Some(T1));
    }

    #[test]
    fn a_shared_plane_address_is_not_a_dedicated_claim() {
        let v = arbitrate(
            &[claimant(
                ("tenant-a", "was-shared"),
                1,
                "a",
                None,
                Some(CLASS),
            )],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "was-shared")], ClaimVerdict::Unresolved);
    }

    #[test]
    fn a_retargeted_token_claims_only_the_new_tunnel() {
        let v = arbitrate(
            &[
                claimant(("tenant-a", "moved"), 1, "a", Some(T2), Some(T1)),
                claimant(("tenant-b", "next"), 10, "b", Some(T1), None),
            ],
            strict(),
        );
        assert_eq!(v[&key("tenant-a", "moved")].serving(), Some(T2));
        assert_eq!(v[&key("tenant-b", "next")].serving(), Some(T1));
    }

    #[test]
    fn the_advertised_tunnel_is_read_from_status_addresses() {
        let gw: Gateway = serde_json::from_value(json!({
            "metadata": {"name": "edge", "namespace": "tenant-a", "uid": "u",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"gatewayClassName": "cloudflare-tunnel", "listeners": []},
            "status": {"addresses": [
                {"type": "IPAddress", "value": "10.0.0.1"},
                {"type": "Hostname", "value": "not-a-uuid.cfargotunnel.com"},
                {"type": "Hostname", "value": "11111111-1111-4111-8111-111111111111.CFARGOTUNNEL.COM"}
            ]}
        }))
        .unwrap();
        let c = Claimant::new(&gw, Some("22222222-2222-4222-8222-222222222222"));
        assert_eq!(c.advertised_tunnel.as_deref(), Some(T1));
        assert_eq!(c.token_tunnel.as_deref(), Some(T2));
        assert_eq!(c.gateway, key("tenant-a", "edge"));
        assert_eq!(
            tunnel_address(T1).value,
            "11111111-1111-4111-8111-111111111111.cfargotunnel.com"
        );
    }
}
