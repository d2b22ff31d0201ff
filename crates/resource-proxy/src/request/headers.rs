//! What passes between the caller and the target: which request headers go on, the `Accept`
//! the target sees, and the hop-by-hop fields neither direction keeps.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub(super) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        || headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Request headers that go to the target. Identity headers, the caller's credentials and
/// hop-by-hop headers never do; the proxy authenticates as its own identity.
pub(super) fn forwardable(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n.starts_with("x-remote-")
        || n.starts_with("impersonate-")
        || http1_wire::is_hop_by_hop(n.as_bytes())
        || matches!(
            n,
            "authorization"
                | "host"
                | "content-length"
                | "proxy-authorization"
                // Answers must come uncompressed so the proxy can restore owner references.
                | "accept-encoding"
        ))
}

pub(super) trait RetainEndToEnd {
    fn retain_mut_hop_by_hop(&mut self);
}

impl RetainEndToEnd for HeaderMap {
    /// The hop-by-hop fields of [`http1_wire::hop`], and the ones `Connection` names.
    fn retain_mut_hop_by_hop(&mut self) {
        http1_wire::strip_hop_by_hop(self, http1_wire::Keep::default());
    }
}

pub(super) fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn is_json(headers: &HeaderMap) -> bool {
    header_str(headers, &header::CONTENT_TYPE).is_some_and(|c| c.starts_with("application/json"))
}

/// The caller's `Accept` without binary encodings (protobuf, CBOR): the target then answers in
/// JSON, the one encoding in which the proxy can restore owner references. Every Kubernetes
/// client that asks for protobuf also accepts JSON.
pub(super) fn json_only_accept(accept: &HeaderValue) -> HeaderValue {
    let Ok(text) = accept.to_str() else {
        return HeaderValue::from_static("application/json");
    };
    let kept: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.contains("protobuf") && !t.contains("cbor"))
        .collect();
    if kept.is_empty() {
        return HeaderValue::from_static("application/json");
    }
    HeaderValue::from_str(&kept.join(",")).unwrap_or(HeaderValue::from_static("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_encodings_are_dropped_from_accept_so_answers_are_json() {
        let gc = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            json_only_accept(&HeaderValue::from_static(gc)),
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
        );
        assert_eq!(
            json_only_accept(&HeaderValue::from_static("application/cbor")),
            "application/json"
        );
        assert_eq!(
            json_only_accept(&HeaderValue::from_static("application/json")),
            "application/json"
        );
    }

    #[test]
    fn identity_credentials_and_hop_by_hop_headers_never_reach_the_target() {
        for h in [
            "x-remote-user",
            "x-remote-group",
            "x-remote-extra-scopes",
            "impersonate-user",
            "authorization",
            "connection",
            "upgrade",
            "accept-encoding",
        ] {
            assert!(!forwardable(&HeaderName::from_static(h)), "{h}");
        }
        for h in ["content-type", "user-agent", "accept"] {
            assert!(forwardable(&HeaderName::from_static(h)), "{h}");
        }
    }
}
