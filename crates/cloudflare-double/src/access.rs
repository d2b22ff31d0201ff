//! Access applications with inline policies: the endpoints `GET|POST /accounts/{id}/access/apps`
//! and `GET|PUT|DELETE /accounts/{id}/access/apps/{id}` (the applications themselves live in
//! [`crate::state`]).
//!
//! Sources (see `docs/cloudflare-double.md` for the table): the application and policy schemas
//! of <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/>
//! (`type`, `name`, `domain`, `destinations[{type, uri}]`, `session_duration` as a Go duration,
//! `policies[]` with `decision` and `include`/`exclude`/`require` rules); the conflict message
//! "access.api.error.conflict: destination belongs to another application" as quoted in public
//! client code (a destination belongs to one application); status and codes "UNCONFIRMED"
//! where no public source settled them. The token's Access permission is not modelled: a token
//! reaching the account may use its applications.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::envelope::{Reply, error, failure, paged, query_pairs, success};
use crate::state::{AccessAppRec, ControlError, World, now_rfc3339, random_uuid};

/// Default and bounds of `per_page` when listing applications (UNCONFIRMED: the page lists
/// `page` and `per_page` without bounds).
const APPS_PER_PAGE: (u64, u64, u64) = (25, 5, 1000);

/// Rule kinds a policy's `include`, `exclude` and `require` may hold (the documented selectors
/// the double knows; each rule is an object with exactly one of them).
const RULE_KINDS: &[&str] = &[
    "email",
    "email_domain",
    "email_list",
    "everyone",
    "group",
    "azureAD",
    "okta",
    "gsuite",
    "github-organization",
    "saml",
    "service_token",
    "any_valid_service_token",
    "ip",
    "ip_list",
    "geo",
    "certificate",
    "common_name",
    "login_method",
    "auth_method",
];
const DECISIONS: &[&str] = &["allow", "deny", "non_identity", "bypass"];

/// HTTP 400 with an `access.api.error.invalid_request` message (UNCONFIRMED code 12000).
fn invalid(message: &str) -> Reply {
    failure(
        400,
        vec![error(
            12000,
            &format!("access.api.error.invalid_request: {message}"),
        )],
    )
}

/// HTTP 404 (UNCONFIRMED code and text).
fn app_not_found() -> Reply {
    failure(
        404,
        vec![error(
            12001,
            "access.api.error.not_found: application not found",
        )],
    )
}

fn app_json(a: &AccessAppRec) -> Value {
    json!({
        "id": a.id, "uid": a.id, "type": "self_hosted", "name": a.name, "domain": a.domain,
        "destinations": a.destinations.iter().map(|u| json!({"type": "public", "uri": u})).collect::<Vec<_>>(),
        "self_hosted_domains": a.destinations,
        "session_duration": a.session_duration, "policies": a.policies,
        "aud": format!("{}{}", a.id.replace('-', ""), a.id.replace('-', "")),
        "allowed_idps": [], "app_launcher_visible": true, "auto_redirect_to_identity": false,
        "tags": [], "created_at": a.created_at, "updated_at": a.updated_at,
    })
}

/// A Go duration (`30m`, `24h`, `1h30m`), as `session_duration` is documented.
fn valid_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .filter(|u| rest.starts_with(**u))
            .max_by_key(|u| u.len())
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// A public destination: a hostname (`*` labels allowed) and an optional path, no scheme.
fn valid_uri(uri: &str) -> bool {
    let (host, path) = match uri.find('/') {
        Some(i) => (&uri[..i], &uri[i..]),
        None => (uri, ""),
    };
    let host_ok = host.len() <= 253
        && host.contains('.')
        && host.split('.').all(|l| {
            l == "*"
                || (!l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        });
    host_ok && !path.contains(char::is_whitespace) && !uri.contains("://")
}

#[derive(Deserialize)]
struct AppBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    domain: Option<String>,
    #[serde(default)]
    destinations: Vec<Destination>,
    session_duration: Option<String>,
    #[serde(default)]
    policies: Vec<Value>,
}

