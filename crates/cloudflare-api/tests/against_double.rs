//! The client against the contract double over real TCP: the production code path except for
//! the base URL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloudflare_api::{
    AccessDestination, AccessPolicyRule, ApiMetrics, CallObserver, CallRecord, Client,
    ConnectorToken, Error, ErrorKind, IngressRule, NewAccessApp, Resource, RetryPolicy,
    TunnelConfig, retry,
};
use cloudflare_double::{CloudflareDouble, Fault, FaultRule, TokenScope, TunnelInfo};
use serde_json::json;

const TOKEN_A: &str = "token-a";
const TOKEN_A_ACCOUNT_OWNED: &str = "token-a-account";
const TOKEN_B: &str = "token-b";

struct World {
    double: CloudflareDouble,
    account_a: String,
    account_b: String,
    tunnel_a: TunnelInfo,
    tunnel_b: TunnelInfo,
}

async fn world() -> World {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let double = CloudflareDouble::start().await.expect("double starts");
    let account_a = double.add_account("team-a").unwrap();
    let account_b = double.add_account("team-b").unwrap();
    let tunnel_a = double.add_tunnel(&account_a, "a").unwrap();
    let tunnel_b = double.add_tunnel(&account_b, "b").unwrap();
    double
        .add_token(TOKEN_A, TokenScope::User(vec![account_a.clone()]))
        .unwrap();
    double
        .add_token(
            TOKEN_A_ACCOUNT_OWNED,
            TokenScope::Account(account_a.clone()),
        )
        .unwrap();
    double
        .add_token(TOKEN_B, TokenScope::User(vec![account_b.clone()]))
        .unwrap();
    World {
        double,
        account_a,
        account_b,
        tunnel_a,
        tunnel_b,
    }
}

fn client(w: &World, token: &str) -> Client {
    Client::builder(token)
        .base_url(w.double.base_url())
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client builds")
}

fn config_path(account: &str, tunnel: &str) -> String {
    format!("/accounts/{account}/cfd_tunnel/{tunnel}/configurations")
}

#[tokio::test]
async fn get_put_round_trip_keeps_unknown_fields() {
    let w = world().await;
    let (acct, tun) = (&w.account_a, &w.tunnel_a.tunnel_id);
    w.double
        .set_configuration(
            acct,
            tun,
            json!({
                "ingress": [
                    {"hostname": "old.example.com", "service": "http://localhost:8080",
                     "originRequest": {"connectTimeout": 10}, "dashboardOnly": "keep-me"},
                    {"service": "http_status:404"}
                ],
                "originRequest": {"noTLSVerify": false},
                "warp-routing": {"enabled": true}
            }),
        )
        .unwrap();
    let c = client(&w, TOKEN_A);

    let current = c.get_tunnel_configuration(acct, tun).await.unwrap();
    assert_eq!(current.version, 1);
    assert_eq!(current.tunnel_id.as_deref(), Some(tun.as_str()));
    assert_eq!(current.config.ingress.len(), 2);

    let mut next = current.config.clone();
    next.ingress.insert(
        1,
        IngressRule::new("new.example.com", "http://localhost:8080"),
    );
    let written = c.put_tunnel_configuration(acct, tun, &next).await.unwrap();
    assert_eq!(written.version, 2, "version increments on PUT");
    assert_eq!(written.config, next);

    let (stored, version) = w.double.configuration(acct, tun).unwrap();
    let stored = stored.unwrap();
    assert_eq!(version, 2);
    assert_eq!(stored["warp-routing"], json!({"enabled": true}));
    assert_eq!(stored["originRequest"], json!({"noTLSVerify": false}));
    assert_eq!(stored["ingress"][0]["dashboardOnly"], json!("keep-me"));
    assert_eq!(
        stored["ingress"][0]["originRequest"],
        json!({"connectTimeout": 10})
    );
    assert_eq!(stored["ingress"][1]["hostname"], json!("new.example.com"));
    assert_eq!(stored["ingress"][2], json!({"service": "http_status:404"}));
    assert_eq!(w.double.put_count(tun), 1);

    let calls: Vec<(String, Option<u16>)> = w
        .double
        .calls()
        .into_iter()
        .map(|c| (c.method, c.status))
        .collect();
    assert_eq!(
        calls,
        vec![("GET".into(), Some(200)), ("PUT".into(), Some(200))]
    );
}

