//! Seed files for the binary: accounts, tunnels and API tokens, in YAML (or JSON).
//!
//! ```yaml
//! accounts:
//!   - id: 0123456789abcdef0123456789abcdef   # optional, random when absent
//!     name: demo
//!     tunnels:
//!       - id: f70ff985-a4ef-4643-bbbc-4a0ed4fc8415   # optional
//!         name: demo
//!         secret: <base64 of >= 32 bytes>            # optional
//!     zones:
//!       - name: example.com
//!         id: 023e105f4ecef8ad9ca31a8372d0c353      # optional
//! tokens:
//!   - value: demo-api-token
//!     accounts: [0123456789abcdef0123456789abcdef]  # user-owned token
//!     dns: {edit: true}                             # optional; zones: [..] limits it
//!   - value: demo-account-token
//!     account: 0123456789abcdef0123456789abcdef     # account-owned token
//! ```

use serde::Deserialize;

use crate::state::{ControlError, DnsGrant, TokenScope, TunnelInfo, World};

/// A seed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    /// Accounts with their tunnels.
    #[serde(default)]
    pub accounts: Vec<SeedAccount>,
    /// API tokens.
    #[serde(default)]
    pub tokens: Vec<SeedToken>,
}

/// An account of the seed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedAccount {
    /// 32 hex characters; random when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Account name.
    pub name: String,
    /// Its tunnels.
    #[serde(default)]
    pub tunnels: Vec<SeedTunnel>,
    /// Its zones.
    #[serde(default)]
    pub zones: Vec<SeedZone>,
}

/// A zone of the seed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedZone {
    /// 32 hex characters; random when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// The domain name.
    pub name: String,
}

/// A tunnel of the seed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedTunnel {
    /// UUID; random when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Tunnel name.
    pub name: String,
    /// Base64 secret of at least 32 bytes; random when absent.
    #[serde(default)]
    pub secret: Option<String>,
}

/// An API token of the seed: user-owned with `accounts`, or account-owned with `account`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedToken {
    /// The Bearer value.
    pub value: String,
    /// Accounts a user-owned token reaches.
    #[serde(default)]
    pub accounts: Vec<String>,
    /// The account owning an account-owned token.
    #[serde(default)]
    pub account: Option<String>,
    /// DNS permission on the zones of its accounts; none when absent.
    #[serde(default)]
    pub dns: Option<DnsGrant>,
}

/// A seed that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The file does not parse.
    #[error("seed file does not parse: {0}")]
    Parse(String),
    /// A token names both `account` and `accounts`, or neither.
    #[error("token #{0}: give either `account` (account-owned) or `accounts` (user-owned)")]
    TokenScope(usize),
    /// An entry was refused.
    #[error("seed entry refused: {0}")]
    Control(#[from] ControlError),
}

impl Seed {
    /// Parses YAML or JSON.
    pub fn parse(text: &str) -> Result<Seed, SeedError> {
        serde_saphyr::from_str(text).map_err(|e| SeedError::Parse(e.to_string()))
    }

    pub(crate) fn apply(&self, world: &mut World) -> Result<Vec<TunnelInfo>, SeedError> {
        let mut tunnels = Vec::new();
        for account in &self.accounts {
            let id = world.add_account(account.id.as_deref(), &account.name)?;
            for t in &account.tunnels {
                tunnels.push(world.add_tunnel(
                    &id,
                    t.id.as_deref(),
                    &t.name,
                    t.secret.as_deref(),
                )?);
            }
            for z in &account.zones {
                world.add_zone(&id, z.id.as_deref(), &z.name)?;
            }
        }
        for (i, token) in self.tokens.iter().enumerate() {
            let scope = match (&token.account, token.accounts.is_empty()) {
                (Some(a), true) => TokenScope::Account(a.to_ascii_lowercase()),
                (None, false) => TokenScope::User(
                    token
                        .accounts
                        .iter()
                        .map(|a| a.to_ascii_lowercase())
                        .collect(),
                ),
                _ => return Err(SeedError::TokenScope(i)),
            };
            world.add_token(&token.value, scope)?;
            if let Some(grant) = &token.dns {
                world.grant_dns(&token.value, grant.clone())?;
            }
        }
        Ok(tunnels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNT: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn yaml_seed_applies() {
        let seed = Seed::parse(&format!(
            "accounts:\n  - id: {ACCOUNT}\n    name: demo\n    tunnels:\n      - id: f70ff985-a4ef-4643-bbbc-4a0ed4fc8415\n        name: t1\n      - name: t2\ntokens:\n  - value: user-token\n    accounts: [{ACCOUNT}]\n  - value: acct-token\n    account: {ACCOUNT}\n"
        ))
        .unwrap();
        let mut world = World::default();
        let tunnels = seed.apply(&mut world).unwrap();
        assert_eq!(tunnels.len(), 2);
        assert_eq!(tunnels[0].tunnel_id, "f70ff985-a4ef-4643-bbbc-4a0ed4fc8415");
        assert_eq!(world.tokens.len(), 2);
        assert_eq!(
            world.tokens["acct-token"].scope,
            TokenScope::Account(ACCOUNT.into())
        );
    }

    #[test]
    fn json_seed_and_errors() {
        let seed = Seed::parse(r#"{"accounts": [{"name": "x"}]}"#).unwrap();
        assert_eq!(seed.accounts.len(), 1);
        assert!(matches!(
            Seed::parse("accounts: [{name: x, colour: red}]"),
            Err(SeedError::Parse(_))
        ));
        let both = Seed::parse(&format!(
            "accounts: [{{id: {ACCOUNT}, name: a}}]\ntokens: [{{value: t, account: {ACCOUNT}, accounts: [{ACCOUNT}]}}]"
        ))
        .unwrap();
        assert!(matches!(
            both.apply(&mut World::default()),
            Err(SeedError::TokenScope(0))
        ));
        let unknown =
            Seed::parse("tokens: [{value: t, accounts: [0123456789abcdef0123456789abcdee]}]")
                .unwrap();
        assert!(matches!(
            unknown.apply(&mut World::default()),
            Err(SeedError::Control(ControlError::NoAccount(_)))
        ));
    }
}
