//! The parts of the world that run in the calling process, on its tokio runtime: the shared
//! plane's proxies, the Cloudflare contract double and HTTP backends.

use std::net::SocketAddr;
use std::sync::Arc;

use cloudflare_double::{CloudflareDouble, ControlError, TokenScope, TunnelInfo};
use tokio::net::TcpListener;
use tunnel_proxy::admin::{self, AdminError, AdminOptions};
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
}

/// A proxy standing in for one pod of a data plane.
pub struct Proxy {
    /// Its traffic port.
    pub data: SocketAddr,
    /// Its config API.
    pub admin: SocketAddr,
    pub state: Arc<State>,
}

/// Starts a proxy: the data plane and the config API with `token`.
pub async fn start_proxy(token: &str) -> Result<Proxy, StartError> {
    let state = Arc::new(State::new());
    let data = TcpListener::bind("127.0.0.1:0").await?;
    let admin_l = TcpListener::bind("127.0.0.1:0").await?;
    let p = Proxy {
        data: data.local_addr()?,
        admin: admin_l.local_addr()?,
        state: state.clone(),
    };
    let router = admin::router(
        state.clone(),
        AdminOptions {
            auth_token: Some(token.to_owned()),
            connector_ready_url: None,
        },
    )?;
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
