//! The route lane (its own task beside the rounds): when only routes changed since the last
//! round's snapshot, it decides the changed routes again against that round's model
//! ([`crate::model::lane`]) and pushes the spliced tables at once ([`crate::publish::planes::Planes::lane`]).

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use super::metrics::PushLabels;
use super::{Controller, push_result};
use crate::model;

impl Controller {
    /// The route lane: on each route event, while the changes since the last round's snapshot
    /// are all routes', their tables are spliced and pushed at once. Anything it declines (or a
    /// change of another kind) waits for the round, which every event also wakes.
    pub(super) async fn lane(self: Arc<Self>, mut leader: watch::Receiver<bool>) {
        let journal = self.stores.journal().clone();
        loop {
            tokio::select! {
                _ = journal.route_changed() => {}
                r = leader.changed() => {
                    if r.is_err() {
                        return;
                    }
                    continue;
                }
            }
            if !*leader.borrow() {
                continue;
            }
            let Some(basis) = self
                .basis
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
            else {
                continue;
            };
            let Some((seq, routes)) = journal.routes_since(basis.seq, model::lane::MAX_ROUTES)
            else {
                continue; // something else changed too: the round decides
            };
            if routes.is_empty() {
                continue;
            }
            let started = Instant::now();
            let edits = model::lane::decide_all(&basis.model, &basis.ctx, &routes, |id| {
                self.stores.route(id)
            });
            let edits = match edits {
                Ok(edits) => edits,
                Err(why) => {
                    tracing::debug!(%why, "route lane declined; the round decides");
                    continue;
                }
            };
            let decided = started.elapsed();
            let mut planes = self.planes.lock().await;
            let locked = started.elapsed();
            match planes
                .lane(seq, |docs| model::lane::splice(&edits, docs))
                .await
            {
                Err(why) => tracing::debug!(%why, "route lane declined; the round decides"),
                Ok(pushed) => {
                    for (partition, outcomes) in &pushed {
                        for (_, o) in outcomes {
                            self.metrics
                                .pushes
                                .get_or_create(&PushLabels {
                                    partition: partition.to_string(),
                                    result: push_result(o),
                                })
                                .inc();
                        }
                    }
                    tracing::debug!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        decide_us = decided.as_micros() as u64,
                        lock_wait_ms = (locked - decided).as_millis() as u64,
                        routes = routes.len(),
                        partitions = pushed.len(),
                        seq,
                        "route lane"
                    );
                }
            }
        }
    }
}