#[tokio::test]
async fn never_configured_tunnel_reads_as_empty_version_zero() {
    let w = world().await;
    let c = client(&w, TOKEN_A);
    let current = c
        .get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id)
        .await
        .unwrap();
    assert_eq!(current.version, 0);
    assert!(current.config.ingress.is_empty());
}

#[tokio::test]
async fn validation_errors_surface_code_and_message() {
    let w = world().await;
    let (acct, tun) = (&w.account_a, &w.tunnel_a.tunnel_id);
    let c = client(&w, TOKEN_A);
    let cases = [
        (
            vec![IngressRule::new("a.example.com", "http://localhost:8080")],
            "The last ingress rule must match all URLs",
        ),
        (
            vec![
                IngressRule::new("", "http://localhost:8080"),
                IngressRule::catch_all(),
            ],
            "Rule #1 is matching the hostname ''",
        ),
        (vec![], "doesn't contain any ingress rules"),
        (
            vec![
                IngressRule::new("a.example.com", "localhost:8080"),
                IngressRule::catch_all(),
            ],
            "invalid address",
        ),
    ];
    for (ingress, want) in cases {
        let config = TunnelConfig {
            ingress,
            ..TunnelConfig::default()
        };
        let err = c
            .put_tunnel_configuration(acct, tun, &config)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert!(err.has_code(1056), "{err}");
        let message = &err.api_errors()[0].message;
        assert!(
            message.starts_with("Bad Configuration: Validation failed: ") && message.contains(want),
            "{message}"
        );
    }
    let mut too_many: Vec<IngressRule> = (0..1000)
        .map(|i| IngressRule::new(format!("h{i}.example.com"), "http://localhost:8080"))
        .collect();
    too_many.push(IngressRule::catch_all());
    let err = c
        .put_tunnel_configuration(
            acct,
            tun,
            &TunnelConfig {
                ingress: too_many,
                ..TunnelConfig::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.has_code(1056) && err.to_string().contains("1001 ingress rules"),
        "{err}"
    );
    assert_eq!(w.double.put_count(tun), 0, "rejected writes are not stored");
    assert_eq!(w.double.configuration(acct, tun).unwrap(), (None, 0));
}

#[tokio::test]
async fn wrong_token_is_auth() {
    let w = world().await;
    let err = client(&w, "no-such-token")
        .get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
    assert!(matches!(err, Error::Auth { status: 401, .. }), "{err:?}");
    assert!(err.has_code(1000));
    let err = client(&w, "no-such-token")
        .verify_user_token()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
}

#[tokio::test]
async fn other_accounts_tunnel_is_auth_and_untouched() {
    let w = world().await;
    let c = client(&w, TOKEN_A);
    let b = (&w.account_b, &w.tunnel_b.tunnel_id);
    for err in [
        c.get_tunnel_configuration(b.0, b.1).await.unwrap_err(),
        c.get_tunnel(b.0, b.1).await.unwrap_err(),
        c.get_tunnel_token(b.0, b.1).await.unwrap_err(),
        c.put_tunnel_configuration(
            b.0,
            b.1,
            &TunnelConfig {
                ingress: vec![IngressRule::catch_all()],
                ..TunnelConfig::default()
            },
        )
        .await
        .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Auth { status: 403, .. }), "{err:?}");
        assert!(err.has_code(10000));
    }
    assert_eq!(w.double.put_count(b.1), 0);
    // Account B's tunnel ID under account A (squatting a foreign UUID): not found there.
    let err = c
        .get_tunnel(&w.account_a, &w.tunnel_b.tunnel_id)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn unknown_and_malformed_identifiers() {
    let w = world().await;
    let c = client(&w, TOKEN_A);
    let err = c
        .get_tunnel(&w.account_a, "00000000-0000-4000-8000-000000000000")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = c
        .get_tunnel_configuration(&w.account_a, "../../user/tokens/verify")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(err.has_code(7003) && err.has_code(7000), "{err}");
    let before = w.double.calls().len();
    for bad in ["..", ".", ""] {
        let err = c.get_tunnel(&w.account_a, bad).await.unwrap_err();
        assert!(matches!(err, Error::Invalid { status: 0, .. }), "{err:?}");
    }
    assert_eq!(w.double.calls().len(), before, "refused before sending");
}

