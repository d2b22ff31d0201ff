//! What a request loses and gains on its way to a backend: hop-by-hop fields removed (the
//! [`http1_wire::hop`] policy, keeping `TE: trailers`), the rule's header changes applied,
//! `Host` and `X-Forwarded-*` set, the path rewritten. Shared by both paths.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http1_wire::Keep;

use crate::table::Rule;

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Request headers as a backend gets them: hop-by-hop fields removed, the rule's header
/// changes applied, then the [`Forwarding`] fields set.
pub(crate) fn prepare_request_headers(
    h: &mut HeaderMap,
    rule: &Rule,
    authority: &HeaderValue,
    peer_ip: &HeaderValue,
    upgrade: bool,
) {
    filter_request_headers(h, rule, upgrade);
    let f = forwarding(h, rule, authority, peer_ip);
    h.insert(header::HOST, f.host);
    if let Some(v) = f.forwarded_for {
        h.insert(X_FORWARDED_FOR.clone(), v);
    }
    h.insert(X_FORWARDED_PROTO.clone(), f.forwarded_proto);
}

/// Hop-by-hop fields removed and the rule's request header changes applied.
pub(crate) fn filter_request_headers(h: &mut HeaderMap, rule: &Rule, upgrade: bool) {
    strip_hop_by_hop(h, upgrade);
    if let Some(m) = &rule.request_headers {
        m.apply(h);
    }
}

/// The fields the proxy sets on every forwarded request, replacing the client's.
pub(crate) struct Forwarding {
    /// The routed authority, or the URL rewrite's hostname.
    pub host: HeaderValue,
    /// The client's value with the peer appended; `None` keeps the client's (it could not
    /// be extended).
    pub forwarded_for: Option<HeaderValue>,
    pub forwarded_proto: HeaderValue,
}

pub(crate) fn forwarding(
    h: &HeaderMap,
    rule: &Rule,
    authority: &HeaderValue,
    peer_ip: &HeaderValue,
) -> Forwarding {
    let host = rule
        .rewrite
        .as_ref()
        .and_then(|r| r.hostname.clone())
        .unwrap_or_else(|| authority.clone());
    let forwarded_for = match h.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => {
            let peer_ip = peer_ip.to_str().unwrap_or_default();
            HeaderValue::try_from(format!("{prev}, {peer_ip}")).ok()
        }
        None => Some(peer_ip.clone()),
    };
    Forwarding {
        host,
        forwarded_for,
        forwarded_proto: HeaderValue::from_static(forwarded_proto(h)),
    }
}

/// The upstream path and query: the client's (shared, not copied) unless a URL rewrite
/// changes the path. `None` when the rewritten target is not a valid one.
pub(crate) fn upstream_target(
    rule: &Rule,
    uri: &http::Uri,
    matched_prefix: Option<&str>,
) -> Option<PathAndQuery> {
    let Some(rewrite) = rule.rewrite.as_ref().and_then(|r| r.path.as_ref()) else {
        return Some(
            uri.path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
    };
    let path = rewrite.apply(uri.path(), matched_prefix);
    let target = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    PathAndQuery::try_from(target).ok()
}

/// The scheme the client used, as told by the front proxy (`http` when unknown). It only
/// shapes redirects and `X-Forwarded-Proto`, never routing.
pub(crate) fn forwarded_proto(headers: &HeaderMap) -> &'static str {
    match headers.get(&X_FORWARDED_PROTO).map(HeaderValue::as_bytes) {
        Some(b"https") => "https",
        _ => "http",
    }
}

/// Removes hop-by-hop headers ([`http1_wire::hop`]), except what an upgrade needs and
/// `te: trailers` (gRPC needs it).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    http1_wire::strip_hop_by_hop(
        headers,
        Keep {
            upgrade: keep_upgrade,
            te_trailers: true,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_removed_including_connection_listed_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers, deflate"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false);
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["te", "x-keep"]);
        assert_eq!(h[header::TE], "trailers");
    }

    #[test]
    fn upgrade_keeps_upgrade_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[header::UPGRADE], "websocket");
        assert_eq!(h[header::CONNECTION], "upgrade");
    }
}
