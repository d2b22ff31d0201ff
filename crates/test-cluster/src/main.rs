//! `test-cluster`: the harness as a command, for the demo and for people.
//!
//! ```text
//! test-cluster up --clusters client,target [--ha target] [--controller-manager] [--gateway-api]
//!                 [--node target --image NAME=PATH ... --host NAME=IP ...] --state-dir DIR
//! test-cluster down --state-dir DIR
//! ```
//! `up` starts the control plane, writes `DIR/<cluster>/kubeconfig` for each cluster and
//! `DIR/env` (shell exports), prints them, and stays up until interrupted. `down` stops the `up`
//! running on DIR and everything it started.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use service_support::logging::{self, LogFormat};
use test_cluster::node::NodeSpec;
use test_cluster::{ClusterSpec, ControlPlane};

#[derive(Parser)]
#[command(
    name = "test-cluster",
    about = "Real kube-apiservers and etcd on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a control plane and keep it up until interrupted (Ctrl-C, SIGTERM, or `down`).
    Up {
        /// Cluster names, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        clusters: Vec<String>,
        /// Clusters that get a second kube-apiserver on the same storage (an HA peer).
        #[arg(long, value_delimiter = ',')]
        ha: Vec<String>,
        /// Run kube-controller-manager (garbage collector, namespace controller) per cluster.
        #[arg(long)]
        controller_manager: bool,
        /// Install the Gateway API CRDs (standard channel) on every cluster.
        #[arg(long)]
        gateway_api: bool,
        /// Clusters that get a node agent running their Pods as local processes.
        #[arg(long, value_delimiter = ',')]
        node: Vec<String>,
        /// An image the nodes run, as NAME=EXECUTABLE (repeatable).
        #[arg(long = "image", value_parser = parse_image)]
        images: Vec<(String, PathBuf)>,
        /// An `/etc/hosts` entry of every Pod on the nodes, as NAME=IP (repeatable).
        #[arg(long = "host", value_parser = parse_host)]
        hosts: Vec<(String, std::net::IpAddr)>,
        /// Where PKI, kubeconfigs, logs and etcd data go. Wiped at start.
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Stop the control plane that `up` runs on this state directory.
    Down {
        #[arg(long)]
        state_dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    test_cluster::install_crypto_provider();
    logging::init_with_default(LogFormat::Text, "info,kube_client=off");
    match Cli::parse().command {
        Cmd::Up {
            clusters,
            ha,
            controller_manager,
            gateway_api,
            node,
            images,
            hosts,
            state_dir,
        } => up(
            clusters,
            ha,
            controller_manager,
            gateway_api,
            Nodes {
                node,
                images,
                hosts,
            },
            &state_dir,
        ),
        Cmd::Down { state_dir } => down(&state_dir),
    }
}

fn parse_image(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(path)))
        }
        _ => Err(format!("{arg:?}: expected NAME=EXECUTABLE")),
    }
}

fn parse_host(arg: &str) -> Result<(String, std::net::IpAddr), String> {
    match arg.split_once('=') {
        Some((name, ip)) if !name.is_empty() => ip
            .parse()
            .map(|ip| (name.to_owned(), ip))
            .map_err(|_| format!("{arg:?}: {ip:?} is not an IP address")),
        _ => Err(format!("{arg:?}: expected NAME=IP")),
    }
}

/// Which clusters get a node, the images the nodes run and their `/etc/hosts` entries.
struct Nodes {
    node: Vec<String>,
    images: Vec<(String, PathBuf)>,
    hosts: Vec<(String, std::net::IpAddr)>,
}

