//! The HTTP client: one method per endpoint, envelope decoding, classification, observation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;

use crate::error::{BuildError, Error};
use crate::observe::{CallObserver, CallRecord, Resource};
use crate::types::{
    AccessApp, Account, DnsRecord, Envelope, NewAccessApp, NewDnsRecord, PutConfigurationBody,
    RecordFilter, TokenVerification, Tunnel, TunnelConfig, TunnelConfiguration, Zone,
};

/// A request body as JSON.
fn encode<T: serde::Serialize>(body: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(body).map_err(|e| Error::Decode {
        status: 0,
        detail: format!("encoding request body: {e}"),
    })
}

/// The production API base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.cloudflare.com/client/v4";

/// Default per-request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Page size used when listing accounts (the documented maximum of `per_page` for this
/// endpoint is not stated on the current page; 50 was the legacy documented maximum).
pub const ACCOUNTS_PER_PAGE: u64 = 50;

/// Page size used when listing zones (documented range 5..50).
pub const ZONES_PER_PAGE: u64 = 50;

/// Page size used when listing DNS records (documented default 100; larger pages mean fewer
/// calls for big zones).
pub const DNS_RECORDS_PER_PAGE: u64 = 1000;

/// Page size used when listing Access applications (the documented list takes `page` and
/// `per_page`; no bound is stated, 50 is the common default elsewhere).
pub const ACCESS_APPS_PER_PAGE: u64 = 50;

/// Upper bound on pages fetched by one list call, against a server that never ends.
const MAX_PAGES: u64 = 100;

/// Configures a [`Client`].
#[derive(Clone)]
pub struct ClientBuilder {
    token: String,
    base_url: String,
    timeout: Duration,
    observer: Option<Arc<dyn CallObserver>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Overrides the base URL (tests and the demo point it at the contract double).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Per-request timeout (connect included).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Receives one record per HTTP attempt (e.g. [`crate::ApiMetrics`]).
    pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Builds the client. Requires an installed rustls crypto provider (ring in this workspace).
    pub fn build(self) -> Result<Client, BuildError> {
        let mut base = Url::parse(&self.base_url).map_err(|e| BuildError::BaseUrl {
            url: self.base_url.clone(),
            reason: e.to_string(),
        })?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(BuildError::BaseUrl {
                url: self.base_url,
                reason: "must be an http or https URL".into(),
            });
        }
        base.set_query(None);
        base.set_fragment(None);
        if self.token.trim().is_empty() {
            return Err(BuildError::Token("empty"));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", self.token.trim()))
            .map_err(|_| BuildError::Token("not a valid HTTP header value"))?;
        auth.set_sensitive(true);
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(BuildError::NoCryptoProvider);
        }
        let http = reqwest::Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("cftunnel-controller/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(BuildError::Http)?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                auth,
                observer: self.observer,
            }),
        })
    }
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    auth: HeaderValue,
    observer: Option<Arc<dyn CallObserver>>,
}

