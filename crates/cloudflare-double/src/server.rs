//! The HTTP/1.1 server: accept loop, fault injection, call log, optional admin surface.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api;
use crate::envelope::{self, Body, Reply};
use crate::state::{Call, Fault, Shared, lock};

/// The API base path, as on `https://api.cloudflare.com/client/v4`.
pub const BASE_PATH: &str = "/client/v4";

/// Prefix of the admin surface (only when enabled).
pub const ADMIN_PREFIX: &str = "/__admin";

/// Largest request body read (a 1,000-rule document is well under this).
const MAX_BODY: usize = 8 * 1024 * 1024;

#[derive(Clone)]
struct Ctx {
    world: Shared,
    admin: bool,
    shutdown: watch::Receiver<bool>,
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct Dropped;

pub(crate) fn spawn(
    listener: TcpListener,
    world: Shared,
    admin: bool,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let ctx = Ctx {
        world,
        admin,
        shutdown,
    };
    tokio::spawn(accept_loop(listener, ctx))
}

async fn accept_loop(listener: TcpListener, ctx: Ctx) {
    let mut stop = ctx.shutdown.clone();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut stop = ctx.shutdown.clone();
            let svc_ctx = ctx.clone();
            let svc = service_fn(move |req| serve(svc_ctx.clone(), peer, req));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, %peer, "connection ended");
                },
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}

fn to_response(reply: Reply) -> Response<Full<Bytes>> {
    let (content_type, bytes) = match reply.body {
        Body::Json(v) => ("application/json", Bytes::from(v.to_string())),
        Body::Text(t) => ("text/plain; charset=utf-8", Bytes::from(t)),
    };
    let mut builder = Response::builder()
        .status(reply.status)
        .header("content-type", content_type);
    for (name, value) in reply.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(bytes))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::from_static(b"bad reply"))))
}

async fn serve(
    ctx: Ctx,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let method = req.method().as_str().to_string();
    let full_path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);

    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Ok(to_response(envelope::failure(
                413,
                vec![serde_json::json!({"code": 1000, "message": "request body too large"})],
            )));
        }
    };

    if ctx.admin
        && let Some(rest) = full_path.strip_prefix(ADMIN_PREFIX)
    {
        let reply = crate::admin::handle(&ctx.world, &method, rest, &body);
        return Ok(to_response(reply));
    }

    let Some(path) = full_path.strip_prefix(BASE_PATH) else {
        return Ok(to_response(envelope::no_route(&full_path)));
    };
    let path = if path.is_empty() { "/" } else { path };

    let fault = lock(&ctx.world).take_fault(&method, path);
    let log = |status: Option<u16>| {
        lock(&ctx.world).calls.push(Call {
            method: method.clone(),
            path: path.to_string(),
            query: query.clone(),
            status,
        });
    };
    if let Some(fault) = fault {
        tracing::info!(%method, path, ?fault, %peer, "injecting fault");
        match api::fault_reply(&fault) {
            Some(reply) => {
                log(Some(reply.status));
                return Ok(to_response(reply));
            }
            None => {
                log(None);
                if fault == Fault::Hang {
                    let mut stop = ctx.shutdown.clone();
                    let _ = stop.wait_for(|s| *s).await;
                }
                return Err(Dropped);
            }
        }
    }

    let reply = {
        let mut world = lock(&ctx.world);
        api::handle(
            &mut world,
            &method,
            path,
            &full_path,
            query.as_deref(),
            auth.as_deref(),
            &body,
        )
    };
    tracing::debug!(%method, path, status = reply.status, "API call");
    log(Some(reply.status));
    Ok(to_response(reply))
}
