//! The request path of one listener: authenticate the caller, classify the request, answer
//! discovery, and forward resource requests to the target with owner labels (RP-6), visibility
//! (RP-7) and namespace mirroring (RP-8). Response bodies stream, so watches pass event by event.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::Value;

use crate::answer_owner::is_owned_answer;
use crate::caller_auth::{Authenticator, PeerChain};
use crate::config::{AccessMode, GroupVersionListener};
use crate::discovery::{self, Discovery, Source};
use crate::labels::{self, BodyKind, Injection, LabelsBefore, MAX_BODY_BYTES, OwnerLabels};
use crate::metrics::{
    GroupVersionReasonLabels, Metrics, ReasonLabels, RequestSeries, TargetLabels,
};
use crate::owner_refs;
use crate::request_info::{RequestInfo, Route, Verb, classify};
use crate::selector::{is_owned_object, scope_query};
use crate::status::{RETRY_AFTER_SECONDS, Status};
use crate::target::{TargetBody, TargetClient};

/// Errors of a body stream: the target's, or ours.
pub use crate::pool::BoxError;
/// The body of every response the proxy sends.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Everything one listener needs to answer requests.
pub struct Listener {
    pub listener: GroupVersionListener,
    pub target: TargetClient,
    pub auth: Authenticator,
    pub owner: OwnerLabels,
    pub client_cluster: kube::Client,
    pub discovery: Discovery,
    pub metrics: Metrics,
    /// The series every request updates, resolved once.
    series: RequestSeries,
}

impl Listener {
    /// The listener of `listener`'s group/version, proxying to `target`.
    pub fn new(
        listener: GroupVersionListener,
        target: TargetClient,
        auth: Authenticator,
        owner: OwnerLabels,
        client_cluster: kube::Client,
        metrics: Metrics,
    ) -> Self {
        Listener {
            discovery: Discovery::new(&listener),
            series: RequestSeries::new(&metrics, target.name(), listener.group_version()),
            listener,
            target,
            auth,
            owner,
            client_cluster,
            metrics,
        }
    }
}

/// The outcome of one request, for the metric and the log line.
struct Outcome {
    response: Response<ProxyBody>,
    verb: String,
    reason: &'static str,
}

impl Outcome {
    fn status(status: Status, verb: &str, reason: &'static str) -> Self {
        Outcome {
            response: status_response(&status),
            verb: verb.to_owned(),
            reason,
        }
    }
}

/// Answers one request. `peer` is the client certificate chain of the connection.
pub async fn handle(
    ctx: Arc<Listener>,
    peer: Option<Arc<PeerChain>>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let inflight = ctx.series.inflight().clone();
    inflight.inc();
    // Counts the request as `canceled` if the caller goes away before it is answered (the
    // server then drops this future).
    let mut guard = RequestGuard {
        ctx: &ctx,
        inflight,
        method: req.method().clone(),
        uri: req.uri().clone(),
        answered: false,
    };
    let outcome = route(&ctx, peer.as_deref(), req).await;
    guard.answered = true;

    let code = outcome.response.status().as_u16();
    ctx.series.count(&outcome.verb, code, outcome.reason);
    if outcome.verb != "watch" {
        ctx.series
            .observe_duration(&outcome.verb, started.elapsed().as_secs_f64());
    }
    tracing::debug!(method = %guard.method, path = guard.uri.path(), verb = %outcome.verb, code, reason = outcome.reason, "request");
    outcome.response
}

/// Keeps `vcluster_proxy_inflight_requests` right and counts requests whose caller left.
struct RequestGuard<'a> {
    ctx: &'a Listener,
    inflight: prometheus_client::metrics::gauge::Gauge,
    method: Method,
    uri: http::Uri,
    answered: bool,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        self.inflight.dec();
        if self.answered {
            return;
        }
        let l = &self.ctx.listener;
        let verb = match classify(
            &l.group,
            &l.version,
            self.method.as_str(),
            self.uri.path(),
            self.uri.query(),
        ) {
            Route::Resource(info) => info.verb.as_str().to_owned(),
            _ => "get".to_owned(),
        };
        self.ctx
            .metrics
            .request_terminations
            .get_or_create(&ReasonLabels {
                target: self.ctx.target.name().to_owned(),
                reason: "canceled".into(),
            })
            .inc();
        // nginx's "client closed request": no answer was sent.
        self.ctx.series.count(&verb, 499, "canceled");
        tracing::info!(method = %self.method, path = self.uri.path(), verb, reason = "canceled", "the caller went away before the answer");
    }
}