#[derive(Deserialize)]
struct Destination {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    uri: String,
}

/// Validates a create or update body into the stored application (`id` and `created_at` kept
/// from `current` on update).
fn admit(
    world: &World,
    account: &str,
    body: &[u8],
    current: Option<&AccessAppRec>,
) -> Result<AccessAppRec, Reply> {
    let body: AppBody = serde_json::from_slice(body)
        .map_err(|e| invalid(&format!("request body is invalid: {e}")))?;
    if body.kind.as_deref() != Some("self_hosted") {
        return Err(invalid(
            "the double supports only applications of type self_hosted",
        ));
    }
    let name = body.name.unwrap_or_default();
    if name.trim().is_empty() {
        return Err(invalid("name is required"));
    }
    let mut destinations = Vec::new();
    for d in &body.destinations {
        if d.kind.as_deref().is_some_and(|k| k != "public") {
            return Err(invalid("the double supports only public destinations"));
        }
        destinations.push(d.uri.trim().to_ascii_lowercase());
    }
    if let Some(domain) = body
        .domain
        .as_deref()
        .map(|d| d.trim().to_ascii_lowercase())
        && !destinations.contains(&domain)
    {
        destinations.insert(0, domain);
    }
    if destinations.is_empty() {
        return Err(invalid("domain is required for self_hosted applications"));
    }
    if let Some(bad) = destinations.iter().find(|u| !valid_uri(u)) {
        return Err(invalid(&format!(
            "destination {bad:?} is not a valid domain"
        )));
    }
    let session_duration = body.session_duration.unwrap_or_else(|| "24h".into());
    if !valid_duration(&session_duration) {
        return Err(invalid(&format!(
            "session_duration {session_duration:?} is not a valid duration (e.g. 30m, 24h)"
        )));
    }
    let now = now_rfc3339();
    let mut policies = Vec::new();
    for (i, p) in body.policies.iter().enumerate() {
        let Some(obj) = p.as_object() else {
            // A reusable policy's ID: the double holds none.
            return Err(invalid("reusable policies are not supported by the double"));
        };
        let decision = obj.get("decision").and_then(Value::as_str).unwrap_or("");
        if !DECISIONS.contains(&decision) {
            return Err(invalid(&format!("policy decision {decision:?} is invalid")));
        }
        for field in ["include", "exclude", "require"] {
            let rules = match obj.get(field) {
                None | Some(Value::Null) => &Vec::new(),
                Some(Value::Array(a)) => a,
                Some(_) => return Err(invalid(&format!("policy {field} must be a list"))),
            };
            if field == "include" && rules.is_empty() {
                return Err(invalid("a policy needs at least one include rule"));
            }
            for r in rules {
                let ok = r.as_object().is_some_and(|o| {
                    o.len() == 1 && o.keys().all(|k| RULE_KINDS.contains(&k.as_str()))
                });
                if !ok {
                    return Err(invalid(&format!("policy rule {r} is not a known rule")));
                }
            }
        }
        let mut stored = Value::Object(obj.clone());
        stored["id"] = json!(random_uuid());
        stored["precedence"] = obj.get("precedence").cloned().unwrap_or(json!(i + 1));
        stored["reusable"] = json!(false);
        stored["created_at"] = json!(now);
        stored["updated_at"] = json!(now);
        for field in ["exclude", "require"] {
            if stored.get(field).is_none_or(Value::is_null) {
                stored[field] = json!([]);
            }
        }
        policies.push(stored);
    }
    let id = current.map_or_else(random_uuid, |c| c.id.clone());
    if world.access_apps.values().any(|a| {
        a.account == account
            && a.id != id
            && a.destinations.iter().any(|u| destinations.contains(u))
    }) {
        // Message as quoted in public client code; status and code UNCONFIRMED.
        return Err(failure(
            409,
            vec![error(
                12130,
                "access.api.error.conflict: destination belongs to another application",
            )],
        ));
    }
    Ok(AccessAppRec {
        id,
        account: account.to_owned(),
        name,
        domain: destinations[0].clone(),
        destinations,
        session_duration,
        policies,
        created_at: current.map_or_else(|| now.clone(), |c| c.created_at.clone()),
        updated_at: now,
    })
}

