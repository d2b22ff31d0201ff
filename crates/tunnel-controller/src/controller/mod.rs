//! The sync loop: every change to a watched object wakes it; after a short quiet period (so a
//! burst becomes one round) it takes a snapshot, computes the [`crate::model::Model`], syncs
//! each tunnel's ingress document, pushes each partition's route table, and writes the statuses
//! that changed. Ingress documents are written only once the changes pause for
//! [`INGRESS_QUIET`] (at most [`MAX_INGRESS_DEFER`] into a burst), so a burst costs one
//! Cloudflare write per tunnel while pushes follow it; in a large burst route statuses and
//! Gateways' route counts wait with them ([`quiet`]), so each is written once, not once per
//! round. A round that left something undone (a failed tunnel, push or write) schedules another
//! with backoff; a round that waits for the quiet schedules the one that will publish; a quiet
//! cluster is re-checked every [`RESYNC`].
//!
//! Only the leader runs rounds; the stores are warm on every replica, so a new leader starts at
//! once.
//!
//! Beside the rounds, the route lane (its own task): when only routes changed since the last
//! round's snapshot, it decides the changed routes again against that round's model
//! ([`crate::model::lane`]) and pushes the spliced tables at once ([`Planes::lane`]), so a route
//! change reaches the proxies without waiting for a round over every object (TG-15's
//! propagation target). The round that follows writes the statuses and finds the tables
//! already pushed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::{Mutex, Notify, watch};

use crate::access::{AccessReport, AccessSync};
use crate::config_expiry::{self, PlaneCerts};
use crate::config_tls::{ConfigTls, PlaneTarget, PlaneTls, RoundCa, presented_by};
use crate::credentials::secret_value;
use crate::dedicated::provision::Provisioner;
use crate::dedicated::{AuthToken, Verification};
use crate::dns::{DnsSync, HostVerdict};
use crate::ingress;
use crate::keys::{ObjKey, PartitionKey};
use crate::metrics::{
    KindLabel, Metrics, PushLabels, ReasonLabel, StatusLabel, TlsExpiryLabels, TunnelLabel,
};
use crate::model::{self, Model, Plane, RouteContext, Settings};
use crate::names::{PlaneNames, sha256_hex};
use crate::planes::{self, Planes};
use crate::push::{ConditionChange, PushOutcome, Transport};
use crate::status::{self, Effects, Write, Writer};
use crate::tunnels::{SyncError, TunnelResult, TunnelSync};
use crate::world::Stores;

mod background;
mod cloudflare;
mod plane_tls;
mod quiet;

use plane_tls::plane_certs;

/// Quiet period after a change before a round starts, when the last round ended less than this
/// ago (a burst in progress). After a quiet spell the first change starts a round at once (the
/// leading edge): a single route change reaches the proxies without waiting (TG-15's
/// propagation target), and the rest of a burst is coalesced as before.
pub const DEBOUNCE: Duration = Duration::from_millis(150);
/// A burst never delays a round longer than this.
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// A quiet cluster is re-checked this often.
pub const RESYNC: Duration = Duration::from_secs(60);
/// Ingress writes wait for the watched objects to be quiet this long ...
pub const INGRESS_QUIET: Duration = Duration::from_secs(1);
/// ... but at most this long into a burst.
pub const MAX_INGRESS_DEFER: Duration = Duration::from_secs(10);
/// The longest wait before retrying what a round left undone.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Status writes in flight at once.
const WRITE_CONCURRENCY: usize = 16;

