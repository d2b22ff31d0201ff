//! Cloudflare Access on routes: AccessPolicy objects (GEP-713 policy attachment) → one Access
//! application per policy and Cloudflare account scope, covering the targets' hostnames (and an
//! HTTPRoute's path prefixes), with the policy's rules as the application's policies.
//!
//! [`decide`] is the pure decision: policies, routes and the model → the applications each scope
//! should hold and each policy's `Accepted` per ancestor. Precedence (GEP-713): every
//! destination (`host` or `host/path`) goes to one policy, the one on the most specific target
//! (an HTTPRoute rule, then an HTTPRoute, then a Gateway listener, then a Gateway), then the
//! oldest, then by namespace/name; two policies on the same target: the older wins and the other
//! is `Conflicted`. A Gateway target covers the hostnames of the routes attached to it (through
//! the named listener with a sectionName), whole hostnames.
//!
//! [`plan_changes`] is the pure reconciliation against the applications that exist: an
//! application is the controller's when its name is [`app_name`] of its owner ID; any other
//! application is never changed, and a destination it covers is left out of ours and reported.
//! [`AccessSync`] is the effect part: it lists the applications, applies the changes with the
//! client's retry, counts them, and remembers the last report so a steady cluster costs no
//! calls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use cloudflare_api::{
    AccessApp, AccessDestination, AccessPolicyRule, Client, NewAccessApp, RetryPolicy, retry,
};
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteRulesMatchesPathType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::api::{
    AccessDecision, AccessPolicy, AccessRule, AccessSubjects, AccessTargetKind, AccessTargetRef,
    IdpProvider,
};
use crate::conditions::{Verdict, merge};
use crate::credentials::Credentials;
use crate::ingress::rule_hostname;
use crate::keys::{GATEWAY_GROUP, ObjKey, ParentRef, RouteKind};
use crate::model::Model;
use crate::names::sha256_hex;
use crate::status::{Notice, Write};

/// Reason: another AccessPolicy on the same target is older.
pub const CONFLICTED: &str = "Conflicted";
/// Reason: the policy's rules cannot be expressed (see the message).
pub const INVALID: &str = "Invalid";
/// Reason: the target (or its sectionName) does not exist.
pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
/// Programmed reason: an application the controller did not make covers a destination.
pub const DOMAIN_OWNED_ELSEWHERE: &str = "DomainOwnedElsewhere";
/// Programmed reason: the Access API failed; retried.
pub const ACCESS_API_ERROR: &str = "AccessAPIError";
/// Programmed reason: the targets serve no hostname through this ancestor.
pub const NO_HOSTNAMES: &str = "NoHostnames";

const NAME_PREFIX: &str = "tunnel-gateway/";

/// The name of the application of `policy` made by the installation `owner`: the ownership
/// mark (the controller touches only applications named so with its own owner ID).
pub fn app_name(owner: &str, policy: &ObjKey) -> String {
    format!("{NAME_PREFIX}{owner}: {policy}")
}

/// The owner and policy of an application name made by [`app_name`].
pub fn parse_app_name(name: &str) -> Option<(String, ObjKey)> {
    let (owner, policy) = name.strip_prefix(NAME_PREFIX)?.split_once(": ")?;
    let (namespace, name) = policy.split_once('/')?;
    (!owner.is_empty() && !namespace.is_empty() && !name.is_empty()).then(|| {
        (
            owner.to_owned(),
            ObjKey {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
        )
    })
}

/// The Cloudflare side applications are written with: the class's owner ID and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub owner: String,
    pub credentials: Credentials,
}

impl Scope {
    /// A stable key (the token hashed, never shown).
    pub fn key(&self) -> String {
        sha256_hex(&format!(
            "access\n{}\n{}\n{:?}",
            self.owner, self.credentials.api_token, self.credentials.account_id
        ))
    }
}

/// An application as a policy wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredApp {
    /// `host` or `host/path`, sorted.
    pub uris: BTreeSet<String>,
    pub session_duration: Option<String>,
    pub rules: Vec<AccessPolicyRule>,
}

