//! The `cloudflare-double` binary: seeded from a YAML file, serving the API on the address it
//! prints.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

const ACCOUNT: &str = "0123456789abcdef0123456789abcdef";
const TUNNEL: &str = "f70ff985-a4ef-4643-bbbc-4a0ed4fc8415";

#[tokio::test]
async fn binary_serves_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed.yaml");
    std::fs::write(
        &seed,
        format!(
            "accounts:\n  - id: {ACCOUNT}\n    name: demo\n    tunnels:\n      - id: {TUNNEL}\n        name: demo\ntokens:\n  - value: demo-token\n    accounts: [{ACCOUNT}]\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloudflare-double"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--edge",
            "127.0.0.1:0",
            "--connectors",
            "127.0.0.1:0",
            "--seed",
        ])
        .arg(&seed)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut token_line = None;
    let mut printed = Vec::new();
    let base = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("tunnel ") {
                token_line = Some(line);
            } else if line.starts_with("edge=") || line.starts_with("connectors=") {
                printed.push(line);
            } else if let Some(url) = line.strip_prefix("base_url=") {
                return url.to_string();
            }
        }
        panic!("binary exited before printing base_url");
    })
    .await
    .expect("binary starts within 20 s");
    let token_line = token_line.expect("seeded tunnel printed");
    assert_eq!(printed.len(), 2, "{printed:?}");
    for line in &printed {
        let addr = line.split_once('=').unwrap().1;
        assert!(
            addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
            "{line}"
        );
        TcpStream::connect(addr).await.unwrap();
    }
    assert!(token_line.contains(&format!("id={TUNNEL}")), "{token_line}");
    assert!(token_line.contains("token=eyJhIjoi"), "{token_line}");

    let addr = base
        .strip_prefix("http://")
        .and_then(|r| r.strip_suffix("/client/v4"))
        .unwrap()
        .to_string();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "GET /client/v4/accounts/{ACCOUNT}/cfd_tunnel/{TUNNEL} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer demo-token\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""name":"demo""#), "{answer}");

    child.start_kill().unwrap();
    tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
}
