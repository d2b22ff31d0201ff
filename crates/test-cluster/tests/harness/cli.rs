//! The command-line entry: `up` prints working kubeconfigs and stays up; `down` stops it all;
//! killing `up` outright still takes its children with it; bad arguments get clear messages.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_test-cluster");

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
}

fn wait_for_file(path: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("`up` exited early with {status}");
        }
        assert!(Instant::now() < deadline, "`up` not ready in time");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pids(state: &Path) -> Vec<u32> {
    std::fs::read_to_string(state.join("pids"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

#[test]
fn up_prints_working_kubeconfigs_and_down_stops_everything() {
    let state = tempfile::tempdir().unwrap();
    let mut up = Command::new(BIN)
        .args(["up", "--clusters", "one,two", "--ha", "two", "--state-dir"])
        .arg(state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&state.path().join("ready"), &mut up);
    let pids = pids(state.path());
    assert_eq!(pids.len(), 4, "etcd, one server for `one`, two for `two`");

    // Every printed kubeconfig works with the built kubectl.
    let env = std::fs::read_to_string(state.path().join("env")).unwrap();
    let kubectl = env
        .lines()
        .find_map(|l| l.strip_prefix("export KUBECTL="))
        .unwrap()
        .to_owned();
    for kc in ["one/kubeconfig", "two/kubeconfig", "two/kubeconfig-1"] {
        let out = Command::new(&kubectl)
            .arg(format!("--kubeconfig={}", state.path().join(kc).display()))
            .args(["get", "namespace", "kube-system", "-o", "name"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "namespace/kube-system",
            "{kc}"
        );
    }

    // A second `up` on the same directory is refused while the first runs.
    let second = Command::new(BIN)
        .args(["up", "--clusters", "one", "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("already runs"));

    let down = Command::new(BIN)
        .args(["down", "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(down.status.success());
    assert_eq!(String::from_utf8_lossy(&down.stdout).trim(), "stopped");
    assert!(up.wait().unwrap().success());
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut up.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(
        printed.contains(&state.path().join("one/kubeconfig").display().to_string()),
        "{printed}"
    );
    for p in pids {
        assert!(!alive(p), "pid {p} survived `down`");
    }
}

#[test]
fn killing_up_outright_kills_its_children() {
    let state = tempfile::tempdir().unwrap();
    let mut up = Command::new(BIN)
        .args(["up", "--clusters", "solo", "--state-dir"])
        .arg(state.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&state.path().join("ready"), &mut up);
    let pids = pids(state.path());
    up.kill().unwrap();
    up.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|p| alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "children survived SIGKILL of `up`: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bad_arguments_are_named() {
    let out = Command::new(BIN)
        .args([
            "up",
            "--clusters",
            "a",
            "--ha",
            "b",
            "--state-dir",
            "/nonexistent/never-created",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ha b: no such cluster"));

    let state = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["down", "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing runs"));
}