/// One ancestor of a policy: `Accepted`, and where its applications live.
#[derive(Debug, Clone, PartialEq)]
pub struct AncestorState {
    pub accepted: Verdict,
    /// The ancestor Gateway's scope key (none: not found, or no credentials).
    pub scope: Option<String>,
    /// Destinations the policy's targets offered through this ancestor (before precedence).
    pub offered: BTreeSet<String>,
}

/// One policy's decision.
#[derive(Debug, Clone)]
pub struct PolicyDecision {
    pub policy: Arc<AccessPolicy>,
    pub ancestors: BTreeMap<ParentRef, AncestorState>,
}

/// Everything [`decide`] says.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// By scope key: the scope and its applications by policy.
    pub scopes: BTreeMap<String, (Scope, BTreeMap<ObjKey, DesiredApp>)>,
    pub policies: Vec<PolicyDecision>,
}

/// How specific a target is: lower wins.
fn rank(t: &AccessTargetRef) -> u8 {
    match (t.kind, t.section_name.is_some()) {
        (AccessTargetKind::HttpRoute, true) => 0,
        (AccessTargetKind::HttpRoute, false) => 1,
        (AccessTargetKind::Gateway, true) => 2,
        (AccessTargetKind::Gateway, false) => 3,
    }
}

fn kind_str(k: AccessTargetKind) -> &'static str {
    match k {
        AccessTargetKind::HttpRoute => "HTTPRoute",
        AccessTargetKind::Gateway => "Gateway",
    }
}

/// The Cloudflare rules of one subject list.
fn subjects_json(s: &AccessSubjects) -> Vec<Value> {
    let mut out = Vec::new();
    out.extend(s.emails.iter().map(|e| json!({"email": {"email": e}})));
    out.extend(
        s.email_domains
            .iter()
            .map(|d| json!({"email_domain": {"domain": d}})),
    );
    out.extend(s.access_groups.iter().map(|g| json!({"group": {"id": g}})));
    for g in &s.idp_groups {
        let idp = &g.identity_provider_id;
        out.push(match g.provider {
            IdpProvider::AzureAd => {
                json!({"azureAD": {"id": g.group, "identity_provider_id": idp}})
            }
            IdpProvider::Okta => json!({"okta": {"name": g.group, "identity_provider_id": idp}}),
            IdpProvider::GoogleWorkspace => {
                json!({"gsuite": {"email": g.group, "identity_provider_id": idp}})
            }
            IdpProvider::GitHubOrganization => {
                json!({"github-organization": {"name": g.group, "identity_provider_id": idp}})
            }
        });
    }
    out.extend(
        s.service_tokens
            .iter()
            .map(|t| json!({"service_token": {"token_id": t}})),
    );
    if s.any_valid_service_token {
        out.push(json!({"any_valid_service_token": {}}));
    }
    if s.everyone {
        out.push(json!({"everyone": {}}));
    }
    out
}

fn has_service_tokens(s: &AccessSubjects) -> bool {
    !s.service_tokens.is_empty() || s.any_valid_service_token
}

fn has_identities(s: &AccessSubjects) -> bool {
    !(s.emails.is_empty()
        && s.email_domains.is_empty()
        && s.access_groups.is_empty()
        && s.idp_groups.is_empty())
}

/// The policy's rules as Cloudflare policies, or why they cannot be.
pub fn cloudflare_rules(rules: &[AccessRule]) -> Result<Vec<AccessPolicyRule>, String> {
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let name = r.name.clone().unwrap_or_else(|| format!("rule-{}", i + 1));
        let include = subjects_json(&r.include);
        if include.is_empty() {
            return Err(format!("rule {name:?}: include names no subject"));
        }
        let all = [Some(&r.include), r.exclude.as_ref(), r.require.as_ref()];
        let tokens = all.iter().flatten().any(|s| has_service_tokens(s));
        match r.decision {
            AccessDecision::ServiceAuth if has_identities(&r.include) => {
                return Err(format!(
                    "rule {name:?}: decision ServiceAuth admits service tokens, not users; put users in a rule with decision Allow"
                ));
            }
            AccessDecision::Allow | AccessDecision::Deny | AccessDecision::Bypass if tokens => {
                return Err(format!(
                    "rule {name:?}: service tokens are checked only by rules with decision ServiceAuth"
                ));
            }
            _ => {}
        }
        out.push(AccessPolicyRule {
            name,
            decision: match r.decision {
                AccessDecision::Allow => "allow",
                AccessDecision::Deny => "deny",
                AccessDecision::Bypass => "bypass",
                AccessDecision::ServiceAuth => "non_identity",
            }
            .to_owned(),
            include,
            exclude: r.exclude.as_ref().map(subjects_json).unwrap_or_default(),
            require: r.require.as_ref().map(subjects_json).unwrap_or_default(),
            precedence: Some(i as u32 + 1),
        });
    }
    Ok(out)
}

