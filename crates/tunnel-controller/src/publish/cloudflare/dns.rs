//! Opt-in DNS records (GatewayClassConfig `spec.dns`): for every hostname a tunnel's ingress
//! document lists, a proxied CNAME `<hostname>` → `<tunnel>.cfargotunnel.com` in the zone whose
//! name is the longest suffix of the hostname, next to an ownership TXT record (external-dns
//! style) that says which controller installation made it.
//!
//! [`plan`] is the pure decision: desired hostnames and the records that exist → the changes,
//! and a verdict per hostname. The controller changes or deletes only a CNAME whose ownership
//! record carries its own owner ID; a hostname whose name holds a record that is not ours is
//! refused ([`HostVerdict::OwnedElsewhere`]) and nothing is written for it. [`DnsSync`] is the
//! effect part: it lists zones and records, applies the plan with the client's retry, counts the
//! changes, and remembers the last report so a steady cluster costs no DNS calls.
//!
//! Names (docs/tunnel-gateway.md, "DNS records"): the ownership record of `a.example.com` is
//! `_tunnel-gateway.a.example.com`; that of `*.example.com` is
//! `_tunnel-gateway-wildcard.example.com` (a `*` label may only be the first one).

use std::collections::{BTreeMap, BTreeSet};

use cloudflare_api::{Client, Error, NewDnsRecord, RecordFilter, RetryPolicy, retry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Mutex;

use super::memo::Synced;

/// Condition type on route parents whose hostnames get DNS records.
pub const DNS_RECORD: &str = "cf.k8s.lex.la/DNSRecord";
/// Reason when a hostname's name holds a record this controller did not make.
pub const OWNED_ELSEWHERE: &str = "RecordOwnedElsewhere";
/// Reason when no zone the API token can see holds the hostname.
pub const NO_ZONE: &str = "NoZone";
/// Reason while a DNS API call keeps failing.
pub const DNS_API_ERROR: &str = "DNSAPIError";

const HERITAGE: &str = "heritage=tunnel-gateway";
const OWNER_KEY: &str = "tunnel-gateway/owner=";
const TUNNEL_KEY: &str = "tunnel-gateway/tunnel=";
const TXT_PREFIX: &str = "_tunnel-gateway.";
const TXT_WILDCARD_PREFIX: &str = "_tunnel-gateway-wildcard.";

/// A zone the API token can see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub id: String,
    pub name: String,
}

/// An existing record, as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub content: String,
    pub proxied: bool,
}

/// One change, in the order it must be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create {
        zone: String,
        record: NewDnsRecord,
    },
    Update {
        zone: String,
        id: String,
        record: NewDnsRecord,
    },
    Delete {
        zone: String,
        id: String,
        kind: String,
        name: String,
    },
}

/// What a desired hostname's DNS looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostVerdict {
    /// Our CNAME points at the tunnel (after this plan's changes).
    Ready { tunnel: String },
    /// A record not ours holds the name; nothing is written. The message names it.
    OwnedElsewhere(String),
    /// No visible zone holds the hostname.
    NoZone,
    /// The DNS API failed (set by the effect part).
    Failed(String),
}

/// The decision for one owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Changes with the hostname each serves, in order (ownership TXT before CNAME on create;
    /// CNAME before TXT on delete).
    pub changes: Vec<(String, Change)>,
    pub verdicts: BTreeMap<String, HostVerdict>,
}

/// The CNAME target of a tunnel.
pub fn target(tunnel: &str) -> String {
    format!("{tunnel}.cfargotunnel.com")
}

/// The name of a hostname's ownership record.
pub fn owner_record_name(host: &str) -> String {
    match host.strip_prefix("*.") {
        Some(rest) => format!("{TXT_WILDCARD_PREFIX}{rest}"),
        None => format!("{TXT_PREFIX}{host}"),
    }
}

/// The hostname an ownership record's name stands for.
fn host_of_owner_record(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix(TXT_WILDCARD_PREFIX) {
        return Some(format!("*.{rest}"));
    }
    name.strip_prefix(TXT_PREFIX).map(str::to_owned)
}

/// The ownership record's text (quoted, as TXT content is stored).
pub fn ownership_content(owner: &str, tunnel: &str) -> String {
    format!("\"{HERITAGE},{OWNER_KEY}{owner},{TUNNEL_KEY}{tunnel}\"")
}

