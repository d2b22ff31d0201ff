//! The pieces HTTPRoute and GRPCRoute rules share: header matches, header modifiers, request
//! mirrors, backend weights and failing a backend closed. The generated Gateway API types of the
//! two route kinds (and of rule and backendRef filters) are distinct types with the same field
//! names, hence macros for the conversions that only read fields.

use tunnel_proxy::config::{self, Filter};

use super::backends::{BackendIndex, Ref, Referrer, Role};
use super::report::Report;

/// A header match (`name`, `value`, optional `type` of enum `$ty`) as a document value match.
macro_rules! value_match {
    ($h:expr, $ty:ident) => {
        tunnel_proxy::config::ValueMatch {
            kind: match $h.r#type {
                None | Some($ty::Exact) => tunnel_proxy::config::ValueMatchType::Exact,
                Some($ty::RegularExpression) => {
                    tunnel_proxy::config::ValueMatchType::RegularExpression
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
        tunnel_proxy::config::HeaderModifier {
            set: $m
                .set
                .iter()
                .flatten()
                .map(|h| tunnel_proxy::config::Header {
                    name: h.name.clone(),
                    value: h.value.clone(),
                })
                .collect(),
            add: $m
                .add
                .iter()
                .flatten()
                .map(|h| tunnel_proxy::config::Header {
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

/// Filters on a backendRef are not supported: the backend's share answers 500.
pub(super) fn refuse_backend_filters(backend: &mut config::Backend, at: &str, report: &mut Report) {
    report.ref_problem(
        "UnsupportedValue",
        format!(
            "{at} {}: filters on a backendRef are not supported, put them on the rule; its share of the traffic is answered 500",
            backend.name
        ),
    );
    backend.endpoints.clear();
    backend.tls = None;
    backend.failure_status = Some(500);
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
