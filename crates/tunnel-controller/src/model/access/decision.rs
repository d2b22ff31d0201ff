//! The pure decision: policies, routes and the model → each scope's applications and each
//! policy's `Accepted` per ancestor, with GEP-713 precedence; and the rules' translation.

use super::*;

/// How specific a target is: lower wins.
pub(super) fn rank(t: &AccessTargetRef) -> u8 {
    match (t.kind, t.section_name.is_some()) {
        (AccessTargetKind::HttpRoute, true) => 0,
        (AccessTargetKind::HttpRoute, false) => 1,
        (AccessTargetKind::Gateway, true) => 2,
        (AccessTargetKind::Gateway, false) => 3,
    }
}

pub(super) fn kind_str(k: AccessTargetKind) -> &'static str {
    match k {
        AccessTargetKind::HttpRoute => "HTTPRoute",
        AccessTargetKind::Gateway => "Gateway",
    }
}

/// The Cloudflare rules of one subject list.
pub(super) fn subjects_json(s: &AccessSubjects) -> Vec<Value> {
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

pub(super) fn has_service_tokens(s: &AccessSubjects) -> bool {
    !s.service_tokens.is_empty() || s.any_valid_service_token
}

pub(super) fn has_identities(s: &AccessSubjects) -> bool {
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
pub(super) fn route_paths(
    route: &HttpRoute,
    section: Option<&str>,
) -> Result<BTreeSet<Option<String>>, ()> {
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

pub(super) fn uri(host: &str, path: &Option<String>) -> String {
    format!("{host}{}", path.as_deref().unwrap_or(""))
}

/// What one target offers: by ancestor Gateway, the destinations by scope key.
struct Offer {
    ancestors: BTreeMap<ObjKey, Option<(Scope, BTreeSet<String>)>>,
}

pub(super) fn scope_of(model: &Model, gw: &ObjKey) -> Option<Scope> {
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
                for h in hosts.iter().map(|h| normalize(h)) {
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
                for h in p.hostnames.iter().flatten().map(|h| normalize(h)) {
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