async fn route(ctx: &Listener, peer: Option<&PeerChain>, req: Request<Incoming>) -> Outcome {
    if let Err(e) = ctx.auth.check(peer, req.headers()) {
        tracing::warn!(reason = %e, path = %req.uri().path(), "refused an unauthenticated request");
        return Outcome::status(Status::unauthorized(), "unknown", "unauthenticated");
    }
    if is_upgrade(req.headers()) {
        tracing::info!(path = %req.uri().path(), "refused a connection upgrade (exec, attach, port-forward and websockets are not proxied)");
        return Outcome::status(
            Status::upgrade_not_supported(),
            "unknown",
            "upgrade_rejected",
        );
    }
    let l = &ctx.listener;
    let route = classify(
        &l.group,
        &l.version,
        req.method().as_str(),
        req.uri().path(),
        req.uri().query(),
    );
    match route {
        Route::Outside | Route::OpenApiV2 => {
            Outcome::status(Status::path_not_found(), "get", "not_found")
        }
        Route::DiscoveryRoot => {
            let (list, _) = resource_list(ctx).await;
            let outcome = if discovery::wants_aggregated(header_str(req.headers(), &header::ACCEPT))
            {
                json_response(
                    StatusCode::OK,
                    discovery::AGGREGATED_V2,
                    &ctx.discovery.aggregated(&list),
                )
            } else {
                json_response(
                    StatusCode::OK,
                    "application/json",
                    &ctx.discovery.api_group_list(),
                )
            };
            Outcome {
                response: outcome,
                verb: "get".into(),
                reason: "discovery",
            }
        }
        Route::DiscoveryGroup => Outcome {
            response: json_response(
                StatusCode::OK,
                "application/json",
                &ctx.discovery.api_group(),
            ),
            verb: "get".into(),
            reason: "discovery",
        },
        Route::DiscoveryGroupVersion => {
            let (list, _) = resource_list(ctx).await;
            Outcome {
                response: bytes_response(StatusCode::OK, "application/json", list),
                verb: "get".into(),
                reason: "discovery",
            }
        }
        Route::OpenApiV3Root => Outcome {
            response: json_response(
                StatusCode::OK,
                "application/json",
                &ctx.discovery.openapi_v3_root(&ctx.target).await,
            ),
            verb: "get".into(),
            reason: "discovery",
        },
        Route::OpenApiV3GroupVersion => {
            let path_and_query = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            forward(
                ctx,
                req.method().clone(),
                &path_and_query,
                req.headers(),
                Bytes::new(),
                "get",
                false,
            )
            .await
        }
        Route::Resource(info) => resource_request(ctx, info, req).await,
    }
}

async fn resource_list(ctx: &Listener) -> (Bytes, Source) {
    let (list, source, why) = ctx.discovery.resource_list(&ctx.target).await;
    if let Some(why) = why {
        let reason = match source {
            Source::LastGood => "last_good",
            _ => "synthesized",
        };
        ctx.metrics
            .discovery_fallbacks
            .get_or_create(&GroupVersionReasonLabels {
                target: ctx.target.name().to_owned(),
                group_version: ctx.listener.group_version(),
                reason: reason.to_owned(),
            })
            .inc();
        tracing::warn!(group_version = %ctx.listener.group_version(), target = ctx.target.name(), cause = %why, answer = reason, "discovery served locally: the target could not answer");
    }
    (list, source)
}

