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
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::{Mutex, Notify, watch};

use crate::keys::ObjKey;
use crate::model::dedicated::Verification;
use crate::model::{Model, RouteContext, Settings};
use crate::observe::world::Stores;
use crate::publish::cloudflare::access::{AccessReport, AccessSync};
use crate::publish::cloudflare::dns::{DnsSync, HostVerdict};
use crate::publish::cloudflare::tunnels::TunnelSync;
use crate::publish::config_api::tls::ConfigTls;
use crate::publish::planes::Planes;
use crate::publish::planes::provision::Provisioner;
use crate::publish::planes::push::PushOutcome;
use crate::status::{Write, Writer};
use cloudflare::{Standing, TunnelResults};
use metrics::{KindLabel, Metrics};

mod background;
mod cloudflare;
mod lane;
pub mod metrics;
mod planes;
mod quiet;
mod round;

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
    last_tunnels: Standing<TunnelResults>,
    /// DNS records (opt-in), applied after the tunnels' documents.
    dns: DnsSync,
    /// The last DNS verdicts by tunnel and hostname, standing while ingress writes wait.
    last_dns: Standing<BTreeMap<ObjKey, BTreeMap<String, HostVerdict>>>,
    /// Access applications of AccessPolicies, applied after the DNS records.
    access: AccessSync,
    /// The last Access reports by scope, standing while ingress writes wait.
    last_access: Standing<BTreeMap<String, AccessReport>>,
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
            last_access: Standing::default(),
            last_dns: Standing::default(),
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
            last_tunnels: Standing::default(),
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
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
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
