//! A tiny HTTP server for the harness's own tests (pods on the node, network namespaces).
//!
//! `kt-test-server [PORT]` (default `$PORT`, else 8080) listens on `0.0.0.0`; every request is
//! answered `200` with `$IDENTITY` (or `-`) on the first line, then the request's path, then,
//! for `/env`, the environment sorted. On SIGTERM it prints `received SIGTERM` and exits 0.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PORT").ok())
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080);
    let identity = std::env::var("IDENTITY").unwrap_or_else(|_| "-".into());
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = term.recv() => {
                println!("received SIGTERM");
                return Ok(());
            }
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                tokio::spawn(answer(stream, identity.clone()));
            }
        }
    }
}

async fn answer(mut stream: tokio::net::TcpStream, identity: String) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut body = format!("{identity}\n{path}\n");
    if path == "/env" {
        let mut vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
        vars.sort();
        body.push_str(&vars.join("\n"));
        body.push('\n');
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
