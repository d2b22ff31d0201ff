//! Contract double of the Cloudflare API endpoints the tunnel gateway controller calls (TG-14).
//!
//! The real API cannot be reached from the test machines, so tests and the demo talk to this
//! HTTP server instead. It serves, under `/client/v4` like `https://api.cloudflare.com/client/v4`:
//!
//! | endpoint | behaviour |
//! |---|---|
//! | `GET /accounts` | accounts the token reaches, paged (`page`, `per_page`, `result_info`) |
//! | `GET /user/tokens/verify` | user-owned tokens |
//! | `GET /accounts/{id}/tokens/verify` | account-owned tokens |
//! | `GET /accounts/{id}/cfd_tunnel/{id}` | the tunnel |
//! | `GET /accounts/{id}/cfd_tunnel/{id}/token` | the connector token |
//! | `GET\|PUT /accounts/{id}/cfd_tunnel/{id}/configurations` | the ingress document, validated, versioned |
//! | `GET /zones` | zones the token has a DNS permission on, paged |
//! | `GET\|POST /zones/{id}/dns_records`, `PATCH\|DELETE /zones/{id}/dns_records/{id}` | DNS records: validation, same-name conflicts, DNS Read/Edit permission ([`dns`]) |
//! | `GET\|POST /accounts/{id}/access/apps`, `GET\|PUT\|DELETE /accounts/{id}/access/apps/{id}` | Access applications with inline policies: validation, one application per destination ([`access`]) |
//!
//! with the documented envelope ([`envelope`]), Bearer authentication, per-account scoping, and
//! the validation cloudflared applies. Each behaviour and its source (documentation page, or a
//! real response quoted publicly) is listed in `docs/cloudflare-double.md` and next to the code
//! in [`api`] and [`validate`].
//!
//! With [`Options::edge`] and [`Options::connectors`] it also plays the part of Cloudflare a
//! visitor's request meets ([`edge`]): an edge listener routing by the tunnels' ingress documents
//! over connectors registered on the connector port ([`wire`]), WebSockets included
//! ([`upgrade`]). The `cloudflared-standin` binary ([`connector`]) is the connector: what the
//! harness runs for the `cloudflared` image.
//!
//! Test controls live on [`CloudflareDouble`] (in-process) and, in the binary with `--admin`,
//! under [`ADMIN_PREFIX`] over HTTP: create accounts, tunnels and API tokens; inject faults
//! (a status, 429 with `Retry-After`, a hang, a closed connection) into the next N matching calls;
//! read the call log and the number of accepted configuration writes per tunnel.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use cloudflare_double::{CloudflareDouble, Fault, FaultRule, TokenScope};
//! let double = CloudflareDouble::start().await?;
//! let account = double.add_account("demo").unwrap();
//! let tunnel = double.add_tunnel(&account, "demo").unwrap();
//! double.add_token("api-token", TokenScope::User(vec![account.clone()])).unwrap();
//! double.inject(FaultRule::new(format!("/accounts/{account}/cfd_tunnel/{}/configurations", tunnel.tunnel_id), Fault::Status(503)).times(2));
//! // ... point the client at double.base_url() ...
//! assert_eq!(double.put_count(&tunnel.tunnel_id), 0);
//! # Ok(()) }
//! ```

mod access;
mod admin;
pub mod api;
pub mod connector;
mod dns;
pub mod edge;
mod envelope;
mod seed;
mod server;
mod state;
pub mod upgrade;
pub mod validate;
pub mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use seed::{Seed, SeedAccount, SeedError, SeedToken, SeedTunnel, SeedZone};
pub use server::{ADMIN_PREFIX, BASE_PATH};
pub use state::{
    AccessAppRec, Call, ControlError, DnsGrant, Fault, FaultRule, RecordRec, TokenScope, TunnelInfo,
};

use state::{Shared, World, lock};

/// Options of [`CloudflareDouble::start_with`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to bind (tests use `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// Serve the admin surface under [`ADMIN_PREFIX`].
    pub admin: bool,
    /// Address of the edge listener visitors send requests to ([`edge`]), if any.
    pub edge: Option<SocketAddr>,
    /// Address of the port connectors register on ([`wire`]), if any.
    pub connectors: Option<SocketAddr>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: false,
            edge: None,
            connectors: None,
        }
    }
}

