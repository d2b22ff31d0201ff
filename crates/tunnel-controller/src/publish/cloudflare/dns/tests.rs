//! Table tests of [`super::plan`]: desired hostnames and existing records → changes and
//! verdicts.

use std::collections::BTreeMap;

use super::*;

const OWNER: &str = "prod";
const T1: &str = "11111111-1111-4111-8111-111111111111";
const T2: &str = "22222222-2222-4222-8222-222222222222";
const Z: &str = "zone-example-com";
const ZSUB: &str = "zone-sub-example-com";

fn zones() -> Vec<Zone> {
    vec![
        Zone {
            id: Z.into(),
            name: "example.com".into(),
        },
        Zone {
            id: ZSUB.into(),
            name: "sub.example.com".into(),
        },
    ]
}

fn rec(id: &str, kind: &str, name: &str, content: &str) -> Record {
    Record {
        id: id.into(),
        name: name.into(),
        kind: kind.into(),
        content: content.into(),
        proxied: kind == "CNAME",
    }
}

fn ours_txt(id: &str, host: &str, tunnel: &str) -> Record {
    rec(
        id,
        "TXT",
        &owner_record_name(host),
        &ownership_content(OWNER, tunnel),
    )
}

fn our_cname(id: &str, host: &str, tunnel: &str) -> Record {
    rec(id, "CNAME", host, &target(tunnel))
}

/// A compact spelling of a change: `+TXT name`, `~CNAME name content`, `-CNAME name`.
fn spell(c: &Change) -> String {
    match c {
        Change::Create { record, .. } => {
            format!("+{} {} {}", record.kind, record.name, record.content)
        }
        Change::Update { id, record, .. } => {
            format!("~{} {} {} ({id})", record.kind, record.name, record.content)
        }
        Change::Delete { kind, name, id, .. } => format!("-{kind} {name} ({id})"),
    }
}

