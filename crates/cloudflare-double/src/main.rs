//! `cloudflare-double`: the Cloudflare API contract double as a process, for the demo.
//!
//! `cloudflare-double --listen 127.0.0.1:8787 --seed seed.yaml [--admin]` serves the API under
//! `http://127.0.0.1:8787/client/v4`, seeded from the file, and prints each seeded tunnel's
//! connector token. `--admin` also serves the test controls under `/__admin`; `--edge ADDR` the
//! edge visitors' requests go to, `--connectors ADDR` the port `cloudflared-standin` registers on.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use cloudflare_double::{CloudflareDouble, Options, Seed};
use service_support::logging::{self, LogFormat};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Contract double of the Cloudflare API for tests and the demo"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787", env = "CF_DOUBLE_LISTEN")]
    listen: SocketAddr,
    /// YAML or JSON seed file with accounts, tunnels and API tokens.
    #[arg(long, env = "CF_DOUBLE_SEED")]
    seed: Option<PathBuf>,
    /// Serve the unauthenticated admin surface under /__admin.
    #[arg(long)]
    admin: bool,
    /// Also serve the edge: visitors' requests, routed by the tunnels' ingress documents.
    #[arg(long, env = "CF_DOUBLE_EDGE")]
    edge: Option<SocketAddr>,
    /// Port connectors (`cloudflared-standin`) register on.
    #[arg(long, env = "CF_DOUBLE_CONNECTORS")]
    connectors: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    logging::init(LogFormat::Text);
    let args = Args::parse();
    let double = CloudflareDouble::start_with(Options {
        listen: args.listen,
        admin: args.admin,
        edge: args.edge,
        connectors: args.connectors,
    })
    .await
    .with_context(|| format!("binding {}", args.listen))?;
    if let Some(path) = &args.seed {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading seed {}", path.display()))?;
        let seed = Seed::parse(&text)?;
        for t in double.apply_seed(&seed)? {
            println!(
                "tunnel account={} id={} token={}",
                t.account_id, t.tunnel_id, t.token
            );
        }
    }
    if let Some(addr) = double.edge_addr() {
        println!("edge={addr}");
    }
    if let Some(addr) = double.connector_addr() {
        println!("connectors={addr}");
    }
    println!("base_url={}", double.base_url());
    tokio::select! {
        _ = double.wait() => {}
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
    }
    Ok(())
}