#[tokio::test]
async fn token_verification_by_ownership() {
    let w = world().await;
    let user = client(&w, TOKEN_A).verify_user_token().await.unwrap();
    assert!(user.is_active());
    let owned = client(&w, TOKEN_A_ACCOUNT_OWNED);
    assert!(
        owned
            .verify_account_token(&w.account_a)
            .await
            .unwrap()
            .is_active()
    );
    assert_eq!(
        owned.verify_user_token().await.unwrap_err().kind(),
        ErrorKind::Auth
    );
    assert_eq!(
        owned
            .verify_account_token(&w.account_b)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Auth
    );
    let err = owned.list_accounts().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(err.has_code(1001), "{err}");
}

#[tokio::test]
async fn tunnel_and_connector_token_verify_a_claim() {
    let w = world().await;
    let c = client(&w, TOKEN_A);
    let tunnel = c
        .get_tunnel(&w.account_a, &w.tunnel_a.tunnel_id)
        .await
        .unwrap();
    assert_eq!(tunnel.id, w.tunnel_a.tunnel_id);
    assert_eq!(tunnel.account_tag, w.account_a);
    assert_eq!(tunnel.name, "a");
    assert!(tunnel.deleted_at.is_none());

    let from_api = c
        .get_tunnel_token(&w.account_a, &w.tunnel_a.tunnel_id)
        .await
        .unwrap();
    let api_token = ConnectorToken::parse(&from_api).unwrap();
    let claimed = ConnectorToken::parse(&w.tunnel_a.token).unwrap();
    assert_eq!(api_token.account_tag(), w.account_a);
    assert_eq!(api_token.tunnel_id(), w.tunnel_a.tunnel_id);
    assert!(claimed.secret_matches(&api_token));

    // A forged token: tunnel A's UUID with a secret of the claimant's choosing.
    let other = w
        .double
        .add_tunnel_with(
            &w.account_a,
            "11111111-2222-4333-8444-555555555555",
            "forger",
            Some("QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="),
        )
        .unwrap();
    let forged = ConnectorToken::parse(&other.token).unwrap();
    assert!(!forged.secret_matches(&api_token));
}

#[tokio::test]
async fn list_accounts_follows_pages() {
    let w = world().await;
    let mut ids = vec![w.account_a.clone()];
    for i in 0..119 {
        ids.push(w.double.add_account(&format!("acct-{i}")).unwrap());
    }
    w.double
        .add_token("wide", TokenScope::User(ids.clone()))
        .unwrap();
    let accounts = client(&w, "wide").list_accounts().await.unwrap();
    let mut got: Vec<String> = accounts.into_iter().map(|a| a.id).collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
    let pages: Vec<Option<String>> = w
        .double
        .calls()
        .into_iter()
        .filter(|c| c.path == "/accounts")
        .map(|c| c.query)
        .collect();
    assert_eq!(
        pages,
        vec![
            Some("page=1&per_page=50".into()),
            Some("page=2&per_page=50".into()),
            Some("page=3&per_page=50".into()),
        ]
    );
    let single = client(&w, TOKEN_B).list_accounts().await.unwrap();
    assert_eq!(single.len(), 1);
    assert_eq!(single[0].id, w.account_b);
    assert_eq!(single[0].name, "team-b");
}