async fn resource_request(ctx: &Listener, info: RequestInfo, req: Request<Incoming>) -> Outcome {
    let verb = info.verb.as_str().to_owned();
    let group = ctx.listener.group.as_str();
    if let Verb::Unsupported(method) = &info.verb {
        return Outcome::status(
            Status::method_not_supported(&info.resource, group, &method.to_ascii_lowercase()),
            &verb,
            "method_not_allowed",
        );
    }
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Outcome::status(
                Status::request_entity_too_large(MAX_BODY_BYTES),
                &verb,
                "body_too_large",
            );
        }
        Err(e) => {
            tracing::info!(error = %e, "the caller's request body broke off");
            return Outcome::status(
                Status::bad_request(format!("reading the request body: {e}")),
                &verb,
                "canceled",
            );
        }
    };

    // RP-8: a namespaced write needs the namespace in the client; it is mirrored to the target.
    if let (Some(ns), true) = (&info.namespace, info.verb.writes_body()) {
        match client_namespace(ctx, ns).await {
            Ok(None) => {
                return Outcome::status(
                    Status::namespace_not_found(ns),
                    &verb,
                    "namespace_missing",
                );
            }
            Ok(Some(n)) if info.verb == Verb::Create && is_terminating(&n) => {
                let name = info.name.clone().unwrap_or_default();
                return Outcome::status(
                    Status::namespace_terminating(&info.resource, group, &name, ns),
                    &verb,
                    "namespace_terminating",
                );
            }
            Ok(Some(_)) => {}
            Err(e) => {
                tracing::error!(namespace = %ns, error = %e, "cannot read the namespace in the client cluster");
                return unavailable(
                    &verb,
                    "error",
                    "the client cluster could not be asked about the namespace",
                );
            }
        }
        if !info.dry_run
            && let Err(e) = ensure_target_namespace(ctx, ns).await
        {
            tracing::error!(namespace = %ns, target = ctx.target.name(), error = %e, "cannot create the namespace in the target");
            return unavailable(
                &verb,
                "upstream_error",
                &format!("creating namespace {ns} in the target failed"),
            );
        }
    }

    let owned = ctx.listener.access == AccessMode::Owned;
    let mut query = parts.uri.query().map(str::to_owned);
    let mut labels_before = LabelsBefore::Unknown;
    let mut uid = None;
    let mut target_owner_refs = None;

    // RP-7: collections are scoped by the owner selector; named objects are read first.
    if owned && matches!(info.verb, Verb::List | Verb::Watch | Verb::DeleteCollection) {
        match scope_query(query.as_deref(), &ctx.owner) {
            Ok(q) => query = Some(q),
            Err(e) => return Outcome::status(e.status(), &verb, "bad_request"),
        }
    }
    let content_type = header_str(&parts.headers, &header::CONTENT_TYPE).map(str::to_owned);
    let is_json_patch = content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("application/json-patch+json"));
    let is_apply = info.verb == Verb::Patch
        && content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/apply-patch"));
    // A named GET checks ownership on its own answer: one target request.
    if owned
        && info.verb == Verb::Get
        && info.subresource.is_none()
        && parts.method == Method::GET
        && !asks_for_yaml(&parts.headers)
        && let Some(name) = info.name.as_deref()
    {
        return owned_get(ctx, &info, name, &parts.headers, query.as_deref()).await;
    }
    // The object is read first when ownership must be checked, when a JSON patch needs to know
    // whether labels exist, and before an update (to keep the target's own owner references).
    if info.is_named_object_request() && (owned || is_json_patch || info.verb == Verb::Update) {
        match read_object(ctx, &info).await {
            Ok(Some(obj)) if !owned || is_owned_object(&obj, &ctx.owner) => {
                labels_before = if obj["metadata"]["labels"].is_object() {
                    LabelsBefore::Present
                } else {
                    LabelsBefore::Absent
                };
                uid = obj["metadata"]["uid"].as_str().map(str::to_owned);
                target_owner_refs = obj["metadata"].get("ownerReferences").cloned();
            }
            // Server-side apply creates a missing object: nothing to mask. (The read and the
            // apply are two requests; a same-named object created between them by another
            // client would be patched, which the docs name as a known window.)
            Ok(None) if is_apply => {
                labels_before = LabelsBefore::Absent;
            }
            Ok(found) if owned => {
                let name = info.name.as_deref().unwrap_or_default();
                let reason = if found.is_some() {
                    tracing::info!(resource = %info.resource, namespace = ?info.namespace, name, "masked an object this client does not own");
                    "ownership_masked"
                } else {
                    tracing::debug!(resource = %info.resource, namespace = ?info.namespace, name, "no such object in the target (or not readable with the proxy's identity)");
                    "not_found"
                };
                return Outcome::status(
                    Status::not_found(&info.resource, group, name),
                    &verb,
                    reason,
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, resource = %info.resource, name = ?info.name, "ownership read failed");
                return unavailable(
                    &verb,
                    "ownership_check_failed",
                    "the target could not confirm who owns the object",
                );
            }
        }
    }

    // RP-6: owner labels on every write body.
    let mut body = body;
    let mut forward_content_type = content_type.clone();
    if let Some(kind) = BodyKind::for_verb(&info.verb) {
        match labels::inject(
            kind,
            content_type.as_deref(),
            &body,
            &ctx.owner,
            labels_before,
        ) {
            Ok(Injection::Rewritten {
                body: b,
                content_type: ct,
            }) => {
                match stash_owner_refs(kind, ct, b, target_owner_refs.as_ref()) {
                    Ok(b) => body = b,
                    Err(e) => {
                        return Outcome::status(
                            Status::unprocessable(
                                &info.resource,
                                group,
                                info.name.as_deref().unwrap_or_default(),
                                &e.to_string(),
                            ),
                            &verb,
                            "bad_request",
                        );
                    }
                }
                forward_content_type = Some(ct.to_owned());
            }
            Ok(Injection::Unchanged(why)) => {
                ctx.metrics
                    .unlabelled_writes
                    .get_or_create(&GroupVersionReasonLabels {
                        target: ctx.target.name().to_owned(),
                        group_version: ctx.listener.group_version(),
                        reason: why.as_str().to_owned(),
                    })
                    .inc();
                tracing::warn!(reason = why.as_str(), resource = %info.resource, "forwarding a write without owner labels");
            }
            Err(e) => {
                tracing::info!(error = %e, resource = %info.resource, "refused a write body");
                return Outcome::status(e.status(), &verb, "bad_request");
            }
        }
    } else if info.verb == Verb::Delete
        && let Some(uid) = &uid
    {
        body = with_uid_precondition(&body, uid);
        forward_content_type = Some("application/json".into());
    }

    // A create carries a fresh create id, so an ambiguous failure can be resolved by looking
    // for it (see [`forward_create`]).
    let create_id = if info.verb == Verb::Create
        && !info.dry_run
        && forward_content_type.as_deref() == Some("application/json")
    {
        with_create_id(&body).map(|(b, id)| {
            body = b;
            id
        })
    } else {
        None
    };

    let path = match &query {
        Some(q) if !q.is_empty() => format!("{}?{q}", info.forward_path()),
        _ => info.forward_path().to_owned(),
    };
    let mut headers = parts.headers;
    if let Some(ct) = forward_content_type {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(&ct).unwrap_or(HeaderValue::from_static("application/json")),
        );
    }
    let watch = info.verb == Verb::Watch;
    if let Some(id) = create_id {
        let req = target_request(parts.method, &path, &headers, body);
        return forward_create(ctx, req, &path, info.forward_path(), &id, &verb).await;
    }
    forward(ctx, parts.method, &path, &headers, body, &verb, watch).await
}

