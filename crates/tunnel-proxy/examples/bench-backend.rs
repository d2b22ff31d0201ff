//! A fast fixed-body HTTP backend for `scripts/bench-tunnel-proxy.sh`:
//! `/empty` answers 200 with no body, `/1m` answers 1 MiB. Usage: `bench-backend ADDR`.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18090".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    let big = Bytes::from(vec![b'x'; 1024 * 1024]);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let big = big.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let body = if req.uri().path() == "/1m" {
                    big.clone()
                } else {
                    Bytes::new()
                };
                async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
