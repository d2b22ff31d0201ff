//! The API surface: routing, authentication, and the endpoints, as pure functions of the world.
//!
//! Every behaviour names its source; `docs/cloudflare-double.md` has the same table.
//! "Observed" means a real response quoted in a public issue thread or client code, not a
//! documentation page; "UNCONFIRMED" marks choices no public source settled.

use serde_json::{Value, json};

use crate::envelope::{Body, Reply, error, failure, no_route, paged, success};
use crate::state::{Fault, TokenScope, TunnelRec, World, is_account_id, is_uuid, now_rfc3339};
use crate::validate::{CODE_BAD_CONFIGURATION, validate_config};
use crate::{access, dns};

/// Default `per_page` of `GET /accounts` (UNCONFIRMED: the legacy api.cloudflare.com docs said
/// 20, minimum 5, maximum 50; the current page lists the parameters without bounds).
pub const DEFAULT_PER_PAGE: u64 = 20;
/// Largest accepted `per_page` (values above are clamped).
pub const MAX_PER_PAGE: u64 = 50;
/// Smallest accepted `per_page` (values below are raised).
pub const MIN_PER_PAGE: u64 = 5;

/// HTTP 400, 6003 with 6111 in `error_chain`: missing or malformed `Authorization`. Observed:
/// kissgyorgy/cloudflare-dyndns#40. (Missing and malformed share this answer: a simplification.)
fn bad_auth_header() -> Reply {
    failure(
        400,
        vec![json!({"code": 6003, "message": "Invalid request headers",
                    "error_chain": [error(6111, "Invalid format for Authorization header")]})],
    )
}

/// HTTP 401, code 1000 "Invalid API Token": unknown token. Observed on `/user/tokens/verify`
/// for unknown and for account-owned tokens; applied to every endpoint (the real API may answer
/// resource endpoints with 403/9109 instead; both are `auth` to the client).
fn invalid_token() -> Reply {
    failure(401, vec![error(1000, "Invalid API Token")])
}

/// HTTP 403, code 10000 "Authentication error": a valid token used on an account it does not
/// reach. Observed: cloudflare/workers-sdk#2863 (wrong account ID), terraform-provider#1533.
fn forbidden() -> Reply {
    failure(403, vec![error(10000, "Authentication error")])
}