/// Everything a round needs.
pub struct Controller {
    client: Client,
    stores: Stores,
    settings: Settings,
    writer: Writer,
    tunnels: TunnelSync,
    planes: Mutex<Planes>,
    provisioner: Provisioner,
    /// The config API's mutual TLS; `None` when opted out (plain HTTP pushes).
    config_tls: Option<ConfigTls>,
    /// The current burst of changes (ingress writes wait for its end).
    burst: std::sync::Mutex<quiet::Burst>,
    /// Each tunnel's last sync result, standing while ingress writes wait.
    last_tunnels: std::sync::Mutex<BTreeMap<String, Result<TunnelResult, Arc<SyncError>>>>,
    /// DNS records (opt-in), applied after the tunnels' documents.
    dns: DnsSync,
    /// The last DNS verdicts by tunnel and hostname, standing while ingress writes wait.
    last_dns: std::sync::Mutex<BTreeMap<ObjKey, BTreeMap<String, HostVerdict>>>,
    /// Access applications of AccessPolicies, applied after the DNS records.
    access: AccessSync,
    /// The last Access reports by scope, standing while ingress writes wait.
    last_access: std::sync::Mutex<BTreeMap<String, AccessReport>>,
    /// The Cloudflare API's answers about tunnel claims, by token (and credentials).
    verifications: Mutex<BTreeMap<String, Verification>>,
    metrics: Metrics,
    /// The refusal reasons the last round published (a reason gone is set to 0, not dropped).
    refusal_reasons: std::sync::Mutex<BTreeSet<String>>,
    /// The planes whose certificate expiry series the last round published.
    tls_planes: std::sync::Mutex<BTreeSet<String>>,
    changed: Arc<Notify>,
    /// The last round's model, what it read of routes' surroundings, and the watch event its
    /// snapshot goes up to: what the route lane decides changed routes against.
    basis: std::sync::Mutex<Option<Arc<Basis>>>,
}

/// A round's model as the route lane uses it.
struct Basis {
    seq: u64,
    model: Arc<Model>,
    ctx: RouteContext,
}

/// What a round left undone.
#[derive(Debug, Default)]
struct Outcome {
    incomplete: bool,
    /// Nothing failed, but the next round should come soon (planes still moving to a new CA).
    again: bool,
    /// Mid-burst: what waits for the quiet is due then ([`quiet::Publication::Wait`]).
    wait_until: Option<Instant>,
}

/// What a [`Controller`] is built from.
pub struct Parts {
    pub client: Client,
    pub stores: Stores,
    pub settings: Settings,
    pub writer: Writer,
    pub tunnels: TunnelSync,
    pub planes: Planes,
    pub provisioner: Provisioner,
    /// `None`: push in plain HTTP (explicitly opted out).
    pub config_tls: Option<ConfigTls>,
    pub metrics: Metrics,
    /// Notified by the stores on every change.
    pub changed: Arc<Notify>,
}

impl Controller {
    pub fn new(p: Parts) -> Self {
        let dns = DnsSync::new(p.tunnels.retry_policy(), p.metrics.dns_changes.clone());
        let access = AccessSync::new(p.tunnels.retry_policy(), p.metrics.access_changes.clone());
        Self {
            dns,
            access,
            last_access: std::sync::Mutex::default(),
            last_dns: std::sync::Mutex::default(),
            client: p.client,
            stores: p.stores,
            settings: p.settings,
            writer: p.writer,
            tunnels: p.tunnels,
            planes: Mutex::new(p.planes),
            provisioner: p.provisioner,
            config_tls: p.config_tls,
            verifications: Mutex::default(),
            burst: std::sync::Mutex::default(),
            last_tunnels: std::sync::Mutex::default(),
            metrics: p.metrics,
            refusal_reasons: std::sync::Mutex::default(),
            tls_planes: std::sync::Mutex::default(),
            changed: p.changed,
            basis: std::sync::Mutex::default(),
        }
    }

    /// Runs rounds, and the route lane beside them, while `leader` is true; returns when
    /// `leader`'s sender is gone. Call it once [`Stores::ready`] has returned.
    pub async fn run(self: Arc<Self>, leader: watch::Receiver<bool>) {
        let lane = tokio::spawn(self.clone().lane(leader.clone()));
        self.rounds(leader).await;
        lane.abort();
    }

