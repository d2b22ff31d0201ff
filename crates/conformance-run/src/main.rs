//! `conformance`: what `make conformance` runs. The Gateway API conformance suite (the Go driver in
//! `conformance/`, compiled by `scripts/build-conformance.sh`) against the tunnel gateway as
//! deployed: a cluster with the node agent, the install from `deploy/` as Pods, and the
//! Cloudflare double (API, edge, connector port) in this process
//! ([`tunnel_gateway_fixtures::on_node`]).
//!
//! The suite runs inside the node's private network namespace, with a mount namespace of its own
//! whose `/etc/hosts` names the Gateways' address `<tunnel>.cfargotunnel.com` as the node's
//! address, where the edge listens on port 80. So a request takes the real path: the suite's
//! client → the edge double → connector stand-in → proxy Pod → echo-basic Pod. The edge sends
//! every host no ingress rule names to the class tunnel (the operator's DNS, see
//! `CloudflareDouble::route_unclaimed_hosts_to`).
//!
//! The suite's per-test outcomes are compared with the expected-results file ([`results`]): an
//! expected pass that does not pass fails the run; `--update-expected` rewrites the file. A test
//! that failed with the signature of one of the suite's own known races (`--races`) is run again
//! alone, once, and counts as passed only if it passes then; both runs' logs are kept.

mod results;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use anyhow::{Context, bail};
use clap::Parser;
use service_support::logging::{self, LogFormat};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tunnel_gateway_fixtures::on_node::{self, Binaries, NODE_ADDR};

/// The echo-basic image the suite's v1.5.1 manifests name; the node runs echo-basic for it.
const SUITE_ECHO_IMAGE: &str =
    "gcr.io/k8s-staging-gateway-api/echo-basic:v20260204-monthly-2026.01-60-g28382302";
/// The DNS server the suite's base manifests run for its UDPRoute tests (a profile this run does
/// not test); its Pod only has to run so that the setup finds every Pod Ready.
const SUITE_DNS_IMAGE: &str = "registry.k8s.io/coredns/coredns:v1.12.2";
/// The GatewayClass the suite's Gateways name.
const SUITE_CLASS: &str = "gateway-conformance";
/// Ports of the suite's Gateway listeners that the edge serves inside the namespace (HTTP only:
/// the double's edge does not terminate TLS).
const EDGE_PORTS: [u16; 1] = [80];

#[derive(Parser)]
#[command(
    name = "conformance",
    about = "The Gateway API conformance suite against the tunnel gateway on a cluster with the node agent"
)]
struct Cli {
    /// The compiled suite (`scripts/build-conformance.sh` prints its path).
    #[arg(long)]
    suite: PathBuf,
    /// Where the suite writes its report (YAML).
    #[arg(long)]
    report: PathBuf,
    /// The tests that must pass, one per line.
    #[arg(long)]
    expected: PathBuf,
    /// The tests to skip, one per line, each with its reason as a `#` comment.
    #[arg(long)]
    skip: PathBuf,
    /// The suite's known races: per line a test, the signature its failure shows in the suite's
    /// output, and the reason as a `#` comment.
    #[arg(long)]
    races: PathBuf,
    /// The suite's output and the run's kubeconfig and hosts file go here.
    #[arg(long, default_value = ".state/conformance")]
    state_dir: PathBuf,
    /// Run only this test (the suite's `-run-test`), or these tests (comma-separated: the Go
    /// test filter on the suite's subtests); the expected results are not checked.
    #[arg(long)]
    run_test: Option<String>,
    /// Rewrite the expected-results file with the tests that passed.
    #[arg(long)]
    update_expected: bool,
    /// The implementation version written into the report.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    version: String,
}

