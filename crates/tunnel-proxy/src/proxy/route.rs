//! The live table's decision for a request head: answer locally (no route, a CORS preflight, a
//! redirect, a configured status) or forward to a chosen backend. Shared by both paths; a
//! decision to forward the fast path leaves to hyper goes with the connection as [`Handed`].

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use http::Version;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use tracing::debug;

use super::answer::{Local, bad_request, local, not_found};
use super::headers::forwarded_proto;
use crate::metrics::HostMetrics;
use crate::table::{Action, Backend, RouteTable, Rule, Target};
use crate::upstream::Upstream;
use tunnel_config::cors::{self, ActualHeaders};
use tunnel_config::filters::RedirectInput;
use tunnel_config::routing::{self, Position, RequestView};

/// What the live table says to do with a request.
pub(crate) enum Decision<'t> {
    /// Answer without a backend; the rule's response header changes are applied.
    Respond(Local),
    /// Forward to a backend; the caller applies the rule's response header changes to the
    /// backend's answer.
    Forward(Routed<'t>),
}

/// A request routed to a backend.
pub(crate) struct Routed<'t> {
    pub rule: &'t Rule,
    pub backend: &'t Backend,
    pub upstream: &'t Upstream,
    /// The authority the request was routed by.
    pub authority: HeaderValue,
    pub matched_prefix: Option<&'t str>,
    /// What the rule's CORS filter adds to the response.
    pub cors: Option<ActualHeaders>,
    /// The table, where the lookup found the rule, and the backend chosen among the rule's:
    /// how [`Handed`] finds the decision again.
    table: &'t Arc<RouteTable>,
    position: Position,
    choice: usize,
}

impl Routed<'_> {
    /// The decision, owning its table; `host` is the route's metrics.
    pub fn hand(self, host: Arc<HostMetrics>) -> Handed {
        Handed {
            table: Arc::clone(self.table),
            position: self.position,
            choice: self.choice,
            authority: self.authority,
            cors: self.cors,
            host,
        }
    }

    /// The rule's response changes: its ResponseHeaderModifier, then its CORS headers.
    pub fn change_response(&self, headers: &mut HeaderMap) {
        if let Some(modifier) = &self.rule.response_headers {
            modifier.apply(headers);
        }
        if let Some(cors) = &self.cors {
            cors.apply(headers);
        }
    }

    /// Whether [`Routed::change_response`] changes anything.
    pub fn changes_response(&self) -> bool {
        self.rule.response_headers.is_some() || self.cors.is_some()
    }
}

/// A decision to forward, with the table it was made with: what the fast path hands to hyper
/// with the connection, so that the request is not routed again (nor its backend chosen again).
pub(crate) struct Handed {
    table: Arc<RouteTable>,
    position: Position,
    choice: usize,
    authority: HeaderValue,
    cors: Option<ActualHeaders>,
    /// The route's metrics.
    pub host: Arc<HostMetrics>,
}

impl Handed {
    /// The decision as [`decide`] made it.
    pub fn routed(&self) -> Routed<'_> {
        let (rule, matched_prefix) = self.table.table.at(self.position);
        let Action::Forward { backends, .. } = &rule.action else {
            unreachable!("a rule a request was forwarded by forwards");
        };
        let backend = &backends[self.choice];
        let Target::Upstream(upstream) = &backend.target else {
            unreachable!("a backend a request was forwarded to has an upstream");
        };
        Routed {
            rule: backend.rule(rule),
            backend,
            upstream,
            authority: self.authority.clone(),
            matched_prefix,
            cors: self.cors.clone(),
            table: &self.table,
            position: self.position,
            choice: self.choice,
        }
    }
}

