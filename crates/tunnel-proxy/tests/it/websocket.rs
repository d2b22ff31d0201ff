//! WebSocket upgrades pass through to an HTTP/1.1 backend.

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// A WebSocket echo server on raw TCP.
async fn ws_backend() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(s).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        if ws.send(msg).await.is_err() {
                            return;
                        }
                    } else if msg.is_close() {
                        return;
                    }
                }
            });
        }
    });
    addr.to_string()
}

#[tokio::test]
async fn websocket_upgrade_is_proxied_both_ways() {
    let endpoint = ws_backend().await;
    let p = Proxy::with_config(doc(
        1,
        vec![http_route(
            "ns/ws",
            &["ws.example.com"],
            json!([{ "backends": [backend("ns/ws:80", &endpoint)] }]),
        )],
    ))
    .await;
    let tcp = TcpStream::connect(p.data).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async("ws://ws.example.com/chat", tcp)
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..3 {
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        let back = ws.next().await.unwrap().unwrap();
        assert_eq!(back.into_text().unwrap().as_str(), format!("hello {i}"));
    }
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap().into_data().as_ref(),
        &[1, 2, 3]
    );
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn websocket_to_an_unrouted_host_is_404() {
    let p = Proxy::with_config(doc(1, vec![])).await;
    let tcp = TcpStream::connect(p.data).await.unwrap();
    let err = tokio_tungstenite::client_async("ws://nowhere.example.com/", tcp)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}
