//! The pieces HTTPRoute and GRPCRoute rules share: a route's rules translated one by one, a
//! rule's filters and backends (failing the rule closed on an unsupported filter), header
//! matches, header modifiers, request mirrors, backend weights and failing a backend closed. The
//! generated Gateway API types of the two route kinds (and of rule and backendRef filters) are
//! distinct types with the same field names, hence macros for the conversions that only read
//! fields, and closures for what differs.

use tunnel_config::config::{self, Filter};

use super::backends::{BackendIndex, Ref, Referrer, Role};
use super::report::{DocumentRule, Report, Translated};
use super::tls_policy::ClientCert;

/// A route's rules, each translated by `rule` (its spec index, the rule, the route as referrer,
/// the report) and kept when the proxy accepts it.
pub(super) fn route_rules<'r, S: 'r, R: DocumentRule>(
    from: &Referrer<'_>,
    name: &str,
    rules: impl Iterator<Item = &'r S>,
    mut rule: impl FnMut(usize, &S, &Referrer<'_>, &mut Report) -> R,
) -> Translated<R> {
    let route = format!("{}/{name}", from.namespace);
    let mut report = Report::default();
    let mut out = Vec::new();
    for (i, r) in rules.enumerate() {
        let translated = rule(i, r, from, &mut report);
        report.keep(&route, i, translated, &mut out);
    }
    report.finish(out)
}

/// The referrer a route of `kind` in `namespace` is.
pub(super) fn referrer<'a>(
    kind: &'static str,
    namespace: &'a str,
    client_cert: Option<&'a ClientCert>,
) -> Referrer<'a> {
    Referrer {
        kind,
        namespace,
        client_cert,
    }
}

/// A rule's filters and backends in the document.
#[derive(Default)]
pub(super) struct RuleParts {
    pub filters: Vec<Filter>,
    pub backends: Vec<config::Backend>,
}

/// [`rule_parts`] of a generated rule type (`filters`; `backend_refs` with `weight` and
/// `filters`), its filters translated by `$filter`.
macro_rules! rule_parts_of {
    ($i:expr, $rule:expr, $filter:expr, $idx:expr, $from:expr, $report:expr) => {
        $crate::translate::parts::rule_parts(
            $i,
            $rule.filters.iter().flatten(),
            $filter,
            $rule.backend_refs.iter().flatten().map(|b| {
                (
                    $crate::translate::backends::backend_ref!(b),
                    b.weight,
                    $crate::translate::parts::as_rule_filters(b.filters.iter().flatten()),
                )
            }),
            $idx,
            $from,
            $report,
        )
    };
}
pub(super) use rule_parts_of;

/// A backendRef's filters as the rule filter type of the same route kind. The generated types
/// differ only in name: both are the Gateway API's `HTTPRouteFilter` (or `GRPCRouteFilter`), so
/// they convert through their JSON form.
pub(super) fn as_rule_filters<'f, B: serde::Serialize + 'f, F: serde::de::DeserializeOwned>(
    filters: impl Iterator<Item = &'f B>,
) -> Result<Vec<F>, String> {
    filters
        .map(|f| serde_json::to_value(f).and_then(serde_json::from_value))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("filters: {e}"))
}

