//! Unit tests of the rule translation: AccessPolicy rules → Cloudflare Access selectors.

use super::*;
use crate::api::{AccessRule, IdpGroup};

#[test]
fn rules_translate_to_cloudflare_selectors_or_are_refused() {
    let subjects = AccessSubjects {
        emails: vec!["a@example.com".into()],
        email_domains: vec!["example.org".into()],
        access_groups: vec!["g".into()],
        idp_groups: vec![
            IdpGroup {
                provider: IdpProvider::GoogleWorkspace,
                identity_provider_id: "i".into(),
                group: "devs@example.com".into(),
            },
            IdpGroup {
                provider: IdpProvider::GitHubOrganization,
                identity_provider_id: "i".into(),
                group: "org".into(),
            },
        ],
        ..Default::default()
    };
    let allow = AccessRule {
        name: None,
        decision: AccessDecision::Allow,
        include: subjects.clone(),
        exclude: None,
        require: None,
    };
    let got = cloudflare_rules(std::slice::from_ref(&allow)).unwrap();
    assert_eq!(got[0].name, "rule-1");
    assert_eq!(got[0].decision, "allow");
    assert_eq!(
        got[0].include,
        vec![
            json!({"email": {"email": "a@example.com"}}),
            json!({"email_domain": {"domain": "example.org"}}),
            json!({"group": {"id": "g"}}),
            json!({"gsuite": {"email": "devs@example.com", "identity_provider_id": "i"}}),
            json!({"github-organization": {"name": "org", "identity_provider_id": "i"}}),
        ]
    );
    let refused = [
        AccessRule {
            include: AccessSubjects::default(),
            ..allow.clone()
        },
        AccessRule {
            decision: AccessDecision::ServiceAuth,
            ..allow.clone()
        },
        AccessRule {
            require: Some(AccessSubjects {
                service_tokens: vec!["t".into()],
                ..Default::default()
            }),
            ..allow.clone()
        },
    ];
    for r in refused {
        assert!(cloudflare_rules(std::slice::from_ref(&r)).is_err(), "{r:?}");
    }
}
