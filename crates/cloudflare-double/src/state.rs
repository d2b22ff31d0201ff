//! The double's in-memory world: accounts, tunnels, API tokens, zones and their records, Access
//! applications, faults, and the call log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Who owns an API token and which accounts it reaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// A user-owned token with access to these accounts.
    User(Vec<String>),
    /// An account-owned token (reaches only its account).
    Account(String),
}

impl TokenScope {
    pub(crate) fn reaches(&self, account: &str) -> bool {
        match self {
            TokenScope::User(accounts) => accounts.iter().any(|a| a == account),
            TokenScope::Account(a) => a == account,
        }
    }

    pub(crate) fn accounts(&self) -> Vec<&str> {
        match self {
            TokenScope::User(accounts) => accounts.iter().map(String::as_str).collect(),
            TokenScope::Account(a) => vec![a.as_str()],
        }
    }
}

/// A fault to inject instead of the normal answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Answer with this status. 5xx bodies are the edge's plain-text `error code: NNN`; other
    /// statuses get an envelope.
    Status(u16),
    /// HTTP 429 with `Retry-After` and the rate-limit envelope (code 10100).
    RateLimited {
        /// `Retry-After` value in seconds.
        retry_after_secs: u64,
    },
    /// HTTP 200 whose body is not the envelope (an HTML page, as a broken proxy would send).
    Malformed,
    /// Accept the request and never answer (until the double stops).
    Hang,
    /// Close the connection without an answer.
    Close,
}

/// Injects `fault` into the next `times` calls matching `method` (any when `None`) and `path`
/// (relative to the API base, e.g. `/accounts/<id>/cfd_tunnel/<id>/configurations`; a trailing
/// `*` matches a prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// HTTP method to match, or any.
    #[serde(default)]
    pub method: Option<String>,
    /// Path to match (exact, or prefix with a trailing `*`).
    pub path: String,
    /// What to do.
    pub fault: Fault,
    /// How many matching calls get the fault.
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

impl FaultRule {
    /// A rule for the next call of any method to `path`.
    pub fn new(path: impl Into<String>, fault: Fault) -> FaultRule {
        FaultRule {
            method: None,
            path: path.into(),
            fault,
            times: 1,
        }
    }

    /// Restricts the rule to one HTTP method.
    pub fn method(mut self, method: &str) -> FaultRule {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Applies the fault to this many matching calls.
    pub fn times(mut self, times: u32) -> FaultRule {
        self.times = times;
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        let method_ok = self
            .method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method));
        let path_ok = match self.path.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.path,
        };
        method_ok && path_ok
    }
}

/// One logged API call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// HTTP method.
    pub method: String,
    /// Path relative to the API base.
    pub path: String,
    /// Query string, if any.
    pub query: Option<String>,
    /// Response status; `None` when the double hung or closed the connection.
    pub status: Option<u16>,
}

/// A created tunnel and its connector token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelInfo {
    /// Owning account.
    pub account_id: String,
    /// Tunnel UUID.
    pub tunnel_id: String,
    /// Connector token: base64 of `{"a","t","s"}`.
    pub token: String,
}

/// Errors of the test controls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The account ID is not 32 hex characters.
    #[error("account ID {0:?} is not 32 hex characters")]
    AccountId(String),
    /// The tunnel ID is not a UUID.
    #[error("tunnel ID {0:?} is not a UUID")]
    TunnelId(String),
    /// No such account.
    #[error("no account {0:?}")]
    NoAccount(String),
    /// No such tunnel.
    #[error("no tunnel {1:?} in account {0:?}")]
    NoTunnel(String, String),
    /// The ID is taken.
    #[error("{0:?} already exists")]
    Exists(String),
    /// The secret is not base64 of at least 32 bytes.
    #[error("tunnel secret must be base64 of at least 32 bytes")]
    Secret,
    /// The API token value is empty or has characters a Bearer token cannot carry.
    #[error("API token must be non-empty and use only A-Z a-z 0-9 - _ . ~ + /")]
    TokenValue,
    /// No such API token.
    #[error("no such API token")]
    NoToken,
    /// The zone ID is not 32 hex characters.
    #[error("zone ID {0:?} is not 32 hex characters")]
    ZoneId(String),
    /// The zone name is not a domain name.
    #[error("zone name {0:?} is not a domain name")]
    ZoneName(String),
    /// No such zone.
    #[error("no zone {0:?}")]
    NoZone(String),
    /// The API's validation refused the record.
    #[error("record refused: {0}")]
    Record(String),
}

