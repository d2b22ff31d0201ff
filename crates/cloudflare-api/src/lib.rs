//! Thin typed client for the Cloudflare API endpoints the tunnel gateway controller calls.
//!
//! Endpoints (each method cites its documentation page):
//! - `GET|PUT /accounts/{account_id}/cfd_tunnel/{tunnel_id}/configurations`: the tunnel's
//!   ingress document ([`Client::get_tunnel_configuration`], [`Client::put_tunnel_configuration`]);
//!   unknown fields survive a GET→PUT round trip;
//! - `GET /accounts` with pagination ([`Client::list_accounts`]);
//! - `GET /user/tokens/verify` (user-owned tokens) and `GET /accounts/{id}/tokens/verify`
//!   (account-owned tokens);
//! - `GET /accounts/{id}/cfd_tunnel/{id}` and `.../token` (claim verification, TG-8);
//! - `GET /zones` and `GET|POST|PATCH|DELETE /zones/{id}/dns_records[/{id}]` (the opt-in DNS
//!   records: [`Client::list_zones`], [`Client::list_dns_records`], [`Client::create_dns_record`],
//!   [`Client::update_dns_record`], [`Client::delete_dns_record`]);
//! - `GET|POST /accounts/{id}/access/apps`, `PUT|DELETE /accounts/{id}/access/apps/{id}` (Access
//!   applications with inline policies: [`Client::list_access_apps`],
//!   [`Client::create_access_app`], [`Client::update_access_app`], [`Client::delete_access_app`]).
//!
//! Every failure is an [`Error`] whose [`Error::kind`] is a metric label; [`retry()`] retries the
//! retryable kinds with `Retry-After` honoured. Calls are reported to a [`CallObserver`], such as
//! [`ApiMetrics`]. [`ConnectorToken`] decodes tunnel connector tokens and compares secrets in
//! constant time.
//!
//! The client uses reqwest on rustls without a bundled provider: install ring's provider
//! (`rustls::crypto::ring::default_provider().install_default()`) before [`ClientBuilder::build`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use cloudflare_api::{ApiMetrics, Client, IngressRule, RetryPolicy, retry};
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = Arc::new(ApiMetrics::register(&mut registry));
//! let client = Client::builder("api-token").observer(metrics).build()?;
//! let (account, tunnel) = ("0123456789abcdef0123456789abcdef", "f70ff985-a4ef-4643-bbbc-4a0ed4fc8415");
//! let policy = RetryPolicy::default();
//! let mut current = retry(&policy, tokio::time::sleep, || client.get_tunnel_configuration(account, tunnel)).await?;
//! current.config.ingress = vec![IngressRule::new("app.example.com", "http://localhost:8080"), IngressRule::catch_all()];
//! retry(&policy, tokio::time::sleep, || client.put_tunnel_configuration(account, tunnel, &current.config)).await?;
//! # Ok(()) }
//! ```

// Everything but the token decoder is the client, behind the default `client` feature (the fuzz
// target builds the crate without it: see Cargo.toml).
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod error;
#[cfg(feature = "client")]
mod observe;
#[cfg(feature = "client")]
mod retry;
mod token;
#[cfg(feature = "client")]
mod types;

#[cfg(feature = "client")]
pub use client::{
    ACCESS_APPS_PER_PAGE, ACCOUNTS_PER_PAGE, Client, ClientBuilder, DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT, DNS_RECORDS_PER_PAGE, ZONES_PER_PAGE,
};
#[cfg(feature = "client")]
pub use error::{AUTH_ERROR_CODES, ApiMessage, BuildError, Error, ErrorKind};
#[cfg(feature = "client")]
pub use observe::{ApiMetrics, CallObserver, CallRecord, Resource};
#[cfg(feature = "client")]
pub use retry::{RetryPolicy, retry};
pub use token::{ConnectorToken, TokenError, is_account_id, is_uuid, secrets_equal};
#[cfg(feature = "client")]
pub use types::{
    AccessApp, AccessAppPolicy, AccessDestination, AccessPolicyRule, Account, CATCH_ALL_SERVICE,
    DnsRecord, Envelope, IngressRule, NewAccessApp, NewDnsRecord, RecordFilter, ResultInfo,
    TokenVerification, Tunnel, TunnelConfig, TunnelConfiguration, Zone,
};