/// Handles one API request. `path` is relative to the base (`/client/v4` stripped);
/// `full_path` is the request path, for messages.
pub(crate) fn handle(
    world: &mut World,
    method: &str,
    path: &str,
    full_path: &str,
    query: Option<&str>,
    authorization: Option<&str>,
    body: &[u8],
) -> Reply {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let route = match (method, segs.as_slice()) {
        ("GET", ["accounts"]) => Route::Accounts,
        ("GET", ["user", "tokens", "verify"]) => Route::VerifyUser,
        ("GET", ["zones"]) => Route::Zones,
        ("GET", ["zones", z, "dns_records"]) if is_account_id(z) => Route::ListRecords(z),
        ("POST", ["zones", z, "dns_records"]) if is_account_id(z) => Route::CreateRecord(z),
        ("PATCH", ["zones", z, "dns_records", r]) if is_account_id(z) && is_account_id(r) => {
            Route::PatchRecord(z, r)
        }
        ("DELETE", ["zones", z, "dns_records", r]) if is_account_id(z) && is_account_id(r) => {
            Route::DeleteRecord(z, r)
        }
        ("GET", ["accounts", a, "tokens", "verify"]) if is_account_id(a) => Route::VerifyAccount(a),
        (m, ["accounts", a, "access", "apps", rest @ ..]) if is_account_id(a) => match (m, rest) {
            ("GET", []) => Route::ListApps(a),
            ("POST", []) => Route::CreateApp(a),
            ("GET", [id]) if is_uuid(id) => Route::GetApp(a, id),
            ("PUT", [id]) if is_uuid(id) => Route::PutApp(a, id),
            ("DELETE", [id]) if is_uuid(id) => Route::DeleteApp(a, id),
            _ => return no_route(full_path),
        },
        (m, ["accounts", a, "cfd_tunnel", t, rest @ ..]) if is_account_id(a) && is_uuid(t) => {
            match (m, rest) {
                ("GET", []) => Route::Tunnel(a, t),
                ("GET", ["token"]) => Route::TunnelToken(a, t),
                ("GET", ["configurations"]) => Route::GetConfig(a, t),
                ("PUT", ["configurations"]) => Route::PutConfig(a, t),
                _ => return no_route(full_path),
            }
        }
        _ => return no_route(full_path),
    };

    let Some(token) = authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
    else {
        return bad_auth_header();
    };
    let Some(rec) = world.tokens.get(token) else {
        return invalid_token();
    };
    let scope = rec.scope.clone();
    let token_id = rec.id.clone();
    let grant = rec.dns.clone();
    let grant = grant.as_ref();
    let account_owned = matches!(scope, TokenScope::Account(_));

    if let Some(account) = route.account()
        && !scope.reaches(&account.to_ascii_lowercase())
    {
        return forbidden();
    }

    match route {
        Route::Accounts if account_owned => {
            // Observed: edgefirst-dev/starter#3, HTTP 400 code 1001.
            failure(
                400,
                vec![error(
                    1001,
                    "List accounts endpoint does not support account owned tokens.",
                )],
            )
        }
        Route::Accounts => list_accounts(world, &scope.accounts(), query),
        // Account-owned tokens fail the user endpoint (observed: "Invalid API Token");
        // user tokens on the account endpoint are refused the same way (UNCONFIRMED, symmetric).
        Route::VerifyUser if account_owned => invalid_token(),
        Route::VerifyAccount(_) if !account_owned => invalid_token(),
        Route::VerifyUser | Route::VerifyAccount(_) => verified(&token_id),
        Route::Tunnel(a, t) => with_tunnel(world, a, t, |acct, tun| {
            success(json!({
                "id": tun.id, "account_tag": acct, "name": tun.name,
                "created_at": tun.created_at, "deleted_at": null,
                "connections": [], "conns_active_at": null, "conns_inactive_at": null,
                "tun_type": "cfd_tunnel", "status": "inactive",
                "remote_config": true, "config_src": "cloudflare", "metadata": {}
            }))
        }),
        Route::TunnelToken(a, t) => {
            match world.tunnel_token(&a.to_ascii_lowercase(), &t.to_ascii_lowercase()) {
                Ok(token) => success(Value::String(token)),
                Err(_) => tunnel_not_found(),
            }
        }
        Route::GetConfig(a, t) => {
            with_tunnel(world, a, t, |acct, tun| success(configuration(acct, tun)))
        }
        Route::PutConfig(a, t) => put_config(world, a, t, body),
        Route::Zones => dns::list_zones(world, &scope, grant, query),
        Route::ListRecords(z) => dns::list_records(world, &scope, grant, z, query, full_path),
        Route::CreateRecord(z) => dns::create_record(world, &scope, grant, z, body, full_path),
        Route::PatchRecord(z, r) => dns::patch_record(world, &scope, grant, z, r, body, full_path),
        Route::DeleteRecord(z, r) => dns::delete_record(world, &scope, grant, z, r, full_path),
        Route::ListApps(a) => access::list(world, &a.to_ascii_lowercase(), query),
        Route::CreateApp(a) => access::create(world, &a.to_ascii_lowercase(), body),
        Route::GetApp(a, id) => {
            access::get(world, &a.to_ascii_lowercase(), &id.to_ascii_lowercase())
        }
        Route::PutApp(a, id) => access::update(
            world,
            &a.to_ascii_lowercase(),
            &id.to_ascii_lowercase(),
            body,
        ),
        Route::DeleteApp(a, id) => {
            access::delete(world, &a.to_ascii_lowercase(), &id.to_ascii_lowercase())
        }
    }
}