/// A named GET in `owned` mode (RP-7) in one target request: the target answers in the
/// representation the caller asked for (JSON object, `PartialObjectMetadata` or `Table`, all of
/// which show the owner labels), and an answer that does not show this client's labels becomes
/// the same 404 a missing object gets. The target's 404 and 403 are answered with that 404 too,
/// so hidden, missing and unreadable objects look alike: same code, same body, one request each.
async fn owned_get(
    ctx: &Listener,
    info: &RequestInfo,
    name: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Outcome {
    let verb = "get";
    // A Table without row objects would not show the labels: ask for their metadata and drop
    // it again before answering.
    let (query, strip_row_objects) = table_row_metadata(query);
    let path = match &query {
        Some(q) if !q.is_empty() => format!("{}?{q}", info.forward_path()),
        _ => info.forward_path().to_owned(),
    };
    let req = target_request(Method::GET, &path, headers, Bytes::new());
    let answered = tokio::time::timeout(REQUEST_DEADLINE, async {
        let resp = match ctx.target.send(req).await {
            Ok(resp) => resp,
            Err(e) => {
                let reason = e.reason();
                tracing::error!(error = %e, reason, path = %path, "the target could not be reached");
                return target_unavailable(ctx, verb, reason);
            }
        };
        let status = resp.status();
        if status.is_server_error() {
            log_server_error(ctx, &path, resp, "the target answered with a server error").await;
            return target_unavailable(ctx, verb, "upstream_error");
        }
        if status == StatusCode::NOT_FOUND || status == StatusCode::FORBIDDEN {
            tracing::debug!(resource = %info.resource, namespace = ?info.namespace, name, "no such object in the target (or not readable with the proxy's identity)");
            return Outcome::status(
                Status::not_found(&info.resource, &ctx.listener.group, name),
                verb,
                "not_found",
            );
        }
        let (mut parts, body) = resp.into_parts();
        if status != StatusCode::OK {
            // Answers that do not depend on the object (400 for a bad query, 406, 429) pass.
            parts.headers.retain_mut_hop_by_hop();
            return Outcome {
                response: Response::from_parts(
                    parts,
                    body.boxed_unsync(),
                ),
                verb: verb.to_owned(),
                reason: "upstream",
            };
        }
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                tracing::error!(error = %e, path = %path, "the target's answer broke off");
                return unavailable(verb, "upstream_error", "the target's answer broke off");
            }
        };
        if !is_json(&parts.headers) || !is_owned_answer(&bytes, &ctx.owner) {
            tracing::info!(resource = %info.resource, namespace = ?info.namespace, name, "masked an object this client does not own");
            return Outcome::status(
                Status::not_found(&info.resource, &ctx.listener.group, name),
                verb,
                "ownership_masked",
            );
        }
        let restored = if strip_row_objects {
            without_row_objects(&bytes)
        } else {
            owner_refs::restore_body(&bytes)
        };
        let bytes = match restored {
            Some(b) => {
                parts.headers.remove(header::CONTENT_LENGTH);
                Bytes::from(b)
            }
            None => bytes,
        };
        parts.headers.retain_mut_hop_by_hop();
        Outcome {
            response: Response::from_parts(
                parts,
                Full::new(bytes).map_err(|never| match never {}).boxed_unsync(),
            ),
            verb: verb.to_owned(),
            reason: "upstream",
        }
    })
    .await;
    answered.unwrap_or_else(|_| {
        tracing::error!(path = %path, target = ctx.target.name(), reason = "deadline", "request cut at the {REQUEST_DEADLINE:?} deadline");
        terminated(ctx, "deadline");
        target_unavailable(ctx, verb, "deadline")
    })
}

/// The query with `includeObject=None` (a Table without row objects) turned into
/// `includeObject=Metadata`, and whether the row objects must be dropped from the answer.
fn table_row_metadata(query: Option<&str>) -> (Option<String>, bool) {
    let Some(q) = query else {
        return (None, false);
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    // The API server reads the first value of a parameter.
    let first = pairs.iter().find(|(k, _)| k == "includeObject");
    if first.is_none_or(|(_, v)| v != "None") {
        return (Some(q.to_owned()), false);
    }
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &pairs {
        if k == "includeObject" {
            out.append_pair(k, "Metadata");
        } else {
            out.append_pair(k, v);
        }
    }
    (Some(out.finish()), true)
}

/// A Table answer without its rows' objects (the caller asked for `includeObject=None`).
fn without_row_objects(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    for row in v.get_mut("rows")?.as_array_mut()? {
        if let Some(row) = row.as_object_mut() {
            row.remove("object");
        }
    }
    serde_json::to_vec(&v).ok()
}

/// Whether the caller wants YAML, which the ownership check of a GET answer cannot read (such
/// GETs read the object as JSON first).
fn asks_for_yaml(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("yaml"))
}

