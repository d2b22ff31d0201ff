//! Route propagation (TG-15, gateway-api-bench's method): with the burst's routes present and
//! requests flowing, one more HTTPRoute has its backend switched between two backends again and
//! again by an API write. Per switch: the time from the write to the first answer served by the
//! new backend (through any shared-plane proxy, and through every one of them), and, over the
//! whole run, the requests that failed and the answers from the old backend after a proxy had
//! already served the new one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::burst::Shape;

const ROUTE: &str = "switch";
const PATH: &str = "/switch/x";

/// One answer of the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Served by backend `0` or `1`.
    Backend(usize),
    Failed,
}

/// The answers one proxy gave, in order, with when each arrived.
type Log = Arc<Mutex<Vec<(Instant, Answer)>>>;

/// What the switches measured.
pub struct Outcome {
    /// Per switch: write → first answer from the new backend through any proxy.
    pub first: Vec<Duration>,
    /// Per switch: write → every proxy has served the new backend.
    pub all: Vec<Duration>,
    /// Per switch: the API write's own round trip (the PATCH until its answer), the part of
    /// `first` no controller can shorten.
    pub acked: Vec<Duration>,
    /// Per switch: when its write went out (UTC), to read the controller's log against.
    pub written_at: Vec<k8s_openapi::jiff::Timestamp>,
    pub requests: usize,
    pub failed: usize,
    /// Answers from the old backend after the same proxy had served the new one.
    pub stale: usize,
    /// The first failures, for the report.
    pub failures: Vec<String>,
}

/// The two backends' Services, the route on the first Gateway pointing at backend 0; returns
/// once every proxy serves it.
pub async fn prepare(
    client: &Client,
    ns: &str,
    backend_ports: [u16; 2],
    proxies: &[SocketAddr],
) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    for (i, port) in backend_ports.iter().enumerate() {
        let name = service(i);
        services
            .create(
                &pp,
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"ports": [{"name": "http", "port": 80}]},
                }))?,
            )
            .await
            .with_context(|| format!("creating Service {name}"))?;
        slices
            .create(
                &pp,
                &serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("{name}-1"),
                        "namespace": ns,
                        "labels": {"kubernetes.io/service-name": name},
                    },
                    "addressType": "FQDN",
                    "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
                    "endpoints": [{"addresses": ["127.1"], "conditions": {"ready": true}}],
                }))?,
            )
            .await
            .with_context(|| format!("creating the EndpointSlice of {name}"))?;
    }
    Api::<HttpRoute>::namespaced(client.clone(), ns)
        .create(&pp, &serde_json::from_value(route(ns, 0))?)
        .await
        .context("creating the switched route")?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for proxy in proxies {
        while ask(&http, *proxy).await != Answer::Backend(0) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the switched route does not reach backend 0 through {proxy} after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Switches the route's backend `switches` times, `gap` apart, while one sequential keep-alive
/// request stream per proxy runs.
pub async fn run(
    client: &Client,
    ns: &str,
    proxies: &[SocketAddr],
    switches: usize,
    gap: Duration,
) -> anyhow::Result<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<Log> = proxies.iter().map(|_| Log::default()).collect();
    let streams: Vec<_> = proxies
        .iter()
        .zip(&logs)
        .map(|(proxy, log)| {
            let (proxy, log, stop) = (*proxy, log.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                while !stop.load(Ordering::Relaxed) {
                    let answer = ask(&http, proxy).await;
                    log.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((Instant::now(), answer));
                }
            })
        })
        .collect();
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    let mut writes = Vec::with_capacity(switches);
    let mut acked = Vec::with_capacity(switches);
    let mut written_at = Vec::with_capacity(switches);
    let mut result = Ok(());
    for i in 1..=switches {
        tokio::time::sleep(gap).await;
        let target = i % 2;
        let written = Instant::now();
        written_at.push(k8s_openapi::jiff::Timestamp::now());
        if let Err(e) = routes
            .patch(
                ROUTE,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": route(ns, target)["spec"]})),
            )
            .await
        {
            result = Err(e).context("switching the route's backend");
            break;
        }
        acked.push(written.elapsed());
        writes.push((written, target));
        // The next switch only once every proxy serves this one (or a generous deadline): a
        // switch that overtakes the previous one would measure nothing.
        let deadline = written + Duration::from_secs(10);
        while Instant::now() < deadline && !logs.iter().all(|l| served_since(l, written, target)) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    tokio::time::sleep(gap).await;
    stop.store(true, Ordering::Relaxed);
    for s in streams {
        s.await.context("a request stream panicked")?;
    }
    result?;
    let logs: Vec<Vec<(Instant, Answer)>> = logs
        .iter()
        .map(|l| std::mem::take(&mut *l.lock().unwrap_or_else(PoisonError::into_inner)))
        .collect();
    Ok(Outcome {
        acked,
        written_at,
        ..measure(&writes, &logs)
    })
}

