//! HTTPRoute rules → document rules: matches, filters (RequestHeaderModifier,
//! ResponseHeaderModifier, RequestRedirect, URLRewrite, RequestMirror, CORS), weighted backends,
//! timeouts and the rule name. A rule with a filter this implementation does not support
//! (ExtensionRef) fails closed: it keeps its matches, so precedence stays right, and answers
//! 500.

use gateway_api::apis::standard::httproutes::{
    HttpRoute, HttpRouteRules, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestRedirectPathType as RedirectPathType,
    HttpRouteRulesFiltersRequestRedirectScheme as Scheme, HttpRouteRulesFiltersType,
    HttpRouteRulesFiltersUrlRewritePathType as RewritePathType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesMethod as Method,
    HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParamsType,
};
use kube::ResourceExt;
use tunnel_config::config::{self, Filter, HttpRule, PathModifier};

use super::backends::{BackendIndex, Referrer};
use super::parts::{
    first_of_each_name, header_modifier, referrer, refuse_extension_ref, request_mirror,
    route_rules, rule_parts_of, value_match,
};
use super::report::{Report, Translated};
use super::tls_policy::ClientCert;

/// One HTTPRoute's rules for the document, and the verdicts about its contents.
pub fn http_route(
    route: &HttpRoute,
    idx: &BackendIndex,
    client_cert: Option<&ClientCert>,
) -> Translated<HttpRule> {
    let namespace = route.namespace().unwrap_or_default();
    let from = referrer("HTTPRoute", &namespace, client_cert);
    route_rules(
        &from,
        &route.name_any(),
        route.spec.rules.iter().flatten(),
        |i, rule, from, report| http_rule(i, rule, idx, from, report),
    )
}

fn http_rule(
    i: usize,
    rule: &HttpRouteRules,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> HttpRule {
    let filter = |at: &str, f: &_, report: &mut Report| filter(at, f, idx, from, report);
    let parts = rule_parts_of!(i, rule, filter, idx, from, report);
    let failed = parts.is_none();
    let parts = parts.unwrap_or_default();
    HttpRule {
        name: rule.name.clone(),
        matches: rule.matches.iter().flatten().map(http_match).collect(),
        filters: parts.filters,
        backends: parts.backends,
        timeouts: match &rule.timeouts {
            Some(t) if !failed => config::Timeouts {
                request: t.request.clone(),
                backend_request: t.backend_request.clone(),
            },
            _ => config::Timeouts::default(),
        },
        failure_status: failed.then_some(500),
    }
}

fn http_match(m: &HttpRouteRulesMatches) -> config::HttpMatch {
    use HttpRouteRulesMatchesHeadersType as HeaderType;
    use HttpRouteRulesMatchesQueryParamsType as QueryType;
    config::HttpMatch {
        path: m.path.as_ref().map(|p| config::PathMatch {
            kind: match p.r#type {
                None | Some(HttpRouteRulesMatchesPathType::PathPrefix) => {
                    config::PathMatchType::PathPrefix
                }
                Some(HttpRouteRulesMatchesPathType::Exact) => config::PathMatchType::Exact,
                Some(HttpRouteRulesMatchesPathType::RegularExpression) => {
                    config::PathMatchType::RegularExpression
                }
            },
            value: p.value.clone().unwrap_or_else(|| "/".to_owned()),
        }),
        headers: first_of_each_name(
            m.headers
                .iter()
                .flatten()
                .map(|h| value_match!(h, HeaderType)),
            true,
        ),
        query_params: first_of_each_name(
            m.query_params
                .iter()
                .flatten()
                .map(|q| value_match!(q, QueryType)),
            false,
        ),
        method: m.method.as_ref().map(|m| {
            match m {
                Method::Get => "GET",
                Method::Head => "HEAD",
                Method::Post => "POST",
                Method::Put => "PUT",
                Method::Delete => "DELETE",
                Method::Connect => "CONNECT",
                Method::Options => "OPTIONS",
                Method::Trace => "TRACE",
                Method::Patch => "PATCH",
            }
            .to_owned()
        }),
    }
}

/// A rule filter: `Ok(None)` for a mirror left out (its reference is invalid, reported),
/// `Err` for a filter this implementation does not support.
fn filter(
    at: &str,
    f: &HttpRouteRulesFilters,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> Result<Option<Filter>, String> {
    use HttpRouteRulesFiltersType as T;
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
        T::RequestRedirect => {
            let r = f.request_redirect.as_ref().ok_or_else(missing)?;
            Filter::RequestRedirect(config::RequestRedirect {
                scheme: r.scheme.as_ref().map(|s| {
                    match s {
                        Scheme::Http => "http",
                        Scheme::Https => "https",
                    }
                    .to_owned()
                }),
                hostname: r.hostname.clone(),
                // Out of range becomes 0, which the proxy's check refuses with its own message.
                port: r.port.map(|p| u16::try_from(p).unwrap_or(0)),
                // Set by the caller, which knows the listeners the route attached to.
                listener_port: None,
                path: r.path.as_ref().map(|p| match p.r#type {
                    RedirectPathType::ReplaceFullPath => PathModifier::ReplaceFullPath(
                        p.replace_full_path.clone().unwrap_or_default(),
                    ),
                    RedirectPathType::ReplacePrefixMatch => PathModifier::ReplacePrefixMatch(
                        p.replace_prefix_match.clone().unwrap_or_default(),
                    ),
                }),
                status_code: r.status_code.map(|c| u16::try_from(c).unwrap_or(0)),
            })
        }
        T::UrlRewrite => {
            let r = f.url_rewrite.as_ref().ok_or_else(missing)?;
            Filter::UrlRewrite(config::UrlRewrite {
                hostname: r.hostname.clone(),
                path: r.path.as_ref().map(|p| match p.r#type {
                    RewritePathType::ReplaceFullPath => PathModifier::ReplaceFullPath(
                        p.replace_full_path.clone().unwrap_or_default(),
                    ),
                    RewritePathType::ReplacePrefixMatch => PathModifier::ReplacePrefixMatch(
                        p.replace_prefix_match.clone().unwrap_or_default(),
                    ),
                }),
            })
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
        T::Cors => {
            let c = f.cors.as_ref().ok_or_else(missing)?;
            Filter::Cors(config::Cors {
                allow_origins: c.allow_origins.clone().unwrap_or_default(),
                allow_methods: c.allow_methods.clone().unwrap_or_default(),
                allow_headers: c.allow_headers.clone().unwrap_or_default(),
                expose_headers: c.expose_headers.clone().unwrap_or_default(),
                allow_credentials: c.allow_credentials.unwrap_or(false),
                max_age: c.max_age.map(i64::from),
            })
        }
    }))
}
