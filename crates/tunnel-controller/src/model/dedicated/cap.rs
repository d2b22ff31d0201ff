//! The per-namespace cap on dedicated data planes (TG-9, `maxDataPlanesPerNamespace` on the
//! GatewayClassConfig).
//!
//! Every Gateway carrying `spec.infrastructure.parametersRef` counts, whatever else is true of
//! it: refused for its tunnel claim, being deleted (its pods may still run), or with a
//! configuration that does not resolve (otherwise a tenant could free a slot by making a token
//! unreadable). Slots go oldest first ([`Seniority`]: creationTimestamp, then UID), so a new
//! Gateway takes a free slot or is refused and never evicts one already serving, while an OLDER
//! Gateway opting in later, or a lowered cap, evicts the newest. Beyond that the verdict does not
//! move between reconciles. A cap of 0 (only from a CRD older than the `minimum: 1` schema)
//! means no dedicated planes at all, never "unlimited".
//!
//! A refused Gateway keeps the address it already published; see
//! [`super::claims::status_addresses`].

use std::collections::BTreeMap;

use gateway_api::apis::standard::gateways::Gateway;

use super::seniority::Seniority;
use crate::conditions::Verdict;
use crate::keys::GatewayKey;

/// The Gateway `Accepted=False` reason and the Warning Event reason.
pub const DATA_PLANE_QUOTA_EXCEEDED: &str = "DataPlaneQuotaExceeded";
/// The Gateway `Programmed=False` reason.
pub const NO_RESOURCES: &str = "NoResources";

/// A Gateway asking for a dedicated plane (it carries `spec.infrastructure.parametersRef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    pub gateway: GatewayKey,
    pub seniority: Seniority,
}

impl Contender {
    /// The Gateway as a contender; `None` when it has no `parametersRef` (the shared plane
    /// serves it, and it does not count).
    pub fn of(gateway: &Gateway) -> Option<Self> {
        gateway
            .spec
            .infrastructure
            .as_ref()?
            .parameters_ref
            .as_ref()?;
        Some(Self {
            gateway: GatewayKey::of(gateway),
            seniority: Seniority::of(&gateway.metadata),
        })
    }
}

/// The outcome for one contender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Within,
    Refused(QuotaRefusal),
}

/// A Gateway refused for its namespace's cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    pub gateway: GatewayKey,
    pub cap: i32,
    /// The older Gateways holding the namespace's slots.
    pub holders: Vec<GatewayKey>,
}

impl QuotaRefusal {
    /// What the Gateway and its `DataPlaneQuotaExceeded` Event say.
    pub fn message(&self) -> String {
        let namespace = &self.gateway.namespace;
        if self.cap <= 0 {
            return format!(
                "namespace {namespace} may hold no dedicated data planes (maxDataPlanesPerNamespace is {}): nothing is rendered for this Gateway and none of its routes are programmed. Drop spec.infrastructure.parametersRef to serve it from the shared data plane, or ask the operator to raise maxDataPlanesPerNamespace",
                self.cap
            );
        }
        let holders = self
            .holders
            .iter()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "namespace {namespace} is at its cap of {} dedicated data planes (maxDataPlanesPerNamespace), held by older Gateways: {holders}. Nothing is rendered for this Gateway and none of its routes are programmed. Delete one of those Gateways, drop spec.infrastructure.parametersRef from this one to serve it from the shared data plane, or ask the operator to raise maxDataPlanesPerNamespace",
            self.cap
        )
    }

    /// `Accepted=False/DataPlaneQuotaExceeded` and `Programmed=False/NoResources`.
    pub fn gateway_verdicts(&self) -> [Verdict; 2] {
        [
            Verdict::fail("Accepted", DATA_PLANE_QUOTA_EXCEEDED, self.message()),
            Verdict::fail(
                "Programmed",
                NO_RESOURCES,
                "no data plane: the namespace is at its maxDataPlanesPerNamespace cap",
            ),
        ]
    }

    /// What each route on the refused Gateway says on that parent.
    pub fn route_verdict(&self) -> Verdict {
        Verdict::fail(
            "Accepted",
            DATA_PLANE_QUOTA_EXCEEDED,
            format!(
                "parent Gateway {} has no data plane: {}",
                self.gateway,
                self.message()
            ),
        )
    }
}