fn main() -> ExitCode {
    test_cluster::install_crypto_provider();
    logging::init_with_default(LogFormat::Text, "info,kube_client=off");
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("conformance: tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// One name per line, `#` comments dropped.
fn read_list(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    Ok(results::parse_expected(&text).into_iter().collect())
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(std::env::current_dir()
        .context("the working directory")?
        .join(path))
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let suite = absolute(&cli.suite)?;
    let report = absolute(&cli.report)?;
    let state_dir = absolute(&cli.state_dir)?;
    let skip = read_list(&cli.skip)?;
    let races_text =
        std::fs::read_to_string(&cli.races).with_context(|| format!("{}", cli.races.display()))?;
    let races = results::parse_races(&races_text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cli.races.display()))?;
    let expected = match std::fs::read_to_string(&cli.expected) {
        Ok(text) => results::parse_expected(&text),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && (cli.update_expected || cli.run_test.is_some()) =>
        {
            BTreeSet::new()
        }
        Err(e) => return Err(e).context(format!("{}", cli.expected.display())),
    };
    if state_dir.exists() {
        std::fs::remove_dir_all(&state_dir)
            .with_context(|| format!("clearing {}", state_dir.display()))?;
    }
    std::fs::create_dir_all(&state_dir)?;

    let exe = std::env::current_exe().context("this binary's path")?;
    let mut binaries = Binaries::beside(&exe.with_file_name("tunnel-gateway-controller"))
        .context("the workspace's binaries (cargo build --bins)")?;
    let echo = test_cluster::echo_basic().context("echo-basic")?;
    binaries.images.push((SUITE_ECHO_IMAGE.into(), echo));
    let idle = state_dir.join("idle");
    std::fs::write(
        &idle,
        "#!/bin/sh\n# Stands in for an image whose Pod only has to run.\nexec sleep infinity\n",
    )?;
    std::fs::set_permissions(&idle, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    binaries.images.push((SUITE_DNS_IMAGE.into(), idle));

    tracing::info!("starting the cluster with the node, the Cloudflare double and the install");
    let install = on_node::start(&binaries, &[])
        .await
        .context("bringing up the install")?;
    let cluster = install.cluster();
    let tunnel = install.tunnel.tunnel_id.clone();
    for port in EDGE_PORTS {
        install.expose(SocketAddr::from((NODE_ADDR, port)), install.edge());
    }
    install.double.route_unclaimed_hosts_to(Some(&tunnel));
    cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            &format!(
                r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {SUITE_CLASS}}}
spec:
  controllerName: {controller}
  parametersRef: {{group: cf.k8s.lex.la, kind: GatewayClassConfig, name: {config}}}
"#,
                controller = tunnel_gateway_fixtures::CONTROLLER,
                config = tunnel_gateway_fixtures::CLASS,
            ),
        )
        .await
        .context("the suite's GatewayClass")?;
    // The suite reads the features to test from the class's status when it is given none.
    on_node::wait(
        cluster,
        "",
        &format!("gatewayclass/{SUITE_CLASS}"),
        "condition=Accepted",
        "120s",
    )
    .await?;
    let features = cluster
        .kubectl_ok(&[
            "get",
            "gatewayclass",
            SUITE_CLASS,
            "-o",
            "jsonpath={.status.supportedFeatures[*].name}",
        ])
        .await?;
    if features.trim().is_empty() {
        bail!("GatewayClass {SUITE_CLASS} lists no supportedFeatures");
    }
    tracing::info!(%features, "the class's supported features");

    // What the suite sees inside the namespace: the API server where the Pods see it, the
    // tunnel's hostname at the edge.
    let admin = cluster.mint_client_cert("conformance", &["system:masters"])?;
    let kubeconfig = state_dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        test_cluster::kubeconfig::render(
            "install",
            &format!("https://{NODE_ADDR}:{}", test_cluster::node::API_PORT),
            &cluster.ca_pem(),
            "conformance",
            &admin,
        ),
    )?;
    let hosts = state_dir.join("hosts");
    std::fs::write(
        &hosts,
        format!(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             {NODE_ADDR}\t{tunnel}.cfargotunnel.com\n"
        ),
    )?;

    let output = state_dir.join("suite.log");
    let netns = install.world.ns_path();
    let run = |report: &Path, only: Option<&str>, output: PathBuf| {
        let mut args = vec![
            "-test.v".to_owned(),
            "-test.timeout=120m".to_owned(),
            "-test.run=^TestConformance$".to_owned(),
            format!("-gateway-class={SUITE_CLASS}"),
            format!("-report-output={}", report.display()),
            format!("-version={}", cli.version),
            // GatewayStaticAddresses: a Gateway's one usable address is its tunnel's hostname;
            // any other hostname (here one of no tunnel) is not usable.
            format!("-usable-address={tunnel}.cfargotunnel.com"),
            "-unusable-address=not-a-tunnel.cfargotunnel.com".to_owned(),
        ];
        if !skip.is_empty() {
            args.push(format!("-skip-tests={}", skip.join(",")));
        }
        if let Some(test) = only {
            // With a single test the suite infers nothing: the class's features are passed.
            args.push(run_filter(test));
            args.push(format!(
                "-supported-features={}",
                features.split_whitespace().collect::<Vec<_>>().join(",")
            ));
        }
        let (netns, hosts, kubeconfig, suite, state_dir) =
            (&netns, &hosts, &kubeconfig, &suite, &state_dir);
        async move {
            tracing::info!(log = %output.display(), "running the suite");
            let status =
                run_suite(netns, hosts, kubeconfig, suite, &args, &output, state_dir).await?;
            anyhow::Ok((status, std::fs::read_to_string(&output)?))
        }
    };
    let (status, log) = run(&report, cli.run_test.as_deref(), output.clone()).await?;
    let mut outcomes = results::parse(&log);
    let verdict = results::compare(&expected, &outcomes);
    println!(
        "conformance: suite exited with {status}; {} passed, {} failed, {} skipped (log {})",
        verdict.passed.len(),
        verdict.failed.len(),
        verdict.skipped.len(),
        output.display()
    );
    for name in &verdict.failed {
        println!("  FAIL {name}");
    }
    if cli.run_test.is_some() {
        return Ok(status.success());
    }
    // The report stays the first run's: a rerun writes its own beside the logs.
    for race in results::raced(&verdict, &races, &log) {
        let name = &race.test;
        let rerun_log = state_dir.join(format!("suite-rerun-{name}.log"));
        let rerun_report = state_dir.join(format!("report-rerun-{name}.yaml"));
        println!(
            "conformance: {name} failed with a known race of the suite ({:?}, see {}); running it again alone",
            race.signature,
            cli.races.display()
        );
        // The first run's cleanup deletes the suite's namespaces; its setup would fail in a
        // namespace still terminating.
        namespaces_gone(cluster).await?;
        let (_, rerun) = run(&rerun_report, Some(name), rerun_log.clone()).await?;
        let again = results::parse(&rerun).get(name).copied();
        println!("  RERUN {name}: {again:?} (log {})", rerun_log.display());
        if again == Some(results::Outcome::Pass) {
            outcomes.insert(name.clone(), results::Outcome::Pass);
        }
    }
    let verdict = results::compare(&expected, &outcomes);
    if cli.update_expected {
        std::fs::write(&cli.expected, results::render_expected(&verdict.passed))?;
        println!("conformance: wrote {}", cli.expected.display());
        return Ok(true);
    }
    for name in &verdict.new_passes {
        println!("  NEW PASS {name} (add it to {})", cli.expected.display());
    }
    if verdict.regressions.is_empty() {
        println!(
            "conformance: every expected test passed ({})",
            expected.len()
        );
        Ok(true)
    } else {
        for (name, outcome) in &verdict.regressions {
            println!("  REGRESSION {name}: {outcome:?}");
        }
        Ok(false)
    }
}

