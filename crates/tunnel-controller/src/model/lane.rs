//! The route lane: routes that changed since a model's snapshot, decided again against that
//! model alone and spliced into the route tables the proxies hold, without recomputing the
//! model over every object (TG-15: a route change reaches traffic in milliseconds with
//! thousands of routes present).
//!
//! A route's table entries depend only on its own object, the Gateways and ListenerSets, the
//! namespaces and the backend index (see `route::route_result`), and its entries sit
//! together in each table at the place its creation time and name give it. So while nothing but
//! routes changed since the model's snapshot, a changed route's entries can replace its old
//! ones in place. The lane declines, and leaves the change to the next full round, where that
//! does not hold: a route made again (another UID: another place), a route new to a table, a
//! table that is the union of Gateways sharing a tunnel. What it makes is exactly what a full
//! round over the new snapshot puts in the tables (tested against every golden case in
//! `tests/model`); conditions, ingress documents and DNS are the full round's.

use std::collections::{BTreeMap, BTreeSet};

use tunnel_config::config::{self, Config};

use super::attachment::RouteContext;
use super::route::{RouteView, route_result};
use super::types::Model;
use crate::keys::{PartitionKey, RouteId, RouteKind};
use crate::observe::world::RouteNow;

/// Why the lane leaves a change to the full round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Declined {
    #[error("{0} was made again since the model (another UID): its place in the tables moves")]
    Recreated(String),
    #[error("{route} now has entries in {partition}, where it had none: its place is not known")]
    NoPlace { route: String, partition: String },
    #[error("{0} is the union of the tables of Gateways sharing a tunnel")]
    Union(String),
    #[error("{0} routes changed since the model: a burst, for the full round")]
    Burst(usize),
}

/// A route's entries now, in every partition of the model (a partition not listed: none).
#[derive(Debug, Clone)]
pub struct RouteEdit {
    kind: RouteKind,
    /// The entries' name (`namespace/name`).
    name: String,
    entries: BTreeMap<PartitionKey, Vec<config::Route>>,
    unions: BTreeSet<PartitionKey>,
}

/// What the route `id` (`now`: its object now, `None`: deleted) has in each table, decided
/// against `model` and the `ctx` of its snapshot.
pub fn decide(
    model: &Model,
    ctx: &RouteContext,
    id: &RouteId,
    now: Option<&RouteNow>,
) -> Result<RouteEdit, Declined> {
    let view = now.map(|r| match r {
        RouteNow::Http(r) => RouteView::http(r),
        RouteNow::Grpc(r) => RouteView::grpc(r),
    });
    let entries: BTreeMap<PartitionKey, Vec<config::Route>> = view
        .as_ref()
        .and_then(|v| route_result(v, model, ctx))
        .map(|r| r.entries.into_iter().collect())
        .unwrap_or_default();
    let uid = now.and_then(|r| match r {
        RouteNow::Http(r) => r.metadata.uid.clone(),
        RouteNow::Grpc(r) => r.metadata.uid.clone(),
    });
    let recreated = now.is_some() && ctx.uids.get(id) != Some(&uid);
    if recreated && entries.values().any(|e| !e.is_empty()) {
        return Err(Declined::Recreated(format!(
            "{} {}",
            id.kind.as_str(),
            id.key
        )));
    }
    Ok(RouteEdit {
        kind: id.kind,
        name: id.key.to_string(),
        entries,
        unions: ctx.unions.clone(),
    })
}

/// The most routes changed since the model that the lane decides at once: more is a burst, for
/// the full round (the lane runs on every route event, and a burst's events each find all the
/// burst's routes changed).
pub const MAX_ROUTES: usize = 64;

