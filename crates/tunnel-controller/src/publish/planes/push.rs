//! Config push to a partition's proxies (TG-4, TG-10): the compiled route table goes to every
//! pod behind the partition's headless config Service, authenticated with that partition's
//! token and no other. The pusher only moves documents; which endpoints and which token belong to
//! a partition is the caller's decision.
//!
//! - Versions come from [`VersionClock`]: seeded from wall-clock milliseconds, one step per new
//!   document. A proxy that holds a newer version (a previous controller instance whose clock ran
//!   ahead) answers 409 with `loadedVersion`; the clock jumps past it and the document is pushed
//!   again once.
//! - [`Transport`]: mutual TLS by default (the plane's serving certificate checked against its
//!   config Service name, the controller's client certificate presented; see
//!   [`tunnel_config::config_api`]), plain HTTP only when opted out. A TLS client is built once
//!   per distinct trust bundle, identities and plane name, and reused. The serving certificate
//!   each endpoint presented on its last answered TLS push is kept ([`Pusher::presented`]):
//!   which CA a plane really serves from decides when a rotated-out CA may be retired.
//! - [`PushHealth`] turns rounds into the route condition: a sustained run of failed rounds
//!   ([`FAILED_ROUNDS_BEFORE_CONDITION`]) sets `ProxyConfigPushed=False`; the first fully
//!   successful round clears it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use sha2::{Digest, Sha256};
use tunnel_config::config::Config;
use tunnel_config::config_api::{ClientIdentity, ConfigTlsError, client_config};
use tunnel_config::delta::Delta;

/// Per-request timeout of a push.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive failed rounds before routes show `ProxyConfigPushed=False`.
pub const FAILED_ROUNDS_BEFORE_CONDITION: u32 = 3;

/// What one proxy said to a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// Loaded (this version or an equal one).
    Loaded,
    /// The token was refused (401): the proxy belongs to another partition, or the token rotated.
    Unauthorized,
    /// The document was refused (400, 413, 415): a controller bug; the proxy keeps its config.
    Rejected { status: u16, message: String },
    /// Still older than what the proxy holds after a re-push.
    Stale { loaded: u64 },
    /// No answer: connection refused, timeout, 5xx.
    Failed(String),
}

impl PushOutcome {
    pub fn is_loaded(&self) -> bool {
        matches!(self, PushOutcome::Loaded)
    }
}

/// Monotonic document versions, seeded from wall-clock milliseconds.
#[derive(Debug)]
pub struct VersionClock(AtomicU64);

impl Default for VersionClock {
    fn default() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1);
        Self(AtomicU64::new(now))
    }
}

impl VersionClock {
    /// The version for a new document.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Makes every later version larger than `seen`.
    pub fn observe(&self, seen: u64) {
        self.0.fetch_max(seen, Ordering::SeqCst);
    }
}

/// How a partition's proxies are reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Plain HTTP: only when explicitly opted out of TLS.
    Plain,
    /// Mutual TLS.
    Tls(Arc<TlsTarget>),
}

/// What the controller needs to push to one plane over mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsTarget {
    /// The CAs a serving certificate may chain to (PEM; both during a CA rotation).
    pub trust_pem: String,
    /// The controller's client certificates, the current CA's first.
    pub identities: Vec<ClientIdentity>,
    /// The name the plane's serving certificate must be valid for (its config Service's).
    pub plane_name: String,
}

/// Distinct TLS clients kept at once; beyond it the cache starts over (a rotation or a plane
/// gone leaves stale entries).
const MAX_TLS_CLIENTS: usize = 256;

/// Pushes documents over the proxies' config API.
#[derive(Clone)]
pub struct Pusher {
    http: reqwest::Client,
    tls: Arc<Mutex<HashMap<[u8; 32], reqwest::Client>>>,
    /// Per endpoint, the DER serving certificate it presented on its last answered TLS push.
    presented: Arc<Mutex<HashMap<String, Vec<u8>>>>,
}