/// Waits (up to 5 min) until no namespace is terminating.
async fn namespaces_gone(cluster: &test_cluster::Cluster) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let terminating = cluster
            .kubectl_ok(&[
                "get",
                "namespaces",
                "-o",
                r#"jsonpath={.items[?(@.status.phase=="Terminating")].metadata.name}"#,
            ])
            .await?;
        if terminating.trim().is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "namespaces still terminating after 5 min: {}",
                terminating.trim()
            );
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// The suite's argument that selects `tests`: `-run-test` for one, a filter on the subtests of
/// `TestConformance` (which replaces the one above) for several.
fn run_filter(tests: &str) -> String {
    let names: Vec<&str> = tests.split(',').map(str::trim).collect();
    match names.as_slice() {
        [one] => format!("-run-test={one}"),
        many => format!("-test.run=^TestConformance$/^({})$", many.join("|")),
    }
}

/// Runs the suite in the node's network namespace, with a mount namespace of its own whose
/// `/etc/hosts` is `hosts` (util-linux `setpriv`, `nsenter`, `unshare`); its output goes to
/// `output` and to this process's stdout.
async fn run_suite(
    netns: &Path,
    hosts: &Path,
    kubeconfig: &Path,
    suite: &Path,
    args: &[String],
    output: &Path,
    dir: &Path,
) -> anyhow::Result<std::process::ExitStatus> {
    // The suite dies with this process (the signal is kept across the execs that follow).
    let mut cmd = tokio::process::Command::new("setpriv");
    cmd.args(["--pdeathsig", "KILL", "--", "nsenter"])
        .arg(format!("--net={}", netns.display()))
        .args(["unshare", "--mount", "--propagation", "private", "--"])
        .args(["sh", "-c", r#"mount --bind "$0" /etc/hosts && exec "$@""#])
        .arg(hosts)
        .arg(suite)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .context("starting the suite (setpriv, nsenter)")?;
    let mut file = tokio::fs::File::create(output).await?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for stream in [
        Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(stderr),
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    while let Some(line) = rx.recv().await {
        println!("{line}");
        file.write_all(line.as_bytes()).await?;
        file.write_all(b"\n").await?;
    }
    file.flush().await?;
    let status = child.wait().await?;
    if status.code().is_none() {
        bail!("the suite was killed ({status})");
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::run_filter;

    #[test]
    fn one_test_is_the_suites_run_test_several_a_subtest_filter() {
        assert_eq!(run_filter("HTTPRouteCORS"), "-run-test=HTTPRouteCORS");
        assert_eq!(
            run_filter("HTTPRouteCORS, GatewayWithAttachedRoutes"),
            "-test.run=^TestConformance$/^(HTTPRouteCORS|GatewayWithAttachedRoutes)$"
        );
    }
}