/// Routes a request head with `table` (`None`: no config loaded). `host` becomes the matched
/// route's metrics.
pub(crate) fn decide<'t>(
    peer: SocketAddr,
    parts: &Parts,
    table: Option<&'t Arc<RouteTable>>,
    host_metrics: &mut Arc<HostMetrics>,
) -> Decision<'t> {
    let grpc = is_grpc(&parts.headers);
    let authority = match routed_authority(parts) {
        Ok(a) => a,
        Err(why) => {
            debug!(%peer, why, "refused request");
            return Decision::Respond(bad_request(why));
        }
    };
    let Some(host) = authority.to_str().ok().and_then(routing::normalize_host) else {
        return Decision::Respond(local(StatusCode::BAD_REQUEST, "invalid host"));
    };
    let Some(table) = table else {
        return Decision::Respond(not_found(grpc));
    };
    let view = RequestView {
        host: &host,
        path: parts.uri.path(),
        query: parts.uri.query(),
        method: &parts.method,
        headers: &parts.headers,
        grpc,
    };
    let Some(m) = table.table.lookup(&view) else {
        return Decision::Respond(not_found(grpc));
    };
    if let Some(h) = table.host(m.hostname) {
        *host_metrics = h.clone();
    }
    let rule: &Rule = m.rule;
    // A preflight is the CORS filter's to answer; it never reaches a backend.
    if let Some(c) = &rule.cors
        && cors::is_preflight(&parts.method, &parts.headers)
    {
        let (status, headers) = c.preflight(&parts.headers);
        let mut answer = local(status, "");
        if let Some(modifier) = &rule.response_headers {
            modifier.apply(&mut answer.headers);
        }
        answer.headers.extend(headers);
        return Decision::Respond(answer);
    }
    let cors = rule.cors.as_ref().map(|c| c.actual(&parts.headers));
    let mut answer = match &rule.action {
        Action::Respond(status) => local(*status, ""),
        Action::Redirect(redirect) => {
            let port = authority
                .to_str()
                .ok()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok());
            let location = redirect.location(&RedirectInput {
                scheme: forwarded_proto(&parts.headers),
                host: &host,
                port,
                path: parts.uri.path(),
                query: parts.uri.query(),
                matched_prefix: m.matched_prefix,
            });
            let mut answer = local(redirect.status, "");
            match HeaderValue::from_str(&location) {
                Ok(v) => {
                    answer.headers.insert(header::LOCATION, v);
                }
                Err(_) => answer.status = StatusCode::BAD_REQUEST,
            }
            answer
        }
        Action::Forward { choice, backends } => {
            let pick = choice.pick(rand::random_range(0..choice.total()));
            let backend = &backends[pick];
            match &backend.target {
                Target::Fail(status) => local(*status, ""),
                Target::Upstream(upstream) => {
                    drop(host);
                    return Decision::Forward(Routed {
                        // The backendRef's own filters apply after the rule's, to this request.
                        rule: backend.rule(rule),
                        backend,
                        upstream,
                        authority,
                        matched_prefix: m.matched_prefix,
                        cors,
                        table,
                        position: m.position,
                        choice: pick,
                    });
                }
            }
        }
    };
    if let Some(modifier) = &rule.response_headers {
        modifier.apply(&mut answer.headers);
    }
    if let Some(cors) = &cors {
        cors.apply(&mut answer.headers);
    }
    Decision::Respond(answer)
}

/// The authority a request is routed by: `Host` for HTTP/1, `:authority` (or `Host`) for
/// HTTP/2. Ambiguity is refused rather than resolved, so no header or request-target form
/// can make the proxy route by a name other than the one a front proxy checked.
fn routed_authority(req: &Parts) -> Result<HeaderValue, &'static str> {
    let headers = &req.headers;
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host header");
    }
    let uri_authority = req.uri.authority().map(|a| a.as_str());
    match (req.version, host, uri_authority) {
        (Version::HTTP_2, None, Some(a)) => {
            HeaderValue::from_str(a).map_err(|_| "invalid :authority")
        }
        (_, Some(h), None) => Ok(h.clone()),
        (_, Some(h), Some(a)) if h.as_bytes().eq_ignore_ascii_case(a.as_bytes()) => Ok(h.clone()),
        (_, Some(_), Some(_)) => Err("request target authority differs from Host"),
        (_, None, _) => Err("missing Host"),
    }
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::State;

    #[test]
    fn a_handed_decision_is_the_decision_made() {
        let backend = |name: &str, filters| json!({ "name": name, "endpoints": ["127.0.0.1:9"], "filters": filters });
        let doc = json!({ "version": 1, "routes": [{ "kind": "HTTPRoute", "name": "ns/r",
            "hostnames": ["a.example"], "rules": [
                { "matches": [{ "path": { "type": "Exact", "value": "/" } }],
                  "backends": [backend("other", json!([]))] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                  "filters": [{ "type": "CORS", "allowOrigins": ["https://b.example"] }],
                  "backends": [backend("plain", json!([])), backend("filtered", json!([
                      { "type": "RequestHeaderModifier", "set": [{ "name": "x", "value": "y" }] }]))] },
            ] }] });
        let state = State::new();
        state.apply(doc.to_string().as_bytes()).unwrap();
        let table = state.table();
        let (parts, ()) = http::Request::get("/api/x")
            .header("host", "a.example")
            .header("origin", "https://b.example")
            .body(())
            .unwrap()
            .into_parts();
        let peer = "127.0.0.1:1".parse().unwrap();
        let mut chosen = Vec::new();
        for _ in 0..64 {
            let mut host = state.metrics().unmatched().clone();
            let Decision::Forward(made) = decide(peer, &parts, table.as_ref(), &mut host) else {
                panic!("expected a decision to forward");
            };
            let (rule, backend, upstream) = (made.rule, made.backend, made.upstream);
            let (prefix, cors) = (made.matched_prefix, made.cors.clone());
            let handed = made.hand(host.clone());
            let again = handed.routed();
            assert!(std::ptr::eq(again.rule, rule));
            assert!(std::ptr::eq(again.backend, backend));
            assert!(std::ptr::eq(again.upstream, upstream));
            assert_eq!(again.authority, "a.example");
            assert_eq!((again.matched_prefix, again.cors), (prefix, cors));
            assert!(Arc::ptr_eq(&handed.host, &host));
            chosen.push(backend.name.to_string());
        }
        chosen.sort();
        chosen.dedup();
        assert_eq!(chosen.len(), 2, "both backends chosen: {chosen:?}");
    }
}