/// The paths an HTTPRoute (one rule of it with `section`) serves, as Access paths: `None` is the
/// whole hostname (no match, `/`, or a regular expression, which Access cannot express: the
/// application then covers more, never less). `Err` when `section` names no rule.
fn route_paths(route: &HttpRoute, section: Option<&str>) -> Result<BTreeSet<Option<String>>, ()> {
    let rules: Vec<_> = route
        .spec
        .rules
        .iter()
        .flatten()
        .filter(|r| section.is_none_or(|s| r.name.as_deref() == Some(s)))
        .collect();
    if section.is_some() && rules.is_empty() {
        return Err(());
    }
    let mut out = BTreeSet::new();
    for r in rules {
        let matches = r.matches.as_deref().unwrap_or_default();
        if matches.is_empty() {
            out.insert(None);
        }
        for m in matches {
            let path = m.path.as_ref().and_then(|p| match p.r#type {
                Some(HttpRouteRulesMatchesPathType::RegularExpression) => None,
                _ => p.value.as_deref(),
            });
            let trimmed = path.map(|p| p.trim_end_matches('/')).unwrap_or_default();
            out.insert((!trimmed.is_empty()).then(|| trimmed.to_owned()));
        }
    }
    if out.contains(&None) {
        return Ok(BTreeSet::from([None]));
    }
    Ok(out)
}

fn uri(host: &str, path: &Option<String>) -> String {
    format!("{host}{}", path.as_deref().unwrap_or(""))
}

/// What one target offers: by ancestor Gateway, the destinations by scope key.
struct Offer {
    ancestors: BTreeMap<ObjKey, Option<(Scope, BTreeSet<String>)>>,
}

fn scope_of(model: &Model, gw: &ObjKey) -> Option<Scope> {
    let g = model.gateways.get(gw)?;
    Some(Scope {
        owner: g.owner_id.clone()?,
        credentials: g.credentials.clone()?,
    })
}

/// Resolves a target: `Ok(None)` when it is not this controller's (no status), `Err` when it
/// does not exist.
fn resolve(
    t: &AccessTargetRef,
    ns: &str,
    http_routes: &[Arc<HttpRoute>],
    gateways: &[Arc<Gateway>],
    model: &Model,
) -> Result<Option<Offer>, String> {
    let key = ObjKey {
        namespace: ns.to_owned(),
        name: t.name.clone(),
    };
    let section = t.section_name.as_deref();
    match t.kind {
        AccessTargetKind::HttpRoute => {
            let Some(route) = http_routes.iter().find(|r| ObjKey::of(r.as_ref()) == key) else {
                return Err(format!("HTTPRoute {key} does not exist"));
            };
            let paths = route_paths(route, section).map_err(|()| {
                format!(
                    "HTTPRoute {key} has no rule named {:?}",
                    section.unwrap_or_default()
                )
            })?;
            let Some(outcome) = model
                .routes
                .iter()
                .find(|r| r.id.kind == RouteKind::Http && r.id.key == key)
            else {
                return Ok(None);
            };
            let mut ancestors: BTreeMap<ObjKey, Option<(Scope, BTreeSet<String>)>> =
                BTreeMap::new();
            for p in &outcome.parents {
                let entry = ancestors
                    .entry(p.gateway.clone())
                    .or_insert_with(|| scope_of(model, &p.gateway).map(|s| (s, BTreeSet::new())));
                let (Some((_, uris)), Some(hosts)) = (entry.as_mut(), &p.hostnames) else {
                    continue;
                };
                for h in hosts.iter().map(|h| rule_hostname(h)) {
                    if h != "*" && !h.is_empty() {
                        uris.extend(paths.iter().map(|p| uri(&h, p)));
                    }
                }
            }
            Ok((!ancestors.is_empty()).then_some(Offer { ancestors }))
        }
        AccessTargetKind::Gateway => {
            let Some(gw) = model.gateways.get(&key) else {
                if gateways.iter().any(|g| ObjKey::of(g.as_ref()) == key) {
                    return Ok(None);
                }
                return Err(format!("Gateway {key} does not exist"));
            };
            let listener = match section {
                Some(s) => match gw.listeners.iter().position(|l| l.name == s) {
                    Some(i) => Some(i),
                    None => return Err(format!("Gateway {key} has no listener named {s:?}")),
                },
                None => None,
            };
            let scope = scope_of(model, &key);
            let mut uris = BTreeSet::new();
            for p in model.routes.iter().flat_map(|r| &r.parents) {
                if p.gateway != key
                    || listener
                        .is_some_and(|i| p.listener_set.is_some() || !p.listeners.contains(&i))
                {
                    continue;
                }
                for h in p.hostnames.iter().flatten().map(|h| rule_hostname(h)) {
                    if h != "*" && !h.is_empty() {
                        uris.insert(h);
                    }
                }
            }
            Ok(Some(Offer {
                ancestors: BTreeMap::from([(key, scope.map(|s| (s, uris)))]),
            }))
        }
    }
}