fn up(
    clusters: Vec<String>,
    ha: Vec<String>,
    controller_manager: bool,
    gateway_api: bool,
    nodes: Nodes,
    state_dir: &Path,
) -> anyhow::Result<()> {
    if let Some(unknown) = ha.iter().find(|h| !clusters.contains(h)) {
        bail!("--ha {unknown}: no such cluster in --clusters");
    }
    if let Some(unknown) = nodes.node.iter().find(|n| !clusters.contains(n)) {
        bail!("--node {unknown}: no such cluster in --clusters");
    }
    if let Some(pid) = running_pid(state_dir) {
        bail!(
            "a control plane (pid {pid}) already runs on {}; run `test-cluster down --state-dir {}` first",
            state_dir.display(),
            state_dir.display()
        );
    }
    if state_dir.exists() {
        std::fs::remove_dir_all(state_dir)
            .with_context(|| format!("wiping {}", state_dir.display()))?;
    }
    std::fs::create_dir_all(state_dir)?;
    let state_dir = state_dir.canonicalize()?;
    let mut builder = ControlPlane::builder().state_dir(&state_dir);
    for name in &clusters {
        let mut spec = ClusterSpec::new(name);
        if ha.contains(name) {
            spec = spec.ha();
        }
        if controller_manager {
            spec = spec.controller_manager();
        }
        if nodes.node.contains(name) {
            let node = nodes.images.iter().fold(
                NodeSpec::new(format!("{name}-node")),
                |node, (image, path)| node.image(image, path),
            );
            let node = nodes
                .hosts
                .iter()
                .fold(node, |node, (host, ip)| node.host(host, *ip));
            spec = spec.node(node);
        }
        builder = builder.cluster(spec);
    }
    if gateway_api {
        builder = builder.gateway_api();
    }
    std::fs::write(state_dir.join("up.pid"), std::process::id().to_string())?;

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let cp = builder
            .start()
            .await
            .context("starting the control plane")?;
        let pids: Vec<String> = cp.pids().iter().map(u32::to_string).collect();
        std::fs::write(state_dir.join("pids"), pids.join("\n"))?;
        let mut env = String::new();
        for c in cp.clusters() {
            println!("cluster {}:", c.name());
            for i in 0..c.server_count() {
                println!("  server     {}", c.server_url(i));
                println!("  kubeconfig {}", c.kubeconfig_path_for_server(i).display());
            }
            if let Some(node) = c.node() {
                println!("  node       {} (pods in 10.244.0.0/24)", node.name());
                println!(
                    "  pod network: nsenter --net={} <command>",
                    node.world().ns_path().display()
                );
            }
            env.push_str(&format!(
                "export KUBECONFIG_{}={}\n",
                c.name().to_uppercase().replace('-', "_"),
                c.kubeconfig_path().display()
            ));
        }
        let kubectl = test_cluster::Binaries::locate()?.kubectl();
        env.push_str(&format!("export KUBECTL={}\n", kubectl.display()));
        // kubectl's default discovery cache is keyed by host:port, which other clusters reuse.
        env.push_str(&format!(
            "export KUBECACHEDIR={}\n",
            state_dir.join("kubectl-cache").display()
        ));
        std::fs::write(state_dir.join("env"), &env)?;
        println!("kubectl    {}", kubectl.display());
        println!("shell      source {}", state_dir.join("env").display());
        println!("logs       {}/<cluster>/*.log", state_dir.display());
        println!(
            "ready; stop with Ctrl-C or `test-cluster down --state-dir {}`",
            state_dir.display()
        );
        std::fs::write(state_dir.join("ready"), "")?;

        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("stopping");
        drop(cp);
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(state_dir.join("up.pid"));
    let _ = std::fs::remove_file(state_dir.join("ready"));
    Ok(())
}

fn down(state_dir: &Path) -> anyhow::Result<()> {
    let Some(pid) = running_pid(state_dir) else {
        println!("nothing runs on {}", state_dir.display());
        return Ok(());
    };
    kill(Pid::from_raw(pid), Signal::SIGTERM).context("signalling the control plane")?;
    for _ in 0..300 {
        if !alive(pid) {
            println!("stopped");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // It did not stop in 30 s; SIGKILL takes its children with it (parent-death signal).
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    if let Ok(pids) = std::fs::read_to_string(state_dir.join("pids")) {
        for p in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
    println!("killed");
    Ok(())
}

fn running_pid(state_dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(state_dir.join("up.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"))
}
