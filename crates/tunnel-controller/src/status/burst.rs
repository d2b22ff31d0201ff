//! Mid-burst status writes: which of a round's writes wait for the burst's end, so a burst
//! writes each route status and Gateway route count once instead of once per round.

use std::collections::BTreeSet;

use gateway_api::apis::standard::gateways::GatewayStatus;

use crate::keys::ObjKey;

use super::{Notice, Write};

/// What a round writes in the middle of a burst of changes, and what it holds back.
#[derive(Debug)]
pub struct Held {
    pub writes: Vec<Write>,
    pub notices: Vec<Notice>,
    /// Writes held back for a later round.
    pub held: usize,
    /// Route statuses and route counts written at once: the burst's rounds count them.
    pub passed: usize,
}

/// Mid-burst (the watched objects still changing, ingress documents waiting for the quiet),
/// more than this many route statuses and Gateway route counts to write, the burst's earlier
/// rounds' included, is a burst: the same bound as the route lane's
/// ([`crate::model::lane::MAX_ROUTES`]).
pub const BURST_WRITES: usize = crate::model::lane::MAX_ROUTES;

/// Holds back, when there are more than [`BURST_WRITES`] of them with the `written` the burst's
/// earlier rounds let through, the writes a burst would make again: route statuses (their
/// `Published` condition turns True once the ingress document that waits for the quiet lists
/// their hostnames, a second write per route) and Gateway writes that change only listeners'
/// `attachedRoutes` (which grow with every round of the burst). Their Events wait with them.
/// Everything else (conditions of Gateways, classes, policies) is written at once, and a few
/// route statuses too, so a lone change's `Accepted` is not held. Counting over the burst, not
/// the round, matters when the burst arrives slowly (a loaded API server): each of its rounds
/// may see only a few new routes, and all of them would be written twice.
/// `current` is the Gateway status the API server holds.
pub fn hold_in_burst<'a>(
    writes: Vec<Write>,
    notices: Vec<Notice>,
    written: usize,
    current: impl Fn(&ObjKey) -> Option<&'a GatewayStatus>,
) -> Held {
    let holdable: Vec<bool> = writes
        .iter()
        .map(|w| match w {
            Write::Route { .. } => true,
            Write::Gateway { key, status } => {
                only_route_counts_differ(current(key).unwrap_or(&GatewayStatus::default()), status)
            }
            _ => false,
        })
        .collect();
    let held = holdable.iter().filter(|h| **h).count();
    if written + held <= BURST_WRITES {
        return Held {
            writes,
            notices,
            held: 0,
            passed: held,
        };
    }
    let mut kept = Vec::with_capacity(writes.len() - held);
    let mut held_routes = BTreeSet::new();
    for (w, hold) in writes.into_iter().zip(holdable) {
        match w {
            Write::Route { id, .. } if hold => {
                held_routes.insert((id.kind.as_str(), id.key.namespace, id.key.name));
            }
            _ if hold => {}
            w => kept.push(w),
        }
    }
    let notices = notices
        .into_iter()
        .filter(|n| {
            let o = &n.object;
            !held_routes.contains(&(
                o.kind.as_deref().unwrap_or_default(),
                o.namespace.clone().unwrap_or_default(),
                o.name.clone().unwrap_or_default(),
            ))
        })
        .collect();
    Held {
        writes: kept,
        notices,
        held,
        passed: 0,
    }
}

