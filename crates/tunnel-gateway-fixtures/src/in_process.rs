//! The parts of the world that run in the calling process, on its tokio runtime: the shared
//! plane's proxies, the Cloudflare contract double and HTTP backends.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cloudflare_double::{CloudflareDouble, ControlError, TokenScope, TunnelInfo};
use tokio::net::TcpListener;
use tunnel_proxy::admin::{self, AdminError, AdminOptions};
use tunnel_proxy::config_tls::{self, ReloadingTls, TlsFiles, TlsFilesError};
use tunnel_proxy::state::State;

/// Why a part could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding a loopback port: {0}")]
    Bind(#[from] std::io::Error),
    #[error("the proxy's config API: {0}")]
    Admin(#[from] AdminError),
    #[error("the Cloudflare double: {0}")]
    Double(#[from] ControlError),
    #[error("the config API's certificate files: {0}")]
    Tls(#[from] TlsFilesError),
}

/// A proxy standing in for one pod of a data plane.
pub struct Proxy {
    /// Its traffic port.
    pub data: SocketAddr,
    /// Its admin port (status routes; also `/config` when the config API is plain HTTP).
    pub admin: SocketAddr,
    /// Where pushes go: the admin port, or the mutual TLS listener.
    pub config: SocketAddr,
    pub state: Arc<State>,
}

/// Starts a proxy: the data plane and the config API with `token`, in plain HTTP on the admin
/// port, or over mutual TLS on a port of its own with the files of a plane's TLS Secret in
/// `tls_dir` (re-read when they change, as the binary's `--config-tls-dir`).
pub async fn start_proxy(token: &str, tls_dir: Option<&Path>) -> Result<Proxy, StartError> {
    let state = Arc::new(State::new());
    let data = TcpListener::bind("127.0.0.1:0").await?;
    let admin_l = TcpListener::bind("127.0.0.1:0").await?;
    let options = AdminOptions {
        auth_token: Some(token.to_owned()),
        connector_ready_url: None,
    };
    let (router, config) = match tls_dir {
        None => {
            let router = admin::router(state.clone(), options)?;
            (router, admin_l.local_addr()?)
        }
        Some(dir) => {
            let expiry = state.metrics().config_tls_expiry().clone();
            let tls = ReloadingTls::load(TlsFiles::in_dir(dir), expiry)?;
            let (status, config_api) = admin::split(state.clone(), options)?;
            let l = TcpListener::bind("127.0.0.1:0").await?;
            let addr = l.local_addr()?;
            tls.watch(Duration::from_millis(200));
            tokio::spawn(config_tls::serve(l, config_api, tls));
            (status, addr)
        }
    };
    let p = Proxy {
        data: data.local_addr()?,
        admin: admin_l.local_addr()?,
        config,
        state: state.clone(),
    };
    tokio::spawn(async move { axum::serve(admin_l, router).await });
    tokio::spawn(tunnel_proxy::proxy::serve(
        data,
        state,
        std::future::pending(),
    ));
    Ok(p)
}

/// Starts an HTTP backend answering `<name> <path>`; returns its port.
pub async fn start_backend(name: &str) -> Result<u16, StartError> {
    let name = name.to_owned();
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let port = l.local_addr()?.port();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let name = name.clone();
        async move { format!("{name} {}", uri.path()) }
    });
    tokio::spawn(async move { axum::serve(l, app).await });
    Ok(port)
}

/// The Cloudflare double with one account, its tunnel `shared` (the class tunnel) and a
/// user-owned API token reaching the account.
pub struct Cloudflare {
    pub double: CloudflareDouble,
    pub account: String,
    pub tunnel: TunnelInfo,
}

/// Starts the double with account `account_name` and the API token `api_token`.
pub async fn start_cloudflare(
    account_name: &str,
    api_token: &str,
) -> Result<Cloudflare, StartError> {
    let double = CloudflareDouble::start().await?;
    let account = double.add_account(account_name)?;
    let tunnel = double.add_tunnel(&account, "shared")?;
    double.add_token(api_token, TokenScope::User(vec![account.clone()]))?;
    Ok(Cloudflare {
        double,
        account,
        tunnel,
    })
}
