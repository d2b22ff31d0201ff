//! Claim verification against the Cloudflare contract double over real TCP: a claim is accepted
//! only with a real connector token of a tunnel in the credentials' account, and an API outage
//! is told apart from a refusal.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cloudflare_api::{Client, ConnectorToken};
use cloudflare_double::{CloudflareDouble, Fault, FaultRule, TokenScope, TunnelInfo};
use tunnel_controller::publish::cloudflare::verify::{ClaimVerificationError, verify_claim};

const CREDENTIALS_A: &str = "credentials-a";
const CREDENTIALS_B: &str = "credentials-b";

struct World {
    double: CloudflareDouble,
    account_a: String,
    tunnel_a: TunnelInfo,
    tunnel_b: TunnelInfo,
}

async fn world() -> World {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let double = CloudflareDouble::start().await.expect("double starts");
    let account_a = double.add_account("tenant-a").unwrap();
    let account_b = double.add_account("tenant-b").unwrap();
    let tunnel_a = double.add_tunnel(&account_a, "edge-a").unwrap();
    let tunnel_b = double.add_tunnel(&account_b, "edge-b").unwrap();
    double
        .add_token(CREDENTIALS_A, TokenScope::User(vec![account_a.clone()]))
        .unwrap();
    double
        .add_token(CREDENTIALS_B, TokenScope::User(vec![account_b]))
        .unwrap();
    World {
        double,
        account_a,
        tunnel_a,
        tunnel_b,
    }
}

fn api(w: &World, credentials: &str) -> Client {
    Client::builder(credentials)
        .base_url(w.double.base_url())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A token a tenant can write without any access to the tunnel.
fn minted(account: &str, tunnel: &str) -> ConnectorToken {
    let json = format!(
        r#"{{"a":"{account}","t":"{tunnel}","s":"{}"}}"#,
        STANDARD.encode([0x5a_u8; 32])
    );
    ConnectorToken::parse(&STANDARD.encode(json)).unwrap()
}

fn real(info: &TunnelInfo) -> ConnectorToken {
    ConnectorToken::parse(&info.token).unwrap()
}

#[tokio::test]
async fn the_tunnels_own_token_is_accepted() {
    let w = world().await;
    verify_claim(&api(&w, CREDENTIALS_A), &w.account_a, &real(&w.tunnel_a))
        .await
        .expect("a real token of a tunnel in the credentials' account");
}

#[tokio::test]
async fn a_forged_token_with_the_right_tunnel_id_and_a_wrong_secret_is_refused() {
    let w = world().await;
    let forged = minted(&w.account_a, &w.tunnel_a.tunnel_id);
    let err = verify_claim(&api(&w, CREDENTIALS_A), &w.account_a, &forged)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClaimVerificationError::SecretMismatch { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert_eq!(err.reason(), "TunnelSecretMismatch");
    assert!(err.to_string().contains("tunnelTokenSecretRef"), "{err}");
}

#[tokio::test]
async fn a_tunnel_of_another_account_is_refused() {
    let w = world().await;
    // The neighbour's real token: its account is not the credentials' account. Refused before
    // any call, so nothing is read or written with the operator's credentials.
    let err = verify_claim(&api(&w, CREDENTIALS_A), &w.account_a, &real(&w.tunnel_b))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClaimVerificationError::AccountMismatch { .. }),
        "{err:?}"
    );
    assert_eq!(err.reason(), "TunnelAccountMismatch");
    assert!(w.double.calls().is_empty(), "{:?}", w.double.calls());

    // The neighbour's tunnel UUID written into a token of the credentials' account: that
    // account has no such tunnel.
    let err = verify_claim(
        &api(&w, CREDENTIALS_A),
        &w.account_a,
        &minted(&w.account_a, &w.tunnel_b.tunnel_id),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ClaimVerificationError::TunnelNotFound { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_nonexistent_tunnel_is_refused() {
    let w = world().await;
    let token = minted(&w.account_a, "deadbeef-0000-4000-8000-000000000000");
    let err = verify_claim(&api(&w, CREDENTIALS_A), &w.account_a, &token)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClaimVerificationError::TunnelNotFound { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert_eq!(err.reason(), "TunnelNotFound");
    let verdict = err.gateway_verdict();
    assert_eq!(
        (verdict.type_.as_str(), verdict.status),
        ("Accepted", false)
    );
}

#[tokio::test]
async fn credentials_without_access_to_the_account_say_which_permission_is_missing() {
    let w = world().await;
    let err = verify_claim(&api(&w, CREDENTIALS_B), &w.account_a, &real(&w.tunnel_a))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClaimVerificationError::CredentialsRefused { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert!(err.to_string().contains("Cloudflare Tunnel Write"), "{err}");
}

#[tokio::test]
async fn server_errors_rate_limits_and_dropped_connections_are_transient() {
    let w = world().await;
    let token = real(&w.tunnel_a);
    let tunnel_path = format!(
        "/accounts/{}/cfd_tunnel/{}",
        w.account_a, w.tunnel_a.tunnel_id
    );
    let token_path = format!("{tunnel_path}/token");
    let faults = [
        (tunnel_path.clone(), Fault::Status(503)),
        (token_path.clone(), Fault::Status(500)),
        (
            tunnel_path.clone(),
            Fault::RateLimited {
                retry_after_secs: 1,
            },
        ),
        (token_path, Fault::Close),
        (tunnel_path, Fault::Malformed),
    ];
    let api = api(&w, CREDENTIALS_A);
    for (path, fault) in faults {
        w.double.inject(FaultRule::new(&path, fault.clone()));
        let err = verify_claim(&api, &w.account_a, &token).await.unwrap_err();
        assert!(err.is_transient(), "{fault:?} on {path}: {err:?}");
        assert_eq!(err.reason(), "TunnelVerificationPending");
    }
    verify_claim(&api, &w.account_a, &token)
        .await
        .expect("the next attempt, with the API back, accepts the claim");
}