enum Route<'a> {
    Accounts,
    VerifyUser,
    VerifyAccount(&'a str),
    Tunnel(&'a str, &'a str),
    TunnelToken(&'a str, &'a str),
    GetConfig(&'a str, &'a str),
    PutConfig(&'a str, &'a str),
    Zones,
    ListRecords(&'a str),
    CreateRecord(&'a str),
    PatchRecord(&'a str, &'a str),
    DeleteRecord(&'a str, &'a str),
    ListApps(&'a str),
    CreateApp(&'a str),
    GetApp(&'a str, &'a str),
    PutApp(&'a str, &'a str),
    DeleteApp(&'a str, &'a str),
}

impl<'a> Route<'a> {
    fn account(&self) -> Option<&'a str> {
        match *self {
            // Zones carry their account: the DNS handlers check it.
            Route::Accounts
            | Route::VerifyUser
            | Route::Zones
            | Route::ListRecords(_)
            | Route::CreateRecord(_)
            | Route::PatchRecord(..)
            | Route::DeleteRecord(..) => None,
            Route::VerifyAccount(a)
            | Route::Tunnel(a, _)
            | Route::TunnelToken(a, _)
            | Route::GetConfig(a, _)
            | Route::PutConfig(a, _)
            | Route::ListApps(a)
            | Route::CreateApp(a)
            | Route::GetApp(a, _)
            | Route::PutApp(a, _)
            | Route::DeleteApp(a, _) => Some(a),
        }
    }
}

/// Verify result `{id, status}` plus message 10000 "This API Token is valid and active"
/// (docs: user/accounts tokens verify pages; message observed in
/// putyourlightson/craft-cloudflare#88).
fn verified(token_id: &str) -> Reply {
    let mut reply = success(json!({"id": token_id, "status": "active"}));
    if let Body::Json(v) = &mut reply.body {
        v["messages"] =
            json!([{"code": 10000, "message": "This API Token is valid and active", "type": null}]);
    }
    reply
}

/// HTTP 404, code 1000 "Tunnel not found" (UNCONFIRMED code and text: no public capture found;
/// the status follows REST convention and the `code >= 1000` schema).
fn tunnel_not_found() -> Reply {
    failure(404, vec![error(1000, "Tunnel not found")])
}

fn with_tunnel(
    world: &World,
    account: &str,
    tunnel: &str,
    f: impl FnOnce(&str, &TunnelRec) -> Reply,
) -> Reply {
    let account = account.to_ascii_lowercase();
    match world.tunnel(&account, &tunnel.to_ascii_lowercase()) {
        Ok(t) => f(&account, t),
        Err(_) => tunnel_not_found(),
    }
}

/// Result shape of GET/PUT configurations (docs: `{account_id, config, created_at, source,
/// tunnel_id, version}`). A never-configured tunnel answers `config: null`, `version: 0`
/// (UNCONFIRMED: the schema marks `config` optional).
fn configuration(account: &str, t: &TunnelRec) -> Value {
    json!({
        "account_id": account,
        "tunnel_id": t.id,
        "version": t.version,
        "config": t.config.clone().unwrap_or(Value::Null),
        "source": "cloudflare",
        "created_at": t.config_created_at.clone().unwrap_or_else(|| t.created_at.clone()),
    })
}

fn put_config(world: &mut World, account: &str, tunnel: &str, body: &[u8]) -> Reply {
    let (account, tunnel) = (account.to_ascii_lowercase(), tunnel.to_ascii_lowercase());
    if world.tunnel(&account, &tunnel).is_err() {
        return tunnel_not_found();
    }
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        // UNCONFIRMED code for a body that is not a JSON object.
        _ => {
            return failure(
                400,
                vec![error(
                    CODE_BAD_CONFIGURATION,
                    "Bad Configuration: request body must be a JSON object",
                )],
            );
        }
    };
    let config = parsed.get("config").cloned().unwrap_or(json!({}));
    if let Err(message) = validate_config(&config) {
        return failure(400, vec![error(CODE_BAD_CONFIGURATION, &message)]);
    }
    let Ok(t) = world.tunnel_mut(&account, &tunnel) else {
        return tunnel_not_found();
    };
    t.config = Some(config);
    t.version += 1;
    t.writes += 1;
    t.config_created_at = Some(now_rfc3339());
    let result = configuration(&account, t);
    success(result)
}

fn list_accounts(world: &World, visible: &[&str], query: Option<&str>) -> Reply {
    let all: Vec<Value> = world
        .accounts
        .values()
        .filter(|a| visible.contains(&a.id.as_str()))
        .map(|a| {
            json!({"id": a.id, "name": a.name, "type": "standard", "created_on": a.created_on,
                   "settings": {"enforce_twofactor": false}})
        })
        .collect();
    let pairs: Vec<(String, String)> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut reply = paged(all, &pairs, (DEFAULT_PER_PAGE, MIN_PER_PAGE, MAX_PER_PAGE));
    // The accounts page documents `result_info` without `total_pages`.
    if let Body::Json(v) = &mut reply.body
        && let Some(info) = v["result_info"].as_object_mut()
    {
        info.remove("total_pages");
    }
    reply
}

/// The answer to an injected status fault. 429: code 10100 and `Retry-After` (observed on
/// community.cloudflare.com "Do requests to Cloudflare's API include ... when rate limited";
/// header per <https://developers.cloudflare.com/fundamentals/api/reference/limits/>).
/// 5xx: the edge's plain-text `error code: NNN` page.
pub(crate) fn fault_reply(fault: &Fault) -> Option<Reply> {
    match *fault {
        Fault::RateLimited { retry_after_secs } => {
            let mut r = failure(
                429,
                vec![error(
                    10100,
                    "More than 1200 requests per 300 seconds reached. Please wait and consider throttling your request speed",
                )],
            );
            r.headers
                .push(("retry-after", retry_after_secs.to_string()));
            Some(r)
        }
        Fault::Status(status) if status >= 500 => Some(Reply {
            status,
            headers: vec![],
            body: Body::Text(format!("error code: {status}")),
        }),
        Fault::Status(status) => Some(failure(status, vec![error(1000, "injected fault")])),
        Fault::Malformed => Some(Reply {
            status: 200,
            headers: vec![],
            body: Body::Text("<html><body>maintenance</body></html>".into()),
        }),
        Fault::Hang | Fault::Close => None,
    }
}
