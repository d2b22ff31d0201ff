//! HTTPRoute rules → document rules: matches, filters (RequestHeaderModifier,
//! ResponseHeaderModifier, RequestRedirect, URLRewrite, RequestMirror), weighted backends,
//! timeouts and the rule name. A rule with a filter this implementation does not support
//! (ExtensionRef, CORS) fails closed: it keeps its matches, so precedence stays right, and
//! answers 500.

use gateway_api::apis::standard::httproutes::{
    HttpRoute, HttpRouteRules, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestRedirectPathType as RedirectPathType,
    HttpRouteRulesFiltersRequestRedirectScheme as Scheme, HttpRouteRulesFiltersType,
    HttpRouteRulesFiltersUrlRewritePathType as RewritePathType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesMethod as Method,
    HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParamsType,
};
use kube::ResourceExt;
use tunnel_proxy::config::{self, Filter, HttpRule, PathModifier};

use super::backends::{BackendIndex, ClientCert, Referrer, Role, backend_ref};
use super::parts::{
    header_modifier, refuse_backend_filters, refuse_extension_ref, request_mirror, value_match,
    weight,
};
use super::report::{Report, Translated};

/// One HTTPRoute's rules for the document, and the verdicts about its contents.
pub fn http_route(
    route: &HttpRoute,
    idx: &BackendIndex,
    client_cert: Option<&ClientCert>,
) -> Translated<HttpRule> {
    let namespace = route.namespace().unwrap_or_default();
    let name = format!("{namespace}/{}", route.name_any());
    let from = Referrer {
        kind: "HTTPRoute",
        namespace: &namespace,
        client_cert,
    };
    let mut report = Report::default();
    let mut rules = Vec::new();
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        let translated = http_rule(i, rule, idx, &from, &mut report);
        report.keep(&name, i, translated, &mut rules);
    }
    report.finish(rules)
}

fn http_rule(
    i: usize,
    rule: &HttpRouteRules,
    idx: &BackendIndex,
    from: &Referrer<'_>,
    report: &mut Report,
) -> HttpRule {
    let mut out = HttpRule {
        name: rule.name.clone(),
        matches: rule.matches.iter().flatten().map(http_match).collect(),
        filters: Vec::new(),
        backends: Vec::new(),
        timeouts: rule
            .timeouts
            .as_ref()
            .map(|t| config::Timeouts {
                request: t.request.clone(),
                backend_request: t.backend_request.clone(),
            })
            .unwrap_or_default(),
        failure_status: None,
    };
    let mut unsupported = Vec::new();
    for (fi, f) in rule.filters.iter().flatten().enumerate() {
        match filter(&format!("Rule {i} filters[{fi}]"), f, idx, from, report) {
            Ok(Some(f)) => out.filters.push(f),
            Ok(None) => {}
            Err(why) => unsupported.push(format!("filters[{fi}]: {why}")),
        }
    }
    for (bi, b) in rule.backend_refs.iter().flatten().enumerate() {
        let at = format!("Rule {i} backendRefs[{bi}]");
        let mut resolved = idx.resolve(
            from,
            &at,
            &backend_ref!(b),
            weight(b.weight),
            Role::Backend,
            report,
        );
        if !resolved.invalid && b.filters.as_ref().is_some_and(|f| !f.is_empty()) {
            refuse_backend_filters(&mut resolved.backend, &at, report);
        }
        out.backends.push(resolved.backend);
    }
    if !unsupported.is_empty() {
        report.rule_fails_closed(i, unsupported.join("; "));
        out.filters.clear();
        out.backends.clear();
        out.timeouts = config::Timeouts::default();
        out.failure_status = Some(500);
    }
    out
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
        headers: m
            .headers
            .iter()
            .flatten()
            .map(|h| value_match!(h, HeaderType))
            .collect(),
        query_params: m
            .query_params
            .iter()
            .flatten()
            .map(|q| value_match!(q, QueryType))
            .collect(),
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
        T::Cors => return Err("CORS is not supported by this controller".to_owned()),
    }))
}
