//! `make demo` works: the built `demo --check` brings up the clusters (the client with its node),
//! installs the resource proxy and the tunnel gateway from `deploy/` as Pods on the node, runs
//! every command the demo prints, and passes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use test_cluster::ManagedProcess;

/// The demo finds the binaries it starts next to its own executable; `cargo test --workspace`
/// (and `make test`) builds them all into the same directory.
fn demo_binary() -> PathBuf {
    let demo = PathBuf::from(env!("CARGO_BIN_EXE_demo"));
    for (binary, package) in [
        ("resource-proxy", "resource-proxy"),
        ("cloudflared-standin", "cloudflare-double"),
        ("tunnel-proxy", "tunnel-proxy"),
        ("tunnel-gateway-controller", "tunnel-controller"),
    ] {
        let path = demo.parent().unwrap().join(binary);
        assert!(
            path.is_file(),
            "{} is missing: build it with `cargo build -p {package}` (cargo test --workspace does)",
            path.display()
        );
    }
    demo
}

fn state_root() -> PathBuf {
    let root = std::env::temp_dir().join("kube-tenancy-tests");
    std::fs::create_dir_all(&root).unwrap();
    root
}

#[test]
fn demo_check_runs_every_printed_command_and_passes() {
    let demo = demo_binary();
    let work = tempfile::Builder::new()
        .prefix("demo-")
        .tempdir_in(state_root())
        .unwrap();
    let state = work.path().join("state");
    let log = work.path().join("demo.log");
    // ManagedProcess: the demo (and with it every process it starts) dies with this test.
    let mut process = ManagedProcess::spawn(
        "demo",
        &demo,
        &[
            "--check".into(),
            "--state-dir".into(),
            state.display().to_string(),
        ],
        &log,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(480);
    let status = loop {
        if let Some(status) = process.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "demo --check did not finish in 480 s:\n{}",
            process.log_tail(80)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        status.success(),
        "demo --check failed ({status}):\n{output}"
    );
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines.contains(&"PASS"), "no PASS line:\n{output}");
    assert!(
        !lines.iter().any(|l| l.starts_with("FAIL")),
        "a step failed:\n{output}"
    );
    // Every step ran: the resource proxy's (its Pod on the node, the watch and the protected
    // APIService among them) and the tunnel gateway's (the backend Pods, a request through the
    // edge to them, the ingress document at Cloudflare).
    let passed = lines.iter().filter(|l| l.starts_with("PASS  ")).count();
    assert!(passed >= 29, "only {passed} steps ran:\n{output}");
    for wanted in [
        "get pods -n kube-system -l app.kubernetes.io/name=resource-proxy -o wide",
        "get widgets -n demo -w",
        "delete apiservice v1.example.com",
        "--show-labels",
        "deployment/hello",
        "gateway/hello",
        "httproute/hello",
        "curl -s -H 'Host: hello.demo.example' http://127.0.0.1:",
        "/configurations",
    ] {
        assert!(output.contains(wanted), "no step ran {wanted:?}:\n{output}");
    }
    // The demo stopped what it started (etcd, the API servers, the controller managers, the
    // node's namespaces and every container of its Pods) and removed its pid file.
    assert!(!Path::new(&state).join("up.pid").exists());
    let pids = std::fs::read_to_string(state.join("pids")).unwrap();
    assert!(pids.lines().count() >= 15, "pids: {pids}");
    for pid in pids.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z"),
            "process {pid} outlived the demo: {stat}"
        );
    }
}