/// Rule `i`'s filters (each translated by `filter`: `Ok(None)` leaves it out, `Err` is
/// unsupported) and its backends (reference, weight, its own filters as rule filters).
/// `None` when a rule filter is unsupported: the rule then fails closed (reported), keeping only
/// its matches so precedence stays right. A backend with an unsupported filter fails closed for
/// its share of the traffic (500).
pub(super) fn rule_parts<'f, F: 'f>(
    i: usize,
    filters: impl Iterator<Item = &'f F>,
    mut filter: impl FnMut(&str, &F, &mut Report) -> Result<Option<Filter>, String>,
    backends: impl Iterator<Item = (Ref<'f>, Option<i32>, Result<Vec<F>, String>)>,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> Option<RuleParts> {
    let mut parts = RuleParts {
        filters: Vec::new(),
        backends: Vec::new(),
    };
    let mut unsupported = Vec::new();
    for (fi, f) in filters.enumerate() {
        match filter(&format!("Rule {i} filters[{fi}]"), f, report) {
            Ok(Some(f)) => parts.filters.push(f),
            Ok(None) => {}
            Err(why) => unsupported.push(format!("filters[{fi}]: {why}")),
        }
    }
    for (bi, (r, w, own)) in backends.enumerate() {
        let at = format!("Rule {i} backendRefs[{bi}]");
        let mut resolved = idx.resolve(from, &at, &r, weight(w), Role::Backend, report);
        let mut refused = Vec::new();
        for (fi, f) in own.iter().flatten().enumerate() {
            match filter(&format!("{at} filters[{fi}]"), f, report) {
                Ok(Some(Filter::RequestRedirect(_))) => refused.push(format!(
                    "filters[{fi}]: RequestRedirect is not valid on a backendRef, put it on the rule"
                )),
                Ok(Some(Filter::Cors(_))) => refused.push(format!(
                    "filters[{fi}]: CORS is not valid on a backendRef (a preflight is answered before a backend is chosen), put it on the rule"
                )),
                Ok(Some(f)) => resolved.backend.filters.push(f),
                Ok(None) => {}
                Err(why) => refused.push(format!("filters[{fi}]: {why}")),
            }
        }
        if let Err(why) = own {
            refused.push(why);
        }
        if !resolved.invalid && !refused.is_empty() {
            refuse_backend_filters(&mut resolved.backend, &at, &refused.join("; "), report);
        }
        parts.backends.push(resolved.backend);
    }
    if unsupported.is_empty() {
        Some(parts)
    } else {
        report.rule_fails_closed(i, unsupported.join("; "));
        None
    }
}

/// A header match (`name`, `value`, optional `type` of enum `$ty`) as a document value match.
macro_rules! value_match {
    ($h:expr, $ty:ident) => {
        tunnel_config::config::ValueMatch {
            kind: match $h.r#type {
                None | Some($ty::Exact) => tunnel_config::config::ValueMatchType::Exact,
                Some($ty::RegularExpression) => {
                    tunnel_config::config::ValueMatchType::RegularExpression
                }
            },
            name: $h.name.clone(),
            value: $h.value.clone(),
        }
    };
}
pub(super) use value_match;

/// A RequestHeaderModifier or ResponseHeaderModifier configuration as a document modifier.
macro_rules! header_modifier {
    ($m:expr) => {
        tunnel_config::config::HeaderModifier {
            set: $m
                .set
                .iter()
                .flatten()
                .map(|h| tunnel_config::config::Header {
                    name: h.name.clone(),
                    value: h.value.clone(),
                })
                .collect(),
            add: $m
                .add
                .iter()
                .flatten()
                .map(|h| tunnel_config::config::Header {
                    name: h.name.clone(),
                    value: h.value.clone(),
                })
                .collect(),
            remove: $m.remove.clone().unwrap_or_default(),
        }
    };
}
pub(super) use header_modifier;

/// A RequestMirror configuration of either route kind as a document filter (see [`mirror`]).
macro_rules! request_mirror {
    ($idx:expr, $from:expr, $at:expr, $m:expr, $report:expr) => {
        $crate::translate::parts::mirror(
            $idx,
            $from,
            $at,
            &$crate::translate::backends::backend_ref!($m.backend_ref),
            $m.percent,
            $m.fraction.as_ref().map(|f| (f.numerator, f.denominator)),
            $report,
        )
    };
}
pub(super) use request_mirror;

/// A mirror to the resolved backend; `None` when the reference is invalid (the specification:
/// such a mirror is not configured, and `ResolvedRefs` says why).
pub(super) fn mirror(
    idx: &BackendIndex,
    from: &Referrer<'_>,
    at: &str,
    r: &Ref<'_>,
    percent: Option<i32>,
    fraction: Option<(i32, Option<i32>)>,
    report: &mut Report,
) -> Option<Filter> {
    let resolved = idx.resolve(from, at, r, 1, Role::Mirror, report);
    (!resolved.invalid).then(|| {
        Filter::RequestMirror(config::RequestMirror {
            backend: resolved.backend,
            percent: mirror_percent(percent, fraction),
        })
    })
}

