//! The real binary with `--config-tls-dir`: the config API moves to its own port over mutual
//! TLS and accepts only the controller's identity; the admin port keeps health and metrics.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio_rustls::TlsConnector;
use tunnel_config::config_api::{CONTROLLER_IDENTITY, ClientIdentity, client_config};

use crate::common::*;

const TOKEN: &str = "tls-token";
const PLANE: &str = "tunnel-proxy-config.cf-system.svc";

/// One HTTP/1.1 exchange over TLS as `who`; the response head and body, or why it failed.
async fn exchange(
    addr: &str,
    ca_pem: &str,
    who: &Leaf,
    method: &str,
    body: &str,
) -> Result<String, String> {
    let id = ClientIdentity {
        cert_pem: who.cert_pem.clone(),
        key_pem: who.key_pem.clone(),
    };
    let config = client_config(ca_pem, &[id], PLANE).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("ignored.invalid").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let req = format!(
        "{method} /config HTTP/1.1\r\nHost: {PLANE}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    tls.read_to_string(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[tokio::test]
async fn the_binary_serves_the_config_api_only_over_mutual_tls_to_the_controller() {
    init();
    let pki = Pki::new();
    let serving = pki.leaf(&[PLANE]);
    let controller = pki.leaf(&[CONTROLLER_IDENTITY]);
    let tenant = pki.leaf(&["spiffe://tunnel-gateway/tenant"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &serving.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &serving.key_pem).unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_tunnel-proxy"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--config-listen", "127.0.0.1:0", "--auth-token", TOKEN])
        .arg("--config-tls-dir")
        .arg(dir.path())
        .env_remove("TUNNEL_TOKEN")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut config_api, mut admin) = (String::new(), String::new());
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(a) = v["config_api"].as_str() {
                config_api = a.to_owned();
            }
            if v["message"] == "listening" {
                admin = v["admin"].as_str().unwrap().to_owned();
                return;
            }
        }
        panic!("the binary exited before listening");
    })
    .await
    .expect("no `listening` log line within 10 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    assert!(!config_api.is_empty(), "the config API's address is logged");

    let v1 = doc(1, vec![]).to_string();
    let ok = exchange(&config_api, &pki.ca_pem, &controller, "PUT", &v1)
        .await
        .unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");

    // Another identity of the same CA: refused at the handshake, nothing loaded.
    let v2 = doc(2, vec![]).to_string();
    let refused = exchange(&config_api, &pki.ca_pem, &tenant, "PUT", &v2).await;
    assert!(
        refused.as_ref().is_err() || refused.as_ref().is_ok_and(|r| r.is_empty()),
        "{refused:?}"
    );
    // The admin port has no config API; health and metrics stay there in plain HTTP.
    let resp = http1_client()
        .request(
            http::Request::put(format!("http://{admin}/config"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(full(v2.clone()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let ready = http1_client()
        .request(
            http::Request::get(format!("http://{admin}/readyz"))
                .body(full(""))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "ready: the first push loaded");

    let got = exchange(&config_api, &pki.ca_pem, &controller, "GET", "")
        .await
        .unwrap();
    assert!(got.contains("\"version\":1"), "{got}");
}