struct Case {
    name: &'static str,
    desired: Vec<(&'static str, &'static str)>,
    records: Vec<(&'static str, Record)>,
    allow_delete: bool,
    changes: Vec<String>,
    verdicts: Vec<(&'static str, &'static str)>,
}

fn run(case: &Case) {
    let desired: BTreeMap<String, String> = case
        .desired
        .iter()
        .map(|(h, t)| (h.to_string(), t.to_string()))
        .collect();
    let mut records: BTreeMap<String, Vec<Record>> =
        zones().into_iter().map(|z| (z.id, Vec::new())).collect();
    for (zone, r) in &case.records {
        records.entry(zone.to_string()).or_default().push(r.clone());
    }
    let plan = plan(OWNER, &desired, &zones(), &records, case.allow_delete);
    let changes: Vec<String> = plan.changes.iter().map(|(_, c)| spell(c)).collect();
    assert_eq!(changes, case.changes, "{}: changes", case.name);
    let verdicts: Vec<(String, String)> = plan
        .verdicts
        .iter()
        .map(|(h, v)| {
            let v = match v {
                HostVerdict::Ready { tunnel } => format!("ready {tunnel}"),
                HostVerdict::OwnedElsewhere(_) => "elsewhere".into(),
                HostVerdict::NoZone => "no zone".into(),
                HostVerdict::Failed(_) => "failed".into(),
            };
            (h.clone(), v)
        })
        .collect();
    let want: Vec<(String, String)> = case
        .verdicts
        .iter()
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect();
    assert_eq!(verdicts, want, "{}: verdicts", case.name);
}

fn txt_of(host: &str, tunnel: &str) -> String {
    format!(
        "+TXT {} {}",
        owner_record_name(host),
        ownership_content(OWNER, tunnel)
    )
}

#[test]
fn decisions() {
    let ready1 = format!("ready {T1}");
    let ready2 = format!("ready {T2}");
    let ready1: &'static str = Box::leak(ready1.into_boxed_str());
    let ready2: &'static str = Box::leak(ready2.into_boxed_str());
    let cases = vec![
        Case {
            name: "new hostname: ownership record first, then the proxied CNAME",
            desired: vec![("app.example.com", T1)],
            records: vec![],
            allow_delete: true,
            changes: vec![
                txt_of("app.example.com", T1),
                format!("+CNAME app.example.com {}", target(T1)),
            ],
            verdicts: vec![("app.example.com", ready1)],
        },
        Case {
            name: "the longest zone suffix wins",
            desired: vec![("a.sub.example.com", T1)],
            records: vec![],
            allow_delete: true,
            changes: vec![
                txt_of("a.sub.example.com", T1),
                format!("+CNAME a.sub.example.com {}", target(T1)),
            ],
            verdicts: vec![("a.sub.example.com", ready1)],
        },
        Case {
            name: "wildcard: wildcard CNAME, ownership record at a valid name",
            desired: vec![("*.example.com", T1)],
            records: vec![],
            allow_delete: true,
            changes: vec![
                format!(
                    "+TXT _tunnel-gateway-wildcard.example.com {}",
                    ownership_content(OWNER, T1)
                ),
                format!("+CNAME *.example.com {}", target(T1)),
            ],
            verdicts: vec![("*.example.com", ready1)],
        },
        Case {
            name: "in sync: nothing to do",
            desired: vec![("app.example.com", T1)],
            records: vec![
                (Z, ours_txt("t1", "app.example.com", T1)),
                (Z, our_cname("c1", "app.example.com", T1)),
            ],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![("app.example.com", ready1)],
        },
        Case {
            name: "route moved to another tunnel: our TXT and CNAME are updated",
            desired: vec![("app.example.com", T2)],
            records: vec![
                (Z, ours_txt("t1", "app.example.com", T1)),
                (Z, our_cname("c1", "app.example.com", T1)),
            ],
            allow_delete: true,
            changes: vec![
                format!(
                    "~TXT {} {} (t1)",
                    owner_record_name("app.example.com"),
                    ownership_content(OWNER, T2)
                ),
                format!("~CNAME app.example.com {} (c1)", target(T2)),
            ],
            verdicts: vec![("app.example.com", ready2)],
        },
        Case {
            name: "ours but unproxied (edited in the dashboard): proxied again",
            desired: vec![("app.example.com", T1)],
            records: vec![
                (Z, ours_txt("t1", "app.example.com", T1)),
                (
                    Z,
                    Record {
                        proxied: false,
                        ..our_cname("c1", "app.example.com", T1)
                    },
                ),
            ],
            allow_delete: true,
            changes: vec![format!("~CNAME app.example.com {} (c1)", target(T1))],
            verdicts: vec![("app.example.com", ready1)],
        },
        Case {
            name: "ownership record left by a crash before the CNAME: CNAME created",
            desired: vec![("app.example.com", T1)],
            records: vec![(Z, ours_txt("t1", "app.example.com", T1))],
            allow_delete: true,
            changes: vec![format!("+CNAME app.example.com {}", target(T1))],
            verdicts: vec![("app.example.com", ready1)],
        },
        Case {
            name: "foreign CNAME without ownership record: refused, untouched",
            desired: vec![("app.example.com", T1)],
            records: vec![(
                Z,
                rec("x", "CNAME", "app.example.com", "elsewhere.example.net"),
            )],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![("app.example.com", "elsewhere")],
        },
        Case {
            name: "foreign A and AAAA records: refused",
            desired: vec![("a.example.com", T1), ("b.example.com", T1)],
            records: vec![
                (Z, rec("x", "A", "a.example.com", "192.0.2.1")),
                (Z, rec("y", "AAAA", "b.example.com", "2001:db8::1")),
            ],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![
                ("a.example.com", "elsewhere"),
                ("b.example.com", "elsewhere"),
            ],
        },
        Case {
            name: "another owner's records (another installation): refused and never deleted",
            desired: vec![("app.example.com", T1)],
            records: vec![
                (
                    Z,
                    rec(
                        "ot",
                        "TXT",
                        &owner_record_name("app.example.com"),
                        &ownership_content("staging", T2),
                    ),
                ),
                (Z, our_cname("oc", "app.example.com", T2)),
                (
                    Z,
                    rec(
                        "ot2",
                        "TXT",
                        &owner_record_name("old.example.com"),
                        &ownership_content("staging", T2),
                    ),
                ),
                (Z, our_cname("oc2", "old.example.com", T2)),
            ],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![("app.example.com", "elsewhere")],
        },
        Case {
            name: "a record added next to our CNAME's name by someone else: refused, ours kept",
            desired: vec![("app.example.com", T2)],
            records: vec![
                (Z, ours_txt("t1", "app.example.com", T1)),
                (Z, rec("x", "A", "app.example.com", "192.0.2.1")),
            ],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![("app.example.com", "elsewhere")],
        },
        Case {
            name: "unrelated TXT at the ownership name does not count as ownership",
            desired: vec![("app.example.com", T1)],
            records: vec![(
                Z,
                rec(
                    "v",
                    "TXT",
                    &owner_record_name("app.example.com"),
                    "\"v=spf1 -all\"",
                ),
            )],
            allow_delete: true,
            changes: vec![
                txt_of("app.example.com", T1),
                format!("+CNAME app.example.com {}", target(T1)),
            ],
            verdicts: vec![("app.example.com", ready1)],
        },
        Case {
            name: "hostname in no visible zone",
            desired: vec![("app.example.org", T1), ("*", T1)],
            records: vec![],
            allow_delete: true,
            changes: vec![],
            verdicts: vec![("app.example.org", "no zone")],
        },
        Case {
            name: "ours and unused: CNAME deleted before the TXT (wildcard too)",
            desired: vec![],
            records: vec![
                (Z, ours_txt("t1", "gone.example.com", T1)),
                (Z, our_cname("c1", "gone.example.com", T1)),
                (Z, ours_txt("t2", "*.example.com", T1)),
                (Z, our_cname("c2", "*.example.com", T1)),
                (
                    Z,
                    rec("keep", "CNAME", "other.example.com", "x.example.net"),
                ),
            ],
            allow_delete: true,
            changes: vec![
                "-CNAME gone.example.com (c1)".into(),
                format!("-TXT {} (t1)", owner_record_name("gone.example.com")),
                "-CNAME *.example.com (c2)".into(),
                "-TXT _tunnel-gateway-wildcard.example.com (t2)".into(),
            ],
            verdicts: vec![],
        },
        Case {
            name: "ours and unused, but a tunnel failed this round: nothing deleted",
            desired: vec![],
            records: vec![
                (Z, ours_txt("t1", "gone.example.com", T1)),
                (Z, our_cname("c1", "gone.example.com", T1)),
            ],
            allow_delete: false,
            changes: vec![],
            verdicts: vec![],
        },
    ];
    for case in &cases {
        run(case);
    }
}

/// The attack: a tenant's route names a hostname whose CNAME another party made (with or
/// without a look-alike ownership record); no change of any kind touches that name.
#[test]
fn a_tenant_route_never_takes_over_a_foreign_record() {
    let victim = "bank.example.com";
    let foreign = vec![
        vec![rec("x", "CNAME", victim, "origin.bank.example.net")],
        vec![
            rec("x", "CNAME", victim, "origin.bank.example.net"),
            rec(
                "t",
                "TXT",
                &owner_record_name(victim),
                &ownership_content("someone-else", T2),
            ),
        ],
        vec![rec(
            "t",
            "TXT",
            &owner_record_name(victim),
            &ownership_content("someone-else", T2),
        )],
        vec![rec("x", "A", victim, "192.0.2.7")],
        vec![rec("x", "MX", victim, "10 mail.example.net")],
    ];
    for existing in foreign {
        let records = BTreeMap::from([(Z.to_owned(), existing.clone())]);
        let desired = BTreeMap::from([(victim.to_owned(), T1.to_owned())]);
        let p = plan(OWNER, &desired, &zones(), &records, true);
        assert!(p.changes.is_empty(), "{existing:?}: {:?}", p.changes);
        match &p.verdicts[victim] {
            HostVerdict::OwnedElsewhere(msg) => assert!(msg.contains(victim), "{msg}"),
            v => panic!("{existing:?}: {v:?}"),
        }
        // Nor does the hostname going away delete them.
        let p = plan(OWNER, &BTreeMap::new(), &zones(), &records, true);
        assert!(p.changes.is_empty(), "{existing:?}: {:?}", p.changes);
    }
}

#[test]
fn ownership_text_round_trips_and_rejects_other_text() {
    let c = ownership_content("prod", T1);
    assert_eq!(
        c,
        format!("\"heritage=tunnel-gateway,tunnel-gateway/owner=prod,tunnel-gateway/tunnel={T1}\"")
    );
    assert_eq!(parse_ownership(&c), Some(("prod".into(), T1.into())));
    assert_eq!(
        parse_ownership(c.trim_matches('"')),
        Some(("prod".into(), T1.into()))
    );
    assert_eq!(
        parse_ownership("\"heritage=external-dns,external-dns/owner=prod\""),
        None
    );
    assert_eq!(parse_ownership("\"heritage=tunnel-gateway\""), None);
    assert_eq!(
        host_of_owner_record("_tunnel-gateway-wildcard.example.com").as_deref(),
        Some("*.example.com")
    );
    assert_eq!(
        host_of_owner_record("_tunnel-gateway.a.example.com").as_deref(),
        Some("a.example.com")
    );
    assert_eq!(host_of_owner_record("a.example.com"), None);
    assert_eq!(zone_of("notexample.com", &zones()), None);
}