/// The decision for a snapshot's AccessPolicies.
pub fn decide(
    policies: &[Arc<AccessPolicy>],
    http_routes: &[Arc<HttpRoute>],
    gateways: &[Arc<Gateway>],
    model: &Model,
) -> Decision {
    let mut ordered: Vec<&Arc<AccessPolicy>> = policies.iter().collect();
    ordered.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, ObjKey::of(a.as_ref()))
            .cmp(&(&b.metadata.creation_timestamp, ObjKey::of(b.as_ref())))
    });
    let mut out = Decision::default();
    let mut taken_targets: BTreeMap<(AccessTargetKind, String, String, Option<String>), ObjKey> =
        BTreeMap::new();
    // (scope key, uri) → (rank, seniority, policy)
    let mut claims: BTreeMap<(String, String), (u8, usize, ObjKey)> = BTreeMap::new();
    // Every Gateway's scope, with or without policies: a scope whose last policy went still
    // has its applications removed.
    let mut scopes: BTreeMap<String, Scope> = model
        .gateways
        .keys()
        .filter_map(|gw| scope_of(model, gw))
        .map(|s| (s.key(), s))
        .collect();
    let mut rules_of: BTreeMap<ObjKey, (Vec<AccessPolicyRule>, Option<String>)> = BTreeMap::new();
    for (seniority, policy) in ordered.iter().enumerate() {
        let pkey = ObjKey::of(policy.as_ref());
        let ns = pkey.namespace.clone();
        let rules = cloudflare_rules(&policy.spec.rules);
        let mut ancestors: BTreeMap<ParentRef, AncestorState> = BTreeMap::new();
        for t in &policy.spec.target_refs {
            let target_ref = ParentRef {
                group: Some(GATEWAY_GROUP.to_owned()),
                kind: Some(kind_str(t.kind).to_owned()),
                namespace: Some(ns.clone()),
                name: t.name.clone(),
                section_name: None,
                port: None,
            };
            let offer = match resolve(t, &ns, http_routes, gateways, model) {
                Ok(Some(o)) => o,
                Ok(None) => continue,
                Err(why) => {
                    ancestors.insert(
                        target_ref,
                        AncestorState {
                            accepted: Verdict::fail("Accepted", TARGET_NOT_FOUND, why),
                            scope: None,
                            offered: BTreeSet::new(),
                        },
                    );
                    continue;
                }
            };
            let same = (t.kind, ns.clone(), t.name.clone(), t.section_name.clone());
            let conflict = match taken_targets.get(&same) {
                Some(winner) if *winner != pkey => Some(winner.clone()),
                Some(_) => None,
                None => {
                    if rules.is_ok() {
                        taken_targets.insert(same, pkey.clone());
                    }
                    None
                }
            };
            for (gw, scoped) in offer.ancestors {
                let accepted = match (&rules, &conflict) {
                    (Err(why), _) => Verdict::fail("Accepted", INVALID, why.clone()),
                    (Ok(_), Some(w)) => Verdict::fail(
                        "Accepted",
                        CONFLICTED,
                        format!(
                            "AccessPolicy {w} is older and targets the same {} {}",
                            kind_str(t.kind),
                            t.name
                        ),
                    ),
                    (Ok(_), None) => Verdict::ok("Accepted", "the policy is accepted"),
                };
                let ok = accepted.status;
                let state = ancestors
                    .entry(ParentRef::to_gateway(&gw, None, None))
                    .or_insert_with(|| AncestorState {
                        accepted: accepted.clone(),
                        scope: None,
                        offered: BTreeSet::new(),
                    });
                // A failing target outweighs an accepted one under the same ancestor.
                if state.accepted.status && !ok {
                    state.accepted = accepted;
                }
                let Some((scope, uris)) = scoped else {
                    continue;
                };
                let skey = scope.key();
                state.scope = Some(skey.clone());
                scopes.entry(skey.clone()).or_insert(scope);
                if !ok {
                    continue;
                }
                state.offered.extend(uris.iter().cloned());
                for u in uris {
                    let claim = (rank(t), seniority, pkey.clone());
                    let slot = claims.entry((skey.clone(), u)).or_insert(claim.clone());
                    if (claim.0, claim.1) < (slot.0, slot.1) {
                        *slot = claim;
                    }
                }
            }
        }
        if let Ok(r) = rules {
            rules_of.insert(pkey, (r, policy.spec.session_duration.clone()));
        }
        out.policies.push(PolicyDecision {
            policy: (*policy).clone(),
            ancestors,
        });
    }
    for (skey, scope) in scopes {
        out.scopes.insert(skey, (scope, BTreeMap::new()));
    }
    for ((skey, u), (_, _, pkey)) in claims {
        let Some((rules, session)) = rules_of.get(&pkey) else {
            continue;
        };
        if let Some((_, apps)) = out.scopes.get_mut(&skey) {
            apps.entry(pkey)
                .or_insert_with(|| DesiredApp {
                    uris: BTreeSet::new(),
                    session_duration: session.clone(),
                    rules: rules.clone(),
                })
                .uris
                .insert(u);
        }
    }
    out
}