/// The label a create carries so that its outcome can be looked up after an ambiguous failure.
pub const CREATE_ID_LABEL: &str = "resource-proxy.vcluster.loft.sh/create-id";
/// Time kept from a create's 60 s for looking it up after an ambiguous failure.
pub const CREATE_LOOKUP_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// Adds a fresh [`CREATE_ID_LABEL`] to a JSON object body; `None` if it is not one.
fn with_create_id(body: &[u8]) -> Option<(Bytes, String)> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let metadata = v.get_mut("metadata")?.as_object_mut()?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}));
    let id = new_create_id();
    labels
        .as_object_mut()?
        .insert(CREATE_ID_LABEL.into(), id.clone().into());
    Some((Bytes::from(v.to_string()), id))
}

/// A unique label value (20 hex digits from the time, the process and a counter).
fn new_create_id() -> String {
    use sha2::Digest;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = sha2::Sha256::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(now.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.finalize()[..10]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Forwards a create (RP-14, retried POSTs). client-go retries a 5xx that carries Retry-After
/// with the same body, so the answer to an ambiguous failure (the request was sent, but the
/// deadline passed, the connection broke, or the target answered 5xx) must not invite a
/// duplicate nor hide a write: the proxy looks the object up by its create id; found, the
/// caller gets 201 with it; not found, 503 (the create did not happen, a retry is safe).
async fn forward_create(
    ctx: &Listener,
    req: Request<Bytes>,
    path: &str,
    collection: &str,
    id: &str,
    verb: &str,
) -> Outcome {
    let attempt = tokio::time::timeout(REQUEST_DEADLINE - CREATE_LOOKUP_BUDGET, async {
        match ctx.target.send(req).await {
            Ok(resp) if resp.status().is_server_error() => {
                log_server_error(
                    ctx,
                    path,
                    resp,
                    "the target answered a create with a server error",
                )
                .await;
                Err("upstream_error")
            }
            Err(e) if e.may_have_been_sent() => {
                tracing::error!(error = %e, path, "a create broke off after it was sent");
                Err(e.reason())
            }
            result => Ok(answer(ctx, result, path, verb, false).await),
        }
    })
    .await;
    let reason = match attempt {
        Ok(Ok(outcome)) => return outcome,
        Ok(Err(reason)) => reason,
        Err(_) => {
            tracing::error!(
                path,
                target = ctx.target.name(),
                "create cut at the deadline"
            );
            terminated(ctx, "deadline");
            "deadline"
        }
    };
    match tokio::time::timeout(CREATE_LOOKUP_BUDGET, find_created(ctx, collection, id)).await {
        Ok(Ok(Some(object))) => {
            tracing::info!(
                path,
                create_id = id,
                failure = reason,
                "the create reached the target despite the failure; answering 201 with the object"
            );
            Outcome {
                response: bytes_response(StatusCode::CREATED, "application/json", object),
                verb: verb.to_owned(),
                reason: "create_confirmed",
            }
        }
        Ok(Ok(None)) => {
            tracing::warn!(
                path,
                create_id = id,
                reason,
                "the create did not happen; answering 503 (a retry cannot duplicate it)"
            );
            target_unavailable(ctx, verb, reason)
        }
        Ok(Err(e)) => {
            tracing::error!(path, create_id = id, reason, error = %e, "could not tell whether the create happened; answering 503");
            target_unavailable(ctx, verb, reason)
        }
        Err(_) => {
            tracing::error!(
                path,
                create_id = id,
                reason,
                "looking up the create timed out; answering 503"
            );
            target_unavailable(ctx, verb, reason)
        }
    }
}

/// The object created with `id` in `collection`, as the body of a 201 (owner references
/// restored), if it exists.
async fn find_created(ctx: &Listener, collection: &str, id: &str) -> Result<Option<Bytes>, String> {
    let selector: String =
        form_urlencoded::byte_serialize(format!("{CREATE_ID_LABEL}={id}").as_bytes()).collect();
    let req = Request::get(format!("{collection}?labelSelector={selector}"))
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("the target answered {status}"));
    }
    let list: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let Some(mut item) = list["items"].as_array().and_then(|i| i.first()).cloned() else {
        return Ok(None);
    };
    if item.get("kind").is_none()
        && let Some(kind) = list["kind"].as_str().and_then(|k| k.strip_suffix("List"))
    {
        item["kind"] = kind.into();
        item["apiVersion"] = list["apiVersion"].clone();
    }
    let bytes = serde_json::to_vec(&item).map_err(|e| e.to_string())?;
    Ok(Some(Bytes::from(
        owner_refs::restore_body(&bytes).unwrap_or(bytes),
    )))
}

/// The request to send to the target: the caller's method, path and forwardable headers (JSON
/// answers only), and `body`.
fn target_request(
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Request<Bytes> {
    let mut builder = Request::builder().method(method).uri(path_and_query);
    let listed = http1_wire::connection_names(headers);
    for (name, value) in headers {
        if name == header::ACCEPT {
            builder = builder.header(name, json_only_accept(value));
        } else if forwardable(name) && !listed.contains(name) {
            builder = builder.header(name, value);
        }
    }
    builder.body(body).expect("valid request parts")
}

/// Sends a request to the target and streams its answer back.
#[allow(clippy::too_many_arguments)]
async fn forward(
    ctx: &Listener,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
    verb: &str,
    watch: bool,
) -> Outcome {
    let req = target_request(method, path_and_query, headers, body);
    if watch {
        let req = req.map(Full::new);
        return answer(ctx, ctx.target.watch(req).await, path_and_query, verb, true).await;
    }
    // RP-12: a non-watch request and its response get 60 s end to end.
    match tokio::time::timeout(REQUEST_DEADLINE, async {
        answer(ctx, ctx.target.send(req).await, path_and_query, verb, false).await
    })
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::error!(path = %path_and_query, target = ctx.target.name(), reason = "deadline", "request cut at the {REQUEST_DEADLINE:?} deadline");
            terminated(ctx, "deadline");
            target_unavailable(ctx, verb, "deadline")
        }
    }
}

