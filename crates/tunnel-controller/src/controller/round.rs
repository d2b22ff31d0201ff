//! One round, as a table of contents: observe, decide, publish, write the statuses. Each step
//! is a method below (the planes' in [`super::planes`], the Cloudflare API's in
//! [`super::cloudflare`]) that returns its part of the [`Effects`].

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use futures::StreamExt;

use super::background;
use super::metrics::{ReasonLabel, StatusLabel};
use super::{Basis, Controller, Outcome, WRITE_CONCURRENCY, quiet, write_kind};
use crate::events::Notice;
use crate::keys::ObjKey;
use crate::model::access::Decision;
use crate::model::dedicated::Verification;
use crate::model::{self, Model, RouteContext};
use crate::observe::world::Snapshot;
use crate::publish::cloudflare::access::AccessReport;
use crate::status::{self, Effects, Write};

impl Controller {
    pub(super) async fn round(&self) -> Outcome {
        let started = Instant::now();
        let mut outcome = Outcome::default();
        // Read before the snapshot: the snapshot holds every event up to it.
        let seq = self.stores.journal().seq();
        let snap = self.stores.snapshot();
        let model = self.decide(seq, &snap, &mut outcome).await;
        let modelled = started.elapsed();
        let due = self.due(&mut outcome);

        // Dedicated planes first: a new plane's Service must exist before it can be pushed to.
        let provisioned = self.provisioner.sync(&model, &snap).await;
        let mut notices = provisioned.notices;
        let tunnels = self.sync_tunnels(&model, due, &mut outcome).await;
        let synced = started.elapsed();
        let partitions = self.partitions(seq, &model, &snap, &mut outcome).await;
        // Routes changed since the snapshot go to the lane now, against this round's model and
        // into the tables just pushed. Their events may have found the lane unable to use the
        // previous model (something else had changed since its snapshot, such as the echo of a
        // Gateway status this controller wrote); without this they would wait for the next round.
        self.stores.journal().nudge();
        let pushed = started.elapsed();
        // DNS records and Access applications after the documents and the pushes: their calls
        // never delay a route's propagation, and their failures never hold back or undo a
        // document.
        let dns = self
            .sync_dns(due, &model, &tunnels.ingress, &mut outcome)
            .await;
        let access = model::access::decide(
            &snap.access_policies,
            &snap.http_routes,
            &snap.gateways,
            &model,
        );
        let access_reports = self.sync_access(due, &access, &mut outcome).await;

        let effects = Effects {
            tunnel_errors: tunnels.errors,
            overflow: tunnels.overflow,
            push_failing: partitions.push_failing,
            render_errors: provisioned.errors,
            loaded: partitions.loaded,
            ingress: tunnels.ingress,
            dns,
            config_tls: partitions.config_tls,
        };
        let (writes, held) = self.statuses(
            due,
            &model,
            &effects,
            &access,
            &access_reports,
            &mut notices,
        );
        self.write(&writes, &notices, &mut outcome).await;

        let status = if outcome.incomplete {
            "error"
        } else {
            "success"
        };
        self.metrics
            .sync_duration
            .get_or_create(&StatusLabel { status })
            .observe(started.elapsed().as_secs_f64());
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            model_ms = modelled.as_millis() as u64,
            planes_and_tunnels_ms = (synced - modelled).as_millis() as u64,
            pushes_ms = (pushed - synced).as_millis() as u64,
            gateways = model.gateways.len(),
            routes = model.routes.len(),
            writes = writes.len(),
            held,
            incomplete = outcome.incomplete,
            "sync round"
        );
        outcome
    }

    /// The model of `snap` (events up to `seq`), kept as the route lane's basis; its tallies
    /// published.
    async fn decide(&self, seq: u64, snap: &Snapshot, outcome: &mut Outcome) -> Arc<Model> {
        let (model, ctx) = self.model(snap, outcome).await;
        let model = Arc::new(model);
        let basis = Some(Arc::new(Basis {
            seq,
            model: model.clone(),
            ctx,
        }));
        // The basis replaced is dropped here: megabytes with thousands of routes (see `model`
        // for why off the async worker).
        tokio::task::block_in_place(|| {
            *self.basis.lock().unwrap_or_else(PoisonError::into_inner) = basis;
        });
        self.stores.journal().forget_until(seq);
        self.publish_tallies(&model);
        model
    }

    /// Whether this round publishes what waits for the quiet ([`quiet::decide`]).
    fn due(&self, outcome: &mut Outcome) -> bool {
        let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
        match quiet::decide(
            &mut burst,
            self.stores.last_change().elapsed(),
            Instant::now(),
        ) {
            quiet::Publication::Due => true,
            quiet::Publication::Wait { until } => {
                tracing::debug!("changes still arriving; ingress documents wait for the quiet");
                outcome.wait_until = Some(until);
                false
            }
        }
    }

    /// The status writes and Events of this round, and how many wait for a burst's end.
    fn statuses(
        &self,
        due: bool,
        model: &Model,
        effects: &Effects,
        access: &Decision,
        access_reports: &BTreeMap<String, AccessReport>,
        notices: &mut Vec<Notice>,
    ) -> (Vec<Write>, usize) {
        let controller = &self.settings.controller_name;
        let (mut writes, more) =
            tokio::task::block_in_place(|| status::plan(model, effects, controller));
        notices.extend(more);
        let (access_writes, more) =
            status::access::status_writes(access, access_reports, controller, &status::now());
        writes.extend(access_writes);
        notices.extend(more);
        if due {
            return (writes, 0);
        }
        let current = |k: &ObjKey| {
            model
                .gateways
                .get(k)
                .and_then(|g| g.gateway.status.as_ref())
        };
        let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
        let round = status::hold_in_burst(writes, std::mem::take(notices), burst.written, current);
        burst.written += round.passed;
        *notices = round.notices;
        if round.held > 0 {
            tracing::debug!(
                held = round.held,
                "a burst: route statuses and route counts wait for the quiet"
            );
        }
        (round.writes, round.held)
    }

    /// Writes the statuses, then the Events; a failed write makes the round incomplete.
    async fn write(&self, writes: &[Write], notices: &[Notice], outcome: &mut Outcome) {
        // Borrowed, not cloned: a burst's round holds thousands of route statuses.
        let pending: Vec<_> = writes
            .iter()
            .map(|w| async move { (write_kind(w), self.writer.write(w).await) })
            .collect();
        let results: Vec<(&'static str, Result<(), kube::Error>)> = futures::stream::iter(pending)
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        for (kind, r) in results {
            self.count(kind, r.is_ok());
            if let Err(e) = r {
                tracing::debug!(kind, error = %e, "status write failed; retrying next round");
                outcome.incomplete = true;
            }
        }
        for n in notices {
            self.writer.notify(n).await;
        }
    }

    /// The model, after asking the Cloudflare API about any tunnel claim it has not answered
    /// yet (then decided again with the answers).
    async fn model(&self, snap: &Snapshot, outcome: &mut Outcome) -> (Model, RouteContext) {
        let known = self.verifications.lock().await.clone();
        // Tens to hundreds of milliseconds with thousands of routes: the worker's other tasks
        // (the watches, the route lane) move to another worker meanwhile instead of waiting,
        // and the computing thread yields the cores to them ([`background`]).
        let compute = |known: &BTreeMap<String, Verification>| {
            tokio::task::block_in_place(|| {
                background::run(|| model::compute_with_context(snap, &self.settings, known))
            })
        };
        let (model, ctx) = compute(&known);
        if model.verify_requests.is_empty() {
            return (model, ctx);
        }
        let answers = futures::future::join_all(
            model
                .verify_requests
                .iter()
                .map(|r| async move { (r.key.clone(), self.tunnels.verify(r).await) }),
        )
        .await;
        let mut known = self.verifications.lock().await;
        for (key, answer) in answers {
            if let Verification::Pending(why) = &answer {
                tracing::info!(reason = %why, "tunnel claim not verified yet; retrying");
                outcome.incomplete = true;
            }
            known.insert(key, answer);
        }
        let known = known.clone();
        compute(&known)
    }

    /// The refused and shadowed route parents of `model`, as gauges (a reason gone is set to
    /// 0, not dropped).
    fn publish_tallies(&self, model: &Model) {
        let tallies = model.parent_tallies();
        let mut last = self
            .refusal_reasons
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for gone in last.iter().filter(|r| !tallies.refused.contains_key(*r)) {
            self.metrics
                .refused_parents
                .get_or_create(&ReasonLabel {
                    reason: gone.clone(),
                })
                .set(0);
        }
        for (reason, n) in &tallies.refused {
            self.metrics
                .refused_parents
                .get_or_create(&ReasonLabel {
                    reason: reason.clone(),
                })
                .set(*n);
        }
        *last = tallies.refused.into_keys().collect();
        self.metrics.shadowed_parents.set(tallies.shadowed);
    }
}
