//! `demo`: what `make demo` runs. A `client` and a `target` cluster (real etcd and
//! kube-apiservers from the `test-cluster` harness) with the products running on them, the
//! commands to try, and everything kept up until Ctrl-C or SIGTERM.
//!
//! ```text
//! demo --state-dir .state/demo           # start, print what to try, stay up
//! demo --state-dir DIR --check           # start, run the printed commands, print PASS/FAIL, exit
//! ```
//!
//! One module per product ([`resource_proxy`], [`tunnel_gateway`]). Each product starts against
//! the shared control plane, prints its own instructions and contributes its own
//! [`steps::Step`]s, which are both printed (for people) and run (by `--check`).

mod resource_proxy;
mod steps;
mod tunnel_gateway;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use service_support::logging::{self, LogFormat};
use test_cluster::{ClusterSpec, ControlPlane};

#[derive(Parser)]
#[command(
    name = "demo",
    about = "A client and a target cluster with the resource proxy between them and the tunnel gateway in the client"
)]
struct Cli {
    /// Where PKI, kubeconfigs, configs and logs go. Wiped at start.
    #[arg(long, default_value = ".state/demo")]
    state_dir: PathBuf,
    /// Bring everything up, run the printed commands, print PASS or FAIL and exit (0 on PASS).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    test_cluster::install_crypto_provider();
    logging::init_with_default(LogFormat::Text, "info,kube_client=off");
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo: tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let state_dir = match prepare_state_dir(&cli.state_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("demo: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(run(&state_dir, cli.check));
    let _ = std::fs::remove_file(state_dir.join("up.pid"));
    let _ = std::fs::remove_file(state_dir.join("ready"));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Refuses a state directory another demo (or `test-cluster up`) runs on, wipes it, and records
/// this process in `up.pid` so `test-cluster down --state-dir DIR` (`make clean-state`) stops it.
fn prepare_state_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if let Some(pid) = running_pid(dir) {
        bail!(
            "pid {pid} already runs on {}; stop it (Ctrl-C there, or `make clean-state`) first",
            dir.display()
        );
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("wiping {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    std::fs::write(dir.join("up.pid"), std::process::id().to_string())?;
    Ok(dir)
}

fn running_pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.join("up.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"));
    (kill(Pid::from_raw(pid), None).is_ok() && !zombie).then_some(pid)
}

async fn run(state_dir: &Path, check: bool) -> anyhow::Result<bool> {
    eprintln!(
        "Starting etcd and the client and target clusters in {} ...",
        state_dir.display()
    );
    let cp = ControlPlane::builder()
        .state_dir(state_dir)
        .cluster(ClusterSpec::new("client").controller_manager())
        .cluster(ClusterSpec::new("target").controller_manager())
        .gateway_api()
        .start()
        .await
        .context("starting the control plane")?;
    let kubectl = test_cluster::Binaries::locate()?.kubectl();
    write_env(&cp, state_dir, &kubectl)?;

    eprintln!("Starting the resource proxy ...");
    let mut proxy = resource_proxy::ResourceProxy::start(&cp, state_dir).await?;
    eprintln!("Starting the tunnel gateway ...");
    let mut gateway = tunnel_gateway::TunnelGateway::start(&cp, state_dir).await?;

    let mut pids = cp.pids();
    pids.push(proxy.pid());
    pids.extend(gateway.pids());
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    std::fs::write(state_dir.join("pids"), pids.join("\n"))?;

    if check {
        let mut all = proxy.steps();
        all.extend(gateway.steps());
        let passed = steps::check(&cp, &all).await;
        if passed {
            println!("PASS");
        } else {
            println!("FAIL");
            println!("--- resource-proxy log ---\n{}", proxy.log_tail(60));
            println!("{}", gateway.log_tails(40));
        }
        drop(gateway);
        drop(proxy);
        drop(cp);
        return Ok(passed);
    }

    println!();
    println!("Clusters:");
    for c in cp.clusters() {
        println!(
            "  {:<8} {}  kubeconfig {}",
            c.name(),
            c.server_url(0),
            c.kubeconfig_path().display()
        );
    }
    println!("  kubectl  {}", kubectl.display());
    println!("  logs     {}/<cluster>/*.log", state_dir.display());
    println!();
    print!("{}", proxy.describe());
    println!();
    print!("{}", gateway.describe());
    println!();
    println!("Try it in another shell:");
    println!();
    println!("  source {}", state_dir.join("env").display());
    print_steps(&proxy.steps());
    println!();
    println!("The tunnel gateway:");
    print_steps(&gateway.steps());
    println!();
    println!(
        "Ready. Ctrl-C (or `make clean-state`) stops the products and the clusters; `make demo-check` runs the commands above itself."
    );
    std::fs::write(state_dir.join("ready"), "")?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let outcome = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(true),
            _ = term.recv() => break Ok(true),
            _ = tick.tick() => {
                if let Some(status) = proxy.exited() {
                    eprintln!("the resource proxy exited ({status}); last log lines:\n{}", proxy.log_tail(40));
                    break Ok(false);
                }
                if let Some((name, status)) = gateway.exited() {
                    eprintln!("{name} exited ({status}); last log lines:\n{}", gateway.log_tails(40));
                    break Ok(false);
                }
            }
        }
    };
    eprintln!("stopping");
    drop(gateway);
    drop(proxy);
    drop(cp);
    outcome
}

fn print_steps(steps: &[steps::Step]) {
    for step in steps {
        println!();
        println!("  # {}", step.title);
        println!("  {}", step.command_line());
    }
}

/// A binary of this workspace next to the demo executable (cargo builds them into one
/// directory); `package` is what to build when it is missing.
fn sibling_binary(name: &str, package: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the demo executable")?;
    let dir = exe
        .parent()
        .context("the demo executable has no directory")?;
    let binary = dir.join(name);
    if !binary.is_file() {
        bail!(
            "{} not found; build it next to the demo with `cargo build -p {package} -p demo` (make demo does)",
            binary.display()
        );
    }
    Ok(binary)
}

/// `DIR/env`: shell exports `KUBECONFIG_<CLUSTER>` and `KUBECTL`, as `test-cluster up` writes it.
fn write_env(cp: &ControlPlane, state_dir: &Path, kubectl: &Path) -> anyhow::Result<()> {
    let mut env = String::new();
    for c in cp.clusters() {
        env.push_str(&format!(
            "export KUBECONFIG_{}={}\n",
            c.name().to_uppercase().replace('-', "_"),
            c.kubeconfig_path().display()
        ));
    }
    env.push_str(&format!("export KUBECTL={}\n", kubectl.display()));
    // kubectl's default discovery cache is keyed by host:port, which other clusters reuse.
    env.push_str(&format!(
        "export KUBECACHEDIR={}\n",
        state_dir.join("kubectl-cache").display()
    ));
    std::fs::write(state_dir.join("env"), env)?;
    Ok(())
}