/// Counts a request ended before its answer was complete.
fn terminated(ctx: &Listener, reason: &str) {
    ctx.metrics
        .request_terminations
        .get_or_create(&ReasonLabels {
            target: ctx.target.name().to_owned(),
            reason: reason.to_owned(),
        })
        .inc();
}

/// The longest a non-watch request may take, end to end.
pub const REQUEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// The 503 every non-watch failure of the target answers (RP-14).
fn target_unavailable(ctx: &Listener, verb: &str, reason: &'static str) -> Outcome {
    unavailable(
        verb,
        reason,
        &format!(
            "target tenant cluster {:?} for {} is unavailable",
            ctx.target.name(),
            ctx.listener.group_version()
        ),
    )
}

/// Logs a 5xx answer of the target with the start of its body (the caller gets a 503).
async fn log_server_error(ctx: &Listener, path: &str, resp: Response<TargetBody>, what: &str) {
    let code = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    tracing::error!(
        path, target = ctx.target.name(), status = code.as_u16(),
        answer = %String::from_utf8_lossy(&body[..body.len().min(512)]),
        "{what}"
    );
}

/// Turns the target's answer (or failure) into the caller's.
async fn answer(
    ctx: &Listener,
    result: Result<Response<TargetBody>, crate::target::TargetError>,
    path_and_query: &str,
    verb: &str,
    watch: bool,
) -> Outcome {
    match result {
        Ok(resp) if !watch && resp.status().is_server_error() => {
            log_server_error(
                ctx,
                path_and_query,
                resp,
                "the target answered with a server error",
            )
            .await;
            target_unavailable(ctx, verb, "upstream_error")
        }
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            parts.headers.retain_mut_hop_by_hop();
            let body: ProxyBody = if watch {
                let body = if is_json(&parts.headers) {
                    restore_watch_stream(body)
                } else {
                    body.boxed_unsync()
                };
                let label = TargetLabels {
                    target: ctx.target.name().to_owned(),
                };
                let gauge = ctx.metrics.active_watches.get_or_create(&label).clone();
                let events = ctx.metrics.watch_events.get_or_create(&label).clone();
                let broken = ctx
                    .metrics
                    .request_terminations
                    .get_or_create(&ReasonLabels {
                        target: ctx.target.name().to_owned(),
                        reason: "error".into(),
                    })
                    .clone();
                gauge.inc();
                let guard = WatchGuard(gauge);
                body.map_frame(move |f| {
                    let _ = &guard;
                    if f.is_data() {
                        events.inc();
                    }
                    f
                })
                .map_err(move |e| {
                    broken.inc();
                    tracing::warn!(error = %e, "a watch stream from the target broke off");
                    e
                })
                .boxed_unsync()
            } else if is_json(&parts.headers) {
                // Buffered (non-watch answers are bounded) so owner references can be restored.
                match body.collect().await {
                    Ok(collected) => {
                        let bytes = collected.to_bytes();
                        let bytes = match owner_refs::restore_body(&bytes) {
                            Some(restored) => {
                                parts.headers.remove(header::CONTENT_LENGTH);
                                Bytes::from(restored)
                            }
                            None => bytes,
                        };
                        Full::new(bytes)
                            .map_err(|never| match never {})
                            .boxed_unsync()
                    }
                    Err(e) => {
                        tracing::error!(error = %e, path = %path_and_query, "the target's answer broke off");
                        return unavailable(
                            verb,
                            "upstream_error",
                            "the target's answer broke off",
                        );
                    }
                }
            } else {
                body.boxed_unsync()
            };
            Outcome {
                response: Response::from_parts(parts, body),
                verb: verb.to_owned(),
                reason: "upstream",
            }
        }
        Err(e) => {
            let reason = e.reason();
            tracing::error!(error = %e, reason, path = %path_and_query, "the target could not be reached");
            target_unavailable(ctx, verb, reason)
        }
    }
}

/// Moves the caller's owner references into the annotation (see [`owner_refs`]).
fn stash_owner_refs(
    kind: BodyKind,
    content_type: &str,
    body: Vec<u8>,
    target_refs: Option<&Value>,
) -> Result<Bytes, owner_refs::UnsupportedPatch> {
    if !owner_refs::mentions_owner_refs(&body) && target_refs.is_none() {
        return Ok(Bytes::from(body));
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return Ok(Bytes::from(body));
    };
    match (kind, content_type) {
        (BodyKind::Patch, ct) if ct.starts_with("application/json-patch+json") => {
            owner_refs::check_json_patch(&v)?;
            return Ok(Bytes::from(body));
        }
        (BodyKind::Patch, ct) if ct.starts_with("application/merge-patch+json") => {
            owner_refs::stash_merge_patch(&mut v)
        }
        (BodyKind::Patch, _) => owner_refs::stash_object(&mut v, None),
        (BodyKind::Object, _) => owner_refs::stash_object(&mut v, target_refs),
    }
    Ok(Bytes::from(v.to_string()))
}

