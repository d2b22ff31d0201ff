//! Ingress sync (TG-3): per tunnel, read the ingress document, plan it with
//! [`crate::publish::cloudflare::ingress::plan`], and write it only when it changed.
//!
//! A tunnel whose hostnames equal those of its last successful sync is not read again until
//! [`RESYNC_AFTER`] has passed ([`super::memo`]), and a burst of route changes, coalesced into
//! one round by the sync loop, costs one GET and at most one PUT per tunnel.
//!
//! Each tunnel syncs on its own: one failing tunnel (bad credentials, rate limit, outage) leaves
//! the others untouched, and only its Gateways' routes are marked Pending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cloudflare_api::{ApiMetrics, BuildError, Client, Error, RetryPolicy, retry};
use tokio::sync::Mutex;

#[cfg(doc)]
use super::memo::RESYNC_AFTER;
use super::memo::Synced;
use crate::credentials::Credentials;
use crate::keys::RouteId;
use crate::model::TunnelPlan;
use crate::model::dedicated::{Verification, VerifyRequest};
use crate::model::rules::hostnames;
use crate::names::sha256_hex;
use crate::publish::cloudflare::ingress;
use crate::publish::cloudflare::verify::verify_claim;

/// Why a tunnel's document could not be synced (or a claim not asked about); the text is what
/// its routes and Gateways show.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("building the Cloudflare client: {0}")]
    Client(#[source] BuildError),
    #[error("finding the Cloudflare account: {0}")]
    Account(#[from] AccountError),
    /// Reading or writing the tunnel's configuration.
    #[error(transparent)]
    Api(Error),
}

/// Why the account of an API token is not known.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error(transparent)]
    Api(Error),
    #[error("the API token sees no account; set accountId on the GatewayClassConfig")]
    None,
    #[error("the API token sees {0} accounts; set accountId on the GatewayClassConfig")]
    Many(usize),
}

/// The result of one tunnel's sync.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TunnelResult {
    /// Hostnames left out by the rule cap, with the route that brought each.
    pub overflow: Vec<(String, RouteId)>,
    /// Rules in the document now (the catch-all included).
    pub rules: usize,
    /// Whether a PUT was made.
    pub wrote: bool,
    /// The hostnames the document lists now (lower-case, no trailing dot; the overflow left
    /// out): a route is published once all of its hostnames are here.
    pub hostnames: BTreeSet<String>,
}

#[derive(Default)]
struct TunnelState {
    /// The hostnames and a fingerprint of the credentials used → the rules written.
    synced: Option<Synced<(Vec<String>, String), usize>>,
}

/// Syncs tunnels; keeps clients, accounts and what each tunnel was last synced to.
pub struct TunnelSync {
    base_url: String,
    metrics: ApiMetrics,
    retry: RetryPolicy,
    clients: Mutex<BTreeMap<String, Client>>,
    accounts: Mutex<BTreeMap<String, String>>,
    state: Mutex<BTreeMap<String, Arc<Mutex<TunnelState>>>>,
}

impl TunnelSync {
    pub fn new(base_url: impl Into<String>, metrics: ApiMetrics, retry: RetryPolicy) -> Self {
        Self {
            base_url: base_url.into(),
            metrics,
            retry,
            clients: Mutex::default(),
            accounts: Mutex::default(),
            state: Mutex::default(),
        }
    }

    /// Brings `tunnel`'s ingress document to `plan`; the error is what routes will show.
    pub async fn sync(&self, tunnel: &str, plan: &TunnelPlan) -> Result<TunnelResult, SyncError> {
        // The credentials are part of what was synced: a rotated API token is used at once (and
        // a document another party changed meanwhile is healed with it).
        let hostnames: Vec<String> = plan.hostnames.iter().map(|(h, _)| h.clone()).collect();
        let fingerprint = sha256_hex(&format!(
            "{}\n{:?}",
            plan.credentials.api_token, plan.credentials.account_id
        ));
        let state = self
            .state
            .lock()
            .await
            .entry(tunnel.to_owned())
            .or_default()
            .clone();
        let mut state = state.lock().await;
        let input = (hostnames, fingerprint);
        if let Some(synced) = &state.synced
            && synced.stands_for(&input)
        {
            let overflow = overflow_of(plan, &input.0);
            return Ok(TunnelResult {
                hostnames: listed(&input.0, &overflow),
                overflow,
                rules: synced.result,
                wrote: false,
            });
        }
        let hostnames = &input.0;
        let client = self.client(&plan.credentials).await?;
        let account = self.account(&client, &plan.credentials).await?;
        let sleep = tokio::time::sleep;
        let current = retry(&self.retry, sleep, || {
            client.get_tunnel_configuration(&account, tunnel)
        })
        .await
        .map_err(SyncError::Api)?;
        let current_doc = current.config;
        let planned = ingress::plan(&current_doc, hostnames);
        let rules = planned
            .write
            .as_ref()
            .map(|d| d.ingress.len())
            .unwrap_or(current_doc.ingress.len());
        let wrote = planned.write.is_some();
        if let Some(doc) = &planned.write {
            retry(&self.retry, sleep, || {
                client.put_tunnel_configuration(&account, tunnel, doc)
            })
            .await
            .map_err(SyncError::Api)?;
            tracing::info!(tunnel, rules, "tunnel ingress document written");
        }
        let overflow = overflow_of(plan, hostnames);
        let listed = listed(hostnames, &overflow);
        state.synced = Some(Synced::new(input, rules));
        Ok(TunnelResult {
            hostnames: listed,
            overflow,
            rules,
            wrote,
        })
    }

