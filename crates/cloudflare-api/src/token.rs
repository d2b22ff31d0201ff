//! The tunnel connector token and constant-time secret comparison.
//!
//! A remotely managed tunnel runs with `cloudflared tunnel run --token <TOKEN>`. The token is
//! base64 of the JSON object `{"a": account tag, "t": tunnel UUID, "s": tunnel secret}`, where
//! the secret is itself base64. The API returns it from
//! `GET /accounts/{account_id}/cfd_tunnel/{tunnel_id}/token`
//! (<https://developers.cloudflare.com/cloudflare-one/connections/connect-networks/configure-tunnels/remote-tunnel-permissions/>,
//! tokens shown there start `eyJhIjoi...`, i.e. base64 of `{"a":"`).
//!
//! [`ConnectorToken::parse`] never echoes the token or its secret in errors or `Debug`.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde::Deserialize;
use subtle::ConstantTimeEq;

/// Why a connector token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Empty input.
    #[error("tunnel token is empty")]
    Empty,
    /// Not base64.
    #[error("tunnel token is not base64")]
    Base64,
    /// Base64, but not a JSON object of strings.
    #[error("tunnel token is not the expected JSON object: {0}")]
    Json(String),
    /// A required field (`a`, `t` or `s`) is absent or empty.
    #[error("tunnel token has no {0:?} field ({1})")]
    MissingField(&'static str, &'static str),
    /// The account tag is not 32 hex characters.
    #[error("tunnel token account tag is not 32 hex characters")]
    AccountTag,
    /// The tunnel ID is not a UUID.
    #[error("tunnel token tunnel ID is not a UUID")]
    TunnelId,
    /// The secret is not base64.
    #[error("tunnel token secret is not base64")]
    Secret,
}

#[derive(Deserialize)]
struct RawToken {
    #[serde(default)]
    a: Option<String>,
    #[serde(default)]
    t: Option<String>,
    #[serde(default)]
    s: Option<String>,
}

/// A decoded connector token.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectorToken {
    account_tag: String,
    tunnel_id: String,
    secret: Vec<u8>,
}

impl fmt::Debug for ConnectorToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorToken")
            .field("account_tag", &self.account_tag)
            .field("tunnel_id", &self.tunnel_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

fn decode_b64(s: &str) -> Option<Vec<u8>> {
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(s).ok())
}

/// True for the canonical 8-4-4-4-12 hex UUID form.
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// True for a Cloudflare account identifier: 32 hex characters.
pub fn is_account_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl ConnectorToken {
    /// Decodes a connector token (surrounding whitespace ignored).
    pub fn parse(token: &str) -> Result<ConnectorToken, TokenError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(TokenError::Empty);
        }
        let json = decode_b64(token).ok_or(TokenError::Base64)?;
        let raw: RawToken =
            serde_json::from_slice(&json).map_err(|e| TokenError::Json(e.to_string()))?;
        let field = |v: Option<String>, name: &'static str, what: &'static str| {
            v.filter(|s| !s.is_empty())
                .ok_or(TokenError::MissingField(name, what))
        };
        let account_tag = field(raw.a, "a", "account tag")?;
        let tunnel_id = field(raw.t, "t", "tunnel ID")?;
        let secret = field(raw.s, "s", "tunnel secret")?;
        if !is_account_id(&account_tag) {
            return Err(TokenError::AccountTag);
        }
        if !is_uuid(&tunnel_id) {
            return Err(TokenError::TunnelId);
        }
        let secret = decode_b64(&secret).ok_or(TokenError::Secret)?;
        Ok(ConnectorToken {
            account_tag: account_tag.to_ascii_lowercase(),
            tunnel_id: tunnel_id.to_ascii_lowercase(),
            secret,
        })
    }

    /// The account tag (lower-case).
    pub fn account_tag(&self) -> &str {
        &self.account_tag
    }

    /// The tunnel UUID (lower-case).
    pub fn tunnel_id(&self) -> &str {
        &self.tunnel_id
    }

    /// True when both tokens carry the same secret, compared in constant time.
    pub fn secret_matches(&self, other: &ConnectorToken) -> bool {
        secrets_equal(&self.secret, &other.secret)
    }
}

