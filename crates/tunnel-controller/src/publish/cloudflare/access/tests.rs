//! Table tests of the reconciliation against existing applications (the decision itself has
//! the golden case `tests/model/testdata/access`, the rule translation its tests in
//! `model/access/tests.rs`).

use serde_json::json;

use super::*;

fn key(s: &str) -> ObjKey {
    let (namespace, name) = s.split_once('/').unwrap();
    ObjKey {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn rule(decision: &str) -> AccessPolicyRule {
    AccessPolicyRule {
        name: "r".into(),
        decision: decision.into(),
        include: vec![json!({"everyone": {}})],
        exclude: vec![],
        require: vec![],
        precedence: Some(1),
    }
}

fn desired(uris: &[&str], decision: &str) -> DesiredApp {
    DesiredApp {
        uris: uris.iter().map(|u| u.to_string()).collect(),
        session_duration: None,
        rules: vec![rule(decision)],
    }
}

fn existing(id: &str, name: &str, uris: &[&str], decision: &str) -> AccessApp {
    AccessApp {
        id: id.into(),
        name: name.into(),
        kind: "self_hosted".into(),
        domain: uris[0].into(),
        destinations: uris.iter().map(|u| AccessDestination::public(*u)).collect(),
        session_duration: Some("24h".into()),
        policies: vec![cloudflare_api::AccessAppPolicy {
            id: Some("p".into()),
            rule: rule(decision),
        }],
        extra: Default::default(),
    }
}

/// A change as `op policy [id] [uris]`, for comparing.
fn show(c: &Change) -> String {
    let uris = |a: &NewAccessApp| {
        a.destinations
            .iter()
            .map(|d| d.uri.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    match c {
        Change::Create { policy, app } => format!("create {policy} {}", uris(app)),
        Change::Update { policy, id, app } => format!("update {policy} {id} {}", uris(app)),
        Change::Delete { policy, id } => format!("delete {policy} {id}"),
    }
}

#[test]
fn changes_touch_exactly_what_differs_and_never_a_foreign_application() {
    let ours = |p: &str| app_name("prod", &key(p));
    struct Case {
        name: &'static str,
        desired: Vec<(&'static str, DesiredApp)>,
        existing: Vec<AccessApp>,
        changes: Vec<String>,
        taken: Vec<(&'static str, &'static str)>,
    }
    let cases = vec![
        Case {
            name: "new policy: one create",
            desired: vec![("a/p", desired(&["a.example.com"], "allow"))],
            existing: vec![],
            changes: vec!["create a/p a.example.com".into()],
            taken: vec![],
        },
        Case {
            name: "steady: nothing",
            desired: vec![("a/p", desired(&["a.example.com"], "allow"))],
            existing: vec![existing("1", &ours("a/p"), &["a.example.com"], "allow")],
            changes: vec![],
            taken: vec![],
        },
        Case {
            name: "rules changed: one update of that application",
            desired: vec![
                ("a/p", desired(&["a.example.com"], "deny")),
                ("a/q", desired(&["q.example.com"], "allow")),
            ],
            existing: vec![
                existing("1", &ours("a/p"), &["a.example.com"], "allow"),
                existing("2", &ours("a/q"), &["q.example.com"], "allow"),
            ],
            changes: vec!["update a/p 1 a.example.com".into()],
            taken: vec![],
        },
        Case {
            name: "destinations changed: update",
            desired: vec![(
                "a/p",
                desired(&["a.example.com", "a.example.com/x"], "allow"),
            )],
            existing: vec![existing("1", &ours("a/p"), &["a.example.com"], "allow")],
            changes: vec!["update a/p 1 a.example.com,a.example.com/x".into()],
            taken: vec![],
        },
        Case {
            name: "policy gone: delete ours, other owners' and foreign ones stay",
            desired: vec![],
            existing: vec![
                existing("1", &ours("a/p"), &["a.example.com"], "allow"),
                existing(
                    "2",
                    &app_name("staging", &key("a/p")),
                    &["s.example.com"],
                    "allow",
                ),
                existing("3", "hand made", &["h.example.com"], "allow"),
            ],
            changes: vec!["delete a/p 1".into()],
            taken: vec![],
        },
        Case {
            name: "a foreign application's destination is left out and reported",
            desired: vec![("a/p", desired(&["a.example.com", "h.example.com"], "allow"))],
            existing: vec![existing("3", "hand made", &["h.example.com"], "allow")],
            changes: vec!["create a/p a.example.com".into()],
            taken: vec![("h.example.com", "hand made")],
        },
        Case {
            name: "every destination foreign: our application goes, theirs stays",
            desired: vec![("a/p", desired(&["h.example.com"], "allow"))],
            existing: vec![
                existing("1", &ours("a/p"), &["h.example.com/old"], "allow"),
                existing("3", "hand made", &["h.example.com"], "allow"),
            ],
            changes: vec!["delete a/p 1".into()],
            taken: vec![("h.example.com", "hand made")],
        },
        Case {
            name: "a destination moving between policies: delete and update before create",
            desired: vec![
                ("a/new", desired(&["a.example.com"], "allow")),
                ("a/old", desired(&["b.example.com"], "allow")),
            ],
            existing: vec![existing(
                "1",
                &ours("a/old"),
                &["a.example.com", "b.example.com"],
                "allow",
            )],
            changes: vec![
                "update a/old 1 b.example.com".into(),
                "create a/new a.example.com".into(),
            ],
            taken: vec![],
        },
        Case {
            name: "duplicates of ours: the extra one is deleted",
            desired: vec![("a/p", desired(&["a.example.com"], "allow"))],
            existing: vec![
                existing("1", &ours("a/p"), &["a.example.com"], "allow"),
                existing("2", &ours("a/p"), &["a2.example.com"], "allow"),
            ],
            changes: vec!["delete a/p 2".into()],
            taken: vec![],
        },
    ];
    for c in cases {
        let desired: BTreeMap<ObjKey, DesiredApp> =
            c.desired.into_iter().map(|(k, d)| (key(k), d)).collect();
        let (changes, foreign) = plan_changes("prod", &desired, &c.existing);
        let got: Vec<String> = changes.iter().map(show).collect();
        assert_eq!(got, c.changes, "{}", c.name);
        let taken: Vec<(String, String)> = foreign.values().flat_map(|f| f.taken.clone()).collect();
        let want: Vec<(String, String)> = c
            .taken
            .iter()
            .map(|(u, n)| (u.to_string(), n.to_string()))
            .collect();
        assert_eq!(taken, want, "{}", c.name);
    }
}

#[test]
fn app_names_mark_owner_and_policy() {
    let name = app_name("prod", &key("team-a/web"));
    assert_eq!(name, "tunnel-gateway/prod: team-a/web");
    assert_eq!(
        parse_app_name(&name),
        Some(("prod".to_owned(), key("team-a/web")))
    );
    for foreign in [
        "web",
        "tunnel-gateway/prod",
        "tunnel-gateway/: a/b",
        "tunnel-gateway/p: ab",
    ] {
        assert_eq!(parse_app_name(foreign), None, "{foreign}");
    }
}