/// The proxy mirrors whole percents: a `fraction` is rounded to the nearest one (1/1000 is 0).
fn mirror_percent(percent: Option<i32>, fraction: Option<(i32, Option<i32>)>) -> Option<u32> {
    match (percent, fraction) {
        (Some(p), _) => Some(u32::try_from(p.clamp(0, 100)).unwrap_or(0)),
        (None, Some((numerator, denominator))) => {
            let d = i64::from(denominator.unwrap_or(100).max(1));
            let n = i64::from(numerator).clamp(0, d);
            u32::try_from((n * 100 + d / 2) / d).ok()
        }
        (None, None) => None,
    }
}

/// A backendRef weight: unset is 1, 0 takes no traffic.
pub(super) fn weight(w: Option<i32>) -> u32 {
    w.map_or(1, |w| u32::try_from(w).unwrap_or(0))
}

/// A backendRef with a filter this implementation does not support there: the backend's share
/// answers 500.
fn refuse_backend_filters(backend: &mut config::Backend, at: &str, why: &str, report: &mut Report) {
    report.ref_problem(
        "UnsupportedValue",
        format!(
            "{at} {}: {why}; its share of the traffic is answered 500",
            backend.name
        ),
    );
    backend.endpoints.clear();
    backend.tls = None;
    backend.filters.clear();
    backend.failure_status = Some(500);
}

/// Header or query parameter matches with only the first entry of each name: "If multiple
/// entries specify equivalent ... names, only the first entry with an equivalent name MUST be
/// considered for a match. Subsequent entries with an equivalent ... name MUST be ignored."
/// Header names are equivalent ignoring ASCII case, query parameter names when equal. The
/// proxy's compiler applies the same rule to any document; dropping them here keeps the
/// pushed document as the proxy reads it.
pub(super) fn first_of_each_name(
    matches: impl Iterator<Item = config::ValueMatch>,
    case_insensitive: bool,
) -> Vec<config::ValueMatch> {
    let mut out: Vec<config::ValueMatch> = Vec::new();
    for m in matches {
        let same = |o: &config::ValueMatch| {
            if case_insensitive {
                o.name.eq_ignore_ascii_case(&m.name)
            } else {
                o.name == m.name
            }
        };
        if !out.iter().any(same) {
            out.push(m);
        }
    }
    out
}

/// An ExtensionRef filter (`group`, `kind`, `name`): no extension is supported, so the rule
/// fails closed; the reference is reported as `InvalidKind`. Returns why, for the rule.
pub(super) fn refuse_extension_ref(
    at: &str,
    target: Option<(&str, &str, &str)>,
    report: &mut Report,
) -> String {
    let why = match target {
        Some((group, kind, name)) => format!(
            "ExtensionRef {}/{kind} {name} is not supported by this controller",
            if group.is_empty() { "core" } else { group }
        ),
        None => "ExtensionRef is not supported by this controller".to_owned(),
    };
    report.ref_problem(
        "InvalidKind",
        format!("{at}: {why}; the rule answers 500, remove the filter"),
    );
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_fraction_becomes_the_nearest_whole_percent() {
        let rows = [
            (Some(30), None, Some(30)),
            (None, Some((1, Some(2))), Some(50)),
            (None, Some((1, None)), Some(1)),
            (None, Some((1, Some(3))), Some(33)),
            (None, Some((2, Some(3))), Some(67)),
            (None, Some((1, Some(1000))), Some(0)),
            (None, None, None),
        ];
        for (percent, fraction, want) in rows {
            assert_eq!(
                mirror_percent(percent, fraction),
                want,
                "{percent:?} {fraction:?}"
            );
        }
    }
}