    /// Asks the Cloudflare API whether a dedicated Gateway's connector token is a real token of
    /// a tunnel the credentials' account holds ([`verify_claim`]).
    pub async fn verify(&self, req: &VerifyRequest) -> Verification {
        let client = match self.client(&req.credentials).await {
            Ok(c) => c,
            Err(e) => return Verification::Pending(e.to_string()),
        };
        let account = match self.account(&client, &req.credentials).await {
            Ok(a) => a,
            Err(e) => return Verification::Pending(SyncError::from(e).to_string()),
        };
        match verify_claim(&client, &account, &req.token).await {
            Ok(()) => Verification::Verified,
            Err(e) if e.is_transient() => Verification::Pending(e.to_string()),
            Err(e) => Verification::Refused(e.gateway_verdict()),
        }
    }

    /// The client and account of `creds` (cached), for the other Cloudflare calls of a round
    /// (the DNS records).
    pub async fn client_and_account(
        &self,
        creds: &Credentials,
    ) -> Result<(Client, String), SyncError> {
        let client = self.client(creds).await?;
        let account = self.account(&client, creds).await?;
        Ok((client, account))
    }

    /// The retry policy of every call.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Forgets tunnels that no Gateway uses any more.
    pub async fn retain(&self, tunnels: impl Fn(&str) -> bool) {
        self.state.lock().await.retain(|t, _| tunnels(t));
    }

    async fn client(&self, creds: &Credentials) -> Result<Client, SyncError> {
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(&creds.api_token) {
            return Ok(c.clone());
        }
        let client = Client::builder(creds.api_token.clone())
            .base_url(self.base_url.clone())
            .observer(Arc::new(self.metrics.clone()))
            .build()
            .map_err(SyncError::Client)?;
        clients.insert(creds.api_token.clone(), client.clone());
        Ok(client)
    }

    async fn account(&self, client: &Client, creds: &Credentials) -> Result<String, AccountError> {
        if let Some(a) = &creds.account_id {
            return Ok(a.clone());
        }
        if let Some(a) = self.accounts.lock().await.get(&creds.api_token) {
            return Ok(a.clone());
        }
        let accounts = client.list_accounts().await.map_err(AccountError::Api)?;
        match accounts.as_slice() {
            [one] => {
                self.accounts
                    .lock()
                    .await
                    .insert(creds.api_token.clone(), one.id.clone());
                Ok(one.id.clone())
            }
            [] => Err(AccountError::None),
            many => Err(AccountError::Many(many.len())),
        }
    }
}

/// The hostnames a document written for `hostnames` lists, as [`hostnames::normalize`]
/// spells them.
fn listed(hostnames: &[String], overflow: &[(String, RouteId)]) -> BTreeSet<String> {
    hostnames
        .iter()
        .map(|h| hostnames::normalize(h))
        .filter(|h| !overflow.iter().any(|(o, _)| o == h))
        .collect()
}

/// Hostnames beyond the cap: the plan's newest, mapped back to their routes.
fn overflow_of(plan: &TunnelPlan, hostnames: &[String]) -> Vec<(String, RouteId)> {
    let dry = ingress::plan(&Default::default(), hostnames);
    dry.overflow
        .into_iter()
        .filter_map(|h| {
            plan.hostnames
                .iter()
                .find(|(x, _)| x.trim_end_matches('.').eq_ignore_ascii_case(&h))
                .map(|(_, r)| (h.clone(), r.clone()))
        })
        .collect()
}
