//! The live state shared by the data plane and the config API: the current route table
//! (swapped atomically), the document it came from, metrics, and the pooled clients.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use prometheus_client::registry::Registry;

use tunnel_config::compile::{self, CompileError};
use tunnel_config::config::Config;
use tunnel_config::delta::DeltaError;

use crate::metrics::Metrics;
use crate::table::{self, RouteTable};
use crate::upstream::ClientCache;

/// Why a push was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("invalid config: {0}")]
    Invalid(#[from] CompileError),
    #[error("config version {pushed} is older than the loaded version {loaded}")]
    Stale { loaded: u64, pushed: u64 },
    /// A delta made for another version than the loaded one (0: none is loaded).
    #[error("the delta applies to version {base}, the loaded version is {loaded}")]
    Base { base: u64, loaded: u64 },
    /// A delta that cannot apply to the version it names (a controller bug).
    #[error("invalid delta: {0}")]
    BadDelta(DeltaError),
}

/// The default of `--max-request-head`: bytes of a client's request head (request line and
/// header fields; on HTTP/2 the header list as `SETTINGS_MAX_HEADER_LIST_SIZE` counts it).
pub const DEFAULT_MAX_REQUEST_HEAD: usize = 64 * 1024;
/// The least `--max-request-head` may be (hyper's smallest HTTP/1 read buffer).
pub const MIN_MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Shared by every connection and the admin API.
pub struct State {
    table: ArcSwapOption<RouteTable>,
    document: ArcSwapOption<Config>,
    metrics: Metrics,
    registry: Registry,
    /// Serialises pushes (so the version check and the swap are one step) and keeps the
    /// upstream clients across pushes.
    clients: Mutex<ClientCache>,
    draining: AtomicBool,
    max_request_head: usize,
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        Self {
            table: ArcSwapOption::empty(),
            document: ArcSwapOption::empty(),
            metrics,
            registry,
            clients: Mutex::new(ClientCache::default()),
            draining: AtomicBool::new(false),
            max_request_head: DEFAULT_MAX_REQUEST_HEAD,
        }
    }

    /// The same, with request heads bounded at `max` bytes (at least
    /// [`MIN_MAX_REQUEST_HEAD`]; smaller values are raised to it). Larger heads are answered
    /// with 431 before any byte reaches a backend.
    pub fn with_max_request_head(mut self, max: usize) -> Self {
        self.max_request_head = max.max(MIN_MAX_REQUEST_HEAD);
        self
    }

    /// How many bytes a client's request head may have.
    pub fn max_request_head(&self) -> usize {
        self.max_request_head
    }

    /// Parses, validates and compiles `body` completely, then swaps it in unless a newer
    /// version is loaded. An equal version is accepted (a re-push is idempotent). On any
    /// error nothing changes.
    pub fn apply(&self, body: &[u8]) -> Result<u64, ApplyError> {
        let config = compile::parse(body)?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(loaded) = self.table.load().as_ref().map(|t| t.version)
            && config.version < loaded
        {
            return Err(ApplyError::Stale {
                loaded,
                pushed: config.version,
            });
        }
        self.swap(config, &mut clients)
    }

    /// Applies a delta (`PATCH /config`) on top of the loaded document, only when that is
    /// exactly the delta's base version, then checks, compiles and swaps in the result as
    /// [`Self::apply`] does a whole document. On any error nothing changes.
    pub fn apply_delta(&self, body: &[u8]) -> Result<u64, ApplyError> {
        let delta = compile::parse_delta(body)?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(base) = self.document.load_full() else {
            return Err(ApplyError::Base {
                base: delta.base_version,
                loaded: 0,
            });
        };
        let config = delta.apply(&base).map_err(|e| match e {
            DeltaError::Base { base, loaded } => ApplyError::Base { base, loaded },
            e => ApplyError::BadDelta(e),
        })?;
        self.swap(config, &mut clients)
    }

    /// Compiles `config` and makes it live (the caller holds the push lock).
    fn swap(&self, config: Config, clients: &mut ClientCache) -> Result<u64, ApplyError> {
        let (table, used) = table::compile(&config, &self.metrics, clients)?;
        let version = table.version;
        self.table.store(Some(Arc::new(table)));
        self.document.store(Some(Arc::new(config)));
        clients.retain_used(&used);
        Ok(version)
    }

    /// The live table, if a config was loaded.
    pub fn table(&self) -> arc_swap::Guard<Option<Arc<RouteTable>>> {
        self.table.load()
    }

    /// The loaded document, if any.
    pub fn document(&self) -> Option<Arc<Config>> {
        self.document.load_full()
    }

    /// Marks the process as shutting down: `/readyz` answers 503 from now on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