/// A running double. Dropping it stops the server (hung requests are released).
pub struct CloudflareDouble {
    addr: SocketAddr,
    edge_addr: Option<SocketAddr>,
    connector_addr: Option<SocketAddr>,
    edge: Arc<edge::Edge>,
    world: Shared,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for CloudflareDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudflareDouble")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl CloudflareDouble {
    /// Starts on `127.0.0.1:0` without the admin surface.
    pub async fn start() -> std::io::Result<CloudflareDouble> {
        CloudflareDouble::start_with(Options::default()).await
    }

    /// Starts with explicit options.
    pub async fn start_with(options: Options) -> std::io::Result<CloudflareDouble> {
        let listener = TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let world: Shared = Arc::new(Mutex::new(World::default()));
        let (stop, stop_rx) = watch::channel(false);
        let edge = edge::Edge::new(world.clone(), stop_rx.clone());
        let mut edge_addr = None;
        if let Some(listen) = options.edge {
            let listener = TcpListener::bind(listen).await?;
            edge_addr = Some(listener.local_addr()?);
            edge::spawn_edge(listener, edge.clone());
        }
        let mut connector_addr = None;
        if let Some(listen) = options.connectors {
            let listener = TcpListener::bind(listen).await?;
            connector_addr = Some(listener.local_addr()?);
            edge::spawn_connector_port(listener, edge.clone());
        }
        let task = server::spawn(listener, world.clone(), options.admin, stop_rx);
        tracing::info!(%addr, admin = options.admin, ?edge_addr, ?connector_addr, "Cloudflare API double listening");
        Ok(CloudflareDouble {
            addr,
            edge_addr,
            connector_addr,
            edge,
            world,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The edge listener's address, when started with [`Options::edge`].
    pub fn edge_addr(&self) -> Option<SocketAddr> {
        self.edge_addr
    }

    /// The connector port's address, when started with [`Options::connectors`].
    pub fn connector_addr(&self) -> Option<SocketAddr> {
        self.connector_addr
    }

    /// Makes the edge send requests for hosts that no tunnel's ingress document names to
    /// `tunnel_id` (`None`: the edge's 404 again), as if the zone's operator had made a proxied
    /// CNAME to `<tunnel_id>.cfargotunnel.com` for every other name. The tunnel's document then
    /// decides (for such a host, its catch-all rule).
    pub fn route_unclaimed_hosts_to(&self, tunnel_id: Option<&str>) {
        self.edge.route_unclaimed_hosts_to(tunnel_id);
    }

    /// Live registered connector connections of a tunnel.
    pub fn live_connections(&self, tunnel_id: &str) -> usize {
        self.edge.live_connections(tunnel_id)
    }

    /// The API base URL, `http://<addr>/client/v4` (pass it to the client's `base_url`).
    pub fn base_url(&self) -> String {
        format!("http://{}{BASE_PATH}", self.addr)
    }

    /// Creates an account with a random ID; returns the ID.
    pub fn add_account(&self, name: &str) -> Result<String, ControlError> {
        lock(&self.world).add_account(None, name)
    }

    /// Creates an account with this ID (32 hex characters).
    pub fn add_account_with_id(&self, id: &str, name: &str) -> Result<String, ControlError> {
        lock(&self.world).add_account(Some(id), name)
    }

    /// Creates a tunnel with a random UUID and secret; returns it with its connector token.
    pub fn add_tunnel(&self, account_id: &str, name: &str) -> Result<TunnelInfo, ControlError> {
        lock(&self.world).add_tunnel(account_id, None, name, None)
    }

    /// Creates a tunnel with this UUID and, optionally, this base64 secret (≥ 32 bytes).
    pub fn add_tunnel_with(
        &self,
        account_id: &str,
        tunnel_id: &str,
        name: &str,
        secret_b64: Option<&str>,
    ) -> Result<TunnelInfo, ControlError> {
        lock(&self.world).add_tunnel(account_id, Some(tunnel_id), name, secret_b64)
    }

    /// Registers an API token.
    pub fn add_token(&self, value: &str, scope: TokenScope) -> Result<(), ControlError> {
        lock(&self.world).add_token(value, scope)
    }

    /// Creates a zone (a domain name) in an account; returns its random ID.
    pub fn add_zone(&self, account_id: &str, name: &str) -> Result<String, ControlError> {
        lock(&self.world).add_zone(account_id, None, name)
    }

    /// Gives an API token a DNS permission on zones of its accounts (tokens have none until
    /// then: they see no zones).
    pub fn grant_dns(&self, token: &str, grant: DnsGrant) -> Result<(), ControlError> {
        lock(&self.world).grant_dns(token, grant)
    }

    /// Adds a record to the zone named `zone`, as if made in the dashboard (the API's
    /// validation and same-name conflict rules apply).
    pub fn add_dns_record(
        &self,
        zone: &str,
        kind: &str,
        name: &str,
        content: &str,
        proxied: bool,
    ) -> Result<RecordRec, ControlError> {
        lock(&self.world).add_record(zone, kind, name, content, proxied)
    }

    /// Every DNS record, by zone name.
    pub fn dns_records(&self) -> std::collections::BTreeMap<String, Vec<RecordRec>> {
        lock(&self.world).records()
    }

    /// Adds an Access application covering `uri`, as if made in the dashboard (the API's
    /// validation and destination conflicts apply).
    pub fn add_access_app(
        &self,
        account_id: &str,
        name: &str,
        uri: &str,
    ) -> Result<AccessAppRec, ControlError> {
        lock(&self.world).add_access_app(account_id, name, uri)
    }

    /// Every Access application, oldest first.
    pub fn access_apps(&self) -> Vec<AccessAppRec> {
        let mut apps: Vec<AccessAppRec> = lock(&self.world).access_apps.values().cloned().collect();
        apps.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        apps
    }

    /// The tunnel's connector token.
    pub fn tunnel_token(&self, account_id: &str, tunnel_id: &str) -> Result<String, ControlError> {
        lock(&self.world).tunnel_token(account_id, tunnel_id)
    }

    /// Gives the tunnel a new secret; returns its new connector token.
    pub fn rotate_tunnel_secret(
        &self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<String, ControlError> {
        lock(&self.world).rotate_tunnel_secret(account_id, tunnel_id)
    }

    /// Replaces a tunnel's configuration document without validation, as if written elsewhere
    /// (e.g. the dashboard). Bumps the version, not the write count.
    pub fn set_configuration(
        &self,
        account_id: &str,
        tunnel_id: &str,
        config: Value,
    ) -> Result<(), ControlError> {
        let mut world = lock(&self.world);
        let t = world.tunnel_mut(account_id, tunnel_id)?;
        t.config = Some(config);
        t.version += 1;
        Ok(())
    }

    /// The tunnel's current configuration document and version.
    pub fn configuration(
        &self,
        account_id: &str,
        tunnel_id: &str,
    ) -> Result<(Option<Value>, u64), ControlError> {
        let world = lock(&self.world);
        let t = world.tunnel(account_id, tunnel_id)?;
        Ok((t.config.clone(), t.version))
    }

    /// Accepted configuration PUTs to this tunnel (rejected ones are not counted).
    pub fn put_count(&self, tunnel_id: &str) -> u64 {
        let world = lock(&self.world);
        world
            .accounts
            .values()
            .find_map(|a| a.tunnels.get(tunnel_id))
            .map_or(0, |t| t.writes)
    }

    /// Injects a fault into the next matching calls.
    pub fn inject(&self, rule: FaultRule) {
        lock(&self.world).faults.push(rule);
    }

    /// Removes every pending fault.
    pub fn clear_faults(&self) {
        lock(&self.world).faults.clear();
    }

    /// Every API call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.world).calls.clone()
    }

    /// Empties the call log.
    pub fn clear_calls(&self) {
        lock(&self.world).calls.clear();
    }

    /// Applies a seed file's accounts, tunnels and tokens.
    pub fn apply_seed(&self, seed: &Seed) -> Result<Vec<TunnelInfo>, SeedError> {
        seed.apply(&mut lock(&self.world))
    }

    /// Runs until the server task ends (the binary's main loop).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for CloudflareDouble {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