/// Allots slots in every namespace; `cap` is `maxDataPlanesPerNamespace` (`None`: no cap).
/// Pass every contender of the class, from all namespaces or one.
pub fn allot(contenders: &[Contender], cap: Option<i32>) -> BTreeMap<GatewayKey, Slot> {
    let mut by_namespace: BTreeMap<&str, Vec<&Contender>> = BTreeMap::new();
    for c in contenders {
        by_namespace
            .entry(c.gateway.namespace.as_str())
            .or_default()
            .push(c);
    }
    let mut slots = BTreeMap::new();
    for (_, mut in_namespace) in by_namespace {
        in_namespace.sort_by(|a, b| a.seniority.cmp(&b.seniority));
        let allowed = match cap {
            None => in_namespace.len(),
            Some(n) => usize::try_from(n).unwrap_or(0),
        };
        let holders: Vec<GatewayKey> = in_namespace
            .iter()
            .take(allowed)
            .map(|c| c.gateway.clone())
            .collect();
        for (i, c) in in_namespace.iter().enumerate() {
            let slot = if i < allowed {
                Slot::Within
            } else {
                Slot::Refused(QuotaRefusal {
                    gateway: c.gateway.clone(),
                    cap: cap.unwrap_or_default(),
                    holders: holders.clone(),
                })
            };
            slots.insert(c.gateway.clone(), slot);
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::model::dedicated::claims::{self, ClaimPolicy, ClaimVerdict, Claimant};

    fn contender(ns: &str, name: &str, created: i64, uid: &str) -> Contender {
        Contender {
            gateway: GatewayKey::new(ns, name),
            seniority: Seniority::new(Some(Timestamp::from_second(created).unwrap()), uid),
        }
    }

    fn key(ns: &str, name: &str) -> GatewayKey {
        GatewayKey::new(ns, name)
    }

    fn refused(slots: &BTreeMap<GatewayKey, Slot>) -> Vec<String> {
        slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Refused(_)))
            .map(|(k, _)| k.name.clone())
            .collect()
    }

    fn gateway(
        name: &str,
        extra_meta: serde_json::Value,
        infrastructure: serde_json::Value,
    ) -> Gateway {
        let mut meta = json!({"name": name, "namespace": "tenant-a", "uid": format!("uid-{name}"),
                              "creationTimestamp": "2026-01-01T00:00:00Z"});
        meta.as_object_mut()
            .unwrap()
            .extend(extra_meta.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"gatewayClassName": "cloudflare-tunnel", "infrastructure": infrastructure, "listeners": []},
            "status": {"addresses": [{"type": "Hostname", "value": "11111111-1111-4111-8111-111111111111.cfargotunnel.com"}]}
        }))
        .unwrap()
    }

    fn dedicated() -> serde_json::Value {
        json!({"parametersRef": {"group": "cf.k8s.lex.la", "kind": "GatewayConfig", "name": "missing-config"}})
    }

    #[test]
    fn without_a_cap_every_gateway_gets_a_plane() {
        let all: Vec<_> = (0..20)
            .map(|i| contender("a", &format!("g{i}"), i, "u"))
            .collect();
        assert!(refused(&allot(&all, None)).is_empty());
    }

    #[test]
    fn a_gateway_created_now_takes_a_free_slot_or_is_refused_and_never_evicts_one_already_serving()
    {
        let serving = vec![
            contender("a", "first", 10, "u1"),
            contender("a", "second", 20, "u2"),
        ];
        assert!(refused(&allot(&serving, Some(3))).is_empty());
        let mut with_new = serving.clone();
        with_new.push(contender("a", "new", 30, "u3"));
        assert!(
            refused(&allot(&with_new, Some(3))).is_empty(),
            "a free slot"
        );
        with_new.push(contender("a", "newest", 40, "u4"));
        assert_eq!(refused(&allot(&with_new, Some(3))), vec!["newest"]);
    }

    #[test]
    fn an_older_gateway_opting_in_later_evicts_the_newest() {
        let serving = vec![contender("a", "b", 20, "u2"), contender("a", "c", 30, "u3")];
        assert!(refused(&allot(&serving, Some(2))).is_empty());
        // Gateway "a" has existed all along on the shared plane; it now adds a parametersRef.
        let mut opted_in = serving;
        opted_in.push(contender("a", "a", 10, "u1"));
        assert_eq!(refused(&allot(&opted_in, Some(2))), vec!["c"]);
    }

    #[test]
    fn lowering_the_cap_evicts_the_newest_planes_above_the_new_limit() {
        let all = vec![
            contender("a", "g1", 10, "u"),
            contender("a", "g2", 20, "u"),
            contender("a", "g3", 30, "u"),
            contender("a", "g4", 40, "u"),
        ];
        assert!(refused(&allot(&all, Some(4))).is_empty());
        assert_eq!(refused(&allot(&all, Some(2))), vec!["g3", "g4"]);
    }

    #[test]
    fn equal_timestamps_break_by_uid() {
        let all = vec![
            contender("a", "x", 10, "bbb"),
            contender("a", "y", 10, "aaa"),
        ];
        assert_eq!(refused(&allot(&all, Some(1))), vec!["x"]);
    }

    #[test]
    fn the_cap_counts_each_namespace_separately() {
        let all = vec![
            contender("a", "a1", 10, "u"),
            contender("a", "a2", 20, "u"),
            contender("b", "b1", 30, "u"),
        ];
        assert_eq!(refused(&allot(&all, Some(1))), vec!["a2"]);
    }

    #[test]
    fn the_verdict_does_not_move_between_reconciles() {
        let mut all = vec![
            contender("a", "g1", 10, "u"),
            contender("a", "g2", 20, "u"),
            contender("a", "g3", 30, "u"),
        ];
        let first = allot(&all, Some(2));
        all.reverse();
        assert_eq!(allot(&all, Some(2)), first, "list order does not matter");
    }

    #[test]
    fn zero_means_no_dedicated_planes_at_all_never_unlimited() {
        let all = vec![contender("a", "g1", 10, "u")];
        let slots = allot(&all, Some(0));
        let Slot::Refused(r) = &slots[&key("a", "g1")] else {
            panic!("0 must refuse")
        };
        assert!(
            r.message().contains("no dedicated data planes"),
            "{}",
            r.message()
        );
    }

    #[test]
    fn only_gateways_carrying_a_parameters_ref_count_including_deleting_and_unresolvable_ones() {
        let shared_plane = gateway("shared", json!({}), json!({"labels": {"x": "y"}}));
        assert_eq!(Contender::of(&shared_plane), None);
        // Its GatewayConfig does not exist: it still asks for a plane.
        let unresolvable = gateway("unresolvable", json!({}), dedicated());
        assert!(Contender::of(&unresolvable).is_some());
        let deleting = gateway(
            "deleting",
            json!({"deletionTimestamp": "2026-02-01T00:00:00Z", "finalizers": ["someone-else/finalizer"]}),
            dedicated(),
        );
        let deleting = Contender::of(&deleting).expect("a Gateway being deleted holds its slot");
        let newer = Contender {
            seniority: Seniority::new(Some(Timestamp::from_second(1_900_000_000).unwrap()), "n"),
            gateway: key("tenant-a", "newer"),
        };
        assert_eq!(refused(&allot(&[deleting, newer], Some(1))), vec!["newer"]);
    }

    #[test]
    fn a_gateway_refused_for_its_tunnel_claim_still_holds_its_slot_and_neither_verdict_moves_the_other()
     {
        const CLASS: &str = "00000000-0000-4000-8000-000000000000";
        const T1: &str = "11111111-1111-4111-8111-111111111111";
        let squatter = Claimant {
            gateway: key("tenant-a", "squatter"),
            seniority: Seniority::new(Some(Timestamp::from_second(10).unwrap()), "s"),
            token_tunnel: Some(T1.into()),
            advertised_tunnel: None,
        };
        let holder = Claimant {
            gateway: key("tenant-b", "holder"),
            seniority: Seniority::new(Some(Timestamp::from_second(20).unwrap()), "h"),
            token_tunnel: Some(T1.into()),
            advertised_tunnel: Some(T1.into()),
        };
        let claims = claims::arbitrate(
            &[squatter.clone(), holder],
            ClaimPolicy {
                class_tunnel: CLASS,
                allow_shared_tunnels: false,
            },
        );
        assert!(matches!(
            claims[&key("tenant-a", "squatter")],
            ClaimVerdict::Rejected(_)
        ));
        let sibling = contender("tenant-a", "sibling", 30, "x");
        let slots = allot(
            &[
                Contender {
                    gateway: squatter.gateway,
                    seniority: squatter.seniority,
                },
                sibling,
            ],
            Some(1),
        );
        assert_eq!(slots[&key("tenant-a", "squatter")], Slot::Within);
        assert_eq!(
            refused(&slots),
            vec!["sibling"],
            "the wasted slot is the refused tenant's own"
        );
    }

    #[test]
    fn a_refused_gateway_says_data_plane_quota_exceeded_and_no_resources_and_names_the_remedies() {
        let all = vec![
            contender("tenant-a", "old", 10, "u"),
            contender("tenant-a", "new", 20, "u"),
        ];
        let slots = allot(&all, Some(1));
        let Slot::Refused(r) = &slots[&key("tenant-a", "new")] else {
            panic!("over the cap")
        };
        let [accepted, programmed] = r.gateway_verdicts();
        assert_eq!(
            (
                accepted.type_.as_str(),
                accepted.status,
                accepted.reason.as_str()
            ),
            ("Accepted", false, "DataPlaneQuotaExceeded")
        );
        assert_eq!(
            (
                programmed.type_.as_str(),
                programmed.status,
                programmed.reason.as_str()
            ),
            ("Programmed", false, "NoResources")
        );
        for needle in [
            "tenant-a",
            "1",
            "old",
            "parametersRef",
            "maxDataPlanesPerNamespace",
        ] {
            assert!(
                accepted.message.contains(needle),
                "{needle}: {}",
                accepted.message
            );
        }
        let route = r.route_verdict();
        assert_eq!(route.reason, DATA_PLANE_QUOTA_EXCEEDED);
        assert!(route.message.contains("tenant-a/new"));
    }

    #[test]
    fn a_refused_gateway_keeps_its_published_address() {
        let gw = gateway("edge", json!({}), dedicated());
        let published = gw.status.as_ref().unwrap().addresses.clone().unwrap();
        assert_eq!(claims::status_addresses(&gw, None), published);
        let serving = claims::status_addresses(&gw, Some("22222222-2222-4222-8222-222222222222"));
        assert_eq!(
            serving[0].value,
            "22222222-2222-4222-8222-222222222222.cfargotunnel.com"
        );
    }
}
