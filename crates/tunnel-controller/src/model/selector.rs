//! Label selectors of Gateway API fields (a listener's `allowedRoutes.namespaces.selector`, a
//! Gateway's `allowedListeners.namespaces.selector`) against a namespace's labels. gateway-api
//! generates one struct per field; each has the shape of a Kubernetes `LabelSelector`, so each is
//! read as one and matched by one function.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;

/// `selector` (a Gateway API selector struct) read as a `LabelSelector`; `None` when it does not
/// read as one.
pub(super) fn label_selector<S: Serialize>(selector: &S) -> Option<LabelSelector> {
    serde_json::from_value(serde_json::to_value(selector).ok()?).ok()
}

/// Whether `s` selects a namespace with `labels` (an empty selector selects every namespace; an
/// unknown operator selects none).
pub(super) fn selects(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = s.match_expressions.iter().flatten().all(|e| {
        let has = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use gateway_api::apis::standard::gateways::GatewayListenersAllowedRoutesNamespacesSelector;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    #[test]
    fn a_selector_matches_labels_and_expressions() {
        let labels: BTreeMap<String, String> =
            [("team".to_owned(), "a".to_owned())].into_iter().collect();
        let sel = |labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]| LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            match_expressions: Some(
                exprs
                    .iter()
                    .map(|(k, op, v)| LabelSelectorRequirement {
                        key: (*k).to_owned(),
                        operator: (*op).to_owned(),
                        values: Some(v.iter().map(|s| (*s).to_owned()).collect()),
                    })
                    .collect(),
            ),
        };
        let cases: &[(LabelSelector, bool)] = &[
            (sel(&[], &[]), true),
            (sel(&[("team", "a")], &[]), true),
            (sel(&[("team", "b")], &[]), false),
            (sel(&[], &[("team", "In", &["a", "b"])]), true),
            (sel(&[], &[("team", "NotIn", &["a"])]), false),
            (sel(&[], &[("tier", "Exists", &[])]), false),
            (sel(&[], &[("tier", "DoesNotExist", &[])]), true),
            (sel(&[], &[("team", "Bogus", &[])]), false),
        ];
        for (i, (s, want)) in cases.iter().enumerate() {
            assert_eq!(selects(s, &labels), *want, "case {i}");
        }
    }

    #[test]
    fn a_gateway_api_selector_reads_as_a_label_selector() {
        let g: GatewayListenersAllowedRoutesNamespacesSelector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}))
            .unwrap();
        let s = label_selector(&g).unwrap();
        let with = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(selects(&s, &with(&[("team", "a"), ("tier", "web")])));
        assert!(!selects(&s, &with(&[("team", "a")])));
        assert!(!selects(&s, &with(&[("team", "b"), ("tier", "web")])));
    }
}