/// The caller's `Accept` without binary encodings (protobuf, CBOR): the target then answers in
/// JSON, the one encoding in which the proxy can restore owner references. Every Kubernetes
/// client that asks for protobuf also accepts JSON.
fn json_only_accept(accept: &HeaderValue) -> HeaderValue {
    let Ok(text) = accept.to_str() else {
        return HeaderValue::from_static("application/json");
    };
    let kept: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.contains("protobuf") && !t.contains("cbor"))
        .collect();
    if kept.is_empty() {
        return HeaderValue::from_static("application/json");
    }
    HeaderValue::from_str(&kept.join(",")).unwrap_or(HeaderValue::from_static("application/json"))
}

fn is_json(headers: &HeaderMap) -> bool {
    header_str(headers, &header::CONTENT_TYPE).is_some_and(|c| c.starts_with("application/json"))
}

/// A watch stream with owner references restored in each event. Events are JSON lines; each
/// complete line is passed on as soon as it arrives.
fn restore_watch_stream(body: TargetBody) -> ProxyBody {
    use bytes::BytesMut;
    use hyper::body::Frame;

    fn line(l: Bytes) -> Bytes {
        let trimmed = l.strip_suffix(b"\n").unwrap_or(&l);
        match owner_refs::restore_body(trimmed) {
            Some(mut restored) => {
                restored.push(b'\n');
                Bytes::from(restored)
            }
            None => l,
        }
    }
    let stream = futures::stream::unfold(
        (body, BytesMut::new(), false),
        |(mut body, mut buf, done)| async move {
            if done {
                return None;
            }
            loop {
                if let Some(pos) = memchr::memchr(b'\n', &buf) {
                    let l = buf.split_to(pos + 1).freeze();
                    if buf.is_empty() {
                        // An idle watch keeps no buffer: the allocation goes with the last line.
                        buf = BytesMut::new();
                    }
                    return Some((Ok(Frame::data(line(l))), (body, buf, false)));
                }
                match body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => buf.extend_from_slice(&data),
                        Err(other) => return Some((Ok(other), (body, buf, false))),
                    },
                    Some(Err(e)) => return Some((Err(e), (body, buf, true))),
                    None if buf.is_empty() => return None,
                    None => {
                        let rest = buf.split().freeze();
                        return Some((Ok(Frame::data(line(rest))), (body, buf, true)));
                    }
                }
            }
        },
    );
    http_body_util::StreamBody::new(stream).boxed_unsync()
}

struct WatchGuard(prometheus_client::metrics::gauge::Gauge);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn unavailable(verb: &str, reason: &'static str, message: &str) -> Outcome {
    let mut response = status_response(&Status::service_unavailable(message));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    Outcome {
        response,
        verb: verb.to_owned(),
        reason,
    }
}

/// Reads the object a named request is about (without subresource), as JSON. `Ok(None)` when
/// the target says it does not exist or the proxy may not read it.
async fn read_object(ctx: &Listener, info: &RequestInfo) -> Result<Option<Value>, String> {
    let req = Request::get(info.object_path())
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(req).await.map_err(|e| e.to_string())?;
    match resp.status() {
        StatusCode::OK => {
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| e.to_string())
        }
        StatusCode::NOT_FOUND | StatusCode::FORBIDDEN => Ok(None),
        other => Err(format!("the target answered {other}")),
    }
}

async fn client_namespace(ctx: &Listener, ns: &str) -> Result<Option<Namespace>, kube::Error> {
    kube::Api::<Namespace>::all(ctx.client_cluster.clone())
        .get_opt(ns)
        .await
}

fn is_terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// Creates the namespace in the target unless it exists.
async fn ensure_target_namespace(ctx: &Listener, ns: &str) -> Result<(), String> {
    let get = Request::get(format!("/api/v1/namespaces/{ns}"))
        .header(header::ACCEPT, "application/json")
        .body(Bytes::new())
        .expect("valid request");
    let resp = ctx.target.send(get).await.map_err(|e| e.to_string())?;
    match resp.status() {
        StatusCode::OK => return Ok(()),
        StatusCode::NOT_FOUND => {}
        other => {
            return Err(format!(
                "reading the namespace: the target answered {other}"
            ));
        }
    }
    let body =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let post = Request::post("/api/v1/namespaces")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Bytes::from(body.to_string()))
        .expect("valid request");
    let resp = ctx.target.send(post).await.map_err(|e| e.to_string())?;
    match resp.status() {
        s if s.is_success() || s == StatusCode::CONFLICT => {
            tracing::info!(
                namespace = ns,
                target = ctx.target.name(),
                "created the namespace in the target"
            );
            Ok(())
        }
        other => Err(format!(
            "creating the namespace: the target answered {other}"
        )),
    }
}

