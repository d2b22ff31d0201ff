//! `cloudflared-standin`: the connector stand-in the harness runs for the `cloudflared` image.
//!
//! Accepts the command line the controller renders for the `cf-proxy-<gateway>` Deployment's
//! cloudflared container (`tunnel --no-autoupdate --metrics ADDR --grace-period 30s run`, the
//! token in `TUNNEL_TOKEN` or `--token`) and runs [`cloudflare_double::connector::run`] against
//! the double's connector port (`--edge` / `TUNNEL_EDGE`). Exits non-zero when no first
//! registration succeeds within `--retries` retries (e.g. the edge refuses the token); on SIGTERM
//! or SIGINT drains for the grace period and exits 0.

use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use cloudflare_double::connector::{self, Config, DEFAULT_EDGE, parse_go_duration};
use service_support::logging::{self, LogFormat};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "cloudflared",
    version,
    about = "Connector stand-in for cloudflared, against the Cloudflare double"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Address of the metrics server serving `/ready`.
    #[arg(long, global = true, env = "TUNNEL_METRICS")]
    metrics: Option<String>,
    /// How long requests in flight may take after SIGTERM (Go duration).
    #[arg(long, global = true, env = "TUNNEL_GRACE_PERIOD", default_value = "30s", value_parser = parse_go_duration)]
    grace_period: Duration,
    /// The double's connector port (`host:port`).
    #[arg(long, global = true, env = "TUNNEL_EDGE", default_value = DEFAULT_EDGE)]
    edge: String,
    /// Failed attempts retried before the first registration, then the process exits non-zero.
    #[arg(long, global = true, env = "TUNNEL_RETRIES", default_value_t = 5)]
    retries: u32,
    /// Accepted for compatibility; the stand-in never updates itself.
    #[arg(long, global = true)]
    no_autoupdate: bool,
    /// Accepted for compatibility; the stand-in always speaks its HTTP/2 registration.
    #[arg(long, global = true, env = "TUNNEL_TRANSPORT_PROTOCOL")]
    protocol: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tunnel commands.
    Tunnel {
        #[command(subcommand)]
        command: TunnelCommand,
    },
}

#[derive(Debug, Subcommand)]
enum TunnelCommand {
    /// Runs a remotely managed tunnel with its connector token.
    Run {
        /// The connector token.
        #[arg(long, env = "TUNNEL_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// A tunnel name or ID; ignored (the token names the tunnel).
        tunnel: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    logging::init(LogFormat::Text);
    let cli = Cli::parse();
    let Command::Tunnel {
        command: TunnelCommand::Run { token, .. },
    } = cli.command;
    let token = token.context("no tunnel token: pass --token or set TUNNEL_TOKEN")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("Received signal terminated"),
            _ = int.recv() => tracing::info!("Received signal interrupt"),
        }
    };
    let config = Config {
        edge: cli.edge,
        token,
        metrics: cli.metrics,
        grace_period: cli.grace_period,
        retries: cli.retries,
    };
    connector::run(config, shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cloudflared").chain(args.iter().copied()))
    }

    #[test]
    fn accepts_the_rendered_command_line_and_the_token_flag() {
        // As the controller renders the cf-proxy-<gateway> container (token from TUNNEL_TOKEN).
        let cli = parse(&[
            "tunnel",
            "--no-autoupdate",
            "--metrics",
            "127.0.0.1:20241",
            "--grace-period",
            "45s",
            "run",
        ])
        .unwrap();
        assert_eq!(cli.metrics.as_deref(), Some("127.0.0.1:20241"));
        assert_eq!(cli.grace_period, Duration::from_secs(45));
        assert_eq!(cli.retries, 5);
        // The documented remote-tunnel form, flags after `run` too.
        let cli = parse(&[
            "tunnel",
            "run",
            "--token",
            "eyJhIjoi",
            "--metrics",
            "localhost:2000",
        ])
        .unwrap();
        let Command::Tunnel {
            command: TunnelCommand::Run { token, .. },
        } = cli.command;
        assert_eq!(token.as_deref(), Some("eyJhIjoi"));
        assert_eq!(cli.metrics.as_deref(), Some("localhost:2000"));
        assert_eq!(cli.grace_period, Duration::from_secs(30));
        assert!(parse(&["tunnel", "--grace-period", "30", "run"]).is_err());
        assert!(parse(&["tunnel", "login"]).is_err());
    }
}
