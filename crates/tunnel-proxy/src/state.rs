//! The live state shared by the data plane and the config API: the current route table
//! (swapped atomically), the document it came from (each route beside what it compiled to),
//! metrics, and the pooled clients.
//!
//! A whole document (`PUT`) compiles every route; a delta (`PATCH`) compiles only the routes it
//! brings and splices them into the loaded ones, sharing the rest (their upstream clients and
//! host metrics handles too) with the table before. Either way the table is
//! [`table::assemble`]d from the routes, so a delta makes exactly the table a push of the whole
//! patched document would.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use prometheus_client::registry::Registry;

use tunnel_config::compile::{self, CompileError};
use tunnel_config::config::{Config, Listener};
use tunnel_config::delta::DeltaError;
use tunnel_config::routing::HostPattern;

use crate::metrics::Metrics;
use crate::table::{self, Compiler, LoadedRoute, RouteTable};
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
    loaded: ArcSwapOption<Loaded>,
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
            loaded: ArcSwapOption::empty(),
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
        let previous = self.table.load_full();
        if let Some(loaded) = previous.as_ref().map(|t| t.version)
            && config.version < loaded
        {
            return Err(ApplyError::Stale {
                loaded,
                pushed: config.version,
            });
        }
        let listeners = Listeners::compile(config.listeners)?;
        let mut compiler = Compiler::new(&self.metrics, &mut clients, previous.as_deref());
        let routes = (config.routes.into_iter().enumerate())
            .map(|(i, route)| compiler.route(i, route))
            .collect::<Result<Vec<_>, _>>()?;
        let document = self.loaded.load_full();
        let replaced = Replaced {
            removed: 0..document.as_ref().map_or(0, |d| d.routes.len()),
            document,
        };
        let loaded = Loaded {
            version: config.version,
            listeners,
            routes,
        };
        let added = 0..loaded.routes.len();
        Ok(self.install(loaded, added, replaced, previous, &mut clients))
    }

    /// Applies a delta (`PATCH /config`) on top of the loaded document, only when that is
    /// exactly the delta's base version: the routes it brings are checked and compiled as
    /// [`Self::apply`] does those of a whole document, the others are kept as compiled. On any
    /// error nothing changes.
    pub fn apply_delta(&self, body: &[u8]) -> Result<u64, ApplyError> {
        let delta = compile::parse_delta(body)?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(base) = self.loaded.load_full() else {
            return Err(ApplyError::Base {
                base: delta.base_version,
                loaded: 0,
            });
        };
        let replaced = delta
            .replaced(base.version, base.routes.len())
            .map_err(|e| match e {
                DeltaError::Base { base, loaded } => ApplyError::Base { base, loaded },
                e => ApplyError::BadDelta(e),
            })?;
        let listeners = match delta.listeners {
            Some(document) => Listeners::compile(document)?,
            None => base.listeners.clone(),
        };
        let previous = self.table.load_full();
        let mut compiler = Compiler::new(&self.metrics, &mut clients, previous.as_deref());
        let brought = (delta.routes.into_iter().enumerate())
            .map(|(i, route)| compiler.route(replaced.start + i, route))
            .collect::<Result<Vec<_>, _>>()?;
        let added = replaced.start..replaced.start + brought.len();
        let mut routes = Vec::with_capacity(base.routes.len() - replaced.len() + brought.len());
        routes.extend_from_slice(&base.routes[..replaced.start]);
        routes.extend(brought);
        routes.extend_from_slice(&base.routes[replaced.end..]);
        let loaded = Loaded {
            version: delta.version,
            listeners,
            routes,
        };
        let replaced = Replaced {
            document: Some(base),
            removed: replaced,
        };
        Ok(self.install(loaded, added, replaced, previous, &mut clients))
    }

    /// Makes `loaded` live (the caller holds the push lock): its table assembled and swapped
    /// in, the clients of its `added` routes counted and those of the routes it `replaced`
    /// uncounted. `previous` is the caller's reference to the table it replaces.
    fn install(
        &self,
        loaded: Loaded,
        added: Range<usize>,
        replaced: Replaced,
        previous: Option<Arc<RouteTable>>,
        clients: &mut ClientCache,
    ) -> u64 {
        let table = table::assemble(
            loaded.version,
            loaded.listeners.gate.clone(),
            &loaded.routes,
        );
        for route in &loaded.routes[added] {
            clients.hold(route.clients());
        }
        if let Some(document) = &replaced.document {
            for route in &document.routes[replaced.removed.clone()] {
                clients.release(route.clients());
            }
        }
        clients.forget_unused();
        let version = loaded.version;
        let old = (
            self.table.swap(Some(Arc::new(table))),
            self.loaded.swap(Some(Arc::new(loaded))),
        );
        retire((old, previous, replaced));
        version
    }

    /// The live table, if a config was loaded.
    pub fn table(&self) -> arc_swap::Guard<Option<Arc<RouteTable>>> {
        self.table.load()
    }

    /// The loaded document, if any (a copy made from its routes).
    pub fn document(&self) -> Option<Arc<Config>> {
        let loaded = self.loaded.load_full()?;
        Some(Arc::new(Config {
            version: loaded.version,
            listeners: loaded.listeners.document.clone(),
            routes: loaded.routes.iter().map(|r| r.route.clone()).collect(),
        }))
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

/// The loaded document as the proxy keeps it: its routes beside what they compiled to, behind
/// `Arc`s, so a delta copies pointers to the routes it keeps.
struct Loaded {
    version: u64,
    listeners: Arc<Listeners>,
    routes: Vec<Arc<LoadedRoute>>,
}

/// The document a push was applied to and the range of its routes the push removed.
struct Replaced {
    document: Option<Arc<Loaded>>,
    removed: Range<usize>,
}

/// Frees what a push replaced (the last references once the new table is live) on a blocking thread of the runtime when there is one, so the
/// push is answered first: dropping a table is ~7 % of a delta's work with 3,000 routes, and
/// ~10 % of a whole document's that replaces another (docs/benchmarks.md).
fn retire(replaced: impl Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(replaced))),
        Err(_) => drop(replaced),
    }
}

/// The listeners of the loaded document and the gate they make.
struct Listeners {
    document: Vec<Listener>,
    gate: Arc<[HostPattern]>,
}

impl Listeners {
    fn compile(document: Vec<Listener>) -> Result<Arc<Self>, CompileError> {
        Ok(Arc::new(Self {
            gate: compile::compile_listeners(&document)?,
            document,
        }))
    }
}

#[cfg(test)]
mod tests;
