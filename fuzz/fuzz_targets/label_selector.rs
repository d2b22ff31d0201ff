//! The label-selector parser (`resource_proxy::tenancy::selector`): any text either parses or gives the
//! API server's error, never a panic; a parsed selector re-rendered parses to the same
//! selector and renders the same again; the selector sent to the target (the caller's ANDed
//! with the owner's) parses back to exactly that conjunction, so it never matches labels
//! without the owner's; a query string keeps one `labelSelector`, the scoped one.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use resource_proxy::tenancy::labels::OwnerLabels;
use resource_proxy::tenancy::selector::{Operator, Selector, scope_query, scoped_selector};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let owner = OwnerLabels {
        vcluster: "client-a".into(),
        project: "default".into(),
    };
    let owner_selector = Selector::owner(&owner);
    match Selector::parse(text) {
        Ok(selector) => {
            let rendered = selector.to_string();
            let again = Selector::parse(&rendered)
                .unwrap_or_else(|e| panic!("{text:?} renders as {rendered:?}, which fails: {e}"));
            assert_eq!(again, selector, "{text:?} renders as {rendered:?}");
            assert_eq!(again.to_string(), rendered);

            let scoped = scoped_selector(Some(text), &owner).expect("parsed once, so again");
            let sent = Selector::parse(&scoped)
                .unwrap_or_else(|e| panic!("{text:?} is scoped as {scoped:?}, which fails: {e}"));
            assert_eq!(sent, selector.clone().and(owner_selector.clone()));
            // Labels that satisfy what the caller asked for as far as one value per key can.
            let labels: HashMap<&str, &str> = selector
                .requirements()
                .iter()
                .filter(|r| !matches!(r.operator(), Operator::DoesNotExist))
                .map(|r| (r.key(), r.values().first().map_or("", String::as_str)))
                .collect();
            let mut with_owner = labels.clone();
            with_owner.insert("vcluster.com/owner-vcluster", "client-a");
            with_owner.insert("vcluster.com/owner-project", "default");
            for set in [&labels, &with_owner] {
                let get = |k: &str| set.get(k).copied();
                if sent.matches(get) {
                    assert!(owner_selector.matches(get), "{scoped:?} matches {set:?}");
                    assert!(selector.matches(get));
                }
            }
        }
        Err(e) => {
            assert_eq!(e.status().code(), 400);
            assert!(scoped_selector(Some(text), &owner).is_err());
        }
    }

    // The same bytes as a raw query string.
    if let Ok(query) = scope_query(Some(text), &owner) {
        let selectors: Vec<String> = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "labelSelector")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(selectors.len(), 1, "{text:?} -> {query:?}");
        let sent = Selector::parse(&selectors[0])
            .unwrap_or_else(|e| panic!("{text:?} -> {query:?}, which fails: {e}"));
        for r in owner_selector.requirements() {
            assert!(sent.requirements().contains(r), "{text:?} -> {query:?}");
        }
    }
});