#[tokio::test]
async fn injected_faults_are_classified() {
    let w = world().await;
    let path = config_path(&w.account_a, &w.tunnel_a.tunnel_id);
    let c = client(&w, TOKEN_A);
    let get = || c.get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id);

    w.double.inject(FaultRule::new(&path, Fault::Status(503)));
    let err = get().await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 503, .. }), "{err:?}");

    w.double.inject(FaultRule::new(
        &path,
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    ));
    let err = get().await.unwrap_err();
    match &err {
        Error::RateLimited { retry_after, .. } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(7)));
        }
        other => panic!("want rate limited, got {other:?}"),
    }
    assert!(err.has_code(10100));

    w.double.inject(FaultRule::new(&path, Fault::Close));
    let err = get().await.unwrap_err();
    assert!(
        matches!(err, Error::Network { timeout: false, .. }),
        "{err:?}"
    );

    w.double.inject(FaultRule::new(&path, Fault::Malformed));
    let err = get().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err:?}");

    w.double.inject(FaultRule::new(&path, Fault::Status(409)));
    assert_eq!(get().await.unwrap_err().kind(), ErrorKind::Invalid);

    // The faults were one-shot: the next call succeeds.
    get().await.unwrap();
}

#[tokio::test]
async fn hung_request_times_out_as_network() {
    let w = world().await;
    let c = Client::builder(TOKEN_A)
        .base_url(w.double.base_url())
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    w.double.inject(FaultRule::new(
        config_path(&w.account_a, &w.tunnel_a.tunnel_id),
        Fault::Hang,
    ));
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        c.get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id),
    )
    .await
    .expect("the client's own timeout fires first")
    .unwrap_err();
    assert!(
        matches!(err, Error::Network { timeout: true, .. }),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn unreachable_server_is_network() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let c = Client::builder("t")
        .base_url(format!("http://{addr}/client/v4"))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert_eq!(
        c.verify_user_token().await.unwrap_err().kind(),
        ErrorKind::Network
    );
}

#[tokio::test]
async fn retry_honours_retry_after_then_succeeds() {
    let w = world().await;
    let (acct, tun) = (&w.account_a, &w.tunnel_a.tunnel_id);
    let path = config_path(acct, tun);
    w.double.inject(
        FaultRule::new(
            &path,
            Fault::RateLimited {
                retry_after_secs: 3,
            },
        )
        .method("PUT")
        .times(2),
    );
    let c = client(&w, TOKEN_A);
    let config = TunnelConfig {
        ingress: vec![
            IngressRule::new("a.example.com", "http://localhost:8080"),
            IngressRule::catch_all(),
        ],
        ..TunnelConfig::default()
    };
    let slept = Mutex::new(Vec::new());
    let policy = RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(200),
        max_delay: Duration::from_secs(30),
    };
    let written = retry(
        &policy,
        |d| {
            slept.lock().unwrap().push(d);
            std::future::ready(())
        },
        || c.put_tunnel_configuration(acct, tun, &config),
    )
    .await
    .unwrap();
    assert_eq!(written.version, 1);
    assert_eq!(
        *slept.lock().unwrap(),
        vec![Duration::from_secs(3), Duration::from_secs(3)]
    );
    let statuses: Vec<Option<u16>> = w.double.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![Some(429), Some(429), Some(200)]);
    assert_eq!(w.double.put_count(tun), 1, "one accepted write");
}

#[tokio::test]
async fn retry_backs_off_on_server_errors_and_stops_on_auth() {
    let w = world().await;
    let path = config_path(&w.account_a, &w.tunnel_a.tunnel_id);
    w.double
        .inject(FaultRule::new(&path, Fault::Status(502)).times(2));
    let c = client(&w, TOKEN_A);
    let slept = Mutex::new(Vec::new());
    let policy = RetryPolicy {
        max_attempts: 5,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(1),
    };
    let sleeper = |d| {
        slept.lock().unwrap().push(d);
        std::future::ready(())
    };
    retry(&policy, sleeper, || {
        c.get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id)
    })
    .await
    .unwrap();
    assert_eq!(
        *slept.lock().unwrap(),
        vec![Duration::from_millis(100), Duration::from_millis(200)]
    );

    slept.lock().unwrap().clear();
    w.double.clear_calls();
    let wrong = client(&w, "wrong");
    let err = retry(&policy, sleeper, || wrong.verify_user_token())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
    assert!(slept.lock().unwrap().is_empty());
    assert_eq!(w.double.calls().len(), 1, "no retry of an auth failure");
}

