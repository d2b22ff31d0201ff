//! GRPCRoute rules → document rules: method matches (Exact / RegularExpression on service and
//! method), header matches, header modifiers, request mirrors, weighted backends (HTTP/2:
//! h2c, or TLS with ALPN h2 under a BackendTLSPolicy) and the rule name. An ExtensionRef filter
//! makes the rule fail closed (500).

use gateway_api::apis::standard::grpcroutes::{
    GrpcRoute, GrpcRouteRules, GrpcRouteRulesFilters, GrpcRouteRulesFiltersType,
    GrpcRouteRulesMatches, GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethodType,
};
use kube::ResourceExt;
use tunnel_config::config::{self, Filter, GrpcRule};

use super::backends::{BackendIndex, Referrer};
use super::parts::{
    first_of_each_name, header_modifier, referrer, refuse_extension_ref, request_mirror,
    route_rules, rule_parts_of, value_match,
};
use super::report::{Report, Translated};
use super::tls_policy::ClientCert;

/// One GRPCRoute's rules for the document, and the verdicts about its contents.
pub fn grpc_route(
    route: &GrpcRoute,
    idx: &BackendIndex,
    client_cert: Option<&ClientCert>,
) -> Translated<GrpcRule> {
    let namespace = route.namespace().unwrap_or_default();
    let from = referrer("GRPCRoute", &namespace, client_cert);
    route_rules(
        &from,
        &route.name_any(),
        route.spec.rules.iter().flatten(),
        |i, rule, from, report| grpc_rule(i, rule, idx, from, report),
    )
}

fn grpc_rule(
    i: usize,
    rule: &GrpcRouteRules,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> GrpcRule {
    let filter = |at: &str, f: &_, report: &mut Report| filter(at, f, idx, from, report);
    let parts = rule_parts_of!(i, rule, filter, idx, from, report);
    let failed = parts.is_none();
    let parts = parts.unwrap_or_default();
    GrpcRule {
        name: rule.name.clone(),
        matches: rule.matches.iter().flatten().map(grpc_match).collect(),
        filters: parts.filters,
        backends: parts.backends,
        timeouts: config::Timeouts::default(),
        failure_status: failed.then_some(500),
    }
}

fn grpc_match(m: &GrpcRouteRulesMatches) -> config::GrpcMatch {
    use GrpcRouteRulesMatchesHeadersType as HeaderType;
    config::GrpcMatch {
        method: m.method.as_ref().map(|mm| config::GrpcMethodMatch {
            kind: match mm.r#type {
                None | Some(GrpcRouteRulesMatchesMethodType::Exact) => {
                    config::ValueMatchType::Exact
                }
                Some(GrpcRouteRulesMatchesMethodType::RegularExpression) => {
                    config::ValueMatchType::RegularExpression
                }
            },
            service: mm.service.clone(),
            method: mm.method.clone(),
        }),
        headers: first_of_each_name(
            m.headers
                .iter()
                .flatten()
                .map(|h| value_match!(h, HeaderType)),
            true,
        ),
    }
}

/// A rule filter: `Ok(None)` for a mirror left out (its reference is invalid, reported),
/// `Err` for a filter this implementation does not support.
fn filter(
    at: &str,
    f: &GrpcRouteRulesFilters,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> Result<Option<Filter>, String> {
    use GrpcRouteRulesFiltersType as T;
    let missing = || format!("type {:?} without its configuration", f.r#type);
    Ok(Some(match f.r#type {
        T::RequestHeaderModifier => {
            let m = f.request_header_modifier.as_ref().ok_or_else(missing)?;
            Filter::RequestHeaderModifier(header_modifier!(m))
        }
        T::ResponseHeaderModifier => {
            let m = f.response_header_modifier.as_ref().ok_or_else(missing)?;
            Filter::ResponseHeaderModifier(header_modifier!(m))
        }
        T::RequestMirror => {
            let m = f.request_mirror.as_ref().ok_or_else(missing)?;
            return Ok(request_mirror!(
                idx,
                from,
                &format!("{at} RequestMirror"),
                m,
                report
            ));
        }
        T::ExtensionRef => {
            let target = f
                .extension_ref
                .as_ref()
                .map(|e| (e.group.as_str(), e.kind.as_str(), e.name.as_str()));
            return Err(refuse_extension_ref(at, target, report));
        }
    }))
}
