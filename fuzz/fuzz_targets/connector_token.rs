//! The Cloudflare connector token parser (`cloudflare_api::ConnectorToken::parse`): any text is
//! a token or an error, never a panic, and never echoes the token or its secret. The module
//! has no encoder, so tokens are also built here from the input (account tag, tunnel ID,
//! secret bytes, base64 alphabets and padding, extra JSON): a token built from valid parts
//! parses to those parts whatever alphabet or padding wrote it.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use cloudflare_api::{ConnectorToken, is_account_id, is_uuid};
use libfuzzer_sys::fuzz_target;

const ENGINES: [base64::engine::GeneralPurpose; 4] =
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD];

#[derive(Debug, Arbitrary)]
struct Parts<'a> {
    account: Field<'a>,
    tunnel: Field<'a>,
    secret: &'a [u8],
    secret_engine: u8,
    token_engine: u8,
    /// Raw JSON put before the fields, e.g. other members.
    extra: &'a str,
    padding: (u8, u8),
}

#[derive(Debug, Arbitrary)]
enum Field<'a> {
    /// A valid value from the fuzzer's bytes (hex digits, a UUID).
    Valid(u128, bool),
    Raw(&'a str),
    Absent,
}

fuzz_target!(|data: &[u8]| {
    // Raw text.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = check(text, None);
    }
    // A token built from parts.
    let Ok(parts) = Parts::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let account = match parts.account {
        Field::Valid(n, upper) => Some(case(format!("{n:032x}"), upper)),
        Field::Raw(s) => Some(s.to_owned()),
        Field::Absent => None,
    };
    let tunnel = match parts.tunnel {
        Field::Valid(n, upper) => {
            let h = format!("{n:032x}");
            Some(case(
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                ),
                upper,
            ))
        }
        Field::Raw(s) => Some(s.to_owned()),
        Field::Absent => None,
    };
    let secret = ENGINES[usize::from(parts.secret_engine) % 4].encode(parts.secret);
    let mut json = format!("{{{}", parts.extra);
    if let Some(a) = &account {
        json.push_str(&format!("\"a\":{},", serde_json::to_string(a).unwrap()));
    }
    if let Some(t) = &tunnel {
        json.push_str(&format!("\"t\":{},", serde_json::to_string(t).unwrap()));
    }
    json.push_str(&format!("\"s\":\"{secret}\"}}"));
    let token = format!(
        "{}{}{}",
        " ".repeat(usize::from(parts.padding.0 % 3)),
        ENGINES[usize::from(parts.token_engine) % 4].encode(&json),
        "\n".repeat(usize::from(parts.padding.1 % 3)),
    );
    let parsed = check(&token, Some(&secret));
    let valid = parts.extra.is_empty()
        && account.as_deref().is_some_and(is_account_id)
        && tunnel.as_deref().is_some_and(is_uuid)
        && !parts.secret.is_empty();
    if valid {
        let parsed = parsed.unwrap_or_else(|e| panic!("{json} refused: {e}"));
        assert_eq!(parsed.account_tag(), account.unwrap().to_ascii_lowercase());
        assert_eq!(parsed.tunnel_id(), tunnel.unwrap().to_ascii_lowercase());
        // The same secret written in the standard alphabet is the same secret.
        let standard = STANDARD.encode(format!(
            "{{\"a\":\"{}\",\"t\":\"{}\",\"s\":\"{}\"}}",
            parsed.account_tag(),
            parsed.tunnel_id(),
            STANDARD.encode(parts.secret)
        ));
        let reference = ConnectorToken::parse(&standard).expect("a canonical token parses");
        assert!(parsed.secret_matches(&reference));
        assert_eq!(parsed, reference);
    }
});

fn case(s: String, upper: bool) -> String {
    if upper { s.to_ascii_uppercase() } else { s }
}

/// Parses `token`; its `Debug` shows only the account tag and tunnel ID, and an error shows
/// neither the token nor the secret.
fn check(token: &str, secret: Option<&str>) -> Result<ConnectorToken, cloudflare_api::TokenError> {
    let result = ConnectorToken::parse(token);
    match &result {
        Ok(t) => assert_eq!(
            format!("{t:?}"),
            format!(
                "ConnectorToken {{ account_tag: {:?}, tunnel_id: {:?}, secret: \"<redacted>\" }}",
                t.account_tag(),
                t.tunnel_id()
            )
        ),
        Err(e) => {
            // Long runs without whitespace: no word of the messages is one.
            let shown = e.to_string();
            for secret in [Some(token.trim()), secret].into_iter().flatten() {
                if secret.len() >= 12 && !secret.contains(char::is_whitespace) {
                    assert!(!shown.contains(secret), "{shown:?} shows {secret:?}");
                }
            }
        }
    }
    result
}