#[derive(Default)]
struct Recorder(Mutex<Vec<CallRecord>>);

impl CallObserver for Recorder {
    fn observe(&self, call: &CallRecord) {
        self.0.lock().unwrap().push(*call);
    }
}

#[tokio::test]
async fn observer_sees_every_attempt_and_metrics_encode() {
    let w = world().await;
    let recorder = Arc::new(Recorder::default());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(ApiMetrics::register(&mut registry));
    let c = Client::builder(TOKEN_A)
        .base_url(w.double.base_url())
        .observer(recorder.clone())
        .build()
        .unwrap();
    let m = Client::builder(TOKEN_A)
        .base_url(w.double.base_url())
        .observer(metrics)
        .build()
        .unwrap();
    let path = config_path(&w.account_a, &w.tunnel_a.tunnel_id);
    for client in [&c, &m] {
        // Each client's first call loses its connection.
        w.double.inject(FaultRule::new(&path, Fault::Close));
        let _ = client
            .get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id)
            .await;
        client
            .get_tunnel_configuration(&w.account_a, &w.tunnel_a.tunnel_id)
            .await
            .unwrap();
        client.verify_user_token().await.unwrap();
    }
    let calls = recorder.0.lock().unwrap().clone();
    let summary: Vec<(&str, Resource, Option<u16>, Option<ErrorKind>)> = calls
        .iter()
        .map(|c| (c.method, c.resource, c.status, c.error))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "GET",
                Resource::TunnelConfigurations,
                None,
                Some(ErrorKind::Network)
            ),
            ("GET", Resource::TunnelConfigurations, Some(200), None),
            ("GET", Resource::TokenVerify, Some(200), None),
        ]
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for want in [
        r#"cftunnel_cloudflare_api_calls_total{method="GET",resource="tunnel_configurations",status="200"} 1"#,
        r#"cftunnel_cloudflare_api_calls_total{method="GET",resource="token_verify",status="200"} 1"#,
        r#"cftunnel_cloudflare_api_errors_total{method="GET",error_type="network"} 1"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}

#[tokio::test]
async fn builder_refuses_bad_settings() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    assert!(Client::builder("").build().is_err());
    assert!(Client::builder("t").base_url("not a url").build().is_err());
    assert!(
        Client::builder("t")
            .base_url("ftp://example.com/x")
            .build()
            .is_err()
    );
    assert!(Client::builder("bad\ntoken").build().is_err());
    assert!(Client::builder("t").build().is_ok());
}

fn cname(name: &str, target: &str) -> cloudflare_api::NewDnsRecord {
    cloudflare_api::NewDnsRecord {
        kind: "CNAME".into(),
        name: name.into(),
        content: target.into(),
        proxied: Some(true),
        ttl: 1,
        comment: None,
    }
}

