//! Claim verification with the Cloudflare API (TG-8, beyond the guide; closes the squatting and
//! foreign-tunnel writes the guide leaves open, upstream issue #679).
//!
//! A connector token is base64 JSON that anyone can write, so before a claim is accepted the
//! controller asks Cloudflare whether it is real: the token's account is the account of the
//! credentials that will write the tunnel's ingress document, the tunnel exists in that account,
//! and the token's secret is the tunnel's own (compared in constant time). A token naming a
//! neighbour's tunnel, or any other tunnel of the account, without its secret is refused before
//! anything is written to that tunnel.
//!
//! `GET .../cfd_tunnel/{id}/token` needs one of the API token permissions "Cloudflare Tunnel
//! Write", "Cloudflare One Connector: cloudflared Write" or "Cloudflare One Connectors Write" —
//! the permission writing ingress documents already requires, so verification adds none.
//!
//! A transient API failure ([`ClaimVerificationError::is_transient`]) is not a verdict: the
//! caller retries and keeps the previous one (a holder is not evicted by an API outage, and a
//! new claim is not accepted without an answer).

use cloudflare_api::{Client, ConnectorToken, Error, ErrorKind, TokenError};

use crate::conditions::Verdict;

/// Why a claim was not verified.
#[derive(Debug, thiserror::Error)]
pub enum ClaimVerificationError {
    #[error(
        "the connector token belongs to Cloudflare account {token_account}, but the Cloudflare API credentials used for this Gateway are for account {credentials_account}; use a token of a tunnel in account {credentials_account}, or set cloudflareCredentialsSecretRef on the GatewayConfig to credentials of account {token_account}"
    )]
    AccountMismatch {
        token_account: String,
        credentials_account: String,
    },
    #[error(
        "tunnel {tunnel} named by the connector token does not exist in Cloudflare account {account} (or was deleted); put the token of an existing tunnel in the tunnelTokenSecretRef Secret"
    )]
    TunnelNotFound { account: String, tunnel: String },
    #[error(
        "the connector token names tunnel {tunnel}, but its secret is not that tunnel's: the token was not issued for this tunnel, or the tunnel's token was rotated; put the tunnel's current token in the tunnelTokenSecretRef Secret"
    )]
    SecretMismatch { tunnel: String },
    #[error(
        "the Cloudflare API refused the credentials reading tunnel {tunnel} of account {account} ({source}); the API token needs Cloudflare Tunnel Write (or Cloudflare One Connector: cloudflared Write) on that account"
    )]
    CredentialsRefused {
        account: String,
        tunnel: String,
        #[source]
        source: Error,
    },
    #[error("could not verify tunnel {tunnel} with the Cloudflare API ({source}); retrying")]
    Unavailable {
        tunnel: String,
        #[source]
        source: Error,
    },
    #[error(
        "could not verify tunnel {tunnel} with the Cloudflare API (the API returned a tunnel token that does not parse: {source}); retrying"
    )]
    UnparsableToken {
        tunnel: String,
        #[source]
        source: TokenError,
    },
}

impl ClaimVerificationError {
    /// True when the API gave no answer about the claim (network, 5xx, rate limit, an answer
    /// that is not the documented one): retry, and keep the previous verdict meanwhile.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClaimVerificationError::Unavailable { .. }
                | ClaimVerificationError::UnparsableToken { .. }
        )
    }

    /// The reason on the Gateway's `Accepted=False`, one per failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ClaimVerificationError::AccountMismatch { .. } => "TunnelAccountMismatch",
            ClaimVerificationError::TunnelNotFound { .. } => "TunnelNotFound",
            ClaimVerificationError::SecretMismatch { .. } => "TunnelSecretMismatch",
            ClaimVerificationError::CredentialsRefused { .. } => "TunnelNotVerifiable",
            ClaimVerificationError::Unavailable { .. }
            | ClaimVerificationError::UnparsableToken { .. } => "TunnelVerificationPending",
        }
    }

    /// `Accepted=False` with [`Self::reason`] and the message.
    pub fn gateway_verdict(&self) -> Verdict {
        Verdict::fail("Accepted", self.reason(), self.to_string())
    }
}

/// Verifies that `token` is a real connector token of a tunnel in `credentials_account`, the
/// account whose credentials `api` carries. One attempt per call; see the module doc for
/// transient failures.
pub async fn verify_claim(
    api: &Client,
    credentials_account: &str,
    token: &ConnectorToken,
) -> Result<(), ClaimVerificationError> {
    let account = token.account_tag();
    let tunnel = token.tunnel_id();
    if !account.eq_ignore_ascii_case(credentials_account) {
        return Err(ClaimVerificationError::AccountMismatch {
            token_account: account.to_owned(),
            credentials_account: credentials_account.to_ascii_lowercase(),
        });
    }
    let refusal = |e: Error| match e.kind() {
        ErrorKind::NotFound => ClaimVerificationError::TunnelNotFound {
            account: account.to_owned(),
            tunnel: tunnel.to_owned(),
        },
        ErrorKind::Auth => ClaimVerificationError::CredentialsRefused {
            account: account.to_owned(),
            tunnel: tunnel.to_owned(),
            source: e,
        },
        _ => ClaimVerificationError::Unavailable {
            tunnel: tunnel.to_owned(),
            source: e,
        },
    };
    let found = api.get_tunnel(account, tunnel).await.map_err(refusal)?;
    if found.deleted_at.is_some() {
        return Err(ClaimVerificationError::TunnelNotFound {
            account: account.to_owned(),
            tunnel: tunnel.to_owned(),
        });
    }
    let issued = api
        .get_tunnel_token(account, tunnel)
        .await
        .map_err(refusal)?;
    let issued =
        ConnectorToken::parse(&issued).map_err(|e| ClaimVerificationError::UnparsableToken {
            tunnel: tunnel.to_owned(),
            source: e,
        })?;
    if issued.tunnel_id() == tunnel && issued.secret_matches(token) {
        Ok(())
    } else {
        Err(ClaimVerificationError::SecretMismatch {
            tunnel: tunnel.to_owned(),
        })
    }
}
