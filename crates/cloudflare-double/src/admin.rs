//! The HTTP admin surface (binary `--admin` only; [`crate::Options::admin`] in process).
//!
//! Unauthenticated, JSON in and out, under [`crate::ADMIN_PREFIX`]:
//!
//! | request | effect |
//! |---|---|
//! | `POST /accounts {"id"?, "name"}` | creates an account → `{"id"}` |
//! | `POST /tunnels {"account_id", "id"?, "name", "secret"?}` | creates a tunnel → `{account_id, tunnel_id, token}` |
//! | `POST /tokens {"value", "accounts": [..]}` or `{"value", "account"}` | registers a user- or account-owned API token |
//! | `POST /zones {"account_id", "id"?, "name"}` | creates a zone → `{"id"}` |
//! | `POST /dns_grants {"token", "zones"?, "edit"}` | gives an API token DNS Read (or Edit) on zones |
//! | `POST /dns_records {"zone", "type", "name", "content", "proxied"?}` | adds a record as the dashboard would → the record |
//! | `GET /dns_records` | `{zone name: [records]}` |
//! | `POST /faults {"method"?, "path", "times"?, "fault"}` | `fault`: `{"status":503}`, `{"rate_limited":{"retry_after_secs":2}}`, `"malformed"`, `"hang"`, `"close"` |
//! | `DELETE /faults` | clears faults |
//! | `GET /calls` | the call log `[{method, path, query, status}]` |
//! | `DELETE /calls` | clears the call log |
//! | `GET /writes` | `{tunnel_id: accepted PUT count}` |

use serde::Deserialize;
use serde_json::{Value, json};

use crate::envelope::{Body, Reply};
use crate::state::{ControlError, FaultRule, Shared, TokenScope, lock};

fn ok(v: Value) -> Reply {
    Reply {
        status: 200,
        headers: vec![],
        body: Body::Json(v),
    }
}

fn bad(status: u16, message: &str) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: Body::Json(json!({"error": message})),
    }
}

fn control(e: &ControlError) -> Reply {
    bad(400, &e.to_string())
}

#[derive(Deserialize)]
struct NewAccount {
    #[serde(default)]
    id: Option<String>,
    name: String,
}

#[derive(Deserialize)]
struct NewTunnel {
    account_id: String,
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    secret: Option<String>,
}

#[derive(Deserialize)]
struct NewToken {
    value: String,
    #[serde(default)]
    accounts: Vec<String>,
    #[serde(default)]
    account: Option<String>,
}

#[derive(Deserialize)]
struct NewZone {
    account_id: String,
    #[serde(default)]
    id: Option<String>,
    name: String,
}

#[derive(Deserialize)]
struct NewGrant {
    token: String,
    #[serde(flatten)]
    grant: crate::state::DnsGrant,
}

#[derive(Deserialize)]
struct NewRecord {
    zone: String,
    #[serde(rename = "type")]
    kind: String,
    name: String,
    content: String,
    #[serde(default)]
    proxied: bool,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    serde_json::from_slice(body).map_err(|e| bad(400, &format!("bad JSON body: {e}")))
}

pub(crate) fn handle(world: &Shared, method: &str, path: &str, body: &[u8]) -> Reply {
    let result = match (method, path) {
        ("POST", "/accounts") => parse::<NewAccount>(body).map(|a| {
            match lock(world).add_account(a.id.as_deref(), &a.name) {
                Ok(id) => ok(json!({"id": id})),
                Err(e) => control(&e),
            }
        }),
        ("POST", "/tunnels") => parse::<NewTunnel>(body).map(|t| {
            match lock(world).add_tunnel(
                &t.account_id,
                t.id.as_deref(),
                &t.name,
                t.secret.as_deref(),
            ) {
                Ok(info) => ok(json!(info)),
                Err(e) => control(&e),
            }
        }),
        ("POST", "/tokens") => parse::<NewToken>(body).map(|t| {
            let scope = match (t.account, t.accounts.is_empty()) {
                (Some(a), true) => TokenScope::Account(a),
                (None, false) => TokenScope::User(t.accounts),
                _ => return bad(400, "give either `account` or `accounts`"),
            };
            match lock(world).add_token(&t.value, scope) {
                Ok(()) => ok(json!({})),
                Err(e) => control(&e),
            }
        }),
        ("POST", "/zones") => parse::<NewZone>(body).map(|z| {
            match lock(world).add_zone(&z.account_id, z.id.as_deref(), &z.name) {
                Ok(id) => ok(json!({"id": id})),
                Err(e) => control(&e),
            }
        }),
        ("POST", "/dns_grants") => {
            parse::<NewGrant>(body).map(|g| match lock(world).grant_dns(&g.token, g.grant) {
                Ok(()) => ok(json!({})),
                Err(e) => control(&e),
            })
        }
        ("POST", "/dns_records") => parse::<NewRecord>(body).map(|r| {
            match lock(world).add_record(&r.zone, &r.kind, &r.name, &r.content, r.proxied) {
                Ok(rec) => ok(json!(rec)),
                Err(e) => control(&e),
            }
        }),
        ("GET", "/dns_records") => Ok(ok(json!(lock(world).records()))),
        ("POST", "/faults") => parse::<FaultRule>(body).map(|rule| {
            lock(world).faults.push(rule);
            ok(json!({}))
        }),
        ("DELETE", "/faults") => {
            lock(world).faults.clear();
            Ok(ok(json!({})))
        }
        ("GET", "/calls") => Ok(ok(json!(lock(world).calls))),
        ("DELETE", "/calls") => {
            lock(world).calls.clear();
            Ok(ok(json!({})))
        }
        ("GET", "/writes") => {
            let w = lock(world);
            let writes: serde_json::Map<String, Value> = w
                .accounts
                .values()
                .flat_map(|a| a.tunnels.values())
                .map(|t| (t.id.clone(), json!(t.writes)))
                .collect();
            Ok(ok(Value::Object(writes)))
        }
        _ => Ok(bad(404, "unknown admin route")),
    };
    result.unwrap_or_else(|reply| reply)
}