#[tokio::test]
async fn dns_records_lifecycle_pagination_and_conflicts() {
    use cloudflare_api::RecordFilter;
    use cloudflare_double::DnsGrant;
    let w = world().await;
    let zone = w.double.add_zone(&w.account_a, "example.com").unwrap();
    w.double.add_zone(&w.account_b, "example.org").unwrap();
    w.double
        .grant_dns(
            TOKEN_A,
            DnsGrant {
                zones: None,
                edit: true,
            },
        )
        .unwrap();
    let c = client(&w, TOKEN_A);

    // The token sees its account's zone only.
    let zones = c.list_zones(&w.account_a).await.unwrap();
    assert_eq!(zones.len(), 1);
    assert_eq!(
        (zones[0].id.as_str(), zones[0].name.as_str()),
        (zone.as_str(), "example.com")
    );

    // Create, list by name, PATCH, delete.
    let made = c
        .create_dns_record(&zone, &cname("app.example.com", "t.cfargotunnel.com"))
        .await
        .unwrap();
    assert_eq!((made.kind.as_str(), made.proxied), ("CNAME", Some(true)));
    let found = c
        .list_dns_records(
            &zone,
            &RecordFilter {
                name: Some("app.example.com".into()),
                kind: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(found, vec![made.clone()]);
    let changed = c
        .update_dns_record(
            &zone,
            &made.id,
            &cname("app.example.com", "u.cfargotunnel.com"),
        )
        .await
        .unwrap();
    assert_eq!(changed.content, "u.cfargotunnel.com");

    // A second CNAME, an A record or a TXT at the same name are refused with the API's codes.
    let err = c
        .create_dns_record(&zone, &cname("app.example.com", "v.cfargotunnel.com"))
        .await
        .unwrap_err();
    assert!(err.has_code(81053), "{err}");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let mut txt = cname("app.example.com", "\"hello\"");
    txt.kind = "TXT".into();
    txt.proxied = None;
    let err = c.create_dns_record(&zone, &txt).await.unwrap_err();
    assert!(err.has_code(81054), "{err}");
    // A TXT cannot be proxied (9004).
    txt.name = "_owner.app.example.com".into();
    txt.proxied = Some(true);
    let err = c.create_dns_record(&zone, &txt).await.unwrap_err();
    assert!(err.has_code(9004), "{err}");

    // Wildcards are names like any other; many records page through.
    c.create_dns_record(&zone, &cname("*.example.com", "t.cfargotunnel.com"))
        .await
        .unwrap();
    for i in 0..1005 {
        let mut t = txt.clone();
        t.name = format!("r{i}.example.com");
        t.content = format!("\"{i}\"");
        t.proxied = None;
        c.create_dns_record(&zone, &t).await.unwrap();
    }
    let all = c
        .list_dns_records(&zone, &RecordFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 1007);
    let list_calls = w
        .double
        .calls()
        .iter()
        .filter(|call| call.method == "GET" && call.path.ends_with("/dns_records"))
        .count();
    assert_eq!(list_calls, 3, "one filtered list, then two pages of 1000");
    c.delete_dns_record(&zone, &made.id).await.unwrap();
    let err = c.delete_dns_record(&zone, &made.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn dns_permissions_are_enforced_per_zone() {
    use cloudflare_api::RecordFilter;
    use cloudflare_double::DnsGrant;
    let w = world().await;
    let a = w.double.add_zone(&w.account_a, "a.example").unwrap();
    let b = w.double.add_zone(&w.account_a, "b.example").unwrap();
    let other = w.double.add_zone(&w.account_b, "other.example").unwrap();
    let c = client(&w, TOKEN_A);

    // No grant: no zone is visible and records are refused as auth errors.
    assert!(c.list_zones(&w.account_a).await.unwrap().is_empty());
    let err = c
        .list_dns_records(&a, &RecordFilter::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");

    // DNS Read on a.example: it lists, cannot write; b.example stays invisible.
    w.double
        .grant_dns(
            TOKEN_A,
            DnsGrant {
                zones: Some(vec!["a.example".into()]),
                edit: false,
            },
        )
        .unwrap();
    let zones = c.list_zones(&w.account_a).await.unwrap();
    assert_eq!(
        zones.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(),
        ["a.example"]
    );
    c.list_dns_records(&a, &RecordFilter::default())
        .await
        .unwrap();
    let err = c
        .create_dns_record(&a, &cname("x.a.example", "t.cfargotunnel.com"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    let err = c
        .list_dns_records(&b, &RecordFilter::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    // Another account's zone, even with a grant for every zone, is refused.
    w.double
        .grant_dns(
            TOKEN_A,
            DnsGrant {
                zones: None,
                edit: true,
            },
        )
        .unwrap();
    let err = c
        .list_dns_records(&other, &RecordFilter::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(w.double.dns_records()["other.example"].is_empty());
}

fn access_app(name: &str, uris: &[&str], emails: &[&str]) -> NewAccessApp {
    NewAccessApp {
        name: name.into(),
        kind: "self_hosted".into(),
        domain: uris[0].into(),
        destinations: uris.iter().map(|u| AccessDestination::public(*u)).collect(),
        session_duration: Some("12h".into()),
        policies: vec![AccessPolicyRule {
            name: "people".into(),
            decision: "allow".into(),
            include: emails
                .iter()
                .map(|e| json!({"email": {"email": e}}))
                .collect(),
            exclude: vec![],
            require: vec![],
            precedence: Some(1),
        }],
    }
}

#[tokio::test]
async fn access_apps_lifecycle_conflicts_validation_and_account_scope() {
    let w = world().await;
    let c = client(&w, TOKEN_A);
    let a = &w.account_a;

    let app = c
        .create_access_app(
            a,
            &access_app(
                "one",
                &["a.example.com", "b.example.com/api"],
                &["x@example.com"],
            ),
        )
        .await
        .unwrap();
    assert_eq!(app.kind, "self_hosted");
    assert_eq!(app.uris(), vec!["a.example.com", "b.example.com/api"]);
    assert_eq!(app.session_duration.as_deref(), Some("12h"));
    assert_eq!(app.policies.len(), 1);
    assert!(app.policies[0].id.is_some());
    assert_eq!(
        app.policies[0].rule.include,
        vec![json!({"email": {"email": "x@example.com"}})]
    );

    // A destination belongs to one application: refused with the conflict message.
    let err = c
        .create_access_app(
            a,
            &access_app("two", &["b.example.com/api"], &["y@example.com"]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(
        err.to_string()
            .contains("destination belongs to another application"),
        "{err}"
    );
    // Another path of the same host is another destination.
    let other = c
        .create_access_app(
            a,
            &access_app("two", &["b.example.com/web"], &["y@example.com"]),
        )
        .await
        .unwrap();

    // Bad input is refused, naming what is wrong.
    let mut bad = access_app("bad", &["c.example.com"], &["z@example.com"]);
    bad.session_duration = Some("1 day".into());
    let err = c.create_access_app(a, &bad).await.unwrap_err();
    assert!(err.to_string().contains("session_duration"), "{err}");
    let bad = access_app("bad", &["c.example.com"], &[]);
    let err = c.create_access_app(a, &bad).await.unwrap_err();
    assert!(err.to_string().contains("include"), "{err}");
    let bad = access_app("bad", &["https://c.example.com"], &["z@example.com"]);
    assert!(c.create_access_app(a, &bad).await.is_err());

    // PUT replaces destinations and policies; the ID stays.
    let updated = c
        .update_access_app(
            a,
            &app.id,
            &access_app(
                "one",
                &["a.example.com"],
                &["x@example.com", "q@example.com"],
            ),
        )
        .await
        .unwrap();
    assert_eq!(updated.id, app.id);
    assert_eq!(updated.uris(), vec!["a.example.com"]);
    assert_eq!(updated.policies[0].rule.include.len(), 2);

    let listed = c.list_access_apps(a).await.unwrap();
    assert_eq!(
        listed.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
        vec![app.id.as_str(), other.id.as_str()]
    );
    // Another account's token neither sees nor changes them.
    let cb = client(&w, TOKEN_B);
    assert_eq!(cb.list_access_apps(&w.account_b).await.unwrap(), vec![]);
    let err = cb.delete_access_app(a, &app.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    let err = cb
        .delete_access_app(&w.account_b, &app.id)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    c.delete_access_app(a, &app.id).await.unwrap();
    let err = c.delete_access_app(a, &app.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(w.double.access_apps().len(), 1);
}
