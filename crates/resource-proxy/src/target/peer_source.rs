//! The EndpointSlice peer source (RP-9, RP-11): watches the EndpointSlices of the target's API
//! server Service (`kubernetes.io/service-name=<service>`) in the cluster that hosts the
//! target's control plane, and publishes the ready endpoints' addresses with the named port to
//! the target's peer set. Known hosts keep their health across publications.
//!
//! When the watch fails, the peer set's staleness clock starts ([`PeerSet::watch_down`]): the
//! cached list is used for 60 s, then distrusted. A fresh list (after the watcher re-lists)
//! resets the clock. Both moments are logged, the recovery with how long the watch was down.

use std::path::Path;
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, reflector};

use crate::config::PeerAddress;
use crate::target::TargetClient;
use crate::target::peers::PeerSet;

/// Label Kubernetes puts on the EndpointSlices of a Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What to watch.
#[derive(Debug, Clone)]
pub struct EndpointSliceSource {
    pub namespace: String,
    pub service: String,
    pub port_name: String,
}

/// A client of the cluster named by `path`.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    use anyhow::Context;
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .with_context(|| format!("kubeconfig {}", path.display()))?;
    Ok(kube::Client::try_from(config)?)
}

/// The ready addresses of `slices` with the port named `port_name`, sorted and without
/// duplicates. An endpoint without a `ready` condition counts as ready (as in Kubernetes).
pub fn ready_peers<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port_name: &str,
) -> Vec<PeerAddress> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(port) = slice.ports.iter().flatten().find_map(|p| {
            (p.name.as_deref().unwrap_or_default() == port_name)
                .then_some(p.port)
                .flatten()
        }) else {
            continue;
        };
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        for ep in slice.endpoints.iter().flatten() {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            let terminating = ep
                .conditions
                .as_ref()
                .and_then(|c| c.terminating)
                .unwrap_or(false);
            if !ready || terminating {
                continue;
            }
            for a in &ep.addresses {
                out.push(PeerAddress {
                    host: a.trim_matches(['[', ']']).to_owned(),
                    port,
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    out.dedup();
    out
}

/// Longest pause between attempts to re-establish a failed peer watch.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// The first pause after a failure; each failure in a row doubles it.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);

/// Follows the EndpointSlices of `source` in `cluster` (a reflector: watch and store) and
/// publishes them to `target`'s peer set, forever. After an error the watch is started afresh
/// (a full list, see `relisting`), so the recovery is a publication even when nothing changed
/// meanwhile; attempts are 0.5 s apart, doubling up to [`MAX_RETRY_DELAY`].
pub async fn follow(target: TargetClient, cluster: kube::Client, source: EndpointSliceSource) {
    let api = kube::Api::<EndpointSlice>::namespaced(cluster, &source.namespace);
    let config =
        watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={}", source.service));
    let (slices, writer) = reflector::store();
    let events = relisting(api, config)
        .backoff(RetryDelay::default())
        .reflect(writer);
    let mut events = std::pin::pin!(events);
    let peers: &PeerSet = target.peers();
    let name = target.name();
    let mut first = true;
    let publish = |why: &str| {
        let list = ready_peers(slices.state().iter().map(AsRef::as_ref), &source.port_name);
        if let Some(down) = peers.watch_down_for() {
            tracing::info!(target = %name, service = %source.service, namespace = %source.namespace, down_for_seconds = down.as_secs_f64(), "peer watch recovered after being down for {down:.1?}; the peer list is trusted again");
        }
        if peers.hosts() != list || why == "sync" {
            tracing::info!(target = %name, peers = ?list.iter().map(ToString::to_string).collect::<Vec<_>>(), cause = why, "published the target's peers");
        }
        if list.is_empty() {
            tracing::warn!(target = %name, service = %source.service, namespace = %source.namespace, "the target's Service has no ready endpoints with port {:?}: requests fail with no_peer", source.port_name);
        }
        peers.publish(list);
        target.refresh_peer_gauges();
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::InitDone) => {
                publish(if first { "sync" } else { "resync" });
                first = false;
            }
            Ok(Event::Apply(_) | Event::Delete(_)) => publish("changed"),
            Ok(Event::Init | Event::InitApply(_)) => {}
            Err(e) => {
                if peers.watch_down_for().is_none() {
                    tracing::error!(target = %name, service = %source.service, namespace = %source.namespace, error = %e, "peer watch went down: using the cached peer list for at most {:?}", crate::target::peers::STALE_AFTER);
                } else {
                    tracing::debug!(target = %name, error = %e, "peer watch still down");
                }
                peers.watch_down();
                target.refresh_peer_gauges();
            }
        }
    }
}

type Events = BoxStream<'static, watcher::Result<Event<EndpointSlice>>>;

/// A watcher that starts afresh (a full list) after every error. kube's watcher resumes a
/// failed watch from the last resource version it saw: when the host cluster comes back nothing
/// is listed, so nothing would be published and the peer list would stay distrusted for as long
/// as the Service does not change. A fresh watcher's `Init` is held back until its list has
/// answered, so the back-off is reset by an answer of the host cluster, not by the restart.
fn relisting(
    api: kube::Api<EndpointSlice>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<EndpointSlice>>> + Send {
    stream::unfold(
        (None::<Events>, None::<Event<EndpointSlice>>),
        move |(current, held)| {
            let (api, config) = (api.clone(), config.clone());
            async move {
                let mut events = current.unwrap_or_else(|| watcher(api, config).boxed());
                if let Some(held) = held {
                    return Some((Ok(held), (Some(events), None)));
                }
                match events.next().await? {
                    Ok(Event::Init) => match events.next().await? {
                        Ok(next) => Some((Ok(Event::Init), (Some(events), Some(next)))),
                        Err(e) => Some((Err(e), (None, None))),
                    },
                    Ok(event) => Some((Ok(event), (Some(events), None))),
                    Err(e) => Some((Err(e), (None, None))),
                }
            }
        },
    )
}

/// The pause after each failure in a row: [`FIRST_RETRY_DELAY`], doubling up to
/// [`MAX_RETRY_DELAY`]. (kube's default back-off grows to 30 s: a host cluster that came back
/// would go unnoticed for that long while the peer list is distrusted.)
#[derive(Debug, Clone, Copy)]
struct RetryDelay(Duration);

impl Default for RetryDelay {
    fn default() -> Self {
        Self(FIRST_RETRY_DELAY)
    }
}

impl Iterator for RetryDelay {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.0;
        self.0 = (delay * 2).min(MAX_RETRY_DELAY);
        Some(delay)
    }
}

impl Backoff for RetryDelay {
    fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(port_name: &str, port: i32, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s-{port}")},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": port}],
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn ready_endpoints_with_the_named_port_become_peers() {
        let slices = [
            slice(
                "https",
                6443,
                serde_json::json!([
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.1"]},
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.4"], "conditions": {"ready": true, "terminating": true}},
                ]),
            ),
            slice(
                "https",
                7443,
                serde_json::json!([{"addresses": ["10.0.0.1"]}]),
            ),
            slice(
                "metrics",
                9000,
                serde_json::json!([{"addresses": ["10.0.0.9"]}]),
            ),
        ];
        let peers: Vec<String> = ready_peers(&slices, "https")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(peers, ["10.0.0.1:6443", "10.0.0.1:7443", "10.0.0.2:6443"]);
        assert!(ready_peers(&slices, "other").is_empty());
    }
}
