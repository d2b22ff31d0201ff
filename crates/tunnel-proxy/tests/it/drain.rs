//! SIGTERM drain of the real binary.

use std::process::Stdio;
use std::time::{Duration, Instant};

use http::StatusCode;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::*;

struct Running {
    child: Child,
    data: String,
    admin: String,
}

async fn start_binary(grace: &str) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tunnel-proxy"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--grace-period",
            grace,
            "--drain-timeout",
            "10s",
            "--log-format",
            "json",
        ])
        .env_remove("PROXY_AUTH_TOKEN")
        .env_remove("TUNNEL_TOKEN")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["message"] == "listening" {
                return v;
            }
        }
        panic!("the binary exited before listening");
    })
    .await
    .expect("no `listening` log line within 10 s");
    // keep draining stderr (the log) so the child never blocks on a full pipe
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Running {
        child,
        data: listening["data_plane"].as_str().unwrap().to_owned(),
        admin: listening["admin"].as_str().unwrap().to_owned(),
    }
}

fn sigterm(child: &Child) {
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}

async fn get(addr: &str, host: &str, path: &str) -> (StatusCode, String) {
    let req = http::Request::get(format!("http://{addr}{path}"))
        .header("host", host)
        .body(full(""))
        .unwrap();
    let resp = http1_client().request(req).await.unwrap();
    let status = resp.status();
    (status, body_string(resp).await)
}

#[tokio::test]
async fn in_flight_request_completes_after_sigterm_then_the_process_exits() {
    let b = Backend::start("slow").await;
    let mut run = start_binary("700ms").await;
    let config = doc(
        1,
        vec![http_route(
            "ns/s",
            &["slow.example.com"],
            json!([{ "backends": [backend("ns/s:80", &b.endpoint())] }]),
        )],
    );
    let put = http::Request::put(format!("http://{}/config", run.admin))
        .header("content-type", "application/json")
        .body(full(config.to_string()))
        .unwrap();
    assert_eq!(
        http1_client().request(put).await.unwrap().status(),
        StatusCode::OK
    );

    let data = run.data.clone();
    let in_flight = tokio::spawn(async move { get(&data, "slow.example.com", "/slow/1500").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.hits(), 1, "the slow request should be at the backend");
    sigterm(&run.child);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // during the grace period: still serving new requests, but no longer ready
    assert_eq!(
        get(&run.data, "slow.example.com", "/").await.0,
        StatusCode::OK
    );
    assert_eq!(
        get(&run.admin, "x", "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let finished = Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(10), run.child.wait())
        .await
        .expect("the process should exit after draining")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(finished.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn second_sigterm_exits_at_once() {
    let mut run = start_binary("60s").await;
    sigterm(&run.child);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        run.child.try_wait().unwrap().is_none(),
        "first SIGTERM must not exit during the grace period"
    );
    let started = Instant::now();
    sigterm(&run.child);
    let exit = tokio::time::timeout(Duration::from_secs(5), run.child.wait())
        .await
        .expect("second SIGTERM should exit at once")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!exit.success(), "a forced exit reports failure: {exit:?}");
}
