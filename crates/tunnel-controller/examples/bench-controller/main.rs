//! TG-15, controller half: 1,000 HTTPRoutes over 100 Gateways (by default) created in a burst
//! against a real kube-apiserver, and how long the `tunnel-gateway-controller` binary takes to
//! converge: every route Accepted=True, every shared-plane proxy holding every route, the
//! tunnel's ingress document holding every hostname. Also the controller's memory, its
//! Cloudflare writes and sync rounds, and a baseline: the same burst and the status writes any
//! controller must make, into an API server with no controller running (once without watches,
//! once with the watches a convergence holds). With `--switches N`, then route propagation: one
//! more route's backend switched N times under traffic (see [`propagate`]). With `--cold-start`,
//! the objects are created first and the controller started after them (an install over
//! existing routes): convergence is then timed from the controller's start, and its floor is the
//! status writes alone. Run by
//! `scripts/bench-tunnel-controller.sh` and `scripts/bench-propagation.sh`; see
//! docs/benchmarks.md.

mod burst;
mod observe;
mod propagate;
mod setup;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use gateway_api::apis::standard::gatewayclasses::GatewayClass;
use kube::Api;

use burst::Shape;
use observe::{Convergence, Counters, Memory, Planes};

#[derive(Parser)]
#[command(about = "Burst benchmark of tunnel-gateway-controller against a real kube-apiserver")]
struct Cli {
    /// The controller binary (a release build).
    #[arg(long)]
    controller_bin: PathBuf,
    /// Control-plane state, kubeconfigs and the controller's log (kept after the run).
    #[arg(long, default_value = "target/bench-tunnel-controller")]
    state_dir: PathBuf,
    #[arg(long, default_value_t = 100)]
    gateways: usize,
    #[arg(long, default_value_t = 1000)]
    routes: usize,
    /// Backend Services (each with one EndpointSlice); routes use them in turn.
    #[arg(long, default_value_t = 4)]
    services: usize,
    /// In-process proxies standing in for the shared plane's pods.
    #[arg(long, default_value_t = 2)]
    proxies: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The order routes are created in.
    #[arg(long, value_enum, default_value_t = Order::ByGateway)]
    route_order: Order,
    /// Quiet period after convergence, to count late writes.
    #[arg(long, default_value_t = 10)]
    quiet_secs: u64,
    /// Give up when convergence takes longer.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// After convergence: switch one more route's backend this many times under traffic and
    /// report the propagation times (0: no propagation run).
    #[arg(long, default_value_t = 0)]
    switches: usize,
    /// Pause between one switch being served by every proxy and the next switch.
    #[arg(long, default_value_t = 200)]
    switch_gap_ms: u64,
    /// Create every object first and start the controller after them; time convergence from
    /// the controller's start.
    #[arg(long)]
    cold_start: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Order {
    /// Gateway 0's routes, then Gateway 1's, ... (hostnames keep arriving through the burst).
    ByGateway,
    /// Route i on Gateway i mod N (every hostname is in the first N routes).
    RoundRobin,
}

const NAMESPACE: &str = "bench";
const BASELINE_NAMESPACE: &str = "bench-baseline";
/// The controller's status writes in flight (its `WRITE_CONCURRENCY`), for the baseline's.
const STATUS_WRITERS: usize = 16;
/// Polling period of the in-process probes.
const POLL: Duration = Duration::from_millis(5);

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    // The observers (route watch, probes, proxies, backend, double) share two worker threads,
    // like the e2e world; the controller process has its own.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    anyhow::ensure!(
        cli.routes >= cli.gateways && cli.gateways > 0 && cli.services > 0,
        "need at least one route per Gateway, and one Service"
    );
    let load_start = loadavg();
    clear_state_dir(&cli.state_dir)?;
    eprintln!("starting etcd, kube-apiserver, the Cloudflare double and the shared plane");
    let stage = setup::stage(&cli.state_dir, cli.proxies).await?;
    let client = stage.cluster().client().await?;
    let shape = Shape {
        gateways: cli.gateways,
        routes: cli.routes,
        services: cli.services,
        backend_port: stage.backend_port,
        by_gateway: matches!(cli.route_order, Order::ByGateway),
    };

    eprintln!("baseline: the burst into {BASELINE_NAMESPACE}, no controller running");
    burst::namespace(&client, BASELINE_NAMESPACE).await?;
    let floor = measure_floor(&client, &stage, &shape, cli.concurrency, false).await?;
    eprintln!("baseline again, with the watches a convergence holds");
    let watched = measure_floor(&client, &stage, &shape, cli.concurrency, true).await?;

    let admin = SocketAddr::from(([127, 0, 0, 1], test_cluster::free_port()?));
    let tunnel = stage.tunnel.tunnel_id.clone();
    let conv = Arc::new(Convergence::default());
    let started = OnceLock::new();
    let (mut controller, pid, idle, before, puts_before, cpu_before, api_before, created, t0);
    if cli.cold_start {
        observe_convergence(&client, &stage, &cli, &tunnel, &conv).await?;
        created = burst::create(&client, NAMESPACE, &shape, cli.concurrency, &started).await?;
        eprintln!(
            "starting the controller over the {} objects",
            created.objects
        );
        puts_before = stage.double.put_count(&tunnel);
        api_before = observe::api_requests(&client).await?;
        let cp_before = observe::cpu_of(&stage.cp.pids())?;
        let bench_before = observe::cpu(std::process::id())?;
        t0 = Instant::now();
        controller = stage.start_controller(&cli.controller_bin, admin)?;
        pid = controller.pid();
        // A fresh process: its own CPU and counters start at zero; there is no idle moment.
        cpu_before = CpuSplit {
            controller: Duration::ZERO,
            control_plane: cp_before,
            bench: bench_before,
        };
        before = Counters::default();
        idle = None;
        eprintln!("controller log: {}", stage.controller_log().display());
    } else {
        eprintln!("starting the controller");
        controller = stage.start_controller(&cli.controller_bin, admin)?;
        pid = controller.pid();
        eprintln!("controller log: {}", stage.controller_log().display());
        observe::wait_ready(admin, Duration::from_secs(60)).await?;
        wait_class_accepted(&client, Duration::from_secs(60)).await?;
        // Let the first rounds and the leader election settle before the idle figures.
        tokio::time::sleep(Duration::from_secs(3)).await;
        idle = Some(observe::memory(pid)?);
        before = observe::counters(admin).await?;
        puts_before = stage.double.put_count(&tunnel);
        cpu_before = cpu_split(pid, &stage)?;
        api_before = observe::api_requests(&client).await?;
        observe_convergence(&client, &stage, &cli, &tunnel, &conv).await?;
        created = burst::create(&client, NAMESPACE, &shape, cli.concurrency, &started).await?;
        t0 = *started.get().context("the burst started")?;
        // For reading the controller's log against the burst.
        eprintln!(
            "first create at {} (UTC, ±the create time)",
            k8s_openapi::jiff::Timestamp::now() - t0.elapsed()
        );
    }
    let deadline = t0 + Duration::from_secs(cli.timeout_secs);
    while !conv.done() {
        if Instant::now() > deadline {
            let prefix = format!("{NAMESPACE}/");
            anyhow::bail!(
                "no convergence after {} s: routes accepted {}, proxies {:?} routes, ingress {} hostnames; controller log {}",
                cli.timeout_secs,
                conv.routes.get().is_some(),
                stage
                    .proxies
                    .iter()
                    .map(|p| observe::doc_routes(p, &prefix))
                    .collect::<Vec<_>>(),
                observe::ingress_hostnames(&stage.double, &stage.account, &tunnel),
                stage.controller_log().display()
            );
        }
        if let Some(status) = controller.exited() {
            anyhow::bail!(
                "the controller exited ({status}):\n{}",
                controller.log_tail(30)
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let converged = observe::memory(pid)?;
    let cpu_burst = cpu_split(pid, &stage)?.minus(&cpu_before);
    let at_convergence = observe::counters(admin).await?;
    let api_converged = observe::api_requests(&client).await?;
    let puts_burst = stage.double.put_count(&tunnel) - puts_before;
    check_traffic(stage.proxy_data[0], &shape).await?;

    eprintln!("quiet period: {} s", cli.quiet_secs);
    tokio::time::sleep(Duration::from_secs(cli.quiet_secs)).await;
    let after = observe::memory(pid)?;
    let end = observe::counters(admin).await?;
    let puts_quiet = stage.double.put_count(&tunnel) - puts_before - puts_burst;
    let load_end = loadavg();

    let since = |t: &OnceLock<Instant>| t.get().map(|t| t.duration_since(t0)).unwrap_or_default();
    let times = Times {
        routes: since(&conv.routes),
        proxies: since(&conv.proxies),
        ingress: since(&conv.ingress),
    };
    print_report(&Report {
        cli: &cli,
        floor,
        watched,
        created,
        times,
        idle,
        converged,
        after,
        puts: (puts_burst, puts_quiet),
        counters: (&before, &at_convergence, &end),
        load: (load_start, load_end),
        cpu: cpu_burst,
        api: api_converged.since(&api_before),
    });
    if cli.switches > 0 {
        propagation(&cli, &client, &stage, pid).await?;
    }
    controller.kill();
    Ok(())
}

/// Creates the burst's namespace and starts what watches it converge: the route watch and the
/// polls of the proxies' documents and the tunnel's ingress.
async fn observe_convergence(
    client: &kube::Client,
    stage: &setup::Stage,
    cli: &Cli,
    tunnel: &str,
    conv: &Arc<Convergence>,
) -> anyhow::Result<()> {
    burst::namespace(client, NAMESPACE).await?;
    observe::watch_routes(client, NAMESPACE, cli.routes, conv.clone()).await?;
    Planes {
        proxies: stage.proxies.clone(),
        double: stage.double.clone(),
        account: stage.account.clone(),
        tunnel: tunnel.to_owned(),
        namespace: NAMESPACE.to_owned(),
        routes: cli.routes,
        hostnames: ingress_hostnames(cli.gateways),
    }
    .poll(POLL, conv.clone());
    eprintln!(
        "burst: {} Gateways, {} HTTPRoutes, {} Services into {NAMESPACE}",
        cli.gateways, cli.routes, cli.services
    );
    Ok(())
}

/// What the API server alone takes for the writes of a convergence.
struct Floor {
    /// The burst's creates.
    creates: burst::Created,
    /// Then one status write per Gateway and route.
    statuses: burst::Created,
    /// CPU time of kube-apiserver and etcd over both.
    control_plane: Duration,
    /// The requests served over both.
    requests: Vec<(String, u64)>,
}

/// The burst's creates and the status writes any controller must make, into
/// [`BASELINE_NAMESPACE`] with no controller running, and then removed again; `watched`: while
/// the watches a convergence holds receive every event ([`observe::convergence_watches`]).
async fn measure_floor(
    client: &kube::Client,
    stage: &setup::Stage,
    shape: &Shape,
    concurrency: usize,
    watched: bool,
) -> anyhow::Result<Floor> {
    let watches = if watched {
        Some(observe::convergence_watches(client, BASELINE_NAMESPACE).await?)
    } else {
        None
    };
    let api_before = observe::api_requests(client).await?;
    let cpu_before = observe::cpu_of(&stage.cp.pids())?;
    let creates = burst::create(
        client,
        BASELINE_NAMESPACE,
        shape,
        concurrency,
        &OnceLock::new(),
    )
    .await?;
    let statuses = burst::write_statuses(client, BASELINE_NAMESPACE, shape, STATUS_WRITERS).await?;
    let floor = Floor {
        creates,
        statuses,
        control_plane: observe::cpu_of(&stage.cp.pids())?.saturating_sub(cpu_before),
        requests: observe::api_requests(client).await?.since(&api_before),
    };
    drop(watches);
    burst::remove(client, BASELINE_NAMESPACE).await?;
    Ok(floor)
}

/// The propagation run and its report.
async fn propagation(
    cli: &Cli,
    client: &kube::Client,
    stage: &setup::Stage,
    controller: u32,
) -> anyhow::Result<()> {
    eprintln!(
        "propagation: {} backend switches of one route, {} routes present, a request stream through each of {} proxies",
        cli.switches,
        cli.routes + 1,
        stage.proxy_data.len()
    );
    propagate::prepare(client, NAMESPACE, stage.switch_ports, &stage.proxy_data).await?;
    let load_start = loadavg();
    let out = propagate::run(
        client,
        NAMESPACE,
        &stage.proxy_data,
        cli.switches,
        Duration::from_millis(cli.switch_gap_ms),
    )
    .await?;
    let mem = observe::memory(controller)?;
    let bench = observe::memory(std::process::id())?;
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let stats = |d: &[Duration]| {
        format!(
            "{} / {} / {}",
            ms(propagate::percentile(d, 50)),
            ms(propagate::percentile(d, 99)),
            ms(propagate::percentile(d, 100))
        )
    };
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    println!();
    println!(
        "Route propagation: {} routes present, {} switches ({} observed), load average {} at the start, {} at the end.",
        cli.routes + 1,
        cli.switches,
        out.first.len(),
        load_start,
        loadavg()
    );
    println!();
    println!("| figure | value | TG-15 target |");
    println!("|---|---|---|");
    let p99 = propagate::percentile(&out.first, 99);
    println!(
        "| write → first answer from the new backend, p50 / p99 / max | {} | p99 < 30 ms: {} |",
        stats(&out.first),
        verdict(out.first.len() == cli.switches && p99 < Duration::from_millis(30))
    );
    println!(
        "| write → every proxy serves the new backend, p50 / p99 / max | {} | |",
        stats(&out.all)
    );
    println!(
        "| of which the API write's own round trip (PATCH → its answer), p50 / p99 / max | {} | |",
        stats(&out.acked)
    );
    if out.first.len() == out.acked.len() {
        let mut slowest: Vec<_> = out.first.iter().zip(&out.acked).enumerate().collect();
        slowest.sort_by_key(|(_, (first, _))| std::cmp::Reverse(**first));
        let slowest: Vec<_> = slowest
            .iter()
            .take(3)
            .map(|(i, (first, acked))| {
                format!(
                    "#{} {} (API write {}; written {})",
                    i + 1,
                    ms(**first),
                    ms(**acked),
                    out.written_at[*i]
                )
            })
            .collect();
        println!(
            "| slowest switches: write → first answer | {} | |",
            slowest.join("; ")
        );
    }
    println!(
        "| requests during the run / failed | {} / {} | 0 failed: {} |",
        out.requests,
        out.failed,
        verdict(out.failed == 0)
    );
    println!(
        "| old-backend answers after the proxy served the new one | {} | 0: {} |",
        out.stale,
        verdict(out.stale == 0)
    );
    println!(
        "| controller RSS / peak after the run | {:.1} MiB / {:.1} MiB | |",
        mib(mem.rss),
        mib(mem.hwm)
    );
    println!(
        "| benchmark process RSS (the in-process proxies, double, backends, client) | {:.1} MiB | |",
        mib(bench.rss)
    );
    println!(
        "| peers, as gateway-api-bench published them (not run here) | agentgateway 10-30 ms; Istio 120-375 ms; Envoy Gateway 600-2,000 ms with thousands of 503s | |"
    );
    for f in &out.failures {
        eprintln!("{f}");
    }
    Ok(())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// CPU time used so far by the controller, the control plane (kube-apiserver and etcd) and this
/// process (the creates, the watch, the probes, the proxies, the backend, the double).
#[derive(Debug, Clone, Copy)]
struct CpuSplit {
    controller: Duration,
    control_plane: Duration,
    bench: Duration,
}

impl CpuSplit {
    fn minus(&self, earlier: &CpuSplit) -> CpuSplit {
        CpuSplit {
            controller: self.controller.saturating_sub(earlier.controller),
            control_plane: self.control_plane.saturating_sub(earlier.control_plane),
            bench: self.bench.saturating_sub(earlier.bench),
        }
    }
}

fn cpu_split(controller: u32, stage: &setup::Stage) -> anyhow::Result<CpuSplit> {
    Ok(CpuSplit {
        controller: observe::cpu(controller)?,
        control_plane: observe::cpu_of(&stage.cp.pids())?,
        bench: observe::cpu(std::process::id())?,
    })
}

/// Removes the state of a previous run (etcd data would bring its objects back); refuses a
/// non-empty directory that does not look like one.
fn clear_state_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let Ok(mut entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    anyhow::ensure!(
        entries.next().is_none() || dir.join("tunnel-gateway-controller.log").exists(),
        "{} is not empty and holds no previous benchmark run; pass another --state-dir",
        dir.display()
    );
    std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))
}

/// The controller has run a round: our GatewayClass is Accepted.
async fn wait_class_accepted(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<GatewayClass> = Api::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        let class = api.get(setup::CLASS).await?;
        let accepted = class
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "Accepted" && c.status == "True");
        if accepted {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "GatewayClass {} not Accepted after {timeout:?}",
            setup::CLASS
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The converged document routes: the last route of the last Gateway reaches the backend.
async fn check_traffic(proxy: SocketAddr, shape: &Shape) -> anyhow::Result<()> {
    let route = shape.routes - 1;
    let host = Shape::hostname(shape.gateway_of(route));
    let path = format!("/r-{route}/x");
    let resp = reqwest::Client::new()
        .get(format!("http://{proxy}{path}"))
        .header("host", &host)
        .send()
        .await?;
    let status = resp.status();
    let body = resp.text().await?;
    anyhow::ensure!(
        status.is_success() && body == format!("backend {path}"),
        "{host}{path} through the proxy answered {status} {body:?}"
    );
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

struct Times {
    routes: Duration,
    proxies: Duration,
    ingress: Duration,
}

struct Report<'a> {
    cli: &'a Cli,
    /// The API server alone: no watches, and the watches a convergence holds.
    floor: Floor,
    watched: Floor,
    created: burst::Created,
    times: Times,
    /// Before the burst (none with `--cold-start`: the controller starts with the objects).
    idle: Option<Memory>,
    converged: Memory,
    after: Memory,
    /// Ingress writes during the burst and in the quiet period.
    puts: (u64, u64),
    /// Before the burst, at convergence, after the quiet period.
    counters: (&'a Counters, &'a Counters, &'a Counters),
    /// Load average (1, 5, 15 min) at the start and the end.
    load: (String, String),
    /// From the first create (the controller's start with `--cold-start`) to convergence.
    cpu: CpuSplit,
    /// The API server's requests over the same span.
    api: Vec<(String, u64)>,
}

/// The hostnames the tunnel's ingress document can hold of `gateways` (one each): all but the
/// catch-all's rule of a tunnel's [`tunnel_controller::publish::cloudflare::ingress::MAX_RULES`].
fn ingress_hostnames(gateways: usize) -> usize {
    gateways.min(tunnel_controller::publish::cloudflare::ingress::MAX_RULES - 1)
}

fn print_report(r: &Report<'_>) {
    let cli = r.cli;
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let (before, at, end) = r.counters;
    let max = r.times.routes.max(r.times.proxies).max(r.times.ingress);
    // TG-15's two scale points: 1,000 routes over 100 Gateways, 10,000 over 1,000.
    let (target_time, target_mib) = if cli.routes <= 1000 {
        (Duration::from_secs(10), 150)
    } else {
        (Duration::from_secs(30), 300)
    };
    let order = match cli.route_order {
        Order::ByGateway => "by Gateway",
        Order::RoundRobin => "round-robin",
    };
    println!();
    println!(
        "{} HTTPRoutes over {} Gateways (one listener hostname each), {} backend Services, {} shared-plane proxies; {} creates, {} in flight, routes created {order}.",
        cli.routes, cli.gateways, cli.services, cli.proxies, r.created.objects, cli.concurrency
    );
    println!(
        "Load average (1/5/15 min): {} at the start, {} at the end.",
        r.load.0, r.load.1
    );
    println!();
    println!("| figure | value | TG-15 target |");
    println!("|---|---|---|");
    let row = |f: &str, v: String, t: &str| println!("| {f} | {v} | {t} |");
    for (f, watches) in [
        (&r.floor, "no watch"),
        (
            &r.watched,
            "watches on HTTPRoutes (2: the controller's, the benchmark's) and Gateways",
        ),
    ] {
        row(
            &format!(
                "baseline, {watches}: API server accepts the {} creates, no controller",
                f.creates.objects
            ),
            secs(f.creates.elapsed),
            "",
        );
        row(
            &format!(
                "baseline, {watches}: then {} status writes (one per Gateway and route, {STATUS_WRITERS} in flight)",
                f.statuses.objects
            ),
            secs(f.statuses.elapsed),
            "",
        );
        row(
            &format!(
                "**the API server's floor under a convergence**, {watches} (creates + status writes); kube-apiserver + etcd CPU"
            ),
            format!(
                "**{}**; {}",
                secs(f.creates.elapsed + f.statuses.elapsed),
                secs(f.control_plane)
            ),
            "",
        );
    }
    let from = if cli.cold_start {
        row(
            "**the floor of a cold start**: the watched baseline's status writes alone",
            format!("**{}**", secs(r.watched.statuses.elapsed)),
            "",
        );
        row(
            "the same creates, before the controller started",
            secs(r.created.elapsed),
            "",
        );
        "from the controller's start"
    } else {
        row(
            "the same creates, controller running",
            secs(r.created.elapsed),
            "",
        );
        "from the first create"
    };
    row(
        &format!("every route Accepted=True ({})", cli.routes),
        secs(r.times.routes),
        "",
    );
    row(
        &format!(
            "every proxy holds all {} routes ({} proxies)",
            cli.routes, cli.proxies
        ),
        secs(r.times.proxies),
        "",
    );
    row(
        &if ingress_hostnames(cli.gateways) < cli.gateways {
            format!(
                "ingress document holds {} hostnames (a tunnel's {} rules with the catch-all; the routes of the {} other Gateways say they did not fit)",
                ingress_hostnames(cli.gateways),
                tunnel_controller::publish::cloudflare::ingress::MAX_RULES,
                cli.gateways - ingress_hostnames(cli.gateways)
            )
        } else {
            format!("ingress document holds all {} hostnames", cli.gateways)
        },
        secs(r.times.ingress),
        "",
    );
    row(
        &format!("**convergence** (the max, {from})"),
        secs(max),
        &format!(
            "< {} s: {}",
            target_time.as_secs(),
            verdict(max < target_time)
        ),
    );
    row(
        &format!(
            "CPU time, {from} to convergence: controller / kube-apiserver + etcd / benchmark process"
        ),
        format!(
            "{} / {} / {}",
            secs(r.cpu.controller),
            secs(r.cpu.control_plane),
            secs(r.cpu.bench)
        ),
        "",
    );
    row(
        "controller RSS idle, before the burst",
        r.idle
            .map_or("none (cold start)".to_owned(), |m| mib(m.rss)),
        "",
    );
    row("controller RSS at convergence", mib(r.converged.rss), "");
    row(
        &format!("controller RSS after {} s quiet", cli.quiet_secs),
        mib(r.after.rss),
        "",
    );
    row(
        "**controller peak memory** (VmHWM)",
        mib(r.after.hwm),
        &format!(
            "< {target_mib} MiB: {}",
            verdict(r.after.hwm < target_mib * 1024 * 1024)
        ),
    );
    row(
        "ingress writes (PUT) to the tunnel during the burst",
        r.puts.0.to_string(),
        &format!("1: {}", verdict(r.puts.0 == 1)),
    );
    row(
        &format!("ingress writes in the {} s quiet period", cli.quiet_secs),
        r.puts.1.to_string(),
        &format!("0: {}", verdict(r.puts.1 == 0)),
    );
    row(
        "sync rounds until convergence (after quiet)",
        format!(
            "{} ({})",
            at.rounds - before.rounds,
            end.rounds - before.rounds
        ),
        "",
    );
    row(
        "status writes until convergence (after quiet)",
        format!(
            "{} ({})",
            at.status_writes() - before.status_writes(),
            end.status_writes() - before.status_writes()
        ),
        "",
    );
    row(
        "of which HTTPRoute / Gateway",
        format!(
            "{} / {}",
            end.kind("HTTPRoute") - before.kind("HTTPRoute"),
            end.kind("Gateway") - before.kind("Gateway")
        ),
        "",
    );
    print_api_requests(&r.watched.requests, &r.api, from);
}

/// The API server's requests by verb, resource and code: the (watched) baseline's beside the
/// burst's with the controller running, so the work a controller adds beyond the floor is visible.
fn print_api_requests(baseline: &[(String, u64)], burst: &[(String, u64)], from: &str) {
    let count = |list: &[(String, u64)], key: &str| {
        list.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
    };
    let mut keys: Vec<&str> = burst.iter().map(|(k, _)| k.as_str()).collect();
    keys.extend(
        baseline
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| count(burst, k) == 0),
    );
    println!();
    println!(
        "API server requests (`apiserver_request_total`, verb resource code): baseline creates + status writes | {from} to convergence, controller running"
    );
    println!();
    println!("| request | baseline | controller run |");
    println!("|---|---|---|");
    for k in keys {
        println!("| {k} | {} | {} |", count(baseline, k), count(burst, k));
    }
}