    /// The route lane: on each route event, while the changes since the last round's snapshot
    /// are all routes', their tables are spliced and pushed at once. Anything it declines (or a
    /// change of another kind) waits for the round, which every event also wakes.
    async fn lane(self: Arc<Self>, mut leader: watch::Receiver<bool>) {
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

    async fn rounds(&self, mut leader: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(500);
        let mut retry_at: Option<Instant> = None;
        let mut last_end: Option<Instant> = None;
        loop {
            while !*leader.borrow() {
                // Only the leader's view is current: a follower publishes no expiry dates (an
                // old leader's would go stale and look like certificates nearing their end).
                self.metrics.config_tls_expiry.clear();
                self.tls_planes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                if leader.changed().await.is_err() {
                    return;
                }
                self.changed.notify_one();
            }
            let wake = retry_at
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(RESYNC)
                .min(RESYNC);
            tokio::select! {
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(wake) => {}
                r = leader.changed() => { if r.is_err() { return; } continue; }
            }
            if last_end.is_some_and(|t| t.elapsed() < DEBOUNCE) {
                self.debounce().await;
            }
            if !*leader.borrow() {
                continue;
            }
            let out = self.round().await;
            last_end = Some(Instant::now());
            if out.incomplete || out.again {
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            } else {
                retry_at = None;
                backoff = Duration::from_millis(500);
            }
            // Waiting for a burst's end is not a failure: the round that publishes comes when
            // it is due, however long the burst's rounds have been backing off.
            if let Some(until) = out.wait_until {
                retry_at = Some(retry_at.map_or(until, |r| r.min(until)));
            }
        }
    }

    /// Waits for a quiet period, at most [`MAX_DELAY`].
    async fn debounce(&self) {
        let start = Instant::now();
        loop {
            let left = MAX_DELAY.saturating_sub(start.elapsed());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(DEBOUNCE.min(left)) => return,
            }
        }
    }

    /// Whether this round publishes what waits for the quiet ([`quiet::decide`]).
    fn publication(&self) -> quiet::Publication {
        let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
        quiet::decide(
            &mut burst,
            self.stores.last_change().elapsed(),
            Instant::now(),
        )
    }

