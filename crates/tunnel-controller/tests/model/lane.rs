//! The route lane against the full model: for every golden case and every route in it, each
//! change below is decided by the lane against the case's model and spliced into its tables,
//! and the tables must be exactly those a full [`model::compute`] of the changed snapshot
//! makes. A change the lane declines is left to the full round (also fine); the test fails if
//! the lane declines a change that keeps the route's place, or if it never takes one.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use tunnel_config::config::Config;
use tunnel_controller::keys::{ObjKey, PartitionKey, RouteId, RouteKind};
use tunnel_controller::model::lane::{self, Declined};
use tunnel_controller::model::{Model, RouteContext};
use tunnel_controller::observe::world::RouteNow;
use tunnel_controller::observe::world::Snapshot;

use super::{Case, cases, compute_with_context, snapshot};

/// A change to one route; `None` from [`Change::apply`]: the route is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// A new resourceVersion, nothing else (the controller's own status write).
    Touched,
    /// The first backendRef of the first rule on another port.
    BackendPort,
    /// The rules in reverse order.
    RulesReversed,
    /// The first rule gone.
    FirstRuleDropped,
    /// No hostnames (any host the listeners allow).
    HostnamesCleared,
    /// No parentRefs.
    Detached,
    Deleted,
    /// Deleted and made again (another UID).
    Recreated,
}

const CHANGES: [Change; 8] = [
    Change::Touched,
    Change::BackendPort,
    Change::RulesReversed,
    Change::FirstRuleDropped,
    Change::HostnamesCleared,
    Change::Detached,
    Change::Deleted,
    Change::Recreated,
];

impl Change {
    /// Changes that keep the route where it was in every table: the lane must take them.
    fn keeps_place(self) -> bool {
        matches!(self, Change::Touched | Change::BackendPort)
    }
}

/// The same edit for both route kinds (their generated types differ, their fields do not).
macro_rules! change_route {
    ($route:expr, $change:expr) => {{
        let mut r = $route.as_ref().clone();
        r.metadata.resource_version = Some("changed".into());
        match $change {
            Change::Touched => {}
            Change::BackendPort => {
                if let Some(b) = r
                    .spec
                    .rules
                    .iter_mut()
                    .flatten()
                    .next()
                    .and_then(|rule| rule.backend_refs.as_mut())
                    .and_then(|refs| refs.first_mut())
                {
                    b.port = Some(b.port.unwrap_or(80) + 1);
                }
            }
            Change::RulesReversed => {
                if let Some(rules) = r.spec.rules.as_mut() {
                    rules.reverse();
                }
            }
            Change::FirstRuleDropped => {
                if let Some(rules) = r.spec.rules.as_mut().filter(|r| !r.is_empty()) {
                    rules.remove(0);
                }
            }
            Change::HostnamesCleared => r.spec.hostnames = None,
            Change::Detached => r.spec.parent_refs = None,
            Change::Recreated => r.metadata.uid = Some("made-again".into()),
            Change::Deleted => unreachable!(),
        }
        Arc::new(r)
    }};
}

fn changed_http(r: &Arc<HttpRoute>, change: Change) -> Arc<HttpRoute> {
    change_route!(r, change)
}

fn changed_grpc(r: &Arc<GrpcRoute>, change: Change) -> Arc<GrpcRoute> {
    change_route!(r, change)
}

fn id_of(
    kind: RouteKind,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> RouteId {
    RouteId {
        kind,
        key: ObjKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        },
    }
}

/// The snapshot with `changes` made, and each changed route as it is now.
fn apply(
    snap: &Snapshot,
    changes: &[(RouteId, Change)],
) -> (Snapshot, Vec<(RouteId, Option<RouteNow>)>) {
    let mut next = snap.clone();
    let mut now = Vec::new();
    for (id, change) in changes {
        match id.kind {
            RouteKind::Http => {
                let i = next
                    .http_routes
                    .iter()
                    .position(|r| id_of(RouteKind::Http, &r.metadata) == *id)
                    .unwrap();
                if *change == Change::Deleted {
                    next.http_routes.remove(i);
                    now.push((id.clone(), None));
                } else {
                    let r = changed_http(&next.http_routes[i], *change);
                    next.http_routes[i] = r.clone();
                    now.push((id.clone(), Some(RouteNow::Http(r))));
                }
            }
            RouteKind::Grpc => {
                let i = next
                    .grpc_routes
                    .iter()
                    .position(|r| id_of(RouteKind::Grpc, &r.metadata) == *id)
                    .unwrap();
                if *change == Change::Deleted {
                    next.grpc_routes.remove(i);
                    now.push((id.clone(), None));
                } else {
                    let r = changed_grpc(&next.grpc_routes[i], *change);
                    next.grpc_routes[i] = r.clone();
                    now.push((id.clone(), Some(RouteNow::Grpc(r))));
                }
            }
        }
    }
    (next, now)
}

