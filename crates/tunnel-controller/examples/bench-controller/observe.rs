//! What the benchmark reads: when each part of convergence was first reached (route statuses
//! through a watch, the shared plane's documents and the tunnel's ingress document by polling
//! in-process state), the controller's memory from `/proc/<pid>/status`, its counters from
//! `/metrics`, and the requests the API server served (its own `/metrics`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use cloudflare_double::CloudflareDouble;
use futures::StreamExt;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::httproutes::HttpRoute;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tunnel_config::config::Route;
use tunnel_proxy::state::State;

use crate::burst::HOST_SUFFIX;
use crate::setup::CONTROLLER;

/// When each part of convergence was first observed.
#[derive(Debug, Default)]
pub struct Convergence {
    /// Every route's parent says Accepted=True (written by the controller).
    pub routes: OnceLock<Instant>,
    /// Every shared-plane proxy holds a document with every route.
    pub proxies: OnceLock<Instant>,
    /// The tunnel's ingress document lists every Gateway's hostname.
    pub ingress: OnceLock<Instant>,
}

impl Convergence {
    pub fn done(&self) -> bool {
        self.routes.get().is_some() && self.proxies.get().is_some() && self.ingress.get().is_some()
    }
}

/// Watches the HTTPRoutes of `ns` and stamps [`Convergence::routes`] once `expected` of them
/// are accepted by our controller. Returns once the watch's initial list is done.
pub async fn watch_routes(
    client: &Client,
    ns: &str,
    expected: usize,
    conv: Arc<Convergence>,
) -> anyhow::Result<()> {
    let api: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut accepted: HashMap<String, bool> = HashMap::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(r) | Event::InitApply(r)) => {
                    accepted.insert(r.name_any(), is_accepted(&r));
                }
                Ok(Event::Delete(r)) => {
                    accepted.remove(&r.name_any());
                }
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Init) => {}
                Err(e) => eprintln!("route watch: {e} (the watcher retries)"),
            }
            if accepted.values().filter(|a| **a).count() >= expected {
                conv.routes.get_or_init(Instant::now);
                return;
            }
        }
    });
    ready_rx
        .await
        .context("the route watch ended before listing")?;
    Ok(())
}

fn is_accepted(r: &HttpRoute) -> bool {
    r.status.iter().flat_map(|s| &s.parents).any(|p| {
        p.controller_name == CONTROLLER
            && p.conditions
                .iter()
                .any(|c| c.type_ == "Accepted" && c.status == "True")
    })
}

/// Watches that receive every event and keep nothing, in place of the watches a convergence
/// holds on the API server: the controller's on HTTPRoutes and Gateways (it keeps a store of
/// each) and this benchmark's own on HTTPRoutes ([`watch_routes`]). Returned once each has
/// listed; they stop when dropped.
pub struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        self.0.iter().for_each(|w| w.abort());
    }
}

pub async fn convergence_watches(client: &Client, ns: &str) -> anyhow::Result<Watches> {
    let routes = Api::<HttpRoute>::namespaced(client.clone(), ns);
    let mut listed = Vec::new();
    let watches = Watches(vec![
        drain("route", routes.clone(), &mut listed),
        drain("route", routes, &mut listed),
        drain(
            "Gateway",
            Api::<Gateway>::namespaced(client.clone(), ns),
            &mut listed,
        ),
    ]);
    for rx in listed {
        rx.await.context("a baseline watch ended before listing")?;
    }
    Ok(watches)
}

/// Spawns a watch of `api` that decodes every event and drops it; its initial list's end is
/// sent on the receiver pushed to `listed`.
fn drain<K>(
    name: &'static str,
    api: Api<K>,
    listed: &mut Vec<tokio::sync::oneshot::Receiver<()>>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    listed.push(rx);
    let mut tx = Some(tx);
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::InitDone) => {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("baseline {name} watch: {e} (the watcher retries)"),
            }
        }
    })
}

/// The in-process state convergence is read from, and what it must reach.
pub struct Planes {
    pub proxies: Vec<Arc<State>>,
    pub double: Arc<CloudflareDouble>,
    pub account: String,
    pub tunnel: String,
    /// The benchmark namespace.
    pub namespace: String,
    pub routes: usize,
    pub hostnames: usize,
}

impl Planes {
    /// Polls the proxies' documents and the tunnel's ingress document every `every`, stamping
    /// [`Convergence::proxies`] and [`Convergence::ingress`].
    pub fn poll(self, every: Duration, conv: Arc<Convergence>) {
        let prefix = format!("{}/", self.namespace);
        tokio::spawn(async move {
            loop {
                if conv.proxies.get().is_none()
                    && self
                        .proxies
                        .iter()
                        .all(|p| doc_routes(p, &prefix) >= self.routes)
                {
                    conv.proxies.get_or_init(Instant::now);
                }
                if conv.ingress.get().is_none()
                    && ingress_hostnames(&self.double, &self.account, &self.tunnel)
                        >= self.hostnames
                {
                    conv.ingress.get_or_init(Instant::now);
                }
                if conv.proxies.get().is_some() && conv.ingress.get().is_some() {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        });
    }
}

/// HTTPRoutes of the namespace (`{ns}/` names) in the proxy's loaded document.
pub fn doc_routes(p: &State, prefix: &str) -> usize {
    p.document().map_or(0, |d| {
        d.routes
            .iter()
            .filter(|r| matches!(r, Route::Http(h) if h.name.starts_with(prefix)))
            .count()
    })
}

/// Benchmark hostnames in the tunnel's ingress document.
pub fn ingress_hostnames(double: &CloudflareDouble, account: &str, tunnel: &str) -> usize {
    let Ok((Some(doc), _)) = double.configuration(account, tunnel) else {
        return 0;
    };
    doc["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["hostname"]
                .as_str()
                .is_some_and(|h| h.ends_with(HOST_SUFFIX))
        })
        .count()
}

/// The controller's resident memory now and its peak, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss: u64,
    pub hwm: u64,
}

pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (has the controller exited?)"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kib * 1024)
    };
    Ok(Memory {
        rss: field("VmRSS:")?,
        hwm: field("VmHWM:")?,
    })
}

/// CPU time (user + system, all threads) a process has used so far.
pub fn cpu(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(") ")
        .with_context(|| format!("/proc/{pid}/stat: {stat}"))?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .context("short /proc/<pid>/stat")?
        .iter()
        .map(|f| f.parse::<u64>())
        .sum::<Result<u64, _>>()?;
    // USER_HZ is 100 on every Linux architecture this runs on (`getconf CLK_TCK`).
    Ok(Duration::from_millis(ticks * 10))
}

/// The summed CPU time of `pids`.
pub fn cpu_of(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|p| cpu(*p)).sum()
}

/// The controller's counters the benchmark reports.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// `cftunnel_sync_duration_seconds_count`, all outcomes.
    pub rounds: u64,
    /// `cftunnel_reconcile_total` by kind.
    pub reconciles: BTreeMap<String, u64>,
}

impl Counters {
    /// Status writes: reconciles of object kinds (tunnel syncs and partition rounds excluded).
    pub fn status_writes(&self) -> u64 {
        self.reconciles
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "Tunnel" | "Partition"))
            .map(|(_, v)| v)
            .sum()
    }

    pub fn kind(&self, kind: &str) -> u64 {
        self.reconciles.get(kind).copied().unwrap_or_default()
    }
}

pub async fn counters(admin: SocketAddr) -> anyhow::Result<Counters> {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    let mut c = Counters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if series.starts_with("cftunnel_sync_duration_seconds_count") {
            c.rounds += value as u64;
        } else if let Some(labels) = series.strip_prefix("cftunnel_reconcile_total{") {
            let kind = label(labels.trim_end_matches('}'), "kind").to_owned();
            *c.reconciles.entry(kind).or_default() += value as u64;
        }
    }
    Ok(c)
}

/// The value of label `name` in a sample's label list (`a="x",b="y"`, without the braces);
/// empty when absent.
fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|l| l.strip_prefix(name)?.strip_prefix("=\""))
        .map_or("", |v| v.trim_end_matches('"'))
}

/// Requests the API server has served so far (`apiserver_request_total`), by verb, resource
/// (with its subresource) and status code, e.g. `PATCH httproutes/status 409`.
#[derive(Debug, Clone, Default)]
pub struct ApiRequests(pub BTreeMap<String, u64>);

impl ApiRequests {
    /// Parses the API server's metrics text.
    pub fn parse(text: &str) -> ApiRequests {
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let of = |name| label(labels, name);
            let (resource, sub) = (of("resource"), of("subresource"));
            let key = format!(
                "{} {}{}{} {}",
                of("verb"),
                resource,
                if sub.is_empty() { "" } else { "/" },
                sub,
                of("code")
            );
            *out.entry(key).or_default() += value as u64;
        }
        ApiRequests(out)
    }

    /// What was served since `earlier`, largest first, without the zeros.
    pub fn since(&self, earlier: &ApiRequests) -> Vec<(String, u64)> {
        let mut d: Vec<(String, u64)> = self
            .0
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.saturating_sub(earlier.0.get(k).copied().unwrap_or_default()),
                )
            })
            .filter(|(_, v)| *v > 0)
            .collect();
        d.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        d
    }
}

pub async fn api_requests(client: &Client) -> anyhow::Result<ApiRequests> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    Ok(ApiRequests::parse(&text))
}

/// Waits until the controller answers `/readyz` with 200.
pub async fn wait_ready(admin: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(r) = reqwest::get(format!("http://{admin}/readyz")).await
            && r.status().is_success()
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the controller was not ready after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_requests_sum_over_other_labels_and_subtract() {
        let before = ApiRequests::parse(
            "# HELP apiserver_request_total x\n\
             apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"gateway.networking.k8s.io\",resource=\"httproutes\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 5\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"events\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 1\n",
        );
        let after = ApiRequests::parse(
            "apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"gateway.networking.k8s.io\",resource=\"httproutes\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 12\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"gateway.networking.k8s.io\",resource=\"httproutes\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1\"} 3\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"gateway.networking.k8s.io\",resource=\"httproutes\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1beta1\"} 4\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"events\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 1\n\
             apiserver_request_duration_seconds_count{verb=\"POST\"} 99\n",
        );
        assert_eq!(
            after.since(&before),
            vec![
                ("PATCH httproutes/status 200".to_owned(), 7),
                ("POST httproutes 201".to_owned(), 7),
            ]
        );
    }
}