pub(crate) struct TunnelRec {
    pub id: String,
    pub name: String,
    pub secret: Vec<u8>,
    pub created_at: String,
    pub config: Option<Value>,
    pub version: u64,
    pub config_created_at: Option<String>,
    pub writes: u64,
}

pub(crate) struct AccountRec {
    pub id: String,
    pub name: String,
    pub created_on: String,
    pub tunnels: BTreeMap<String, TunnelRec>,
}

pub(crate) struct TokenRec {
    pub id: String,
    pub scope: TokenScope,
    /// DNS permission on zones of its accounts; none by default.
    pub dns: Option<DnsGrant>,
}

/// What an API token may do with DNS records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsGrant {
    /// Zone names the grant covers; `None`: every zone of the token's accounts.
    #[serde(default)]
    pub zones: Option<Vec<String>>,
    /// "DNS Edit" (create, change, delete); otherwise "DNS Read".
    #[serde(default)]
    pub edit: bool,
}

impl DnsGrant {
    pub(crate) fn covers(&self, zone: &str) -> bool {
        self.zones
            .as_ref()
            .is_none_or(|z| z.iter().any(|n| n.eq_ignore_ascii_case(zone)))
    }
}

/// A zone as the double keeps it.
pub(crate) struct ZoneRec {
    pub id: String,
    pub name: String,
    pub account: String,
    pub created_on: String,
    pub records: BTreeMap<String, RecordRec>,
}

/// A DNS record as the double keeps it (and as the admin view shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRec {
    /// 32 hex characters.
    pub id: String,
    /// Fully qualified, lower-case.
    pub name: String,
    /// `A`, `CNAME`, `TXT`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The value.
    pub content: String,
    /// Proxied through Cloudflare.
    pub proxied: bool,
    /// 1 is automatic.
    pub ttl: u32,
    /// Free text.
    #[serde(default)]
    pub comment: Option<String>,
}

/// An Access application as the double keeps it (and as tests read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessAppRec {
    /// A UUID.
    pub id: String,
    /// The account holding it.
    pub account: String,
    pub name: String,
    /// The primary domain.
    pub domain: String,
    /// Every public destination (`host` or `host/path`), the domain first.
    pub destinations: Vec<String>,
    pub session_duration: String,
    /// The policies as answered (with their IDs and precedence).
    pub policies: Vec<Value>,
    pub created_at: String,
    pub updated_at: String,
}

/// The world as the server, the admin surface and the library share it.
pub(crate) type Shared = Arc<Mutex<World>>;

/// Locks the world. A panic while it was held cannot leave it half-changed in a way that
/// matters to a test double, so a poisoned lock is recovered and the double keeps serving.
pub(crate) fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything the double knows. Guarded by one mutex, never held across an await.
#[derive(Default)]
pub(crate) struct World {
    pub accounts: BTreeMap<String, AccountRec>,
    pub tokens: HashMap<String, TokenRec>,
    pub faults: Vec<FaultRule>,
    pub calls: Vec<Call>,
    /// Zones by ID.
    pub zones: BTreeMap<String, ZoneRec>,
    /// Access applications by ID.
    pub access_apps: BTreeMap<String, AccessAppRec>,
}

pub(crate) fn is_account_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn random_hex32() -> String {
    hex(&rand::random::<[u8; 16]>())
}