/// What the lane made of `changes`, checked against a full computation: `Err` when it declined.
fn check(
    case: &str,
    snap: &Snapshot,
    model: &Model,
    ctx: &RouteContext,
    answers: &BTreeMap<String, super::CaseVerification>,
    changes: &[(RouteId, Change)],
) -> Result<(), Declined> {
    let (next, now) = apply(snap, changes);
    let ids: Vec<RouteId> = now.iter().map(|(id, _)| id.clone()).collect();
    let edits = lane::decide_all(model, ctx, &ids, |id| {
        now.iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, r)| r.clone())
    })?;
    let before: BTreeMap<PartitionKey, Config> = model
        .partitions
        .iter()
        .map(|(k, p)| (k.clone(), p.doc.clone()))
        .collect();
    let mut docs = before.clone();
    let splices = lane::splice(&edits, docs.iter_mut().collect())?;
    let (full, _) = compute_with_context(&next, answers);
    for (partition, doc) in &docs {
        let want = full
            .partitions
            .get(partition)
            .map(|p| p.doc.clone())
            .unwrap_or_default();
        assert_eq!(
            doc, &want,
            "{case}: {changes:?}: the lane's table of {partition} differs from a full round's"
        );
        // The splice says exactly where the table changed (what a delta push sends).
        let old = &before[partition];
        let rebuilt = match splices.get(partition) {
            None => old.routes.clone(),
            Some(s) => {
                let mut r = old.routes[..s.start].to_vec();
                r.extend_from_slice(&doc.routes[s.start..s.start + s.insert]);
                r.extend_from_slice(&old.routes[s.start + s.remove..]);
                r
            }
        };
        assert_eq!(
            rebuilt, doc.routes,
            "{case}: {changes:?}: the splice of {partition} is not where the table changed"
        );
    }
    for (partition, plan) in &full.partitions {
        assert!(
            docs.contains_key(partition) || plan.doc.routes.is_empty(),
            "{case}: {changes:?}: a full round makes table {partition}, the lane did not decline"
        );
    }
    Ok(())
}

fn routes(snap: &Snapshot) -> Vec<RouteId> {
    snap.http_routes
        .iter()
        .map(|r| id_of(RouteKind::Http, &r.metadata))
        .chain(
            snap.grpc_routes
                .iter()
                .map(|r| id_of(RouteKind::Grpc, &r.metadata)),
        )
        .collect()
}

#[test]
fn the_lane_makes_the_tables_a_full_round_makes() {
    let (mut taken, mut declined) = (0, 0);
    for input in cases() {
        let name = input.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&input).unwrap();
        let mut case: Case = serde_saphyr::from_str(&text).unwrap();
        let answers = std::mem::take(&mut case.verifications);
        let snap = snapshot(case);
        let (model, ctx) = compute_with_context(&snap, &answers);
        let ids = routes(&snap);
        for id in &ids {
            for change in CHANGES {
                match check(
                    &name,
                    &snap,
                    &model,
                    &ctx,
                    &answers,
                    &[(id.clone(), change)],
                ) {
                    Ok(()) => taken += 1,
                    Err(Declined::Union(_)) => declined += 1,
                    Err(e) => {
                        assert!(!change.keeps_place(), "{name}: {id:?} {change:?}: {e}");
                        declined += 1;
                    }
                }
            }
        }
        // Two routes at once: the first one's backend moves, the last one goes.
        if let [first, .., last] = ids.as_slice() {
            let changes = [
                (first.clone(), Change::BackendPort),
                (last.clone(), Change::Deleted),
            ];
            match check(&name, &snap, &model, &ctx, &answers, &changes) {
                Ok(()) => taken += 1,
                Err(_) => declined += 1,
            }
        }
    }
    eprintln!("route lane: {taken} changes taken, {declined} left to the full round");
    assert!(
        taken > declined,
        "the lane took {taken} changes and declined {declined}"
    );
}

/// The lane decides a few routes at once; more changed since its model is a burst, which it
/// leaves to the full round without deciding any (every event of a burst would otherwise decide
/// the whole burst again). A route made again declines wherever it is among the changes.
#[test]
fn a_burst_and_a_route_made_again_are_left_to_the_round() {
    let input = cases()
        .into_iter()
        .find(|c| {
            let text = std::fs::read_to_string(c).unwrap();
            let case: Case = serde_saphyr::from_str(&text).unwrap();
            snapshot(case).http_routes.len() >= 2
        })
        .expect("a golden case with two HTTPRoutes");
    let mut case: Case = serde_saphyr::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
    let answers = std::mem::take(&mut case.verifications);
    let snap = snapshot(case);
    let (model, ctx) = compute_with_context(&snap, &answers);
    let ids = routes(&snap);
    let current = |id: &RouteId| {
        snap.http_routes
            .iter()
            .find(|r| id_of(RouteKind::Http, &r.metadata) == *id)
            .map(|r| RouteNow::Http(r.clone()))
    };
    let many = vec![ids[0].clone(); lane::MAX_ROUTES + 1];
    assert_eq!(
        lane::decide_all(&model, &ctx, &many, current).unwrap_err(),
        Declined::Burst(lane::MAX_ROUTES + 1)
    );
    let few = vec![ids[0].clone(); lane::MAX_ROUTES];
    assert_eq!(
        lane::decide_all(&model, &ctx, &few, current).unwrap().len(),
        lane::MAX_ROUTES
    );
    // The second route made again, given last and first: declined both ways (when it has
    // entries: the case's routes attach).
    let (_, now) = apply(&snap, &[(ids[1].clone(), Change::Recreated)]);
    let remade = now[0].1.clone();
    let lookup = |id: &RouteId| {
        if *id == ids[1] {
            remade.clone()
        } else {
            current(id)
        }
    };
    for order in [
        [ids[0].clone(), ids[1].clone()],
        [ids[1].clone(), ids[0].clone()],
    ] {
        match lane::decide_all(&model, &ctx, &order, lookup) {
            Err(Declined::Recreated(_)) => {}
            other => panic!("{order:?}: {other:?}"),
        }
    }
}