/// One change to make, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Create {
        policy: ObjKey,
        app: NewAccessApp,
    },
    Update {
        policy: ObjKey,
        id: String,
        app: NewAccessApp,
    },
    Delete {
        policy: ObjKey,
        id: String,
    },
}

/// The outcome [`plan_changes`] foresees for one policy's application.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Foreign {
    /// Destinations left out: another application covers them (`uri → its name`).
    pub taken: BTreeMap<String, String>,
}

fn new_app(owner: &str, policy: &ObjKey, uris: &[String], d: &DesiredApp) -> NewAccessApp {
    NewAccessApp {
        name: app_name(owner, policy),
        kind: "self_hosted".into(),
        domain: uris[0].clone(),
        destinations: uris.iter().map(AccessDestination::public).collect(),
        session_duration: d.session_duration.clone(),
        policies: d.rules.clone(),
    }
}

/// Whether `existing` already is what `want` describes (Cloudflare's defaults filled in).
fn same(existing: &AccessApp, want: &NewAccessApp) -> bool {
    let uris: BTreeSet<String> = existing.uris().into_iter().collect();
    let want_uris: BTreeSet<String> = want.destinations.iter().map(|d| d.uri.clone()).collect();
    let session = |s: &Option<String>| s.clone().unwrap_or_else(|| "24h".into());
    // Precedence is the list order on both sides; the server may number it differently.
    let unnumbered = |r: &AccessPolicyRule| AccessPolicyRule {
        precedence: None,
        ..r.clone()
    };
    let rules: Vec<AccessPolicyRule> = existing
        .policies
        .iter()
        .map(|p| unnumbered(&p.rule))
        .collect();
    let want_rules: Vec<AccessPolicyRule> = want.policies.iter().map(unnumbered).collect();
    existing.kind == want.kind
        && uris == want_uris
        && session(&existing.session_duration) == session(&want.session_duration)
        && rules == want_rules
}