/// Whether `desired` differs from `current` in listeners' `attachedRoutes` alone.
fn only_route_counts_differ(current: &GatewayStatus, desired: &GatewayStatus) -> bool {
    let mut counted = desired.clone();
    if let (Some(listeners), Some(held)) = (counted.listeners.as_mut(), current.listeners.as_ref())
    {
        for l in listeners {
            if let Some(h) = held.iter().find(|h| h.name == l.name) {
                l.attached_routes = h.attached_routes;
            }
        }
    }
    counted == *current
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gateway_api::apis::standard::gatewayclasses::GatewayClassStatus;
    use gateway_api::apis::standard::gateways::GatewayStatusListeners;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::keys::{RouteId, RouteKind};

    fn key(name: &str) -> ObjKey {
        ObjKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn route(name: &str) -> Write {
        Write::Route {
            id: RouteId {
                kind: RouteKind::Http,
                key: key(name),
            },
            resource_version: Some("1".into()),
            parents: Vec::new(),
        }
    }

    fn listener(name: &str, attached: i32) -> GatewayStatusListeners {
        GatewayStatusListeners {
            name: name.into(),
            attached_routes: attached,
            supported_kinds: None,
            conditions: Vec::new(),
        }
    }

    fn gateway_status(listeners: Vec<GatewayStatusListeners>, programmed: &str) -> GatewayStatus {
        GatewayStatus {
            conditions: Some(vec![Condition {
                type_: "Programmed".into(),
                status: programmed.into(),
                reason: "Programmed".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }]),
            listeners: Some(listeners),
            ..GatewayStatus::default()
        }
    }

    fn notice(kind: &str, name: &str) -> Notice {
        Notice {
            object: ObjectReference {
                kind: Some(kind.into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
            warning: true,
            reason: "Why".into(),
            message: String::new(),
        }
    }

    fn names(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .map(|w| match w {
                Write::Route { id, .. } => format!("route {}", id.key.name),
                Write::Gateway { key, .. } => format!("gateway {}", key.name),
                Write::GatewayClass { name, .. } => format!("class {name}"),
                _ => "other".into(),
            })
            .collect()
    }

    /// The Gateways as the API server holds them: `counted` (its route count is all that
    /// changes), `renamed` (a listener replaced) and `failing` (Programmed turns False).
    fn held_gateways() -> BTreeMap<ObjKey, GatewayStatus> {
        BTreeMap::from([
            (
                key("counted"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
            (
                key("renamed"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
            (
                key("failing"),
                gateway_status(vec![listener("http", 3)], "True"),
            ),
        ])
    }

    fn gateway_writes() -> Vec<Write> {
        vec![
            Write::Gateway {
                key: key("counted"),
                status: gateway_status(vec![listener("http", 40)], "True"),
            },
            Write::Gateway {
                key: key("renamed"),
                status: gateway_status(vec![listener("https", 3)], "True"),
            },
            Write::Gateway {
                key: key("failing"),
                status: gateway_status(vec![listener("http", 40)], "False"),
            },
        ]
    }

    fn class() -> Write {
        Write::GatewayClass {
            name: "c".into(),
            status: GatewayClassStatus::default(),
        }
    }

    #[test]
    fn a_few_route_statuses_are_written_at_once_even_mid_burst() {
        let gateways = held_gateways();
        let mut writes = vec![class()];
        writes.extend(gateway_writes());
        writes.extend((0..BURST_WRITES - 1).map(|i| route(&format!("r{i}"))));
        let notices = vec![notice("HTTPRoute", "r0")];
        let held = hold_in_burst(writes.clone(), notices, 0, |k| gateways.get(k));
        assert_eq!(held.held, 0);
        // The routes and the Gateway whose route count alone changed.
        assert_eq!(held.passed, BURST_WRITES);
        assert_eq!(names(&held.writes), names(&writes));
        assert_eq!(held.notices.len(), 1);
    }

    /// A burst that arrives a few routes a round: once the rounds' writes add up to more than
    /// the bound, the rest wait, however few each round has.
    #[test]
    fn a_slow_burst_is_counted_over_its_rounds() {
        let gateways = held_gateways();
        let round = |first: usize, written: usize| {
            let writes: Vec<Write> = (first..first + 40)
                .map(|i| route(&format!("r{i}")))
                .chain([class()])
                .collect();
            hold_in_burst(writes, Vec::new(), written, |k| gateways.get(k))
        };
        let first = round(0, 0);
        assert_eq!((first.held, first.passed, first.writes.len()), (0, 40, 41));
        let second = round(40, first.passed);
        assert_eq!((second.held, second.passed), (40, 0));
        assert_eq!(names(&second.writes), ["class c"]);
        // Exactly at the bound is still written.
        let at_bound = round(80, BURST_WRITES - 40);
        assert_eq!((at_bound.held, at_bound.passed), (0, 40));
    }

    #[test]
    fn a_burst_holds_route_statuses_and_route_counts_with_their_events() {
        let gateways = held_gateways();
        let mut writes = vec![class()];
        writes.extend(gateway_writes());
        writes.extend((0..BURST_WRITES).map(|i| route(&format!("r{i}"))));
        let notices = vec![
            notice("HTTPRoute", "r0"),
            notice("GRPCRoute", "r0"),
            notice("HTTPRoute", "elsewhere"),
            notice("Gateway", "failing"),
        ];
        let held = hold_in_burst(writes, notices, 0, |k| gateways.get(k));
        // 64 routes and the Gateway whose route count alone changed.
        assert_eq!((held.held, held.passed), (BURST_WRITES + 1, 0));
        assert_eq!(
            names(&held.writes),
            ["class c", "gateway renamed", "gateway failing"]
        );
        let kept: Vec<_> = held
            .notices
            .iter()
            .map(|n| {
                (
                    n.object.kind.clone().unwrap(),
                    n.object.name.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("GRPCRoute".into(), "r0".into()),
                ("HTTPRoute".into(), "elsewhere".into()),
                ("Gateway".into(), "failing".into())
            ]
        );
    }

    #[test]
    fn a_gateway_with_no_status_yet_is_not_a_route_count() {
        let mut writes: Vec<Write> = (0..=BURST_WRITES)
            .map(|i| route(&format!("r{i}")))
            .collect();
        writes.push(Write::Gateway {
            key: key("new"),
            status: gateway_status(vec![listener("http", 1)], "True"),
        });
        let held = hold_in_burst(writes, Vec::new(), 0, |_| None);
        assert_eq!(names(&held.writes), ["gateway new"]);
    }
}
