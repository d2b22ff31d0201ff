//! Hop-by-hop fields (RFC 9110 §7.6.1): the fields of one connection, which a proxy does not
//! pass on. The list and why it has each entry is in the [crate docs](crate#hop-by-hop-fields).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The fields that are always hop-by-hop, lower-case. Every field `Connection` names is too.
pub const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "trailer",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Whether `name` (any case) is one of [`HOP_BY_HOP`].
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    // By length first: most names are compared with nothing.
    let candidates: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        7 => &[b"upgrade", b"trailer"],
        10 => &[b"connection", b"keep-alive"],
        16 => &[b"proxy-connection"],
        17 => &[b"transfer-encoding"],
        18 => &[b"proxy-authenticate"],
        19 => &[b"proxy-authorization"],
        _ => return false,
    };
    candidates.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// The tokens of `Connection` field values (option names, compared case-insensitively).
pub fn connection_tokens<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
) -> impl Iterator<Item = &'a [u8]> {
    values
        .into_iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// The field names the `Connection` fields of `headers` list (also `close` and other options
/// that name no field: removing them removes nothing).
pub fn connection_names(headers: &HeaderMap) -> Vec<HeaderName> {
    connection_tokens(
        headers
            .get_all(header::CONNECTION)
            .iter()
            .map(HeaderValue::as_bytes),
    )
    .filter_map(|t| HeaderName::from_bytes(t).ok())
    .collect()
}

/// What [`strip_hop_by_hop`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keep {
    /// `Upgrade`, with `Connection: upgrade` (a request or 101 of an upgrade being passed on).
    pub upgrade: bool,
    /// `TE: trailers` when `TE` lists `trailers` (gRPC needs it end to end).
    pub te_trailers: bool,
}

/// Removes the hop-by-hop fields and every field `Connection` names, except what `keep` says.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep: Keep) {
    // Most messages carry none: one pass over the names, no hashing.
    if !keep.upgrade && !headers.keys().any(|n| is_hop_by_hop(n.as_str().as_bytes())) {
        return;
    }
    for name in connection_names(headers) {
        if !(keep.upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    let te_trailers = keep.te_trailers
        && connection_tokens(
            headers
                .get_all(header::TE)
                .iter()
                .map(HeaderValue::as_bytes),
        )
        .any(|t| t.eq_ignore_ascii_case(b"trailers"));
    for name in [
        header::TE,
        header::TRANSFER_ENCODING,
        header::TRAILER,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    if keep.upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

#[cfg(test)]
mod tests;