pub(crate) fn random_uuid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// RFC 3339 UTC timestamp of now (microseconds, like the API's examples).
pub(crate) fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant's algorithm), valid for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_micros()
    )
}

impl World {
    pub fn add_account(&mut self, id: Option<&str>, name: &str) -> Result<String, ControlError> {
        let id = match id {
            Some(id) if !is_account_id(id) => return Err(ControlError::AccountId(id.into())),
            Some(id) => id.to_ascii_lowercase(),
            None => random_hex32(),
        };
        if self.accounts.contains_key(&id) {
            return Err(ControlError::Exists(id));
        }
        self.accounts.insert(
            id.clone(),
            AccountRec {
                id: id.clone(),
                name: name.to_string(),
                created_on: now_rfc3339(),
                tunnels: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    pub fn add_tunnel(
        &mut self,
        account_id: &str,
        tunnel_id: Option<&str>,
        name: &str,
        secret_b64: Option<&str>,
    ) -> Result<TunnelInfo, ControlError> {
        let id = match tunnel_id {
            Some(t) if !is_uuid(t) => return Err(ControlError::TunnelId(t.into())),
            Some(t) => t.to_ascii_lowercase(),
            None => random_uuid(),
        };
        let secret = match secret_b64 {
            Some(s) => STANDARD
                .decode(s)
                .ok()
                .filter(|b| b.len() >= 32)
                .ok_or(ControlError::Secret)?,
            None => rand::random::<[u8; 32]>().to_vec(),
        };
        if self.accounts.values().any(|a| a.tunnels.contains_key(&id)) {
            return Err(ControlError::Exists(id));
        }
        let account = self
            .accounts
            .get_mut(account_id)
            .ok_or_else(|| ControlError::NoAccount(account_id.into()))?;
        account.tunnels.insert(
            id.clone(),
            TunnelRec {
                id: id.clone(),
                name: name.to_string(),
                secret,
                created_at: now_rfc3339(),
                config: None,
                version: 0,
                config_created_at: None,
                writes: 0,
            },
        );
        let token = self.tunnel_token(account_id, &id)?;
        Ok(TunnelInfo {
            account_id: account_id.to_string(),
            tunnel_id: id,
            token,
        })
    }

    pub fn add_token(&mut self, value: &str, scope: TokenScope) -> Result<(), ControlError> {
        let valid = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/".contains(&b));
        if !valid {
            return Err(ControlError::TokenValue);
        }
        let scope = match scope {
            TokenScope::User(accounts) => {
                TokenScope::User(accounts.iter().map(|a| a.to_ascii_lowercase()).collect())
            }
            TokenScope::Account(a) => TokenScope::Account(a.to_ascii_lowercase()),
        };
        for account in scope.accounts() {
            if !self.accounts.contains_key(account) {
                return Err(ControlError::NoAccount(account.into()));
            }
        }
        if self.tokens.contains_key(value) {
            return Err(ControlError::Exists("API token".into()));
        }
        self.tokens.insert(
            value.to_string(),
            TokenRec {
                id: random_hex32(),
                scope,
                dns: None,
            },
        );
        Ok(())
    }

    pub fn tunnel(&self, account_id: &str, tunnel_id: &str) -> Result<&TunnelRec, ControlError> {
        self.accounts
            .get(account_id)
            .ok_or_else(|| ControlError::NoAccount(account_id.into()))?
            .tunnels
            .get(tunnel_id)
            .ok_or_else(|| ControlError::NoTunnel(account_id.into(), tunnel_id.into()))
    }

    pub fn tunnel_mut(
        &mut self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<&mut TunnelRec, ControlError> {
        self.accounts
            .get_mut(account_id)
            .ok_or_else(|| ControlError::NoAccount(account_id.into()))?
            .tunnels
            .get_mut(tunnel_id)
            .ok_or_else(|| ControlError::NoTunnel(account_id.into(), tunnel_id.into()))
    }

    /// Gives the tunnel a new random secret (what the dashboard's "refresh token" and the API's
    /// tunnel update with a new `tunnel_secret` do) and returns its new connector token; tokens
    /// with the old secret stop matching.
    pub fn rotate_tunnel_secret(
        &mut self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<String, ControlError> {
        let t = self.tunnel_mut(account_id, tunnel_id)?;
        let mut secret = vec![0u8; 32];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut secret);
        t.secret = secret;
        self.tunnel_token(account_id, tunnel_id)
    }

    /// The connector token: base64 of `{"a": account, "t": tunnel, "s": base64 secret}`.
    pub fn tunnel_token(&self, account_id: &str, tunnel_id: &str) -> Result<String, ControlError> {
        let t = self.tunnel(account_id, tunnel_id)?;
        let json = json!({"a": account_id, "t": t.id, "s": STANDARD.encode(&t.secret)});
        Ok(STANDARD.encode(json.to_string()))
    }

    /// Gives an API token a DNS permission (replacing any it had).
    pub fn grant_dns(&mut self, token: &str, grant: DnsGrant) -> Result<(), ControlError> {
        let rec = self.tokens.get_mut(token).ok_or(ControlError::NoToken)?;
        rec.dns = Some(grant);
        Ok(())
    }

    /// Takes one use of the first fault rule matching the call.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<Fault> {
        let at = self
            .faults
            .iter()
            .position(|r| r.times > 0 && r.matches(method, path))?;
        let rule = &mut self.faults[at];
        rule.times -= 1;
        let fault = rule.fault.clone();
        if rule.times == 0 {
            self.faults.remove(at);
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_timestamps() {
        assert!(is_account_id(&random_hex32()));
        assert!(is_uuid(&random_uuid()));
        let ts = now_rfc3339();
        assert_eq!(ts.len(), "2026-01-01T00:00:00.000000Z".len(), "{ts}");
        assert!(ts.starts_with("20") && ts.ends_with('Z'));
    }

    #[test]
    fn faults_are_consumed_in_order() {
        let mut w = World::default();
        w.faults
            .push(FaultRule::new("/accounts*", Fault::Status(503)).times(2));
        w.faults
            .push(FaultRule::new("/accounts", Fault::Close).method("get"));
        assert_eq!(w.take_fault("GET", "/user/tokens/verify"), None);
        assert_eq!(w.take_fault("GET", "/accounts/x"), Some(Fault::Status(503)));
        assert_eq!(w.take_fault("PUT", "/accounts/x"), Some(Fault::Status(503)));
        assert_eq!(w.take_fault("PUT", "/accounts"), None);
        assert_eq!(w.take_fault("GET", "/accounts"), Some(Fault::Close));
        assert!(w.faults.is_empty());
    }

    #[test]
    fn control_errors() {
        let mut w = World::default();
        assert!(matches!(
            w.add_account(Some("nope"), "x"),
            Err(ControlError::AccountId(_))
        ));
        let a = w.add_account(None, "a").unwrap();
        assert!(matches!(
            w.add_tunnel(&a, Some("x"), "t", None),
            Err(ControlError::TunnelId(_))
        ));
        assert!(matches!(
            w.add_tunnel(&a, None, "t", Some("c2hvcnQ=")),
            Err(ControlError::Secret)
        ));
        assert!(matches!(
            w.add_token("has space", TokenScope::User(vec![a.clone()])),
            Err(ControlError::TokenValue)
        ));
        assert!(matches!(
            w.add_token("t", TokenScope::Account(random_hex32())),
            Err(ControlError::NoAccount(_))
        ));
        let t = w.add_tunnel(&a, None, "t", None).unwrap();
        assert!(matches!(
            w.add_tunnel(&a, Some(&t.tunnel_id), "again", None),
            Err(ControlError::Exists(_))
        ));
    }
}