/// [`decide`] for each changed route (`now` looks a route up as it is now), all or none, in the
/// order given. Routes unknown to the model's snapshot (or made again) are decided first: they
/// are the ones likely to decline, and a decline ends it.
pub fn decide_all(
    model: &Model,
    ctx: &RouteContext,
    changed: &[RouteId],
    now: impl Fn(&RouteId) -> Option<RouteNow>,
) -> Result<Vec<RouteEdit>, Declined> {
    if changed.len() > MAX_ROUTES {
        return Err(Declined::Burst(changed.len()));
    }
    let known = |id: &RouteId, now: &Option<RouteNow>| {
        let uid = now.as_ref().and_then(|r| match r {
            RouteNow::Http(r) => r.metadata.uid.as_ref(),
            RouteNow::Grpc(r) => r.metadata.uid.as_ref(),
        });
        now.is_none() || ctx.uids.get(id).is_some_and(|u| u.as_ref() == uid)
    };
    let mut order: Vec<_> = changed
        .iter()
        .enumerate()
        .map(|(i, id)| (i, id, now(id)))
        .collect();
    order.sort_by_key(|(_, id, now)| known(id, now));
    let mut edits = order
        .into_iter()
        .map(|(i, id, now)| decide(model, ctx, id, now.as_ref()).map(|e| (i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    edits.sort_by_key(|(i, _)| *i);
    Ok(edits.into_iter().map(|(_, e)| e).collect())
}

/// Where a table changed: `remove` routes of the table as it was, from `start` on, were
/// replaced by the `insert` routes of the new table from `start` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splice {
    pub start: usize,
    pub remove: usize,
    pub insert: usize,
}

/// Applies `edits` in order to the tables of `docs`, all or none: returns the tables that
/// changed and where, or why the lane declines (then no table was touched). A partition an
/// edit has entries for that is not among `docs` declines too (a new table is a full round's).
pub fn splice(
    edits: &[RouteEdit],
    mut docs: Vec<(&PartitionKey, &mut Config)>,
) -> Result<BTreeMap<PartitionKey, Splice>, Declined> {
    for edit in edits {
        for (partition, entries) in &edit.entries {
            if !entries.is_empty() && !docs.iter().any(|(p, _)| *p == partition) {
                return Err(edit.no_place(partition));
            }
        }
        for (partition, doc) in &docs {
            edit.place(partition, doc)?;
        }
    }
    let mut out = BTreeMap::new();
    for (partition, doc) in &mut docs {
        let before = doc.routes.len();
        // The routes unchanged at the start and at the end of the table, over all edits.
        let (mut head, mut tail) = (before, before);
        for edit in edits {
            if let Some(start) = edit.apply(partition, doc) {
                head = head.min(start);
                tail = tail.min(doc.routes.len() - start - edit.new_len(partition));
            }
        }
        if head < before || doc.routes.len() != before {
            let after = doc.routes.len();
            let tail = tail.min(before - head).min(after - head);
            out.insert(
                (*partition).clone(),
                Splice {
                    start: head,
                    remove: before - head - tail,
                    insert: after - head - tail,
                },
            );
        }
    }
    Ok(out)
}

impl RouteEdit {
    fn is_entry(&self, r: &config::Route) -> bool {
        match (r, self.kind) {
            (config::Route::Http(h), RouteKind::Http) => h.name == self.name,
            (config::Route::Grpc(g), RouteKind::Grpc) => g.name == self.name,
            _ => false,
        }
    }

    fn no_place(&self, partition: &PartitionKey) -> Declined {
        Declined::NoPlace {
            route: format!("{} {}", self.kind.as_str(), self.name),
            partition: partition.to_string(),
        }
    }

    fn new_len(&self, partition: &PartitionKey) -> usize {
        self.entries.get(partition).map_or(0, Vec::len)
    }

    /// The route's entries in `doc`: where they start and how many (together, as the model
    /// puts them), or why they cannot be replaced in place.
    fn place(
        &self,
        partition: &PartitionKey,
        doc: &Config,
    ) -> Result<Option<(usize, usize)>, Declined> {
        let placed = match doc.routes.iter().position(|r| self.is_entry(r)) {
            None => None,
            Some(first) => {
                let n = doc.routes[first..]
                    .iter()
                    .take_while(|r| self.is_entry(r))
                    .count();
                if doc.routes[first + n..].iter().any(|r| self.is_entry(r)) {
                    return Err(self.no_place(partition));
                }
                Some((first, n))
            }
        };
        let new = self.new_len(partition);
        if self.unions.contains(partition) && (placed.is_some() || new > 0) {
            return Err(Declined::Union(partition.to_string()));
        }
        if placed.is_none() && new > 0 {
            return Err(self.no_place(partition));
        }
        Ok(placed)
    }

    /// Replaces the route's entries in `doc` (checked by [`Self::place`]); `Some(start)` when
    /// the table changed.
    fn apply(&self, partition: &PartitionKey, doc: &mut Config) -> Option<usize> {
        let (start, n) = self.place(partition, doc).ok().flatten()?;
        let new = self
            .entries
            .get(partition)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if doc.routes[start..start + n] == *new {
            return None;
        }
        doc.routes.splice(start..start + n, new.iter().cloned());
        Some(start)
    }
}