/// A Cloudflare API client bound to one API token. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base.as_str())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts a builder for `api_token` with the production base URL and a 30 s timeout.
    pub fn builder(api_token: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            token: api_token.into(),
            base_url: DEFAULT_BASE_URL.to_string(),
            timeout: DEFAULT_TIMEOUT,
            observer: None,
        }
    }

    /// `GET /accounts`, every page. Used to find the account when the token sees exactly one.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/accounts/> ("List Accounts": `page`,
    /// `per_page`, `result_info{page, per_page, count, total_count}`).
    /// Account-owned tokens are refused by this endpoint (HTTP 400, code 1001), which surfaces as
    /// [`Error::Invalid`]; such deployments must configure the account ID.
    pub async fn list_accounts(&self) -> Result<Vec<Account>, Error> {
        self.list_all(&["accounts"], &[], ACCOUNTS_PER_PAGE, Resource::Accounts)
            .await
    }

    /// `GET /zones?account.id=...`, every page: the zones of the account the token can see
    /// (each as `{id, name, status, account{id, name}, ...}`).
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zones/methods/list/> (`name`,
    /// `account.id`, `page`, `per_page` 5..50).
    pub async fn list_zones(&self, account_id: &str) -> Result<Vec<Zone>, Error> {
        self.list_all(
            &["zones"],
            &[("account.id", account_id)],
            ZONES_PER_PAGE,
            Resource::Zones,
        )
        .await
    }

    /// `GET /zones/{zone_id}/dns_records`, every page, filtered by exact `name` and `type` when
    /// given.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/dns/subresources/records/methods/list/>.
    pub async fn list_dns_records(
        &self,
        zone_id: &str,
        filter: &RecordFilter,
    ) -> Result<Vec<DnsRecord>, Error> {
        let mut query = Vec::new();
        if let Some(name) = &filter.name {
            query.push(("name", name.as_str()));
        }
        if let Some(kind) = &filter.kind {
            query.push(("type", kind.as_str()));
        }
        self.list_all(
            &["zones", zone_id, "dns_records"],
            &query,
            DNS_RECORDS_PER_PAGE,
            Resource::DnsRecords,
        )
        .await
    }

    /// `POST /zones/{zone_id}/dns_records`.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/dns/subresources/records/methods/create/>.
    /// A name already held by a conflicting record is refused (HTTP 400, codes 81053/81054).
    pub async fn create_dns_record(
        &self,
        zone_id: &str,
        record: &NewDnsRecord,
    ) -> Result<DnsRecord, Error> {
        let url = self.url(&["zones", zone_id, "dns_records"])?;
        let body = encode(record)?;
        self.result(Method::POST, url, Resource::DnsRecords, Some(body))
            .await
    }

    /// `PATCH /zones/{zone_id}/dns_records/{dns_record_id}`: changes the fields given.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/dns/subresources/records/methods/edit/>.
    pub async fn update_dns_record(
        &self,
        zone_id: &str,
        record_id: &str,
        record: &NewDnsRecord,
    ) -> Result<DnsRecord, Error> {
        let url = self.url(&["zones", zone_id, "dns_records", record_id])?;
        let body = encode(record)?;
        self.result(Method::PATCH, url, Resource::DnsRecords, Some(body))
            .await
    }

    /// `DELETE /zones/{zone_id}/dns_records/{dns_record_id}` (result `{id}`).
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/dns/subresources/records/methods/delete/>.
    pub async fn delete_dns_record(&self, zone_id: &str, record_id: &str) -> Result<(), Error> {
        let url = self.url(&["zones", zone_id, "dns_records", record_id])?;
        let _: serde_json::Value = self
            .result(Method::DELETE, url, Resource::DnsRecords, None)
            .await?;
        Ok(())
    }

    /// `GET /accounts/{account_id}/access/apps`, every page.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/methods/list/>.
    pub async fn list_access_apps(&self, account_id: &str) -> Result<Vec<AccessApp>, Error> {
        self.list_all(
            &["accounts", account_id, "access", "apps"],
            &[],
            ACCESS_APPS_PER_PAGE,
            Resource::AccessApps,
        )
        .await
    }

    /// `POST /accounts/{account_id}/access/apps`, with its policies inline.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/methods/create/>.
    /// A destination another application covers is refused (HTTP 409,
    /// `access.api.error.conflict`).
    pub async fn create_access_app(
        &self,
        account_id: &str,
        app: &NewAccessApp,
    ) -> Result<AccessApp, Error> {
        let url = self.url(&["accounts", account_id, "access", "apps"])?;
        let body = encode(app)?;
        self.result(Method::POST, url, Resource::AccessApps, Some(body))
            .await
    }

    /// `PUT /accounts/{account_id}/access/apps/{app_id}`: replaces the application (its
    /// policies too).
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/methods/update/>.
    pub async fn update_access_app(
        &self,
        account_id: &str,
        app_id: &str,
        app: &NewAccessApp,
    ) -> Result<AccessApp, Error> {
        let url = self.url(&["accounts", account_id, "access", "apps", app_id])?;
        let body = encode(app)?;
        self.result(Method::PUT, url, Resource::AccessApps, Some(body))
            .await
    }

    /// `DELETE /accounts/{account_id}/access/apps/{app_id}` (result `{id}`).
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/access/subresources/applications/methods/delete/>.
    pub async fn delete_access_app(&self, account_id: &str, app_id: &str) -> Result<(), Error> {
        let url = self.url(&["accounts", account_id, "access", "apps", app_id])?;
        let _: serde_json::Value = self
            .result(Method::DELETE, url, Resource::AccessApps, None)
            .await?;
        Ok(())
    }

    /// Every page of a list endpoint (`page`, `per_page`; stops on `result_info.total_count`,
    /// a short page, or [`MAX_PAGES`]).
    async fn list_all<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
        per_page: u64,
        resource: Resource,
    ) -> Result<Vec<T>, Error> {
        let mut items = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut url = self.url(segments)?;
            {
                let mut pairs = url.query_pairs_mut();
                for (k, v) in query {
                    pairs.append_pair(k, v);
                }
                pairs
                    .append_pair("page", &page.to_string())
                    .append_pair("per_page", &per_page.to_string());
            }
            let (_, env): (_, Envelope<Vec<T>>) =
                self.send(Method::GET, url, resource, None).await?;
            let info = env.result_info.clone();
            let batch = env.result.unwrap_or_default();
            let got = batch.len() as u64;
            items.extend(batch);
            let done = match info {
                Some(info) if info.total_count > 0 => items.len() as u64 >= info.total_count,
                Some(info) if info.per_page > 0 => got < info.per_page,
                _ => true,
            };
            if done || got == 0 {
                return Ok(items);
            }
        }
        Ok(items)
    }

    /// `GET /user/tokens/verify`: verifies a user-owned token.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/user/subresources/tokens/methods/verify/>.
    /// Account-owned tokens fail here; use [`Client::verify_account_token`] for them.
    pub async fn verify_user_token(&self) -> Result<TokenVerification, Error> {
        let url = self.url(&["user", "tokens", "verify"])?;
        self.result(Method::GET, url, Resource::TokenVerify, None)
            .await
    }

    /// `GET /accounts/{account_id}/tokens/verify`: verifies an account-owned token.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/accounts/subresources/tokens/methods/verify/>.
    pub async fn verify_account_token(&self, account_id: &str) -> Result<TokenVerification, Error> {
        let url = self.url(&["accounts", account_id, "tokens", "verify"])?;
        self.result(Method::GET, url, Resource::TokenVerify, None)
            .await
    }

    /// `GET /accounts/{account_id}/cfd_tunnel/{tunnel_id}`.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/tunnels/subresources/cloudflared/>
    /// ("Get a Cloudflare Tunnel").
    pub async fn get_tunnel(&self, account_id: &str, tunnel_id: &str) -> Result<Tunnel, Error> {
        let url = self.url(&["accounts", account_id, "cfd_tunnel", tunnel_id])?;
        self.result(Method::GET, url, Resource::Tunnel, None).await
    }

    /// `GET /accounts/{account_id}/cfd_tunnel/{tunnel_id}/token`: the connector token
    /// (parse it with [`crate::ConnectorToken::parse`]).
    ///
    /// Doc: <https://developers.cloudflare.com/cloudflare-one/connections/connect-networks/configure-tunnels/remote-tunnel-permissions/>
    /// (result is the token string). Needs a token permission such as "Cloudflare Tunnel Write".
    pub async fn get_tunnel_token(
        &self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<String, Error> {
        let url = self.url(&["accounts", account_id, "cfd_tunnel", tunnel_id, "token"])?;
        self.result(Method::GET, url, Resource::TunnelToken, None)
            .await
    }

    /// `GET /accounts/{account_id}/cfd_tunnel/{tunnel_id}/configurations`.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/tunnels/subresources/cloudflared/subresources/configurations/methods/get/>.
    pub async fn get_tunnel_configuration(
        &self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<TunnelConfiguration, Error> {
        let url = self.config_url(account_id, tunnel_id)?;
        let (_, env): (_, Envelope<TunnelConfiguration>) = self
            .send(Method::GET, url, Resource::TunnelConfigurations, None)
            .await?;
        Ok(env.result.unwrap_or_default())
    }

    /// `PUT /accounts/{account_id}/cfd_tunnel/{tunnel_id}/configurations` with
    /// `{"config": config}`. The whole document is replaced; fields kept in the `extra` maps of a
    /// previously fetched document are sent back unchanged.
    ///
    /// Doc: <https://developers.cloudflare.com/api/resources/zero_trust/subresources/tunnels/subresources/cloudflared/subresources/configurations/methods/update/>.
    pub async fn put_tunnel_configuration(
        &self,
        account_id: &str,
        tunnel_id: &str,
        config: &TunnelConfig,
    ) -> Result<TunnelConfiguration, Error> {
        let url = self.config_url(account_id, tunnel_id)?;
        let body = encode(&PutConfigurationBody { config })?;
        self.result(Method::PUT, url, Resource::TunnelConfigurations, Some(body))
            .await
    }

    fn config_url(&self, account_id: &str, tunnel_id: &str) -> Result<Url, Error> {
        self.url(&[
            "accounts",
            account_id,
            "cfd_tunnel",
            tunnel_id,
            "configurations",
        ])
    }

    /// Base URL plus percent-encoded path segments: an ID can never add or remove a segment
    /// (`/` is encoded; empty, `.` and `..` IDs are refused before sending, with status 0).
    fn url(&self, segments: &[&str]) -> Result<Url, Error> {
        if let Some(bad) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
            return Err(Error::Invalid {
                status: 0,
                errors: vec![crate::ApiMessage {
                    code: 0,
                    message: format!("identifier {bad:?} is not a valid path segment"),
                    error_chain: vec![],
                }],
            });
        }
        let mut url = self.inner.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        Ok(url)
    }

    /// Sends and requires a `result`.
    async fn result<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        resource: Resource,
        body: Option<Vec<u8>>,
    ) -> Result<T, Error> {
        let (status, env): (u16, Envelope<T>) = self.send(method, url, resource, body).await?;
        env.result.ok_or_else(|| Error::Decode {
            status,
            detail: "success without a result".into(),
        })
    }

    /// One HTTP attempt: send, decode the envelope, classify, report to the observer.
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        resource: Resource,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Envelope<T>), Error> {
        let started = Instant::now();
        let method_label = match method {
            Method::PUT => "PUT",
            Method::POST => "POST",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            _ => "GET",
        };
        let outcome = self.attempt(method, url, body).await;
        let (status, result) = match outcome {
            Ok((status, env)) => (Some(status), Ok((status, env))),
            Err((status, err)) => (status, Err(err)),
        };
        let record = CallRecord {
            method: method_label,
            resource,
            status,
            error: result.as_ref().err().map(Error::kind),
            duration: started.elapsed(),
        };
        match &result {
            Ok(_) => tracing::debug!(
                method = method_label,
                resource = resource.as_str(),
                status = record.status_label(),
                "Cloudflare API call"
            ),
            Err(err) => tracing::warn!(
                method = method_label,
                resource = resource.as_str(),
                status = record.status_label(),
                error_type = err.kind().as_str(),
                error = %err,
                "Cloudflare API call failed"
            ),
        }
        if let Some(observer) = &self.inner.observer {
            observer.observe(&record);
        }
        result
    }

    async fn attempt<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Envelope<T>), (Option<u16>, Error)> {
        let mut req = self
            .inner
            .http
            .request(method, url)
            .header(AUTHORIZATION, self.inner.auth.clone());
        if let Some(body) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let network = |e: reqwest::Error| Error::Network {
            timeout: e.is_timeout(),
            source: e,
        };
        let resp = req.send().await.map_err(|e| (None, network(e)))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = resp.bytes().await.map_err(|e| (Some(status), network(e)))?;

        if !(200..300).contains(&status) {
            // Error bodies are usually the envelope, but an edge 5xx may be HTML: classify by
            // status and keep whatever errors parse.
            let errors = serde_json::from_slice::<Envelope<serde_json::Value>>(&bytes)
                .map(|env| env.errors)
                .unwrap_or_default();
            return Err((
                Some(status),
                Error::from_status(status, retry_after, errors),
            ));
        }
        let env: Envelope<T> = serde_json::from_slice(&bytes).map_err(|e| {
            (
                Some(status),
                Error::Decode {
                    status,
                    detail: e.to_string(),
                },
            )
        })?;
        if !env.success {
            return Err((
                Some(status),
                Error::Invalid {
                    status,
                    errors: env.errors,
                },
            ));
        }
        Ok((status, env))
    }
}
