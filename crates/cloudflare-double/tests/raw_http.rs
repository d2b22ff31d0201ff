//! The double spoken to with raw HTTP/1.1 over TCP: envelope, authentication, validation,
//! versioning, faults, and the admin surface.

use std::time::Duration;

use cloudflare_double::{CloudflareDouble, Fault, FaultRule, Options, TokenScope};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "raw-token";

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends one request with `Connection: close` and reads the answer to EOF (bounded).
async fn send(
    double: &CloudflareDouble,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&str>,
) -> Option<Answer> {
    let mut stream = TcpStream::connect(double.addr()).await.unwrap();
    let body = body.unwrap_or("");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: api\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(auth) = auth {
        req.push_str(&format!("Authorization: {auth}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("answer within 10 s")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    if text.is_empty() {
        return None;
    }
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Some(Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

async fn api(double: &CloudflareDouble, method: &str, path: &str, body: Option<&str>) -> Answer {
    let auth = format!("Bearer {TOKEN}");
    send(
        double,
        method,
        &format!("/client/v4{path}"),
        Some(&auth),
        body,
    )
    .await
    .expect("an answer")
}

async fn setup() -> (CloudflareDouble, String, String) {
    let double = CloudflareDouble::start().await.unwrap();
    let account = double.add_account("raw").unwrap();
    let tunnel = double.add_tunnel(&account, "raw").unwrap();
    double
        .add_token(TOKEN, TokenScope::User(vec![account.clone()]))
        .unwrap();
    (double, account, tunnel.tunnel_id)
}

fn put_body(ingress: Value) -> String {
    json!({"config": {"ingress": ingress}}).to_string()
}

#[tokio::test]
async fn envelope_shape_on_success_and_failure() {
    let (double, account, tunnel) = setup().await;
    let ok = api(
        &double,
        "GET",
        &format!("/accounts/{account}/cfd_tunnel/{tunnel}"),
        None,
    )
    .await;
    assert_eq!(ok.status, 200);
    assert!(ok.head.contains("content-type: application/json"));
    let v = ok.json();
    assert_eq!(v["success"], json!(true));
    assert_eq!(v["errors"], json!([]));
    assert_eq!(v["messages"], json!([]));
    assert_eq!(v["result"]["id"], json!(tunnel));
    assert_eq!(v["result"]["account_tag"], json!(account));
    assert_eq!(v["result"]["config_src"], json!("cloudflare"));

    let bad = api(&double, "GET", "/no/such/route", None).await;
    assert_eq!(bad.status, 400);
    let v = bad.json();
    assert_eq!(v["success"], json!(false));
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["errors"][0]["code"], json!(7003));
    assert_eq!(
        v["errors"][0]["message"],
        json!(
            "Could not route to /client/v4/no/such/route, perhaps your object identifier is invalid?"
        )
    );
    assert_eq!(
        v["errors"][1],
        json!({"code": 7000, "message": "No route for that URI"})
    );
}

#[tokio::test]
async fn authentication_answers() {
    let (double, account, tunnel) = setup().await;
    let path = format!("/client/v4/accounts/{account}/cfd_tunnel/{tunnel}/configurations");

    let missing = send(&double, "GET", &path, None, None).await.unwrap();
    assert_eq!(missing.status, 400);
    let v = missing.json();
    assert_eq!(v["errors"][0]["code"], json!(6003));
    assert_eq!(v["errors"][0]["error_chain"][0]["code"], json!(6111));

    let basic = send(&double, "GET", &path, Some("Basic abc"), None)
        .await
        .unwrap();
    assert_eq!(basic.status, 400);

    let unknown = send(&double, "GET", &path, Some("Bearer nope"), None)
        .await
        .unwrap();
    assert_eq!(unknown.status, 401);
    assert_eq!(
        unknown.json()["errors"][0],
        json!({"code": 1000, "message": "Invalid API Token"})
    );

    let other = double.add_account("other").unwrap();
    let foreign = api(
        &double,
        "GET",
        &format!("/accounts/{other}/cfd_tunnel/{tunnel}"),
        None,
    )
    .await;
    assert_eq!(foreign.status, 403);
    assert_eq!(
        foreign.json()["errors"][0],
        json!({"code": 10000, "message": "Authentication error"})
    );

    let verify = api(&double, "GET", "/user/tokens/verify", None).await;
    assert_eq!(verify.status, 200);
    let v = verify.json();
    assert_eq!(v["result"]["status"], json!("active"));
    assert_eq!(v["messages"][0]["code"], json!(10000));
    assert_eq!(v["result"]["id"].as_str().unwrap().len(), 32);
}

#[tokio::test]
async fn put_validation_and_versioning() {
    let (double, account, tunnel) = setup().await;
    let path = format!("/accounts/{account}/cfd_tunnel/{tunnel}/configurations");

    let empty_host = api(
        &double,
        "PUT",
        &path,
        Some(&put_body(json!([
            {"hostname": "", "service": "http://localhost:8080"},
            {"service": "http_status:404"}
        ]))),
    )
    .await;
    assert_eq!(empty_host.status, 400);
    let err = &empty_host.json()["errors"][0];
    assert_eq!(err["code"], json!(1056));
    assert!(
        err["message"].as_str().unwrap().starts_with(
            "Bad Configuration: Validation failed: Rule #1 is matching the hostname ''"
        )
    );

    let not_last = api(
        &double,
        "PUT",
        &path,
        Some(&put_body(json!([
            {"service": "http_status:404"},
            {"hostname": "a.example.com", "service": "http://localhost:8080"}
        ]))),
    )
    .await;
    assert_eq!(not_last.status, 400);
    assert_eq!(not_last.json()["errors"][0]["code"], json!(1056));

    let bad_wildcard = api(
        &double,
        "PUT",
        &path,
        Some(&put_body(json!([
            {"hostname": "a.*.example.com", "service": "http://localhost:8080"},
            {"service": "http_status:404"}
        ]))),
    )
    .await;
    assert!(
        bad_wildcard.body.contains("at most one wildcard"),
        "{}",
        bad_wildcard.body
    );

    let not_json = api(&double, "PUT", &path, Some("{nope")).await;
    assert_eq!(not_json.status, 400);
    assert_eq!(double.put_count(&tunnel), 0);

    let good = put_body(json!([
        {"hostname": "*.example.com", "service": "http://localhost:8080"},
        {"hostname": "a.example.com", "path": "^/api", "service": "http://localhost:8080"},
        {"service": "http_status:404"}
    ]));
    for want in 1..=2 {
        let ok = api(&double, "PUT", &path, Some(&good)).await;
        assert_eq!(ok.status, 200, "{}", ok.body);
        let v = ok.json();
        assert_eq!(v["result"]["version"], json!(want));
        assert_eq!(v["result"]["tunnel_id"], json!(tunnel));
        assert_eq!(v["result"]["config"]["ingress"][1]["path"], json!("^/api"));
    }
    let read = api(&double, "GET", &path, None).await.json();
    assert_eq!(read["result"]["version"], json!(2));
    assert_eq!(double.put_count(&tunnel), 2);
    let log: Vec<(String, Option<u16>)> = double
        .calls()
        .into_iter()
        .map(|c| (c.method, c.status))
        .collect();
    assert_eq!(log.len(), 7);
    assert_eq!(log[6], ("GET".to_string(), Some(200)));
    assert_eq!(log[3], ("PUT".to_string(), Some(400)));
}

#[tokio::test]
async fn connector_token_endpoint() {
    let (double, account, tunnel) = setup().await;
    let v = api(
        &double,
        "GET",
        &format!("/accounts/{account}/cfd_tunnel/{tunnel}/token"),
        None,
    )
    .await
    .json();
    let token = v["result"].as_str().unwrap();
    assert!(token.starts_with("eyJhIjoi"), "{token}");
    assert_eq!(token, double.tunnel_token(&account, &tunnel).unwrap());
    // Identifiers are case-insensitive hex.
    let upper = api(
        &double,
        "GET",
        &format!(
            "/accounts/{}/cfd_tunnel/{}/token",
            account.to_ascii_uppercase(),
            tunnel.to_ascii_uppercase()
        ),
        None,
    )
    .await
    .json();
    assert_eq!(upper["result"].as_str(), Some(token));
}

#[tokio::test]
async fn faults_over_the_wire() {
    let (double, account, _) = setup().await;
    let path = format!("/accounts/{account}/tokens/verify");
    double.inject(FaultRule::new("/user/tokens/verify", Fault::Close));
    assert!(
        send(
            &double,
            "GET",
            "/client/v4/user/tokens/verify",
            Some("Bearer raw-token"),
            None
        )
        .await
        .is_none()
    );

    double.inject(FaultRule::new(&path, Fault::Status(502)));
    let edge = api(&double, "GET", &path, None).await;
    assert_eq!(edge.status, 502);
    assert_eq!(edge.body, "error code: 502");

    double.inject(FaultRule::new(
        "/user/*",
        Fault::RateLimited {
            retry_after_secs: 9,
        },
    ));
    let limited = api(&double, "GET", "/user/tokens/verify", None).await;
    assert_eq!(limited.status, 429);
    assert!(limited.head.contains("retry-after: 9"), "{}", limited.head);
    assert_eq!(limited.json()["errors"][0]["code"], json!(10100));

    let statuses: Vec<Option<u16>> = double.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![None, Some(502), Some(429)]);
}

#[tokio::test]
async fn admin_surface_only_when_enabled() {
    let plain = CloudflareDouble::start().await.unwrap();
    let off = send(&plain, "GET", "/__admin/calls", None, None)
        .await
        .unwrap();
    assert_eq!(off.status, 400, "admin paths are ordinary unknown routes");

    let double = CloudflareDouble::start_with(Options {
        admin: true,
        ..Options::default()
    })
    .await
    .unwrap();
    let account = send(
        &double,
        "POST",
        "/__admin/accounts",
        None,
        Some(r#"{"name":"x"}"#),
    )
    .await
    .unwrap()
    .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let tunnel = send(
        &double,
        "POST",
        "/__admin/tunnels",
        None,
        Some(&json!({"account_id": account, "name": "t"}).to_string()),
    )
    .await
    .unwrap()
    .json();
    let tunnel_id = tunnel["tunnel_id"].as_str().unwrap().to_string();
    assert!(tunnel["token"].as_str().unwrap().starts_with("eyJhIjoi"));
    let added = send(
        &double,
        "POST",
        "/__admin/tokens",
        None,
        Some(&json!({"value": TOKEN, "accounts": [account]}).to_string()),
    )
    .await
    .unwrap();
    assert_eq!(added.status, 200, "{}", added.body);
    let refused = send(
        &double,
        "POST",
        "/__admin/tokens",
        None,
        Some(&json!({"value": "x", "accounts": ["ffffffffffffffffffffffffffffffff"]}).to_string()),
    )
    .await
    .unwrap();
    assert_eq!(refused.status, 400);

    let fault = json!({"method": "PUT", "path": format!("/accounts/{account}/cfd_tunnel/{tunnel_id}/configurations"),
                       "times": 1, "fault": {"status": 503}});
    let r = send(
        &double,
        "POST",
        "/__admin/faults",
        None,
        Some(&fault.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let path = format!("/accounts/{account}/cfd_tunnel/{tunnel_id}/configurations");
    let body = put_body(json!([{"service": "http_status:404"}]));
    assert_eq!(api(&double, "PUT", &path, Some(&body)).await.status, 503);
    assert_eq!(api(&double, "PUT", &path, Some(&body)).await.status, 200);

    let calls = send(&double, "GET", "/__admin/calls", None, None)
        .await
        .unwrap()
        .json();
    assert_eq!(calls.as_array().unwrap().len(), 2);
    assert_eq!(calls[0]["status"], json!(503));
    let writes = send(&double, "GET", "/__admin/writes", None, None)
        .await
        .unwrap()
        .json();
    assert_eq!(writes[&tunnel_id], json!(1));
}

#[tokio::test]
async fn accounts_pagination_over_the_wire() {
    let (double, first, _) = setup().await;
    let mut ids = vec![first];
    for i in 0..6 {
        ids.push(double.add_account(&format!("p{i}")).unwrap());
    }
    double
        .add_token("pager", TokenScope::User(ids.clone()))
        .unwrap();
    let auth = Some("Bearer pager");
    let page = |q: &'static str| {
        let double = &double;
        async move {
            send(
                double,
                "GET",
                &format!("/client/v4/accounts{q}"),
                auth,
                None,
            )
            .await
            .unwrap()
            .json()
        }
    };
    let p1 = page("?page=1&per_page=5").await;
    assert_eq!(p1["result"].as_array().unwrap().len(), 5);
    assert_eq!(
        p1["result_info"],
        json!({"page": 1, "per_page": 5, "count": 5, "total_count": 7})
    );
    let p2 = page("?page=2&per_page=5").await;
    assert_eq!(p2["result_info"]["count"], json!(2));
    let tiny = page("?per_page=1").await;
    assert_eq!(
        tiny["result_info"]["per_page"],
        json!(5),
        "per_page is raised to 5"
    );
    let default = page("").await;
    assert_eq!(default["result_info"]["per_page"], json!(20));
    assert_eq!(default["result_info"]["count"], json!(7));
}

/// Zones and DNS records over the wire: the admin surface seeds them, the API answers with the
/// documented envelope, codes and pages.
#[tokio::test]
async fn dns_records_over_the_wire_and_the_admin_surface() {
    let double = CloudflareDouble::start_with(Options {
        admin: true,
        ..Options::default()
    })
    .await
    .unwrap();
    let admin = |method: &'static str, path: &'static str, body: Option<String>| {
        let double = &double;
        async move {
            send(
                double,
                method,
                &format!("/__admin{path}"),
                None,
                body.as_deref(),
            )
            .await
            .unwrap()
        }
    };
    let account = admin("POST", "/accounts", Some(r#"{"name": "dns"}"#.into()))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let zone = admin(
        "POST",
        "/zones",
        Some(format!(
            r#"{{"account_id": "{account}", "name": "Example.COM."}}"#
        )),
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    admin(
        "POST",
        "/tokens",
        Some(format!(
            r#"{{"value": "dns-token", "accounts": ["{account}"]}}"#
        )),
    )
    .await;
    let auth = Some("Bearer dns-token");

    // No DNS grant yet: no zone is visible, records are refused (403, 10000).
    let zones = send(&double, "GET", "/client/v4/zones", auth, None)
        .await
        .unwrap();
    assert_eq!(zones.json()["result"], json!([]));
    let list = format!("/client/v4/zones/{zone}/dns_records");
    let refused = send(&double, "GET", &list, auth, None).await.unwrap();
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["errors"][0]["code"], json!(10000));

    let grant = admin(
        "POST",
        "/dns_grants",
        Some(r#"{"token": "dns-token", "edit": true}"#.into()),
    )
    .await;
    assert_eq!(grant.status, 200, "{}", grant.body);
    let zones = send(
        &double,
        "GET",
        "/client/v4/zones?name=example.com",
        auth,
        None,
    )
    .await
    .unwrap()
    .json();
    assert_eq!(zones["result"][0]["name"], json!("example.com"));
    assert_eq!(zones["result"][0]["account"]["id"], json!(account));
    assert_eq!(zones["result_info"]["total_count"], json!(1));

    // A dashboard record, then the API's answers to creations next to it.
    let seeded = admin(
        "POST",
        "/dns_records",
        Some(
            r#"{"zone": "example.com", "type": "A", "name": "www", "content": "192.0.2.1"}"#.into(),
        ),
    )
    .await
    .json();
    assert_eq!(seeded["name"], json!("www.example.com"));
    let create = |body: &'static str| {
        let (double, list) = (&double, list.clone());
        async move { send(double, "POST", &list, auth, Some(body)).await.unwrap() }
    };
    let code = |a: &Answer| (a.status, a.json()["errors"][0]["code"].clone());
    assert_eq!(
        code(&create(r#"{"type": "CNAME", "name": "www.example.com", "content": "t.cfargotunnel.com", "proxied": true}"#).await),
        (400, json!(81053))
    );
    assert_eq!(
        code(&create(r#"{"type": "A", "name": "www", "content": "192.0.2.1"}"#).await),
        (400, json!(81057))
    );
    assert_eq!(
        code(&create(r#"{"type": "CNAME", "name": "x", "content": "not a host"}"#).await),
        (400, json!(9007))
    );
    assert_eq!(
        code(&create(r#"{"type": "TXT", "name": "x", "content": "\"t\"", "proxied": true}"#).await),
        (400, json!(9004))
    );
    assert_eq!(
        code(&create(r#"{"type": "BOGUS", "name": "x", "content": "y"}"#).await),
        (400, json!(9020))
    );
    let made = create(
        r#"{"type": "CNAME", "name": "*.example.com", "content": "T.cfargotunnel.com.", "proxied": true, "ttl": 300}"#,
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let made = made.json();
    assert_eq!(made["success"], json!(true));
    assert_eq!(made["result"]["name"], json!("*.example.com"));
    assert_eq!(made["result"]["content"], json!("t.cfargotunnel.com"));
    assert_eq!(
        made["result"]["ttl"],
        json!(1),
        "proxied records have automatic TTL"
    );

    // Filters and pages; an unknown zone routes nowhere; delete and its 404.
    let one = send(
        &double,
        "GET",
        &format!("{list}?name=%2A.example.com&type=CNAME&per_page=5"),
        auth,
        None,
    )
    .await
    .unwrap()
    .json();
    assert_eq!(one["result"].as_array().unwrap().len(), 1);
    assert_eq!(one["result_info"]["per_page"], json!(5));
    let unknown = send(
        &double,
        "GET",
        "/client/v4/zones/0123456789abcdef0123456789abcdef/dns_records",
        auth,
        None,
    )
    .await
    .unwrap();
    assert_eq!(code(&unknown), (400, json!(7003)));
    let id = made["result"]["id"].as_str().unwrap();
    let path = format!("{list}/{id}");
    let deleted = send(&double, "DELETE", &path, auth, None)
        .await
        .unwrap()
        .json();
    assert_eq!(deleted["result"], json!({"id": id}));
    let again = send(&double, "DELETE", &path, auth, None).await.unwrap();
    assert_eq!(code(&again), (404, json!(81044)));
    let all = admin("GET", "/dns_records", None).await.json();
    assert_eq!(all["example.com"].as_array().unwrap().len(), 1);
}
