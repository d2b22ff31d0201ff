//! `demo`: what `make demo` runs. A `client` and a `target` cluster (real etcd and
//! kube-apiservers from the `test-cluster` harness), the client with the node agent, the products
//! installed from `deploy/` and running as Pods on that node, the commands to try, and
//! everything kept up until Ctrl-C or SIGTERM.
//!
//! ```text
//! demo --state-dir .state/demo           # start, print what to try, stay up
//! demo --state-dir DIR --check           # start, run the printed commands, print PASS/FAIL, exit
//! ```
//!
//! One module per product ([`resource_proxy`], [`tunnel_gateway`]). Each product is installed
//! on the shared control plane by the fixtures its `on_node` tests use, prints its own
//! instructions and contributes its own [`steps::Step`]s, which are both printed (for people)
//! and run (by `--check`).

mod resource_proxy;
mod steps;
mod tunnel_gateway;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use service_support::logging::{self, LogFormat};
use test_cluster::{ClusterSpec, ControlPlane};
use tunnel_gateway_fixtures::on_node;

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
        "Starting etcd, the client cluster with its node and the target cluster in {} ...",
        state_dir.display()
    );
    let binaries = on_node::Binaries::beside(&sibling_binary(
        "tunnel-gateway-controller",
        "tunnel-controller",
    )?)?;
    let resource_proxy_binary = sibling_binary("resource-proxy", "resource-proxy")?;
    // The tunnel gateway's install comes up with the control plane (the node maps its images).
    let install = on_node::start_on(
        &binaries,
        &[],
        "client",
        on_node::Method::Kustomize,
        |node| {
            let node = resource_proxy_fixtures::control_plane_node(node, &resource_proxy_binary);
            ControlPlane::builder()
                .state_dir(state_dir)
                .cluster(ClusterSpec::new("client").node(node))
                .cluster(ClusterSpec::new("target").controller_manager())
                .gateway_api()
        },
    )
    .await
    .context("starting the control plane and installing the tunnel gateway on the node")?;
    let cp = &install.cp;
    let kubectl = test_cluster::Binaries::locate()?.kubectl();
    write_env(cp, state_dir, &kubectl)?;

    eprintln!("Installing the resource proxy on the node ...");
    let proxy = resource_proxy::ResourceProxy::start(cp, &install.world, state_dir).await?;
    let gateway = tunnel_gateway::TunnelGateway::new(&install, state_dir)?;

    if check {
        let mut all = proxy.steps();
        all.extend(gateway.steps());
        let passed = steps::check(cp, &all).await;
        record_pids(state_dir)?;
        if passed {
            println!("PASS");
        } else {
            println!("FAIL");
            let seen = cp
                .cluster("client")
                .kubectl_ok(&["get", "pods,events", "-A", "-o", "wide"])
                .await
                .unwrap_or_else(|e| e.to_string());
            println!("--- the client's Pods and Events ---\n{seen}");
            println!(
                "--- container logs: {}/client/node/pods/ ---",
                state_dir.display()
            );
        }
        drop(proxy);
        drop(install);
        return Ok(passed);
    }
    record_pids(state_dir)?;

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
    println!(
        "  node     kt-node in the client: Pods run as processes in network namespaces behind {}; reach them with nsenter --net={} <command>",
        test_cluster::netns::GATEWAY,
        install.world.ns_path().display()
    );
    println!(
        "  logs     {dir}/<cluster>/*.log, containers: {dir}/client/node/pods/<namespace>_<pod>/<container>.log (or kubectl logs)",
        dir = state_dir.display()
    );
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
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("stopping");
    drop(proxy);
    drop(install);
    Ok(true)
}

/// `DIR/pids`: every process the demo started (etcd, the API servers, the controller managers,
/// the node's network-namespace holders and containers): its children.
fn record_pids(state_dir: &Path) -> anyhow::Result<()> {
    let me = std::process::id().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent == Some(me.as_str()) {
            pids.push(pid.to_owned());
        }
    }
    std::fs::write(state_dir.join("pids"), pids.join("\n"))?;
    Ok(())
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
