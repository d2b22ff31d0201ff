//! A round's Cloudflare API calls: each tunnel's ingress document, then the DNS records of the
//! hostnames the documents list and the Access applications of the AccessPolicies. Mid-burst
//! none of them is called, and the last results stand ([`Standing`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};

use super::metrics::TunnelLabel;
use super::{Controller, Outcome};
use crate::keys::{ObjKey, RouteId};
use crate::model::access::{Decision, Scope};
use crate::model::rules::hostnames;
use crate::model::{self, Model};
use crate::names::sha256_hex;
use crate::publish::cloudflare::access::{AccessReport, AppVerdict};
use crate::publish::cloudflare::dns::{DnsReport, HostVerdict};
use crate::publish::cloudflare::tunnels::{SyncError, TunnelResult};

/// Each tunnel's last sync result.
pub(super) type TunnelResults = BTreeMap<String, Result<TunnelResult, Arc<SyncError>>>;

/// The last result of a publication that waits for the quiet: refreshed by a round that is
/// due, standing in the rounds of a burst.
#[derive(Default)]
pub(super) struct Standing<T>(std::sync::Mutex<T>);

impl<T: Clone> Standing<T> {
    /// `fresh`'s result when `due` (kept), else the last one.
    async fn refresh_if(&self, due: bool, fresh: impl Future<Output = T>) -> T {
        if !due {
            return self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
        }
        let result = fresh.await;
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(&result);
        result
    }
}

/// What the tunnels' syncs did, for the statuses and the DNS records.
pub(super) struct Tunnels {
    /// Tunnels whose Cloudflare sync failed, with the reason.
    pub errors: BTreeMap<String, String>,
    /// Hostnames of a route left out of its tunnel's document by the rule cap.
    pub overflow: BTreeMap<RouteId, Vec<String>>,
    /// The hostnames each tunnel's document lists now.
    pub ingress: BTreeMap<String, BTreeSet<String>>,
}

impl Controller {
    /// Syncs every tunnel's ingress document, all at once, each on its own.
    pub(super) async fn sync_tunnels(
        &self,
        model: &Model,
        due: bool,
        outcome: &mut Outcome,
    ) -> Tunnels {
        let fresh = async {
            let syncs = model.tunnels.iter().map(|(tunnel, plan)| async move {
                let result = self.tunnels.sync(tunnel, plan).await.map_err(Arc::new);
                (tunnel.clone(), result)
            });
            futures::future::join_all(syncs).await.into_iter().collect()
        };
        let results = self.last_tunnels.refresh_if(due, fresh).await;
        let mut done = Tunnels {
            errors: BTreeMap::new(),
            overflow: BTreeMap::new(),
            ingress: BTreeMap::new(),
        };
        for (tunnel, result) in results
            .into_iter()
            .filter(|(t, _)| model.tunnels.contains_key(t))
        {
            self.count("Tunnel", result.is_ok());
            match result {
                Ok(r) => {
                    let label = TunnelLabel {
                        tunnel: tunnel.clone(),
                    };
                    self.metrics
                        .ingress_rules
                        .get_or_create(&label)
                        .set(r.rules as i64);
                    for (host, route) in r.overflow {
                        done.overflow.entry(route).or_default().push(host);
                    }
                    done.ingress.insert(tunnel, r.hostnames);
                }
                Err(e) => {
                    tracing::warn!(tunnel, error = %e, "Cloudflare sync failed; the tunnel's routes are Pending");
                    done.errors.insert(tunnel, e.to_string());
                    outcome.incomplete = true;
                }
            }
        }
        self.tunnels.retain(|t| model.tunnels.contains_key(t)).await;
        done
    }

    /// The DNS records of this round ([`Self::dns_records`]) when due.
    pub(super) async fn sync_dns(
        &self,
        due: bool,
        model: &Model,
        ingress: &BTreeMap<String, BTreeSet<String>>,
        outcome: &mut Outcome,
    ) -> BTreeMap<ObjKey, BTreeMap<String, HostVerdict>> {
        let fresh = self.dns_records(model, ingress, outcome);
        self.last_dns.refresh_if(due, fresh).await
    }

    /// The Access applications of this round ([`Self::access_apps`]) when due.
    pub(super) async fn sync_access(
        &self,
        due: bool,
        decision: &Decision,
        outcome: &mut Outcome,
    ) -> BTreeMap<String, AccessReport> {
        let fresh = self.access_apps(decision, outcome);
        self.last_access.refresh_if(due, fresh).await
    }