/// DeleteOptions with `preconditions.uid` set, so the delete hits exactly the object that was
/// checked for ownership (a same-named object created meanwhile is not deleted).
fn with_uid_precondition(body: &[u8], uid: &str) -> Bytes {
    let mut opts: Value = serde_json::from_slice(body).unwrap_or_else(|_| serde_json::json!({}));
    if !opts.is_object() {
        opts = serde_json::json!({});
    }
    if opts.get("kind").is_none() {
        opts["kind"] = "DeleteOptions".into();
        opts["apiVersion"] = "v1".into();
    }
    if !opts["preconditions"].is_object() {
        opts["preconditions"] = serde_json::json!({});
    }
    opts["preconditions"]["uid"] = uid.into();
    Bytes::from(opts.to_string())
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        || headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Request headers that go to the target. Identity headers, the caller's credentials and
/// hop-by-hop headers never do; the proxy authenticates as its own identity.
fn forwardable(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n.starts_with("x-remote-")
        || n.starts_with("impersonate-")
        || http1_wire::is_hop_by_hop(n.as_bytes())
        || matches!(
            n,
            "authorization"
                | "host"
                | "content-length"
                | "proxy-authorization"
                // Answers must come uncompressed so the proxy can restore owner references.
                | "accept-encoding"
        ))
}

trait RetainEndToEnd {
    fn retain_mut_hop_by_hop(&mut self);
}

impl RetainEndToEnd for HeaderMap {
    /// The hop-by-hop fields of [`http1_wire::hop`], and the ones `Connection` names.
    fn retain_mut_hop_by_hop(&mut self) {
        http1_wire::strip_hop_by_hop(self, http1_wire::Keep::default());
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A `Status` as a response.
pub fn status_response(status: &Status) -> Response<ProxyBody> {
    bytes_response(
        StatusCode::from_u16(status.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        crate::status::CONTENT_TYPE,
        Bytes::from(status.to_json()),
    )
}

fn json_response(code: StatusCode, content_type: &str, value: &Value) -> Response<ProxyBody> {
    bytes_response(code, content_type, Bytes::from(value.to_string()))
}

fn bytes_response(code: StatusCode, content_type: &str, body: Bytes) -> Response<ProxyBody> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type)
        .body(
            Full::new(body)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("valid response parts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_encodings_are_dropped_from_accept_so_answers_are_json() {
        let gc = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            json_only_accept(&HeaderValue::from_static(gc)),
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
        );
        assert_eq!(
            json_only_accept(&HeaderValue::from_static("application/cbor")),
            "application/json"
        );
        assert_eq!(
            json_only_accept(&HeaderValue::from_static("application/json")),
            "application/json"
        );
    }

    #[test]
    fn identity_credentials_and_hop_by_hop_headers_never_reach_the_target() {
        for h in [
            "x-remote-user",
            "x-remote-group",
            "x-remote-extra-scopes",
            "impersonate-user",
            "authorization",
            "connection",
            "upgrade",
            "accept-encoding",
        ] {
            assert!(!forwardable(&HeaderName::from_static(h)), "{h}");
        }
        for h in ["content-type", "user-agent", "accept"] {
            assert!(forwardable(&HeaderName::from_static(h)), "{h}");
        }
    }

    #[test]
    fn hop_by_hop_fields_and_the_ones_connection_names_are_dropped_both_ways() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("x-end", HeaderValue::from_static("1"));
        let req = target_request(Method::GET, "/x", &headers, Bytes::new());
        let names: Vec<&str> = req.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-end"]);
        headers.insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic"),
        );
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        headers.retain_mut_hop_by_hop();
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["www-authenticate", "x-end"]);
    }

    #[test]
    fn a_table_without_row_objects_is_fetched_with_their_metadata_and_answered_without() {
        assert_eq!(table_row_metadata(None), (None, false));
        assert_eq!(
            table_row_metadata(Some("includeObject=Object")),
            (Some("includeObject=Object".into()), false)
        );
        assert_eq!(
            table_row_metadata(Some(
                "resourceVersion=0&includeObject=None&includeObject=Object"
            )),
            (
                Some("resourceVersion=0&includeObject=Metadata&includeObject=Metadata".into()),
                true
            )
        );
        let table = serde_json::json!({"kind": "Table", "rows": [
            {"cells": ["w"], "object": {"metadata": {"name": "w"}}}]});
        let stripped: Value =
            serde_json::from_slice(&without_row_objects(table.to_string().as_bytes()).unwrap())
                .unwrap();
        assert_eq!(
            stripped,
            serde_json::json!({"kind": "Table", "rows": [{"cells": ["w"]}]})
        );
    }

    #[test]
    fn a_delete_carries_the_uid_of_the_object_checked_for_ownership() {
        let body = with_uid_precondition(b"", "u-1");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["preconditions"]["uid"], "u-1");
        assert_eq!(v["kind"], "DeleteOptions");
        let body = with_uid_precondition(
            br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#,
            "u-2",
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["propagationPolicy"], "Foreground");
        assert_eq!(v["preconditions"]["uid"], "u-2");
    }
}
