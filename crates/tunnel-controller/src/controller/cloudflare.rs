//! The round's Cloudflare-side syncs besides the tunnels' ingress documents: DNS records for the
//! served hostnames and Access applications for the AccessPolicies.

use super::*;

impl Controller {
    /// Brings every DNS owner's records to the hostnames its Gateways' routes serve and their
    /// tunnels' documents list now (`ingress`: this round's written documents' hostnames by
    /// tunnel; a tunnel missing from it failed); returns the verdicts by Gateway and hostname.
    /// An owner with a failed tunnel this round creates and updates but deletes nothing (what it
    /// no longer serves is not known).
    pub(super) async fn dns_records(
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
                        for h in hosts.iter().map(|h| ingress::rule_hostname(h)) {
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
                Err(e) => crate::dns::DnsReport {
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
    pub(super) async fn access_apps(
        &self,
        decision: &crate::access::Decision,
        outcome: &mut Outcome,
    ) -> BTreeMap<String, AccessReport> {
        let mut reports = BTreeMap::new();
        let mut keys = BTreeSet::new();
        let none = BTreeMap::new();
        let mut scopes: Vec<(&String, &crate::access::Scope, &BTreeMap<_, _>)> = decision
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
                        .map(|p| (p.clone(), crate::access::AppVerdict::Failed(e.to_string())))
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