    /// Brings every DNS owner's records to the hostnames its Gateways' routes serve and their
    /// tunnels' documents list now (`ingress`: this round's written documents' hostnames by
    /// tunnel; a tunnel missing from it failed); returns the verdicts by Gateway and hostname.
    /// An owner with a failed tunnel this round creates and updates but deletes nothing (what it
    /// no longer serves is not known).
    async fn dns_records(
        &self,
        model: &Model,
        ingress: &BTreeMap<String, BTreeSet<String>>,
        outcome: &mut Outcome,
    ) -> BTreeMap<ObjKey, BTreeMap<String, HostVerdict>> {
        #[derive(Default)]
        struct Owner {
            desired: BTreeMap<String, String>,
            failed_tunnel: bool,
            gateways: BTreeMap<ObjKey, BTreeSet<String>>,
        }
        let key = |s: &model::DnsScope| {
            sha256_hex(&format!(
                "{}\n{}\n{:?}",
                s.owner, s.credentials.api_token, s.credentials.account_id
            ))
        };
        let mut owners: BTreeMap<String, (model::DnsScope, Owner)> = model
            .dns_scopes
            .iter()
            .map(|s| (key(s), (s.clone(), Owner::default())))
            .collect();
        for route in &model.routes {
            for p in &route.parents {
                let Some(gw) = model.gateways.get(&p.gateway) else {
                    continue;
                };
                let (Some(owner), Some(tunnel), Some(credentials), Some(hosts)) =
                    (&gw.dns_owner, &gw.tunnel, &gw.credentials, &p.hostnames)
                else {
                    continue;
                };
                let scope = model::DnsScope {
                    owner: owner.clone(),
                    credentials: credentials.clone(),
                };
                let (_, o) = owners
                    .entry(key(&scope))
                    .or_insert_with(|| (scope, Owner::default()));
                match ingress.get(tunnel) {
                    Some(written) => {
                        for h in hosts.iter().map(|h| hostnames::normalize(h)) {
                            if h != "*" && written.contains(&h) {
                                o.desired.entry(h.clone()).or_insert_with(|| tunnel.clone());
                                o.gateways.entry(p.gateway.clone()).or_default().insert(h);
                            }
                        }
                    }
                    None => o.failed_tunnel = true,
                }
            }
        }
        let mut by_gateway: BTreeMap<ObjKey, BTreeMap<String, HostVerdict>> = BTreeMap::new();
        for (k, (scope, o)) in &owners {
            let report = match self.tunnels.client_and_account(&scope.credentials).await {
                Ok((client, account)) => {
                    self.dns
                        .sync(
                            k,
                            &client,
                            &account,
                            &scope.owner,
                            &o.desired,
                            !o.failed_tunnel,
                        )
                        .await
                }
                Err(e) => DnsReport {
                    hosts: o
                        .desired
                        .keys()
                        .map(|h| (h.clone(), HostVerdict::Failed(e.to_string())))
                        .collect(),
                    incomplete: true,
                },
            };
            outcome.incomplete |= report.incomplete;
            for (gw, hosts) in &o.gateways {
                let verdicts = by_gateway.entry(gw.clone()).or_default();
                for h in hosts {
                    if let Some(v) = report.hosts.get(h) {
                        verdicts.insert(h.clone(), v.clone());
                    }
                }
            }
        }
        self.dns.retain(&owners.keys().cloned().collect()).await;
        by_gateway
    }

    /// Brings each scope's Access applications to the decision. A scope is synced once it has
    /// applications, and afterwards until they are gone (also when no Gateway uses it any more);
    /// a scope without any is swept once per process (ours of deleted policies removed).
    async fn access_apps(
        &self,
        decision: &Decision,
        outcome: &mut Outcome,
    ) -> BTreeMap<String, AccessReport> {
        let mut reports = BTreeMap::new();
        let mut keys = BTreeSet::new();
        let none = BTreeMap::new();
        let mut scopes: Vec<(&String, &Scope, &BTreeMap<_, _>)> = decision
            .scopes
            .iter()
            .map(|(k, (s, apps))| (k, s, apps))
            .collect();
        let pending = self.access.pending().await;
        scopes.extend(
            pending
                .iter()
                .filter(|(k, _)| !decision.scopes.contains_key(k))
                .map(|(k, s)| (k, s, &none)),
        );
        for (key, scope, apps) in scopes {
            keys.insert(key.clone());
            if apps.is_empty() && !self.access.known(key).await {
                let Ok((client, account)) =
                    self.tunnels.client_and_account(&scope.credentials).await
                else {
                    continue;
                };
                if let Some(report) = self.access.sweep(key, scope, &client, &account).await {
                    outcome.incomplete |= report.incomplete;
                    reports.insert(key.clone(), report);
                }
                continue;
            }
            let report = match self.tunnels.client_and_account(&scope.credentials).await {
                Ok((client, account)) => {
                    self.access.sync(key, scope, &client, &account, apps).await
                }
                Err(e) => AccessReport {
                    apps: apps
                        .keys()
                        .map(|p| (p.clone(), AppVerdict::Failed(e.to_string())))
                        .collect(),
                    incomplete: true,
                },
            };
            outcome.incomplete |= report.incomplete;
            reports.insert(key.clone(), report);
        }
        self.access.retain(&keys).await;
        reports
    }
}
