//! TLS and mTLS backends (BackendTLSPolicy and backend client certificates).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::StatusCode;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::*;

/// An HTTPS backend (ALPN h2 and http/1.1) with a certificate for `backend.test`.
async fn tls_backend(pki: &Pki, require_client_cert: bool) -> Backend {
    tls_backend_for(pki, &["backend.test"], require_client_cert).await
}

/// An HTTPS backend with a certificate for `names` (see [`Pki::leaf`]).
async fn tls_backend_for(pki: &Pki, names: &[&str], require_client_cert: bool) -> Backend {
    init();
    let leaf = pki.leaf(names);
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder();
    let builder = if require_client_cert {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .unwrap(),
        )
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let a = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            a.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let h = h.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |req| echo("tls", h.clone(), req));
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Backend {
        addr,
        hits,
        accepted,
    }
}

fn tls_route(host: &str, b: &Backend, tls: Value, protocol: &str) -> Value {
    http_route(
        "ns/tls",
        &[host],
        json!([{ "backends": [{ "name": "ns/tls:443", "endpoints": [b.endpoint()], "protocol": protocol, "tls": tls }] }]),
    )
}

#[tokio::test]
async fn tls_backend_over_http1_and_h2() {
    let pki = Pki::new();
    let b = tls_backend(&pki, false).await;
    let tls = json!({ "caBundlePem": pki.ca_pem, "serverName": "backend.test" });
    let p = Proxy::with_config(doc(
        1,
        vec![
            tls_route("h1.example.com", &b, tls.clone(), "http1"),
            tls_route("h2.example.com", &b, tls, "http2"),
        ],
    ))
    .await;
    let resp = p.get("h1.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["version"], "HTTP/1.1");
    let resp = p.get("h2.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["version"], "HTTP/2.0");
}

#[tokio::test]
async fn tls_verification_uses_subject_alt_names_and_the_ca_bundle() {
    let pki = Pki::new();
    let other = Pki::new();
    let b = tls_backend(&pki, false).await;
    let p = Proxy::with_config(doc(
        1,
        vec![
            tls_route("san.example.com", &b, json!({ "caBundlePem": pki.ca_pem, "serverName": "sni.test",
                                                      "subjectAltNames": ["nope.test", "backend.test"] }), "http1"),
            tls_route("badname.example.com", &b, json!({ "caBundlePem": pki.ca_pem, "serverName": "sni.test" }), "http1"),
            tls_route("badca.example.com", &b, json!({ "caBundlePem": other.ca_pem, "serverName": "backend.test" }), "http1"),
        ],
    ))
    .await;
    assert_eq!(p.get("san.example.com", "/").await.status(), StatusCode::OK);
    assert_eq!(
        p.get("badname.example.com", "/").await.status(),
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(
        p.get("badca.example.com", "/").await.status(),
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(b.hits(), 1);
    let (_, metrics) = p.admin_get("/metrics").await;
    let line =
        r#"cftunnel_proxy_backend_errors_total{hostname="badca.example.com",reason="tls"} 1"#;
    assert!(
        metrics.lines().any(|l| l == line),
        "missing {line}\n{metrics}"
    );
}

#[tokio::test]
async fn tls_verification_accepts_a_uri_subject_alt_name_only_from_the_trusted_ca() {
    const ID: &str = "spiffe://cluster.local/ns/shop/sa/web";
    let pki = Pki::new();
    let other = Pki::new();
    let b = tls_backend_for(&pki, &["backend.test", ID], false).await;
    let forged = tls_backend_for(&other, &["backend.test", ID], false).await;
    let tls = |ca: &str, names: Value, uris: Value| json!({ "caBundlePem": ca, "serverName": "sni.test", "subjectAltNames": names, "subjectAltUris": uris });
    let p = Proxy::with_config(doc(
        1,
        vec![
            tls_route(
                "uri.example.com",
                &b,
                tls(&pki.ca_pem, json!([]), json!([ID])),
                "http1",
            ),
            tls_route(
                "either.example.com",
                &b,
                tls(&pki.ca_pem, json!(["nope.test"]), json!([ID])),
                "http1",
            ),
            tls_route(
                "other-id.example.com",
                &b,
                tls(
                    &pki.ca_pem,
                    json!([]),
                    json!(["spiffe://cluster.local/ns/shop/sa/db"]),
                ),
                "http1",
            ),
            tls_route(
                "prefix.example.com",
                &b,
                tls(
                    &pki.ca_pem,
                    json!([]),
                    json!(["spiffe://cluster.local/ns/shop/sa/we"]),
                ),
                "http1",
            ),
            tls_route(
                "forged.example.com",
                &forged,
                tls(&pki.ca_pem, json!([]), json!([ID])),
                "http1",
            ),
        ],
    ))
    .await;
    assert_eq!(p.get("uri.example.com", "/").await.status(), StatusCode::OK);
    assert_eq!(
        p.get("either.example.com", "/").await.status(),
        StatusCode::OK
    );
    for refused in ["other-id", "prefix", "forged"] {
        assert_eq!(
            p.get(&format!("{refused}.example.com"), "/").await.status(),
            StatusCode::BAD_GATEWAY,
            "{refused}"
        );
    }
    assert_eq!(b.hits(), 2);
    assert_eq!(forged.hits(), 0);
}

#[tokio::test]
async fn mtls_backend_requires_the_client_certificate() {
    let pki = Pki::new();
    let b = tls_backend(&pki, true).await;
    let client = pki.leaf(&["proxy.client"]);
    let p = Proxy::with_config(doc(
        1,
        vec![
            tls_route(
                "mtls.example.com",
                &b,
                json!({ "caBundlePem": pki.ca_pem, "serverName": "backend.test",
                "clientCertPem": client.cert_pem, "clientKeyPem": client.key_pem }),
                "http1",
            ),
            tls_route(
                "nocert.example.com",
                &b,
                json!({ "caBundlePem": pki.ca_pem, "serverName": "backend.test" }),
                "http1",
            ),
        ],
    ))
    .await;
    let resp = p.get("mtls.example.com", "/").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["backend"], "tls");
    assert_eq!(
        p.get("nocert.example.com", "/").await.status(),
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(b.hits.load(Ordering::SeqCst), 1);
    // GET /config never hands the private key back
    let (status, body) = p.admin_get("/config").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("PRIVATE KEY"), "{body}");
    assert!(body.contains("<redacted>"));
}
