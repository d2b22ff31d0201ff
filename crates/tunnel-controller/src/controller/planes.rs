//! A round's pushes: each partition's route table to its proxies, over the config API's mutual
//! TLS (its CA brought one step along, each plane's Secret written), and the certificates'
//! expiry published.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::PoisonError;

use super::metrics::{PushLabels, TlsExpiryLabels};
use super::{Controller, Outcome, push_result};
use crate::conditions::Verdict;
use crate::keys::PartitionKey;
use crate::model::Model;
use crate::observe::world::Snapshot;
use crate::publish::config_api::expiry::{self, PlaneCerts};
use crate::publish::config_api::plane;
use crate::publish::config_api::tls::{ConfigTls, RoundCa, presented_by};
use crate::publish::planes::push::{ConditionChange, Transport};
use crate::publish::planes::target::partition_target;
use crate::publish::planes::{ConfigEndpoints, Planes};

/// What the pushes of a round did, for the statuses.
pub(super) struct Partitions {
    /// Partitions whose every proxy holds this round's document.
    pub loaded: BTreeSet<PartitionKey>,
    /// Partitions whose pushes have kept failing, with the reason.
    pub push_failing: BTreeMap<PartitionKey, String>,
    /// The config API certificates' condition of each plane.
    pub config_tls: BTreeMap<PartitionKey, Verdict>,
}

/// The CA this round pushes with, or why there is none (`None`: TLS opted out).
type Ca<'a> = Option<(&'a ConfigTls, Result<RoundCa, String>)>;

impl Controller {
    /// Pushes every partition's table (`seq`: the snapshot's last event) and writes the planes'
    /// TLS Secrets.
    pub(super) async fn partitions(
        &self,
        seq: u64,
        model: &Model,
        snap: &Snapshot,
        outcome: &mut Outcome,
    ) -> Partitions {
        let mut planes = self.planes.lock().await;
        let mut targets = Vec::new();
        for key in model.partitions.keys() {
            targets.push(partition_target(&self.client, &self.settings, key, model, snap).await);
        }
        let ca = self.round_ca(&planes, &targets, snap, outcome).await;
        let mut done = Partitions {
            loaded: BTreeSet::new(),
            push_failing: BTreeMap::new(),
            config_tls: BTreeMap::new(),
        };
        let mut certs = BTreeMap::new();
        for ((key, p), (endpoints, token)) in model.partitions.iter().zip(targets) {
            let transport = match &ca {
                None => Ok(Transport::Plain),
                Some((_, Err(e))) => {
                    certs.insert(key.clone(), PlaneCerts::unavailable(e));
                    Err(e.clone())
                }
                Some((tls, Ok(round))) => {
                    if round.rotating() {
                        outcome.again |= plane::recheck(&mut planes, key, &endpoints.all, round);
                    }
                    let service = &self.settings.shared_plane_service;
                    let tls = plane::transport(tls, round, key, service, model, snap).await;
                    certs.insert(key.clone(), plane::certs(round, tls.as_ref()));
                    tls.map(|p| p.transport)
                }
            };
            if let Err(e) = &transport {
                tracing::warn!(partition = %key, error = %e, "no config API TLS for the plane");
            }
            let token = token.as_deref().map_err(String::as_str);
            let transport = transport.as_ref().map_err(String::as_str);
            let report = planes
                .round(key, &p.doc, &endpoints, token, transport, seq)
                .await;
            self.count("Partition", !report.incomplete);
            for (_, o) in &report.outcomes {
                let labels = PushLabels {
                    partition: key.to_string(),
                    result: push_result(o),
                };
                self.metrics.pushes.get_or_create(&labels).inc();
            }
            outcome.incomplete |= report.incomplete;
            // Not loaded: a failed push (retried, as incomplete) or no proxy yet (its
            // EndpointSlice wakes the next round).
            if report.loaded {
                done.loaded.insert(key.clone());
            }
            if let Some(err) = &report.failing {
                done.push_failing.insert(key.clone(), err.clone());
            }
            if report.change == Some(ConditionChange::Recovered) {
                tracing::info!(partition = %key, "config pushes recovered");
            }
        }
        planes.retain(|k| model.partitions.contains_key(k));
        self.shared_plane_secret(&ca, model, snap, &mut certs, outcome)
            .await;
        done.config_tls = self.publish_expiry(&certs);
        done
    }

    /// The CA of this round's pushes, brought one step along its rotation.
    async fn round_ca<'a>(
        &'a self,
        planes: &Planes,
        targets: &[(ConfigEndpoints, Result<String, String>)],
        snap: &Snapshot,
        outcome: &mut Outcome,
    ) -> Ca<'a> {
        let tls = self.config_tls.as_ref()?;
        // Every pod that answered a push over TLS last presented a certificate of the active
        // CA. A pod that never answered is not waited for: it has no files older than the
        // Secret's that it is known to serve.
        let seen = tls.snapshot_ca(snap);
        let on_active = seen
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .is_some_and(|active| {
                targets.iter().all(|(endpoints, _)| {
                    endpoints.all.iter().all(|ep| {
                        let presented = planes.presented(ep);
                        presented.is_none() || presented_by(presented.as_deref(), &active.cert_pem)
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

    /// The shared plane's pods mount its TLS Secret whether or not a Gateway uses it yet.
    async fn shared_plane_secret(
        &self,
        ca: &Ca<'_>,
        model: &Model,
        snap: &Snapshot,
        certs: &mut BTreeMap<PartitionKey, PlaneCerts>,
        outcome: &mut Outcome,
    ) {
        if model.partitions.contains_key(&PartitionKey::Shared) {
            return;
        }
        match ca {
            None => {}
            Some((_, Err(e))) => {
                certs.insert(PartitionKey::Shared, PlaneCerts::unavailable(e));
            }
            Some((tls, Ok(round))) => {
                let service = &self.settings.shared_plane_service;
                let key = PartitionKey::Shared;
                let tls = plane::transport(tls, round, &key, service, model, snap).await;
                if let Err(e) = &tls {
                    tracing::warn!(error = %e, "the shared plane's config API TLS Secret not written");
                    outcome.incomplete = true;
                }
                certs.insert(key, plane::certs(round, tls.as_ref()));
            }
        }
    }

    /// The expiry series of this round's planes (those of planes gone removed) and each plane's
    /// condition ([`expiry::verdict`]).
    fn publish_expiry(
        &self,
        certs: &BTreeMap<PartitionKey, PlaneCerts>,
    ) -> BTreeMap<PartitionKey, Verdict> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let family = &self.metrics.config_tls_expiry;
        let mut published = self
            .tls_planes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut verdicts = BTreeMap::new();
        let mut planes = BTreeSet::new();
        for (key, c) in certs {
            let plane = expiry::plane_label(key);
            for (kind, at) in c.series() {
                let labels = TlsExpiryLabels {
                    plane: plane.clone(),
                    kind,
                };
                match at {
                    Some(at) => {
                        family.get_or_create(&labels).set(at);
                    }
                    None => {
                        family.remove(&labels);
                    }
                }
            }
            let verdict = expiry::verdict(&plane, c, now);
            if !verdict.status {
                tracing::warn!(plane = %plane, reason = %verdict.reason, "{}", verdict.message);
            }
            verdicts.insert(key.clone(), verdict);
            planes.insert(plane);
        }
        for gone in published.difference(&planes) {
            for (kind, _) in PlaneCerts::default().series() {
                family.remove(&TlsExpiryLabels {
                    plane: gone.clone(),
                    kind,
                });
            }
        }
        *published = planes;
        verdicts
    }
}