/// The changes that bring `owner`'s applications in `existing` to `desired`, and per desired
/// policy the destinations another application holds (left out; when none remains, the policy
/// gets no application).
pub fn plan_changes(
    owner: &str,
    desired: &BTreeMap<ObjKey, DesiredApp>,
    existing: &[AccessApp],
) -> (Vec<Change>, BTreeMap<ObjKey, Foreign>) {
    let mut ours: BTreeMap<ObjKey, Vec<&AccessApp>> = BTreeMap::new();
    let mut foreign_uris: BTreeMap<String, &str> = BTreeMap::new();
    for app in existing {
        match parse_app_name(&app.name) {
            Some((o, policy)) if o == owner => ours.entry(policy).or_default().push(app),
            _ => {
                for u in app.uris() {
                    foreign_uris.insert(u.to_ascii_lowercase(), &app.name);
                }
            }
        }
    }
    let mut changes = Vec::new();
    let mut foreign = BTreeMap::new();
    // Deletions first: a destination moving between two policies must be free before it is
    // given to the other.
    for (policy, apps) in &ours {
        let keep = usize::from(desired.contains_key(policy));
        for app in apps.iter().skip(keep) {
            changes.push(Change::Delete {
                policy: policy.clone(),
                id: app.id.clone(),
            });
        }
    }
    let mut creates_updates = Vec::new();
    for (policy, d) in desired {
        let mut f = Foreign::default();
        let uris: Vec<String> = d
            .uris
            .iter()
            .filter(|u| match foreign_uris.get(*u) {
                Some(name) => {
                    f.taken.insert((*u).clone(), (*name).to_owned());
                    false
                }
                None => true,
            })
            .cloned()
            .collect();
        foreign.insert(policy.clone(), f);
        let current = ours.get(policy).and_then(|a| a.first());
        if uris.is_empty() {
            if let Some(app) = current {
                changes.push(Change::Delete {
                    policy: policy.clone(),
                    id: app.id.clone(),
                });
            }
            continue;
        }
        let want = new_app(owner, policy, &uris, d);
        match current {
            Some(app) if same(app, &want) => {}
            Some(app) => creates_updates.push(Change::Update {
                policy: policy.clone(),
                id: app.id.clone(),
                app: want,
            }),
            None => creates_updates.push(Change::Create {
                policy: policy.clone(),
                app: want,
            }),
        }
    }
    // Updates (which may give destinations up) before creates.
    creates_updates.sort_by_key(|c| matches!(c, Change::Create { .. }));
    changes.extend(creates_updates);
    (changes, foreign)
}

/// Labels of `cftunnel_access_application_changes_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OpLabel {
    /// `created`, `updated`, `deleted`, `failed` (refused or unanswered), `refused` (a
    /// destination another application covers: left out).
    pub op: &'static str,
}

/// A policy's application after a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppVerdict {
    /// In place; `taken`: destinations left out because another application covers them.
    Ready {
        taken: BTreeMap<String, String>,
    },
    Failed(String),
}

/// One scope's outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessReport {
    pub apps: BTreeMap<ObjKey, AppVerdict>,
    pub incomplete: bool,
}

struct Last {
    scope: Scope,
    desired: BTreeMap<ObjKey, DesiredApp>,
    at: Instant,
    report: AccessReport,
}

/// Applies [`plan_changes`] through the Cloudflare API; remembers each scope's last report.
pub struct AccessSync {
    retry: RetryPolicy,
    changes: Family<OpLabel, Counter>,
    last: Mutex<BTreeMap<String, Last>>,
}

impl AccessSync {
    pub fn new(retry: RetryPolicy, changes: Family<OpLabel, Counter>) -> AccessSync {
        AccessSync {
            retry,
            changes,
            last: Mutex::default(),
        }
    }

    fn count(&self, op: &'static str) {
        self.changes.get_or_create(&OpLabel { op }).inc();
    }

    /// Whether `key` was synced before (its applications may need removing).
    pub async fn known(&self, key: &str) -> bool {
        self.last.lock().await.contains_key(key)
    }

    /// Scopes whose last sync left applications in place or failed: synced again (with nothing
    /// desired) even when no Gateway uses them any more, so their applications go.
    pub async fn pending(&self) -> Vec<(String, Scope)> {
        self.last
            .lock()
            .await
            .iter()
            .filter(|(_, l)| !l.desired.is_empty() || l.report.incomplete)
            .map(|(k, l)| (k.clone(), l.scope.clone()))
            .collect()
    }

