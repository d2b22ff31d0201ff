//! The burst: the objects of one benchmark namespace (backend Services with their
//! EndpointSlices, Gateways with one listener hostname each, HTTPRoutes with one path each),
//! created as fast as the API server takes them with bounded concurrency, and removed again.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{FutureExt, StreamExt, TryStreamExt};
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::setup::{CLASS, CONTROLLER};

/// The suffix of every listener hostname: `gw-N.bench.example`.
pub const HOST_SUFFIX: &str = ".bench.example";

/// The shape of a burst.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub gateways: usize,
    pub routes: usize,
    pub services: usize,
    pub backend_port: u16,
    /// Routes created Gateway by Gateway (`true`) or round-robin over the Gateways.
    pub by_gateway: bool,
}

impl Shape {
    /// The Gateway route `i` attaches to.
    pub fn gateway_of(&self, i: usize) -> usize {
        if self.by_gateway {
            i * self.gateways / self.routes
        } else {
            i % self.gateways
        }
    }

    pub fn hostname(gw: usize) -> String {
        format!("gw-{gw}{HOST_SUFFIX}")
    }
}

/// One object to create.
enum Object {
    Service(Service),
    Slice(EndpointSlice),
    Gateway(Gateway),
    Route(HttpRoute),
}

/// The objects of a burst in `ns`, in creation order: Services, EndpointSlices, Gateways, routes.
fn objects(ns: &str, shape: &Shape) -> anyhow::Result<Vec<Object>> {
    let mut out = Vec::new();
    for s in 0..shape.services {
        out.push(Object::Service(serde_json::from_value(json!({
            "metadata": {"name": format!("backend-{s}"), "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        }))?));
    }
    for s in 0..shape.services {
        out.push(Object::Slice(serde_json::from_value(json!({
            "metadata": {
                "name": format!("backend-{s}-1"),
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": format!("backend-{s}")},
            },
            "addressType": "FQDN",
            "ports": [{"name": "http", "port": shape.backend_port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.1"], "conditions": {"ready": true}}],
        }))?));
    }
    for g in 0..shape.gateways {
        out.push(Object::Gateway(serde_json::from_value(json!({
            "metadata": {"name": format!("gw-{g}"), "namespace": ns},
            "spec": {
                "gatewayClassName": CLASS,
                "listeners": [{
                    "name": "http",
                    "protocol": "HTTP",
                    "port": 80,
                    "hostname": Shape::hostname(g),
                }],
            },
        }))?));
    }
    for r in 0..shape.routes {
        out.push(Object::Route(serde_json::from_value(json!({
            "metadata": {"name": format!("r-{r}"), "namespace": ns},
            "spec": {
                "parentRefs": [{"name": format!("gw-{}", shape.gateway_of(r))}],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": format!("/r-{r}")}}],
                    "backendRefs": [{"name": format!("backend-{}", r % shape.services), "port": 80}],
                }],
            },
        }))?));
    }
    Ok(out)
}

/// What a burst took.
#[derive(Debug, Clone, Copy)]
pub struct Created {
    pub objects: usize,
    /// From the first create sent to the last one answered.
    pub elapsed: Duration,
}

/// Creates namespace `ns` (not timed; it must exist before the burst).
pub async fn namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(())
}

/// Creates the burst's objects in `ns`, `concurrency` at a time. `started` is stamped just
/// before the first create goes out.
pub async fn create(
    client: &Client,
    ns: &str,
    shape: &Shape,
    concurrency: usize,
    started: &std::sync::OnceLock<Instant>,
) -> anyhow::Result<Created> {
    let objects = objects(ns, shape)?;
    let count = objects.len();
    let creates = objects.into_iter().map(|o| {
        let client = client.clone();
        async move {
            match o {
                Object::Service(x) => create_one(&client, ns, x).await,
                Object::Slice(x) => create_one(&client, ns, x).await,
                Object::Gateway(x) => create_one(&client, ns, x).await,
                Object::Route(x) => create_one(&client, ns, x).await,
            }
        }
    });
    let t0 = *started.get_or_init(Instant::now);
    futures::stream::iter(creates)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(Created {
        objects: count,
        elapsed: t0.elapsed(),
    })
}

/// One create; the API server's transient refusals (429, 5xx) are retried.
async fn create_one<K>(client: &Client, ns: &str, obj: K) -> anyhow::Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut attempt = 0;
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if (s.code == 429 || s.code >= 500) && attempt < 5 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "creating {} {ns}/{:?}",
                        K::kind(&Default::default()),
                        obj.meta().name
                    )
                });
            }
        }
    }
}