    async fn round(&self) -> Outcome {
        let started = Instant::now();
        // Read before the snapshot: the snapshot holds every event up to it.
        let seq = self.stores.journal().seq();
        let snap = self.stores.snapshot();
        let mut outcome = Outcome::default();
        let (model, ctx) = self.model(&snap, &mut outcome).await;
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
        let modelled = started.elapsed();
        let mut effects = Effects::default();
        let mut notices = Vec::new();

        // Dedicated planes first: a new plane's Service must exist before it can be pushed to.
        let provisioned = self.provisioner.sync(&model, &snap).await;
        effects.render_errors = provisioned.errors;
        notices.extend(provisioned.notices);

        // Tunnels, all at once; each on its own. Mid-burst, the last results stand.
        let due = match self.publication() {
            quiet::Publication::Due => true,
            quiet::Publication::Wait { until } => {
                outcome.wait_until = Some(until);
                false
            }
        };
        let results: Vec<(String, Result<TunnelResult, Arc<SyncError>>)> = if due {
            let syncs = model.tunnels.iter().map(|(tunnel, plan)| async move {
                (
                    tunnel.clone(),
                    self.tunnels.sync(tunnel, plan).await.map_err(Arc::new),
                )
            });
            let results = futures::future::join_all(syncs).await;
            *self
                .last_tunnels
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = results.iter().cloned().collect();
            results
        } else {
            tracing::debug!("changes still arriving; ingress documents wait for the quiet");
            let last = self
                .last_tunnels
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            model
                .tunnels
                .keys()
                .filter_map(|t| last.get(t).map(|r| (t.clone(), r.clone())))
                .collect()
        };
        for (tunnel, result) in results {
            self.count("Tunnel", result.is_ok());
            match result {
                Ok(r) => {
                    self.metrics
                        .ingress_rules
                        .get_or_create(&TunnelLabel {
                            tunnel: tunnel.clone(),
                        })
                        .set(r.rules as i64);
                    for (host, route) in r.overflow {
                        effects.overflow.entry(route).or_default().push(host);
                    }
                    effects.ingress.insert(tunnel, r.hostnames);
                }
                Err(e) => {
                    tracing::warn!(tunnel, error = %e, "Cloudflare sync failed; the tunnel's routes are Pending");
                    effects.tunnel_errors.insert(tunnel, e.to_string());
                    outcome.incomplete = true;
                }
            }
        }
        self.tunnels.retain(|t| model.tunnels.contains_key(t)).await;
        let synced = started.elapsed();

        // Partitions.
        {
            let mut planes = self.planes.lock().await;
            let mut targets = Vec::new();
            for key in model.partitions.keys() {
                targets.push(self.partition_target(key, &model, &snap).await);
            }
            let round_ca = match &self.config_tls {
                None => None,
                Some(tls) => {
                    // Every pod that answered a push over TLS last presented a certificate of
                    // the active CA. A pod that never answered is not waited for: it has no
                    // files older than the Secret's that it is known to serve.
                    let seen = tls.snapshot_ca(&snap);
                    let on_active =
                        seen.as_ref()
                            .and_then(|s| s.active.as_ref())
                            .is_some_and(|active| {
                                targets.iter().all(|(endpoints, _)| {
                                    endpoints.all.iter().all(|ep| {
                                        let presented = planes.presented(ep);
                                        presented.is_none()
                                            || presented_by(presented.as_deref(), &active.cert_pem)
                                    })
                                })
                            });
                    let r = tls
                        .round_ca(on_active, seen, std::time::SystemTime::now())
                        .await;
                    if let Err(e) = &r {
                        tracing::warn!(error = %e, "config API CA unavailable; nothing pushed");
                        outcome.incomplete = true;
                    }
                    Some((tls, r))
                }
            };
            let mut certs = BTreeMap::new();
            for ((key, plan), (endpoints, token)) in model.partitions.iter().zip(targets) {
                let transport = match &round_ca {
                    None => Ok(Transport::Plain),
                    Some((_, Err(e))) => {
                        certs.insert(key.clone(), PlaneCerts::unavailable(e));
                        Err(e.clone())
                    }
                    Some((tls, Ok(round))) => {
                        if round.rotating() {
                            self.recheck_planes(
                                &mut planes,
                                key,
                                &endpoints.all,
                                round,
                                &mut outcome,
                            );
                        }
                        let plane = self.plane_transport(tls, round, key, &model, &snap).await;
                        certs.insert(key.clone(), plane_certs(round, plane.as_ref()));
                        plane.map(|p| p.transport)
                    }
                };
                if let Err(e) = &transport {
                    tracing::warn!(partition = %key, error = %e, "no config API TLS for the plane");
                }
                let report = planes
                    .round(
                        key,
                        &plan.doc,
                        &endpoints,
                        token.as_deref().map_err(String::as_str),
                        transport.as_ref().map_err(String::as_str),
                        seq,
                    )
                    .await;
                self.count("Partition", !report.incomplete);
                for (_, o) in &report.outcomes {
                    self.metrics
                        .pushes
                        .get_or_create(&PushLabels {
                            partition: key.to_string(),
                            result: push_result(o),
                        })
                        .inc();
                }
                outcome.incomplete |= report.incomplete;
                // Not loaded: a failed push (retried, as incomplete) or no proxy yet (its
                // EndpointSlice wakes the next round).
                if report.loaded {
                    effects.loaded.insert(key.clone());
                }
                if let Some(err) = &report.failing {
                    effects.push_failing.insert(key.clone(), err.clone());
                }
                if report.change == Some(ConditionChange::Recovered) {
                    tracing::info!(partition = %key, "config pushes recovered");
                }
            }
            planes.retain(|k| model.partitions.contains_key(k));
            // The shared plane's pods mount its Secret whether or not a Gateway uses it yet.
            if !model.partitions.contains_key(&PartitionKey::Shared) {
                match &round_ca {
                    None => {}
                    Some((_, Err(e))) => {
                        certs.insert(PartitionKey::Shared, PlaneCerts::unavailable(e));
                    }
                    Some((tls, Ok(round))) => {
                        let plane = self
                            .plane_transport(tls, round, &PartitionKey::Shared, &model, &snap)
                            .await;
                        if let Err(e) = &plane {
                            tracing::warn!(error = %e, "the shared plane's config API TLS Secret not written");
                            outcome.incomplete = true;
                        }
                        certs.insert(PartitionKey::Shared, plane_certs(round, plane.as_ref()));
                    }
                }
            }
            effects.config_tls = self.publish_expiry(&certs);
        }
        // Routes changed since the snapshot go to the lane now, against this round's model and
        // into the tables just pushed. Their events may have found the lane unable to use the
        // previous model (something else had changed since its snapshot, such as the echo of a
        // Gateway status this controller wrote); without this they would wait for the next round.
        self.stores.journal().nudge();

        let pushed = started.elapsed();

        // DNS records after the documents and the pushes: their calls never delay a route's
        // propagation, and their failures never hold back or undo a document.
        effects.dns = if due {
            let dns = self
                .dns_records(&model, &effects.ingress, &mut outcome)
                .await;
            self.last_dns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone_from(&dns);
            dns
        } else {
            self.last_dns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };

        // Access applications, after the pushes for the same reason.
        let access = crate::access::decide(
            &snap.access_policies,
            &snap.http_routes,
            &snap.gateways,
            &model,
        );
        let access_reports = if due {
            let reports = self.access_apps(&access, &mut outcome).await;
            self.last_access
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone_from(&reports);
            reports
        } else {
            self.last_access
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };

        // Statuses.
        let (mut writes, more) = tokio::task::block_in_place(|| {
            status::plan(&model, &effects, &self.settings.controller_name)
        });
        notices.extend(more);
        let (access_writes, more) = crate::access::status_writes(
            &access,
            &access_reports,
            &self.settings.controller_name,
            &status::now(),
        );
        writes.extend(access_writes);
        notices.extend(more);
        let mut held = 0;
        if !due {
            let current = |k: &ObjKey| {
                model
                    .gateways
                    .get(k)
                    .and_then(|g| g.gateway.status.as_ref())
            };
            let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
            let round = status::hold_in_burst(writes, notices, burst.written, current);
            burst.written += round.passed;
            (writes, notices, held) = (round.writes, round.notices, round.held);
            if held > 0 {
                tracing::debug!(
                    held,
                    "a burst: route statuses and route counts wait for the quiet"
                );
            }
        }
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
        for n in &notices {
            self.writer.notify(n).await;
        }
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

    fn count(&self, kind: &'static str, ok: bool) {
        self.metrics
            .reconciles
            .get_or_create(&KindLabel { kind })
            .inc();
        if !ok {
            self.metrics
                .reconcile_errors
                .get_or_create(&KindLabel { kind })
                .inc();
        }
    }

    /// The model, after asking the Cloudflare API about any tunnel claim it has not answered
    /// yet (then decided again with the answers).
    async fn model(
        &self,
        snap: &crate::world::Snapshot,
        outcome: &mut Outcome,
    ) -> (Model, RouteContext) {
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
}

const AUTH_TOKEN_KEY: &str = crate::api::DEFAULT_AUTH_TOKEN_KEY;

/// 32 random bytes, hex.
pub fn random_token() -> String {
    use rand::Rng;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn write_kind(w: &Write) -> &'static str {
    match w {
        Write::GatewayClass { .. } | Write::ClassFinalizer { .. } => "GatewayClass",
        Write::ClassConfig { .. } => "GatewayClassConfig",
        Write::Gateway { .. } => "Gateway",
        Write::ListenerSet { .. } => "ListenerSet",
        Write::Route { id, .. } => id.kind.as_str(),
        Write::Policy { .. } => "BackendTLSPolicy",
        Write::AccessPolicy { .. } => "AccessPolicy",
    }
}

fn push_result(o: &PushOutcome) -> &'static str {
    match o {
        PushOutcome::Loaded => "loaded",
        PushOutcome::Unauthorized => "unauthorized",
        PushOutcome::Rejected { .. } => "rejected",
        PushOutcome::Stale { .. } => "stale",
        PushOutcome::Failed(_) => "failed",
    }
}