fn measure(writes: &[(Instant, usize)], logs: &[Vec<(Instant, Answer)>]) -> Outcome {
    let mut out = Outcome {
        first: Vec::new(),
        all: Vec::new(),
        acked: Vec::new(),
        written_at: Vec::new(),
        requests: logs.iter().map(Vec::len).sum(),
        failed: 0,
        stale: 0,
        failures: Vec::new(),
    };
    for (n, &(written, target)) in writes.iter().enumerate() {
        let until = writes.get(n + 1).map(|w| w.0);
        let firsts: Vec<Option<Instant>> = logs
            .iter()
            .map(|log| {
                log.iter()
                    .find(|(t, a)| *t > written && *a == Answer::Backend(target))
                    .map(|(t, _)| *t)
            })
            .collect();
        if let Some(first) = firsts.iter().flatten().min() {
            out.first.push(*first - written);
        }
        if let Some(all) = firsts.iter().copied().collect::<Option<Vec<_>>>() {
            out.all
                .push(*all.iter().max().expect("one proxy at least") - written);
        }
        for (log, first) in logs.iter().zip(&firsts) {
            let Some(first) = first else { continue };
            out.stale += log
                .iter()
                .filter(|(t, a)| {
                    t > first && until.is_none_or(|u| *t < u) && *a == Answer::Backend(1 - target)
                })
                .count();
        }
    }
    for log in logs {
        for (t, a) in log {
            if *a == Answer::Failed {
                out.failed += 1;
                if out.failures.len() < 5 {
                    let since = writes.first().map(|w| t.saturating_duration_since(w.0));
                    out.failures
                        .push(format!("failed request {since:?} after the first switch"));
                }
            }
        }
    }
    out
}

fn served_since(log: &Log, written: Instant, target: usize) -> bool {
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .rev()
        .take_while(|(t, _)| *t > written)
        .any(|(_, a)| *a == Answer::Backend(target))
}

async fn ask(http: &reqwest::Client, proxy: SocketAddr) -> Answer {
    let resp = http
        .get(format!("http://{proxy}{PATH}"))
        .header("host", Shape::hostname(0))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    let Ok(resp) = resp else {
        return Answer::Failed;
    };
    if !resp.status().is_success() {
        return Answer::Failed;
    }
    match resp.text().await.as_deref() {
        Ok(body) if body == format!("{} {PATH}", backend_name(0)) => Answer::Backend(0),
        Ok(body) if body == format!("{} {PATH}", backend_name(1)) => Answer::Backend(1),
        _ => Answer::Failed,
    }
}

/// The name each switch backend answers with (`<name> <path>`).
pub fn backend_name(i: usize) -> String {
    format!("switch-{}", ["a", "b"][i])
}

fn service(i: usize) -> String {
    backend_name(i)
}

fn route(ns: &str, target: usize) -> serde_json::Value {
    json!({
        "metadata": {"name": ROUTE, "namespace": ns},
        "spec": {
            "parentRefs": [{"name": "gw-0"}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/switch"}}],
                "backendRefs": [{"name": service(target), "port": 80}],
            }],
        },
    })
}

/// `p` (0..=100) percentile of `d`, nearest rank.
pub fn percentile(d: &[Duration], p: usize) -> Duration {
    let mut v = d.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * v.len()).div_ceil(100).max(1);
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn measures_first_all_stale_and_failed() {
        let t0 = Instant::now();
        let writes = [(at(t0, 10), 1), (at(t0, 100), 0)];
        let a = Answer::Backend(0);
        let b = Answer::Backend(1);
        let logs = vec![
            // proxy 0 switches at 15 ms, then serves the old backend once more (stale)
            vec![
                (at(t0, 5), a),
                (at(t0, 15), b),
                (at(t0, 20), a),
                (at(t0, 120), a),
            ],
            // proxy 1 switches at 30 ms, fails once, switches back at 110 ms
            vec![
                (at(t0, 30), b),
                (at(t0, 40), Answer::Failed),
                (at(t0, 110), a),
            ],
        ];
        let out = measure(&writes, &logs);
        assert_eq!(
            out.first,
            [Duration::from_millis(5), Duration::from_millis(10)]
        );
        assert_eq!(
            out.all,
            [Duration::from_millis(20), Duration::from_millis(20)]
        );
        assert_eq!(out.stale, 1);
        assert_eq!(out.failed, 1);
        assert_eq!(out.requests, 7);
    }

    #[test]
    fn a_switch_never_served_has_no_time() {
        let t0 = Instant::now();
        let out = measure(
            &[(at(t0, 10), 1)],
            &[vec![(at(t0, 20), Answer::Backend(0))]],
        );
        assert!(out.first.is_empty() && out.all.is_empty());
    }

    #[test]
    fn percentile_nearest_rank() {
        let d: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 50), Duration::from_millis(10));
        assert_eq!(percentile(&d, 99), Duration::from_millis(20));
        assert_eq!(percentile(&d, 100), Duration::from_millis(20));
    }
}