/// The owner and tunnel of an ownership record's text; `None` for any other text.
pub fn parse_ownership(content: &str) -> Option<(String, String)> {
    let text = content.trim().trim_matches('"');
    let mut parts = text.split(',');
    if parts.next()? != HERITAGE {
        return None;
    }
    let (mut owner, mut tunnel) = (None, String::new());
    for p in parts {
        if let Some(o) = p.strip_prefix(OWNER_KEY) {
            owner = Some(o.to_owned());
        } else if let Some(t) = p.strip_prefix(TUNNEL_KEY) {
            tunnel = t.to_owned();
        }
    }
    Some((owner?, tunnel))
}

/// The zone whose name is the longest suffix of `host` (label-wise).
pub fn zone_of<'a>(host: &str, zones: &'a [Zone]) -> Option<&'a Zone> {
    zones
        .iter()
        .filter(|z| {
            let z = z.name.to_ascii_lowercase();
            host == z || host.ends_with(&format!(".{z}"))
        })
        .max_by_key(|z| z.name.len())
}

fn cname(host: &str, tunnel: &str) -> NewDnsRecord {
    NewDnsRecord {
        kind: "CNAME".into(),
        name: host.to_owned(),
        content: target(tunnel),
        proxied: Some(true),
        ttl: 1,
        comment: Some("managed by tunnel-gateway".into()),
    }
}

fn txt(host: &str, owner: &str, tunnel: &str) -> NewDnsRecord {
    NewDnsRecord {
        kind: "TXT".into(),
        name: owner_record_name(host),
        content: ownership_content(owner, tunnel),
        proxied: None,
        ttl: 1,
        comment: Some("ownership record of tunnel-gateway".into()),
    }
}

fn describe(r: &Record) -> String {
    format!("{} {} → {}", r.kind, r.name, r.content)
}