/// The status writes any Gateway API implementation must make, at the least: one per Gateway
/// (server-side apply, as the controller writes Gateways, of the conditions and the listener
/// status the specification requires: `Accepted` and `Programmed`, the listener's route count,
/// supported kinds and its four conditions) and one per route (a merge patch of one parent
/// with the two required conditions, `Accepted` and `ResolvedRefs`, as the controller writes
/// routes), `concurrency` at a time as the controller's writer (16). Written once each, with
/// the final route counts: a controller would have to know the whole burst to do as well. With
/// [`create`] before it: the API server's own floor under a convergence.
pub async fn write_statuses(
    client: &Client,
    ns: &str,
    shape: &Shape,
    concurrency: usize,
) -> anyhow::Result<Created> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({
            "type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": now, "observedGeneration": 1,
        })
    };
    let gateway_conditions = json!([
        condition("Accepted", "True", "Accepted"),
        condition("Programmed", "True", "Programmed"),
    ]);
    let listener_conditions = json!([
        condition("Accepted", "True", "Accepted"),
        condition("Programmed", "True", "Programmed"),
        condition("ResolvedRefs", "True", "ResolvedRefs"),
        condition("Conflicted", "False", "NoConflicts"),
    ]);
    let route_conditions = json!([
        condition("Accepted", "True", "Accepted"),
        condition("ResolvedRefs", "True", "ResolvedRefs"),
    ]);
    let mut attached = vec![0usize; shape.gateways];
    (0..shape.routes).for_each(|r| attached[shape.gateway_of(r)] += 1);
    let gateways: Api<Gateway> = Api::namespaced(client.clone(), ns);
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    let apply = PatchParams::apply("bench-floor").force();
    let writes = (0..shape.gateways)
        .map(|g| {
            let body = json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "status": {
                    "conditions": gateway_conditions,
                    "listeners": [{
                        "name": "http",
                        "attachedRoutes": attached[g],
                        "supportedKinds": [
                            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                            {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"},
                        ],
                        "conditions": listener_conditions,
                    }],
                },
            });
            let (gateways, apply) = (gateways.clone(), apply.clone());
            async move {
                let name = format!("gw-{g}");
                gateways
                    .patch_status(&name, &apply, &Patch::Apply(body))
                    .await
                    .with_context(|| format!("writing the status of Gateway {ns}/{name}"))
                    .map(drop)
            }
            .boxed()
        })
        .chain((0..shape.routes).map(|r| {
            let body = json!({"status": {"parents": [{
                "parentRef": {"name": format!("gw-{}", shape.gateway_of(r))},
                "controllerName": CONTROLLER,
                "conditions": route_conditions,
            }]}});
            let routes = routes.clone();
            async move {
                let name = format!("r-{r}");
                routes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .with_context(|| format!("writing the status of HTTPRoute {ns}/{name}"))
                    .map(drop)
            }
            .boxed()
        }));
    let t0 = Instant::now();
    let count = futures::stream::iter(writes)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?
        .len();
    Ok(Created {
        objects: count,
        elapsed: t0.elapsed(),
    })
}

/// Deletes every object a burst created in `ns` and waits until they are gone.
pub async fn remove(client: &Client, ns: &str) -> anyhow::Result<()> {
    delete_all::<HttpRoute>(client, ns).await?;
    delete_all::<Gateway>(client, ns).await?;
    delete_all::<EndpointSlice>(client, ns).await?;
    delete_all::<Service>(client, ns).await?;
    Ok(())
}

async fn delete_all<K>(client: &Client, ns: &str) -> anyhow::Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    // One by one: Services do not support deletecollection.
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    let dp = DeleteParams::default();
    futures::stream::iter(names.iter().map(|n| api.delete(n, &dp)))
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !api
        .list(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} in {ns} not deleted after 60 s",
            K::kind(&Default::default())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