    /// Brings `owner`'s applications in `account` to `desired`; an unchanged `desired` is not
    /// looked at again until [`crate::tunnels::RESYNC_AFTER`] has passed, unless the last sync
    /// failed.
    pub async fn sync(
        &self,
        key: &str,
        scope: &Scope,
        client: &Client,
        account: &str,
        desired: &BTreeMap<ObjKey, DesiredApp>,
    ) -> AccessReport {
        let mut last = self.last.lock().await;
        if let Some(l) = last.get(key)
            && l.desired == *desired
            && !l.report.incomplete
            && l.at.elapsed() < crate::tunnels::RESYNC_AFTER
        {
            return l.report.clone();
        }
        let report = self.run(client, account, &scope.owner, desired).await;
        last.insert(
            key.to_owned(),
            Last {
                scope: scope.clone(),
                desired: desired.clone(),
                at: Instant::now(),
                report: report.clone(),
            },
        );
        report
    }

    /// Forgets scopes not in `keys` whose applications are all gone.
    pub async fn retain(&self, keys: &BTreeSet<String>) {
        self.last
            .lock()
            .await
            .retain(|k, l| keys.contains(k) || !l.desired.is_empty() || l.report.incomplete);
    }

    async fn run(
        &self,
        client: &Client,
        account: &str,
        owner: &str,
        desired: &BTreeMap<ObjKey, DesiredApp>,
    ) -> AccessReport {
        let sleep = tokio::time::sleep;
        let existing = match retry(&self.retry, sleep, || client.list_access_apps(account)).await {
            Ok(apps) => apps,
            Err(e) => {
                tracing::warn!(owner, error = %e, "listing Access applications failed; retrying next round");
                return AccessReport {
                    apps: desired
                        .keys()
                        .map(|p| {
                            (
                                p.clone(),
                                AppVerdict::Failed(format!("listing Access applications: {e}")),
                            )
                        })
                        .collect(),
                    incomplete: true,
                };
            }
        };
        let (changes, foreign) = plan_changes(owner, desired, &existing);
        let mut report = AccessReport {
            apps: foreign
                .into_iter()
                .map(|(p, f)| {
                    if !f.taken.is_empty() {
                        self.count("refused");
                    }
                    (p, AppVerdict::Ready { taken: f.taken })
                })
                .collect(),
            incomplete: false,
        };
        for change in &changes {
            let (policy, result, op) = match change {
                Change::Create { policy, app } => (
                    policy,
                    retry(&self.retry, sleep, || {
                        client.create_access_app(account, app)
                    })
                    .await
                    .map(drop),
                    "created",
                ),
                Change::Update { policy, id, app } => (
                    policy,
                    retry(&self.retry, sleep, || {
                        client.update_access_app(account, id, app)
                    })
                    .await
                    .map(drop),
                    "updated",
                ),
                Change::Delete { policy, id } => (
                    policy,
                    retry(&self.retry, sleep, || client.delete_access_app(account, id)).await,
                    "deleted",
                ),
            };
            match result {
                Ok(()) => {
                    self.count(op);
                    tracing::info!(policy = %policy, op, "Access application {op}");
                }
                Err(e) => {
                    self.count("failed");
                    tracing::warn!(policy = %policy, op, error = %e, "Access application change failed; retrying next round");
                    report.incomplete = true;
                    if desired.contains_key(policy) {
                        report
                            .apps
                            .insert(policy.clone(), AppVerdict::Failed(e.to_string()));
                    }
                }
            }
        }
        report
    }
}