/// Decides the changes for `owner`: `desired` maps each hostname (lower-case, no trailing dot)
/// to its tunnel; `records` holds every record of the zones listed (by zone ID). Records of
/// ours whose hostname is not desired are deleted only when `allow_delete` (every tunnel of the
/// owner synced this round, so "not desired" is known).
pub fn plan(
    owner: &str,
    desired: &BTreeMap<String, String>,
    zones: &[Zone],
    records: &BTreeMap<String, Vec<Record>>,
    allow_delete: bool,
) -> Plan {
    let mut out = Plan::default();
    let at = |zone: &str, name: &str| -> Vec<Record> {
        records
            .get(zone)
            .into_iter()
            .flatten()
            .filter(|r| r.name.eq_ignore_ascii_case(name))
            .cloned()
            .collect()
    };
    for (host, tunnel) in desired {
        if host == "*" || host.is_empty() {
            continue;
        }
        let Some(zone) = zone_of(host, zones) else {
            out.verdicts.insert(host.clone(), HostVerdict::NoZone);
            continue;
        };
        let here = at(&zone.id, host);
        let owner_name = owner_record_name(host);
        let ownership: Vec<(Record, String, String)> = at(&zone.id, &owner_name)
            .into_iter()
            .filter(|r| r.kind == "TXT")
            .filter_map(|r| parse_ownership(&r.content).map(|(o, t)| (r, o, t)))
            .collect();
        let ours = ownership.iter().find(|(_, o, _)| o == owner);
        let foreign = ownership.iter().find(|(_, o, _)| o != owner);
        let changes = &mut out.changes;
        let mut push = |c: Change| changes.push((host.clone(), c));
        match (ours, foreign) {
            (None, Some((r, other, _))) => {
                out.verdicts.insert(
                    host.clone(),
                    HostVerdict::OwnedElsewhere(format!(
                        "the ownership record {} belongs to owner {other:?}, not {owner:?}",
                        describe(r)
                    )),
                );
                continue;
            }
            (None, None) => {
                if let Some(r) = here.first() {
                    out.verdicts.insert(
                        host.clone(),
                        HostVerdict::OwnedElsewhere(format!(
                            "{} exists and has no ownership record {owner_name} of owner {owner:?}; it is left as it is",
                            describe(r)
                        )),
                    );
                    continue;
                }
                push(Change::Create {
                    zone: zone.id.clone(),
                    record: txt(host, owner, tunnel),
                });
                push(Change::Create {
                    zone: zone.id.clone(),
                    record: cname(host, tunnel),
                });
            }
            (Some((own, _, own_tunnel)), _) => {
                let cnames: Vec<&Record> = here.iter().filter(|r| r.kind == "CNAME").collect();
                if here.len() > cnames.len() || cnames.len() > 1 {
                    let other = here.iter().find(|r| r.kind != "CNAME").unwrap_or(&here[0]);
                    out.verdicts.insert(
                        host.clone(),
                        HostVerdict::OwnedElsewhere(format!(
                            "{} was added next to this controller's record; it is left as it is",
                            describe(other)
                        )),
                    );
                    continue;
                }
                if own_tunnel != tunnel {
                    push(Change::Update {
                        zone: zone.id.clone(),
                        id: own.id.clone(),
                        record: txt(host, owner, tunnel),
                    });
                }
                match cnames.first() {
                    None => push(Change::Create {
                        zone: zone.id.clone(),
                        record: cname(host, tunnel),
                    }),
                    Some(c) if !c.content.eq_ignore_ascii_case(&target(tunnel)) || !c.proxied => {
                        push(Change::Update {
                            zone: zone.id.clone(),
                            id: c.id.clone(),
                            record: cname(host, tunnel),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        out.verdicts.insert(
            host.clone(),
            HostVerdict::Ready {
                tunnel: tunnel.clone(),
            },
        );
    }
    if !allow_delete {
        return out;
    }
    for (zone, recs) in records {
        let mut gone = BTreeSet::new();
        for r in recs.iter().filter(|r| r.kind == "TXT") {
            let Some(host) = host_of_owner_record(&r.name.to_ascii_lowercase()) else {
                continue;
            };
            if desired.contains_key(&host)
                || parse_ownership(&r.content).is_none_or(|(o, _)| o != owner)
            {
                continue;
            }
            if gone.insert(host.clone()) {
                for c in recs
                    .iter()
                    .filter(|c| c.kind == "CNAME" && c.name.eq_ignore_ascii_case(&host))
                {
                    out.changes.push((
                        host.clone(),
                        Change::Delete {
                            zone: zone.clone(),
                            id: c.id.clone(),
                            kind: c.kind.clone(),
                            name: c.name.clone(),
                        },
                    ));
                }
            }
            out.changes.push((
                host,
                Change::Delete {
                    zone: zone.clone(),
                    id: r.id.clone(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                },
            ));
        }
    }
    out
}

/// Labels of `cftunnel_dns_record_changes_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `created`, `updated`, `deleted`, `failed` (a change the API refused or never answered),
    /// `refused` (a hostname owned elsewhere: nothing written).
    pub outcome: &'static str,
}

/// The DNS outcome of one owner's hostnames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsReport {
    pub hosts: BTreeMap<String, HostVerdict>,
    /// Something failed: retry next round.
    pub incomplete: bool,
}

/// The records desired and whether deletes were allowed → the report.
type Last = Synced<(BTreeMap<String, String>, bool), DnsReport>;

/// Applies [`plan`] through the Cloudflare API; remembers each owner's last report.
pub struct DnsSync {
    retry: RetryPolicy,
    changes: Family<OutcomeLabel, Counter>,
    last: Mutex<BTreeMap<String, Last>>,
}

impl DnsSync {
    pub fn new(retry: RetryPolicy, changes: Family<OutcomeLabel, Counter>) -> DnsSync {
        DnsSync {
            retry,
            changes,
            last: Mutex::default(),
        }
    }

    fn count(&self, outcome: &'static str) {
        self.changes.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Brings the records of `owner` (in `account`, through `client`) to `desired`. `key`
    /// identifies the owner and its credentials: an unchanged `desired` is not looked at again
    /// until [`super::memo::RESYNC_AFTER`] has passed, unless the last sync failed.
    pub async fn sync(
        &self,
        key: &str,
        client: &Client,
        account: &str,
        owner: &str,
        desired: &BTreeMap<String, String>,
        allow_delete: bool,
    ) -> DnsReport {
        let mut last = self.last.lock().await;
        let input = (desired.clone(), allow_delete);
        if let Some(l) = last.get(key)
            && !l.result.incomplete
            && l.stands_for(&input)
        {
            return l.result.clone();
        }
        let report = self
            .run(client, account, owner, desired, allow_delete)
            .await;
        last.insert(key.to_owned(), Synced::new(input, report.clone()));
        report
    }

    /// Forgets owners not in use.
    pub async fn retain(&self, keys: &BTreeSet<String>) {
        self.last.lock().await.retain(|k, _| keys.contains(k));
    }

    async fn run(
        &self,
        client: &Client,
        account: &str,
        owner: &str,
        desired: &BTreeMap<String, String>,
        allow_delete: bool,
    ) -> DnsReport {
        let sleep = tokio::time::sleep;
        let fail_all = |e: &Error| DnsReport {
            hosts: desired
                .keys()
                .filter(|h| h.as_str() != "*")
                .map(|h| {
                    (
                        h.clone(),
                        HostVerdict::Failed(format!("listing zones: {e}")),
                    )
                })
                .collect(),
            incomplete: true,
        };
        let zones: Vec<Zone> = match retry(&self.retry, sleep, || client.list_zones(account)).await
        {
            Ok(z) => z
                .into_iter()
                .map(|z| Zone {
                    id: z.id,
                    name: z.name.to_ascii_lowercase(),
                })
                .collect(),
            Err(e) => return fail_all(&e),
        };
        let all = RecordFilter::default();
        let mut records = BTreeMap::new();
        let mut unlisted: BTreeMap<String, String> = BTreeMap::new();
        for z in &zones {
            match retry(&self.retry, sleep, || client.list_dns_records(&z.id, &all)).await {
                Ok(rs) => {
                    let rs = rs
                        .into_iter()
                        .map(|r| Record {
                            id: r.id,
                            name: r.name.to_ascii_lowercase(),
                            kind: r.kind.to_ascii_uppercase(),
                            content: r.content,
                            proxied: r.proxied.unwrap_or(false),
                        })
                        .collect();
                    records.insert(z.id.clone(), rs);
                }
                Err(e) => {
                    unlisted.insert(
                        z.id.clone(),
                        format!("listing the records of zone {}: {e}", z.name),
                    );
                }
            }
        }
        // Deletions need every zone listed; hostnames of an unlisted zone fail.
        let listed: Vec<Zone> = zones
            .iter()
            .filter(|z| records.contains_key(&z.id))
            .cloned()
            .collect();
        let plan = plan(
            owner,
            desired,
            &listed,
            &records,
            allow_delete && unlisted.is_empty(),
        );
        let mut report = DnsReport {
            hosts: plan.verdicts,
            incomplete: !unlisted.is_empty(),
        };
        for (host, verdict) in report.hosts.iter_mut() {
            if let Some(z) = zone_of(host, &zones)
                && let Some(why) = unlisted.get(&z.id)
            {
                *verdict = HostVerdict::Failed(why.clone());
            }
        }
        for verdict in report.hosts.values() {
            if matches!(verdict, HostVerdict::OwnedElsewhere(_)) {
                self.count("refused");
            }
        }
        let mut failed_hosts = BTreeSet::new();
        for (host, change) in &plan.changes {
            if failed_hosts.contains(host) {
                continue;
            }
            let (result, done) = match change {
                Change::Create { zone, record } => (
                    retry(&self.retry, sleep, || {
                        client.create_dns_record(zone, record)
                    })
                    .await
                    .map(drop),
                    "created",
                ),
                Change::Update { zone, id, record } => (
                    retry(&self.retry, sleep, || {
                        client.update_dns_record(zone, id, record)
                    })
                    .await
                    .map(drop),
                    "updated",
                ),
                Change::Delete { zone, id, .. } => (
                    retry(&self.retry, sleep, || client.delete_dns_record(zone, id)).await,
                    "deleted",
                ),
            };
            match result {
                Ok(()) => {
                    self.count(done);
                    tracing::info!(host, change = ?change, "DNS record {done}");
                }
                Err(e) => {
                    self.count("failed");
                    tracing::warn!(host, change = ?change, error = %e, "DNS change failed; retrying next round");
                    failed_hosts.insert(host.clone());
                    report.incomplete = true;
                    if let Some(v) = report.hosts.get_mut(host) {
                        *v = HostVerdict::Failed(e.to_string());
                    }
                }
            }
        }
        report
    }
}

#[cfg(test)]
mod tests;