/// A TLS client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PusherError {
    #[error("config API TLS: {0}")]
    Tls(#[from] ConfigTlsError),
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

impl Pusher {
    /// A pusher (the process's rustls provider must be installed first).
    pub fn new() -> Result<Self, reqwest::Error> {
        Ok(Self {
            http: reqwest::Client::builder().timeout(PUSH_TIMEOUT).build()?,
            tls: Arc::default(),
            presented: Arc::default(),
        })
    }

    /// The serving certificate (DER) `endpoint` presented on its last answered TLS push.
    pub fn presented(&self, endpoint: &str) -> Option<Vec<u8>> {
        self.presented
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(endpoint)
            .cloned()
    }

    /// Forgets the certificates of endpoints `keep` rejects (gone pods).
    pub fn retain_presented(&self, keep: impl Fn(&str) -> bool) {
        self.presented
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|ep, _| keep(ep));
    }

    fn client(
        &self,
        transport: &Transport,
    ) -> Result<(reqwest::Client, &'static str), PusherError> {
        let Transport::Tls(target) = transport else {
            return Ok((self.http.clone(), "http"));
        };
        let mut h = Sha256::new();
        for part in std::iter::once(&target.trust_pem)
            .chain(std::iter::once(&target.plane_name))
            .chain(
                target
                    .identities
                    .iter()
                    .flat_map(|i| [&i.cert_pem, &i.key_pem]),
            )
        {
            // length-prefixed so field boundaries cannot be shifted
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        let key: [u8; 32] = h.finalize().into();
        let mut cache = self.tls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cache.get(&key) {
            return Ok((c.clone(), "https"));
        }
        let config = client_config(&target.trust_pem, &target.identities, &target.plane_name)?;
        let client = reqwest::Client::builder()
            .timeout(PUSH_TIMEOUT)
            .tls_backend_preconfigured(config)
            .tls_info(true)
            // A handshake per push: the certificate recorded is the one the pod serves now, not
            // the one of a pooled connection opened before its files changed.
            .pool_max_idle_per_host(0)
            .build()?;
        if cache.len() >= MAX_TLS_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
        Ok((client, "https"))
    }

    /// Pushes `doc` to every endpoint at once with `token` over `transport`; on a 409 from a
    /// proxy holding a newer version, moves `clock` past it and pushes that proxy once more with
    /// a new version. The endpoints of `delta`'s set (those holding its base version) get the
    /// delta instead; one that refuses it (another base after all, or a proxy without the
    /// delta endpoint) gets the whole document at once.
    pub async fn push(
        &self,
        endpoints: &[String],
        token: &str,
        doc: &Config,
        delta: Option<(&Delta, &BTreeSet<String>)>,
        clock: &VersionClock,
        transport: &Transport,
    ) -> Vec<(String, PushOutcome)> {
        let client = match self.client(transport) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no config API client; nothing pushed");
                return endpoints
                    .iter()
                    .map(|ep| (ep.clone(), PushOutcome::Failed(e.to_string())))
                    .collect();
            }
        };
        let client = &client;
        // Serialised once, not once per proxy (megabytes with thousands of routes).
        let whole = OnceLock::new();
        let whole = &whole;
        let delta_body = delta.map(|(d, _)| body(d));
        let delta_body = delta_body.as_ref();
        let pushes = endpoints.iter().map(|ep| async move {
            let outcome = match delta_body
                .filter(|_| delta.is_some_and(|(_, eps)| eps.contains(ep)))
            {
                Some(patch) => match self
                    .send(client, Method::PATCH, ep, token, patch.clone())
                    .await
                {
                    PushOutcome::Stale { .. } | PushOutcome::Rejected { .. } => {
                        tracing::info!(endpoint = %ep, "delta refused; pushing the whole document");
                        self.whole(client, ep, token, doc, whole, clock).await
                    }
                    other => other,
                },
                None => self.whole(client, ep, token, doc, whole, clock).await,
            };
            if !outcome.is_loaded() {
                tracing::warn!(endpoint = %ep, ?outcome, "config push failed");
            }
            (ep.clone(), outcome)
        });
        futures::future::join_all(pushes).await
    }

    /// `PUT`s the whole document (`body`: its serialisation, made on first use); once more
    /// above a newer version the proxy holds.
    async fn whole(
        &self,
        client: &(reqwest::Client, &'static str),
        ep: &str,
        token: &str,
        doc: &Config,
        body_once: &OnceLock<Bytes>,
        clock: &VersionClock,
    ) -> PushOutcome {
        let first = body_once.get_or_init(|| body(doc)).clone();
        match self.send(client, Method::PUT, ep, token, first).await {
            PushOutcome::Stale { loaded } => {
                clock.observe(loaded);
                let mut again = doc.clone();
                again.version = clock.next();
                tracing::info!(endpoint = %ep, loaded, version = again.version, "proxy holds a newer version; pushing again above it");
                self.send(client, Method::PUT, ep, token, body(&again))
                    .await
            }
            other => other,
        }
    }

    async fn send(
        &self,
        (http, scheme): &(reqwest::Client, &'static str),
        method: Method,
        ep: &str,
        token: &str,
        body: Bytes,
    ) -> PushOutcome {
        let resp = http
            .request(method, format!("{scheme}://{ep}/config"))
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return PushOutcome::Failed(with_sources(&e)),
        };
        if let Some(cert) = resp
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|i| i.peer_certificate())
        {
            self.presented
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(ep.to_owned(), cert.to_vec());
        }
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        match status {
            200..=299 => PushOutcome::Loaded,
            401 => PushOutcome::Unauthorized,
            409 => PushOutcome::Stale {
                loaded: body["loadedVersion"].as_u64().unwrap_or_default(),
            },
            400..=499 => PushOutcome::Rejected {
                status,
                message: body["error"].as_str().unwrap_or_default().to_owned(),
            },
            _ => PushOutcome::Failed(format!("answered {status}")),
        }
    }
}

/// A document or delta as the request body.
fn body(value: &impl serde::Serialize) -> Bytes {
    // Plain data with string keys: serialising it cannot fail.
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// An error and its causes (a TLS refusal is a few levels down in reqwest's).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Whether a partition's routes should show `ProxyConfigPushed=False`.
#[derive(Debug, Default)]
pub struct PushHealth {
    failed_rounds: u32,
}

/// How a round changed the condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionChange {
    None,
    /// Set `ProxyConfigPushed=False` and emit a `ProxyConfigPushFailed` Warning Event.
    Failing,
    /// Clear it.
    Recovered,
}

impl PushHealth {
    /// Records a round (every endpoint's outcome); an empty round (no pods yet) is neutral.
    pub fn record(&mut self, outcomes: &[(String, PushOutcome)]) -> ConditionChange {
        if outcomes.is_empty() {
            return ConditionChange::None;
        }
        if outcomes.iter().all(|(_, o)| o.is_loaded()) {
            let was_failing = self.is_failing();
            self.failed_rounds = 0;
            return if was_failing {
                ConditionChange::Recovered
            } else {
                ConditionChange::None
            };
        }
        self.failed_rounds += 1;
        if self.failed_rounds == FAILED_ROUNDS_BEFORE_CONDITION {
            ConditionChange::Failing
        } else {
            ConditionChange::None
        }
    }

    /// Whether the condition is set now.
    pub fn is_failing(&self) -> bool {
        self.failed_rounds >= FAILED_ROUNDS_BEFORE_CONDITION
    }
}
