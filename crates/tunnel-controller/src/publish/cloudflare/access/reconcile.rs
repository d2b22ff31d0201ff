//! The pure reconciliation against the applications that exist: only ours change.

use super::*;

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

pub(super) fn new_app(
    owner: &str,
    policy: &ObjKey,
    uris: &[String],
    d: &DesiredApp,
) -> NewAccessApp {
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
pub(super) fn same(existing: &AccessApp, want: &NewAccessApp) -> bool {
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