/// `Programmed` of one ancestor.
fn programmed(
    policy: &ObjKey,
    state: &AncestorState,
    decision: &Decision,
    reports: &BTreeMap<String, AccessReport>,
) -> Verdict {
    let Some(skey) = &state.scope else {
        return Verdict::fail(
            "Programmed",
            "Pending",
            "the Gateway's class has no Cloudflare credentials yet",
        );
    };
    let held: BTreeSet<String> = decision
        .scopes
        .get(skey)
        .and_then(|(_, apps)| apps.get(policy))
        .map(|a| a.uris.clone())
        .unwrap_or_default();
    if state.offered.is_empty() {
        return Verdict::fail(
            "Programmed",
            NO_HOSTNAMES,
            "the targets serve no hostname through this Gateway (a route without hostnames cannot have an Access application)",
        );
    }
    let mine: BTreeSet<&String> = state.offered.intersection(&held).collect();
    if mine.is_empty() {
        return Verdict::ok(
            "Programmed",
            "every destination is covered by a policy on a more specific target",
        );
    }
    match reports.get(skey).and_then(|r| r.apps.get(policy)) {
        None => Verdict::fail(
            "Programmed",
            "Pending",
            "the Access application is being written",
        ),
        Some(AppVerdict::Failed(e)) => Verdict::fail(
            "Programmed",
            ACCESS_API_ERROR,
            format!("the Cloudflare Access API failed (retrying): {e}"),
        ),
        Some(AppVerdict::Ready { taken }) => {
            let lost: Vec<String> = mine
                .iter()
                .filter_map(|u| taken.get(*u).map(|n| format!("{u} (application {n:?})")))
                .collect();
            if lost.is_empty() {
                Verdict::ok(
                    "Programmed",
                    format!(
                        "the Access application covers {}",
                        mine.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            } else {
                Verdict::fail(
                    "Programmed",
                    DOMAIN_OWNED_ELSEWHERE,
                    format!(
                        "Access applications this controller did not make cover {}; they are left as they are and those destinations are not in this policy's application",
                        lost.join(", ")
                    ),
                )
            }
        }
    }
}

/// The status writes and Warning Events of every policy, given the scopes' reports.
pub fn status_writes(
    decision: &Decision,
    reports: &BTreeMap<String, AccessReport>,
    controller_name: &str,
    now: &Time,
) -> (Vec<Write>, Vec<Notice>) {
    let mut writes = Vec::new();
    let mut notices = Vec::new();
    for d in &decision.policies {
        let policy = &d.policy;
        let pkey = ObjKey::of(policy.as_ref());
        let current: Vec<(ParentRef, String, Vec<Condition>)> = policy
            .status
            .iter()
            .flat_map(|s| &s.ancestors)
            .map(|a| {
                let r = &a.ancestor_ref;
                (
                    ParentRef {
                        group: r.group.clone(),
                        kind: r.kind.clone(),
                        namespace: r.namespace.clone(),
                        name: r.name.clone(),
                        section_name: r.section_name.clone(),
                        port: r.port,
                    },
                    a.controller_name.clone(),
                    a.conditions.clone(),
                )
            })
            .collect();
        let mut ancestors: Vec<(ParentRef, String, Vec<Condition>)> = current
            .iter()
            .filter(|a| a.1 != controller_name)
            .cloned()
            .collect();
        for (aref, state) in &d.ancestors {
            let before: Vec<Condition> = current
                .iter()
                .find(|a| a.1 == controller_name && a.0 == *aref)
                .map(|a| a.2.clone())
                .unwrap_or_default();
            let programmed = if state.accepted.status {
                programmed(&pkey, state, decision, reports)
            } else {
                Verdict::fail(
                    "Programmed",
                    state.accepted.reason.clone(),
                    "the policy is not accepted for this ancestor",
                )
            };
            let verdicts = [state.accepted.clone(), programmed];
            let after = merge(&before, &verdicts, policy.metadata.generation, now);
            // One Event per failure: Programmed repeats a refusal Accepted already reports.
            let reported = if state.accepted.status {
                &after[..]
            } else {
                &after[..1]
            };
            for c in reported {
                let was = before.iter().find(|b| b.type_ == c.type_);
                if c.status == "False"
                    && c.reason != "Pending"
                    && was.is_none_or(|w| w.status != c.status || w.reason != c.reason)
                {
                    notices.push(Notice {
                        object: policy.object_ref(&()),
                        warning: true,
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    });
                }
            }
            ancestors.push((aref.clone(), controller_name.to_owned(), after));
        }
        if ancestors == current {
            continue;
        }
        writes.push(Write::AccessPolicy {
            key: pkey,
            resource_version: policy.resource_version(),
            ancestors: ancestors
                .into_iter()
                .map(|(ancestor_ref, controller_name, conditions)| {
                    crate::status::PolicyAncestorStatus {
                        ancestor_ref,
                        controller_name,
                        conditions,
                    }
                })
                .collect(),
        });
    }
    (writes, notices)
}

#[cfg(test)]
mod tests;