/// `GET /accounts/{id}/access/apps`, paged, oldest first.
pub(crate) fn list(world: &World, account: &str, query: Option<&str>) -> Reply {
    let pairs = query_pairs(query);
    let mut apps: Vec<&AccessAppRec> = world
        .access_apps
        .values()
        .filter(|a| a.account == account)
        .collect();
    apps.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    paged(
        apps.into_iter().map(app_json).collect(),
        &pairs,
        APPS_PER_PAGE,
    )
}

/// `GET /accounts/{id}/access/apps/{id}`.
pub(crate) fn get(world: &World, account: &str, app: &str) -> Reply {
    match world.access_apps.get(app) {
        Some(a) if a.account == account => success(app_json(a)),
        _ => app_not_found(),
    }
}

/// `POST /accounts/{id}/access/apps`.
pub(crate) fn create(world: &mut World, account: &str, body: &[u8]) -> Reply {
    match admit(world, account, body, None) {
        Ok(app) => {
            let reply = success(app_json(&app));
            world.access_apps.insert(app.id.clone(), app);
            reply
        }
        Err(reply) => reply,
    }
}

/// `PUT /accounts/{id}/access/apps/{id}`: replaces the application and its policies.
pub(crate) fn update(world: &mut World, account: &str, app: &str, body: &[u8]) -> Reply {
    let current = match world.access_apps.get(app) {
        Some(a) if a.account == account => a.clone(),
        _ => return app_not_found(),
    };
    match admit(world, account, body, Some(&current)) {
        Ok(app) => {
            let reply = success(app_json(&app));
            world.access_apps.insert(app.id.clone(), app);
            reply
        }
        Err(reply) => reply,
    }
}

/// `DELETE /accounts/{id}/access/apps/{id}`: result `{id}`.
pub(crate) fn delete(world: &mut World, account: &str, app: &str) -> Reply {
    match world.access_apps.get(app) {
        Some(a) if a.account == account => {
            world.access_apps.remove(app);
            success(json!({"id": app}))
        }
        _ => app_not_found(),
    }
}

impl World {
    /// Adds an application as if made in the dashboard (the API's validation applies).
    pub(crate) fn add_access_app(
        &mut self,
        account: &str,
        name: &str,
        uri: &str,
    ) -> Result<AccessAppRec, ControlError> {
        let account = account.to_ascii_lowercase();
        if !self.accounts.contains_key(&account) {
            return Err(ControlError::NoAccount(account));
        }
        let body = json!({"type": "self_hosted", "name": name, "domain": uri,
            "policies": [{"name": "admins", "decision": "allow", "include": [{"email_domain": {"domain": "example.net"}}]}]});
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let app = admit(self, &account, &body, None)
            .map_err(|reply| ControlError::Record(format!("{:?}", reply.body)))?;
        self.access_apps.insert(app.id.clone(), app.clone());
        Ok(app)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_uris_are_checked_like_the_api() {
        for ok in ["24h", "30m", "1h30m", "300ms", "1.5h"] {
            assert!(valid_duration(ok), "{ok}");
        }
        for bad in ["", "24", "h", "1d", "24h "] {
            assert!(!valid_duration(bad), "{bad}");
        }
        for ok in ["a.example.com", "a.example.com/api", "*.example.com"] {
            assert!(valid_uri(ok), "{ok}");
        }
        for bad in [
            "https://a.example.com",
            "example",
            "a..example.com",
            "a b.example.com",
        ] {
            assert!(!valid_uri(bad), "{bad}");
        }
    }
}
