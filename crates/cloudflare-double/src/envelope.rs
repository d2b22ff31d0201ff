//! The Cloudflare v4 reply envelope every endpoint answers with (`{"success", "errors",
//! "messages", "result"}`), and the paging the list endpoints share: query parameters in, one
//! page with `result_info` out.

use serde_json::{Value, json};

/// An answer: status, extra headers, JSON or plain-text body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers (e.g. `Retry-After`).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Body,
}

/// A reply body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    /// `application/json`.
    Json(Value),
    /// `text/plain` (the edge's `error code: NNN` pages).
    Text(String),
}

/// One entry of `errors`: `{"code", "message"}`.
pub(crate) fn error(code: i64, message: &str) -> Value {
    json!({"code": code, "message": message})
}

/// `{"success": false, "errors": [...], "messages": [], "result": null}` (envelope schema on every
/// page of <https://developers.cloudflare.com/api/>).
pub(crate) fn failure(status: u16, errors: Vec<Value>) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: Body::Json(
            json!({"success": false, "errors": errors, "messages": [], "result": null}),
        ),
    }
}

pub(crate) fn success(result: Value) -> Reply {
    Reply {
        status: 200,
        headers: vec![],
        body: Body::Json(json!({"success": true, "errors": [], "messages": [], "result": result})),
    }
}

/// HTTP 400, codes 7003 + 7000: an unknown route or a malformed identifier. Observed:
/// cloudflare/cloudflare-go#118 (HTTP 400, "Could not route to ..., perhaps your object identifier
/// is invalid?" + "No route for that URI").
pub(crate) fn no_route(full_path: &str) -> Reply {
    failure(
        400,
        vec![
            error(
                7003,
                &format!(
                    "Could not route to {full_path}, perhaps your object identifier is invalid?"
                ),
            ),
            error(7000, "No route for that URI"),
        ],
    )
}

/// One page of `all` by the `page` and `per_page` parameters (`per_page` defaults to and is
/// clamped by `(default, min, max)`), with `result_info{page, per_page, count, total_count,
/// total_pages}`.
pub(crate) fn paged(all: Vec<Value>, pairs: &[(String, String)], bounds: (u64, u64, u64)) -> Reply {
    let (default, min, max) = bounds;
    let mut page = 1u64;
    let mut per_page = default;
    for (k, v) in pairs {
        match k.as_str() {
            "page" => page = v.parse().unwrap_or(1).max(1),
            "per_page" => per_page = v.parse().unwrap_or(default).clamp(min, max),
            _ => {}
        }
    }
    let start = usize::try_from((page - 1).saturating_mul(per_page)).unwrap_or(usize::MAX);
    let items: Vec<Value> = all
        .iter()
        .skip(start)
        .take(usize::try_from(per_page).unwrap_or(usize::MAX))
        .cloned()
        .collect();
    let total = all.len() as u64;
    let mut reply = success(Value::Array(items.clone()));
    if let Body::Json(v) = &mut reply.body {
        v["result_info"] = json!({
            "page": page, "per_page": per_page, "count": items.len(), "total_count": total,
            "total_pages": total.div_ceil(per_page.max(1)),
        });
    }
    reply
}

/// The query's `key=value` pairs, percent-decoded.
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_decoded() {
        assert_eq!(decode("%2A.example.com"), "*.example.com");
        assert_eq!(decode("a+b"), "a b");
        assert_eq!(decode("100%"), "100%");
    }
}