/// Constant-time equality of two secrets. The length is not secret (a mismatch returns early).
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNT: &str = "0123456789abcdef0123456789abcdef";
    const TUNNEL: &str = "f70ff985-a4ef-4643-bbbc-4a0ed4fc8415";

    fn token(json: &str) -> String {
        STANDARD.encode(json)
    }

    fn valid(secret: &[u8]) -> String {
        token(&format!(
            r#"{{"a":"{ACCOUNT}","t":"{TUNNEL}","s":"{}"}}"#,
            STANDARD.encode(secret)
        ))
    }

    #[test]
    fn parses_valid_token() {
        let t = ConnectorToken::parse(&format!("  {}\n", valid(&[7u8; 32]))).unwrap();
        assert_eq!(t.account_tag(), ACCOUNT);
        assert_eq!(t.tunnel_id(), TUNNEL);
        assert!(valid(&[7u8; 32]).starts_with("eyJhIjoi"));
        let dbg = format!("{t:?}");
        assert!(dbg.contains("<redacted>") && !dbg.contains("BwcH"), "{dbg}");
    }

    #[test]
    fn accepts_unpadded_base64() {
        let t = valid(&[1u8; 32]);
        let unpadded = t.trim_end_matches('=');
        assert!(ConnectorToken::parse(unpadded).is_ok());
    }

    #[test]
    fn rejects_bad_input_with_clear_errors() {
        let b64_secret = STANDARD.encode([1u8; 32]);
        let cases: Vec<(String, TokenError)> = vec![
            ("".into(), TokenError::Empty),
            ("not base64 !!".into(), TokenError::Base64),
            (token("not json"), TokenError::Json(String::new())),
            (token("[1,2]"), TokenError::Json(String::new())),
            (
                token(&format!(r#"{{"t":"{TUNNEL}","s":"{b64_secret}"}}"#)),
                TokenError::MissingField("a", "account tag"),
            ),
            (
                token(&format!(r#"{{"a":"{ACCOUNT}","s":"{b64_secret}"}}"#)),
                TokenError::MissingField("t", "tunnel ID"),
            ),
            (
                token(&format!(r#"{{"a":"{ACCOUNT}","t":"{TUNNEL}","s":""}}"#)),
                TokenError::MissingField("s", "tunnel secret"),
            ),
            (
                token(&format!(
                    r#"{{"a":"acct","t":"{TUNNEL}","s":"{b64_secret}"}}"#
                )),
                TokenError::AccountTag,
            ),
            (
                token(&format!(
                    r#"{{"a":"{ACCOUNT}","t":"../x","s":"{b64_secret}"}}"#
                )),
                TokenError::TunnelId,
            ),
            (
                token(&format!(r#"{{"a":"{ACCOUNT}","t":"{TUNNEL}","s":"%%%"}}"#)),
                TokenError::Secret,
            ),
        ];
        for (input, want) in cases {
            let got = ConnectorToken::parse(&input).unwrap_err();
            match (&got, &want) {
                (TokenError::Json(_), TokenError::Json(_)) => {}
                _ => assert_eq!(got, want, "input {input:?}"),
            }
        }
    }

    #[test]
    fn secret_comparison() {
        let a = ConnectorToken::parse(&valid(&[9u8; 32])).unwrap();
        let b = ConnectorToken::parse(&valid(&[9u8; 32])).unwrap();
        let mut other = [9u8; 32];
        other[31] = 8;
        let c = ConnectorToken::parse(&valid(&other)).unwrap();
        assert!(a.secret_matches(&b));
        assert!(!a.secret_matches(&c));
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"abcd"));
        assert!(secrets_equal(b"", b""));
    }

    #[test]
    fn id_helpers() {
        assert!(is_uuid(TUNNEL));
        assert!(!is_uuid("f70ff985a4ef4643bbbc4a0ed4fc8415"));
        assert!(!is_uuid("g70ff985-a4ef-4643-bbbc-4a0ed4fc8415"));
        assert!(is_account_id(ACCOUNT));
        assert!(!is_account_id("0123"));
    }
}
