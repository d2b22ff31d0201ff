//! The objects that route the configured group/versions of the client cluster to the proxy
//! (RP-2, RP-3), kept applied by the leader replica.
//!
//! For each listener (an enabled group/version), [`Wiring::reconcile_once`] server-side applies
//! (field manager [`names::FIELD_MANAGER`], forced):
//! - the ExternalName Service `kube-system/<service>` → `localhost`, and
//! - the APIService `<version>.<group>` pointing at it on the listener's port, with the serving
//!   CA as `caBundle` and priorities 100/100,
//!
//! both labelled [`names::PROTECTED_LABEL`]`=`[`names::PROTECTED_VALUE`] and
//! [`names::CLIENT_LABEL`]`=<client name>`; and the ValidatingAdmissionPolicy
//! [`names::PROTECTION_POLICY_NAME`] with its binding, which deny deleting objects carrying the
//! protection label with [`names::PROTECTION_MESSAGE`]. The policy exempts the proxy's own user in
//! the client cluster (learnt with a SelfSubjectReview), so the proxy can remove the wiring of
//! entries that left its configuration. The policy is shared by every proxy of the cluster: each
//! client's exemption is its own `matchConditions` entry (`exempt-<client>`), applied with its own
//! field manager ([`names::policy_field_manager`]), so no proxy's apply removes another's entry.
//!
//! A group/version is refused (not wired, reported in [`WiringReport::refused`], logged once
//! when it starts and once when it ends) when the client cluster serves it itself: from a CRD
//! that serves that version, or through an APIService of that name the aggregator manages
//! (`kube-aggregator.kubernetes.io/automanaged`), or when another client's proxy has wired it.
//! Wiring of this client that is not wanted (an entry removed, or refused) is deleted; the proxy
//! never deletes an object without its protection and client labels, nor an automanaged
//! APIService.
//!
//! [`run`] repeats this every interval, on start, when it becomes leader and when the serving CA
//! changes, only while this replica holds the Lease ([`lease_config`]); followers write nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kube_support::leader::LeaseConfig;
use tokio::sync::watch;

use crate::config::names;
use crate::config::{Config, GroupVersionListener};
use crate::listen::serving::ServingMaterial;

/// How often the leader re-applies the wiring by default.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(10);

/// `groupPriorityMinimum` and `versionPriority` of the APIServices.
const PRIORITY: i32 = 100;

/// Why wiring could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SelfSubjectReview on the client cluster failed.
    #[error("asking the client cluster who the proxy is (SelfSubjectReview): {0}")]
    WhoAmI(#[source] Box<kube::Error>),
    /// The SelfSubjectReview answer carried no user name.
    #[error("the client cluster's SelfSubjectReview answer has no username")]
    NoUsername,
    /// A call to the client cluster failed.
    #[error("{action} {kind} {name} in the client cluster: {source}")]
    Kube {
        /// What was attempted (`applying`, `listing`, `deleting`).
        action: &'static str,
        /// Object kind.
        kind: &'static str,
        /// Object name (empty for lists).
        name: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The leader election stopped (its task ended), so this replica can no longer know whether
    /// it leads.
    #[error("the leader election ended; wiring stops")]
    ElectionEnded,
}

fn kube_err(
    action: &'static str,
    kind: &'static str,
    name: &str,
) -> impl FnOnce(kube::Error) -> Error {
    let name = name.to_owned();
    move |source| Error::Kube {
        action,
        kind,
        name,
        source: Box::new(source),
    }
}

/// Why a group/version was not registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// A local CustomResourceDefinition serves it.
    Crd {
        /// The CRD's name.
        name: String,
    },
    /// An APIService of that name is managed by the client's own API server.
    LocalApiService {
        /// The APIService's name.
        name: String,
    },
    /// Another client's proxy wired it.
    OtherClient {
        /// The other client's name (its [`names::CLIENT_LABEL`]).
        client: String,
    },
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Crd { name } => write!(
                f,
                "the client cluster serves it from its CustomResourceDefinition {name}; remove \
                 the entry from the proxy configuration or the CRD from the client cluster"
            ),
            RefusalReason::LocalApiService { name } => write!(
                f,
                "the client cluster's API server serves it itself (APIService {name} is labelled \
                 {})",
                names::AUTOMANAGED_LABEL
            ),
            RefusalReason::OtherClient { client } => write!(
                f,
                "the resource proxy of client {client:?} has registered it in this cluster"
            ),
        }
    }
}

/// A group/version that was not registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `<group>/<version>`.
    pub group_version: String,
    /// Why.
    pub reason: RefusalReason,
}

/// What one reconcile did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WiringReport {
    /// Group/versions whose Service and APIService are applied.
    pub wired: Vec<String>,
    /// Objects the applies created or changed (drift corrected), as `<Kind> <name>`.
    pub changed: Vec<String>,
    /// Group/versions not registered, and why.
    pub refused: Vec<Refusal>,
    /// Stale objects of this client deleted, as `<Kind> <name>`.
    pub removed: Vec<String>,
}

/// The wiring of one client's proxy in its client cluster.
pub struct Wiring {
    client: kube::Client,
    config: Arc<Config>,
    proxy_user: String,
    /// Refusals of the previous reconcile (`group/version` → reason), to log changes only.
    refused: Mutex<BTreeMap<String, String>>,
}

impl Wiring {
    /// Asks the client cluster who the proxy is (SelfSubjectReview): that user is exempt from the
    /// deletion protection.
    pub async fn new(client: kube::Client, config: Arc<Config>) -> Result<Self, Error> {
        let review = Api::<SelfSubjectReview>::all(client.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .map_err(|e| Error::WhoAmI(Box::new(e)))?;
        let proxy_user = review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .ok_or(Error::NoUsername)?;
        tracing::info!(user = %proxy_user, "the proxy's identity in the client cluster (exempt from the deletion protection)");
        Ok(Self {
            client,
            config,
            proxy_user,
            refused: Mutex::new(BTreeMap::new()),
        })
    }

    /// The proxy's user in the client cluster.
    pub fn proxy_user(&self) -> &str {
        &self.proxy_user
    }

    /// Applies the protection policy and every listener's Service and APIService (with `ca_pem`
    /// as `caBundle`), refuses group/versions the cluster serves itself, and deletes this
    /// client's stale wiring.
    pub async fn reconcile_once(&self, ca_pem: &str) -> Result<WiringReport, Error> {
        let mut report = WiringReport::default();
        self.apply_protection().await?;

        let client_name = &self.config.client.name;
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing", "CustomResourceDefinitions", ""))?
            .items;
        let api_services: BTreeMap<String, APIService> =
            Api::<APIService>::all(self.client.clone())
                .list(&ListParams::default())
                .await
                .map_err(kube_err("listing", "APIServices", ""))?
                .items
                .into_iter()
                .map(|a| (a.name_any(), a))
                .collect();
        let services_api: Api<Service> =
            Api::namespaced(self.client.clone(), names::SERVICE_NAMESPACE);
        let protected = format!("{}={}", names::PROTECTED_LABEL, names::PROTECTED_VALUE);
        let services: BTreeMap<String, Service> = services_api
            .list(&ListParams::default().labels(&protected))
            .await
            .map_err(kube_err("listing", "Services", ""))?
            .items
            .into_iter()
            .map(|s| (s.name_any(), s))
            .collect();

        let mut wanted_api_services = BTreeSet::new();
        let mut wanted_services = BTreeSet::new();
        for listener in &self.config.listeners {
            let api_service_name = names::api_service_name(&listener.group, &listener.version);
            let service_name = names::service_name(&listener.group, &listener.version);
            if let Some(reason) = self.refusal(
                listener,
                &crds,
                api_services.get(&api_service_name),
                services.get(&service_name),
            ) {
                report.refused.push(Refusal {
                    group_version: listener.group_version(),
                    reason,
                });
                continue;
            }
            let service = self.apply_service(&service_name).await?;
            if changed(services.get(&service_name), &service) {
                report.changed.push(format!("Service {service_name}"));
            }
            let api_service = self
                .apply_api_service(listener, &api_service_name, &service_name, ca_pem)
                .await?;
            if changed(api_services.get(&api_service_name), &api_service) {
                report
                    .changed
                    .push(format!("APIService {api_service_name}"));
            }
            wanted_api_services.insert(api_service_name);
            wanted_services.insert(service_name);
            report.wired.push(listener.group_version());
        }
        for object in &report.changed {
            tracing::info!(%object, client = %client_name, "applied wiring (created, or restored after drift)");
        }
        self.log_refusals(&report.refused);

        let api_services_api: Api<APIService> = Api::all(self.client.clone());
        for (name, api_service) in &api_services {
            if self.owns(api_service)
                && !wanted_api_services.contains(name)
                && !api_service.labels().contains_key(names::AUTOMANAGED_LABEL)
                && delete(&api_services_api, "APIService", api_service).await?
            {
                report.removed.push(format!("APIService {name}"));
            }
        }
        for (name, service) in &services {
            if self.owns(service)
                && !wanted_services.contains(name)
                && delete(&services_api, "Service", service).await?
            {
                report.removed.push(format!("Service {name}"));
            }
        }
        for object in &report.removed {
            tracing::info!(%object, client = %client_name, "deleted stale wiring: its group/version is no longer wired by this proxy");
        }
        Ok(report)
    }

    /// Whether `object` is this client's wiring.
    fn owns<K: Resource>(&self, object: &K) -> bool {
        let labels = object.meta().labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        label(names::PROTECTED_LABEL) == Some(names::PROTECTED_VALUE)
            && label(names::CLIENT_LABEL) == Some(self.config.client.name.as_str())
    }

    fn refusal(
        &self,
        listener: &GroupVersionListener,
        crds: &[CustomResourceDefinition],
        api_service: Option<&APIService>,
        service: Option<&Service>,
    ) -> Option<RefusalReason> {
        if let Some(crd) = crds.iter().find(|crd| {
            crd.spec.group == listener.group
                && crd
                    .spec
                    .versions
                    .iter()
                    .any(|v| v.name == listener.version && v.served)
        }) {
            return Some(RefusalReason::Crd {
                name: crd.name_any(),
            });
        }
        if let Some(api_service) = api_service
            && api_service.labels().contains_key(names::AUTOMANAGED_LABEL)
        {
            return Some(RefusalReason::LocalApiService {
                name: api_service.name_any(),
            });
        }
        let other_client = |labels: &BTreeMap<String, String>| {
            labels
                .get(names::CLIENT_LABEL)
                .filter(|c| **c != self.config.client.name)
                .cloned()
        };
        api_service
            .and_then(|a| other_client(a.labels()))
            .or_else(|| service.and_then(|s| other_client(s.labels())))
            .map(|client| RefusalReason::OtherClient { client })
    }

    fn log_refusals(&self, refusals: &[Refusal]) {
        let now: BTreeMap<String, String> = refusals
            .iter()
            .map(|r| (r.group_version.clone(), r.reason.to_string()))
            .collect();
        let mut previous = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        for (group_version, reason) in &now {
            if previous.get(group_version) != Some(reason) {
                tracing::warn!(%group_version, %reason, "refusing to register the group/version in the client cluster");
            }
        }
        for group_version in previous.keys().filter(|gv| !now.contains_key(*gv)) {
            tracing::info!(%group_version, "the group/version is no longer refused; registering it");
        }
        *previous = now;
    }

    fn labels(&self) -> BTreeMap<String, String> {
        [
            (names::PROTECTED_LABEL, names::PROTECTED_VALUE),
            (names::CLIENT_LABEL, self.config.client.name.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    async fn apply_service(&self, name: &str) -> Result<Service, Error> {
        let service = Service {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(names::SERVICE_NAMESPACE.to_owned()),
                labels: Some(self.labels()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("ExternalName".to_owned()),
                external_name: Some("localhost".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply(
            &Api::namespaced(self.client.clone(), names::SERVICE_NAMESPACE),
            "Service",
            name,
            &service,
            names::FIELD_MANAGER,
        )
        .await
    }

    async fn apply_api_service(
        &self,
        listener: &GroupVersionListener,
        name: &str,
        service_name: &str,
        ca_pem: &str,
    ) -> Result<APIService, Error> {
        let api_service = APIService {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(self.labels()),
                ..Default::default()
            },
            spec: Some(APIServiceSpec {
                group: Some(listener.group.clone()),
                version: Some(listener.version.clone()),
                service: Some(ServiceReference {
                    namespace: Some(names::SERVICE_NAMESPACE.to_owned()),
                    name: Some(service_name.to_owned()),
                    port: Some(i32::from(listener.port)),
                }),
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                group_priority_minimum: PRIORITY,
                version_priority: PRIORITY,
                insecure_skip_tls_verify: None,
            }),
            status: None,
        };
        apply(
            &Api::all(self.client.clone()),
            "APIService",
            name,
            &api_service,
            names::FIELD_MANAGER,
        )
        .await
    }

    /// The ValidatingAdmissionPolicy and its binding.
    async fn apply_protection(&self) -> Result<(), Error> {
        let rule = |group: &str, resource: &str| NamedRuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec!["*".to_owned()]),
            operations: Some(vec!["DELETE".to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            ..Default::default()
        };
        // A DELETE's request has no `object`, only `oldObject`.
        let not_protected = format!(
            "!has(oldObject.metadata.labels) || !({key} in oldObject.metadata.labels) || \
             oldObject.metadata.labels[{key}] != {value}",
            key = cel_string(names::PROTECTED_LABEL),
            value = cel_string(names::PROTECTED_VALUE),
        );
        let policy = ValidatingAdmissionPolicy {
            metadata: ObjectMeta {
                name: Some(names::PROTECTION_POLICY_NAME.to_owned()),
                ..Default::default()
            },
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: Some("Fail".to_owned()),
                match_constraints: Some(MatchResources {
                    resource_rules: Some(vec![
                        rule("apiregistration.k8s.io", "apiservices"),
                        rule("", "services"),
                    ]),
                    object_selector: Some(LabelSelector {
                        match_labels: Some(
                            [(
                                names::PROTECTED_LABEL.to_owned(),
                                names::PROTECTED_VALUE.to_owned(),
                            )]
                            .into(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                match_conditions: Some(vec![MatchCondition {
                    name: names::exemption_condition_name(&self.config.client.name),
                    expression: format!(
                        "request.userInfo.username != {}",
                        cel_string(&self.proxy_user)
                    ),
                }]),
                validations: Some(vec![Validation {
                    expression: not_protected,
                    message: Some(names::PROTECTION_MESSAGE.to_owned()),
                    reason: Some("Forbidden".to_owned()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        };
        apply(
            &Api::all(self.client.clone()),
            "ValidatingAdmissionPolicy",
            names::PROTECTION_POLICY_NAME,
            &policy,
            &names::policy_field_manager(&self.config.client.name),
        )
        .await?;
        let binding = ValidatingAdmissionPolicyBinding {
            metadata: ObjectMeta {
                name: Some(names::PROTECTION_BINDING_NAME.to_owned()),
                ..Default::default()
            },
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: names::PROTECTION_POLICY_NAME.to_owned(),
                validation_actions: vec!["Deny".to_owned()],
                ..Default::default()
            },
        };
        apply(
            &Api::all(self.client.clone()),
            "ValidatingAdmissionPolicyBinding",
            names::PROTECTION_BINDING_NAME,
            &binding,
            names::FIELD_MANAGER,
        )
        .await?;
        Ok(())
    }
}

/// A CEL string literal (JSON's escapes are valid CEL escapes).
fn cel_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// Whether an apply changed `before` (absent, or another resourceVersion).
fn changed<K: Resource>(before: Option<&K>, after: &K) -> bool {
    before.and_then(|b| b.meta().resource_version.as_deref())
        != after.meta().resource_version.as_deref()
}

async fn apply<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    object: &K,
    manager: &str,
) -> Result<K, Error>
where
    K: Resource + Clone + fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(kube_err("applying", kind, name))
}

/// Deletes `object` if it is still the same object (UID precondition). Returns whether it was
/// deleted by this call.
async fn delete<K>(api: &Api<K>, kind: &'static str, object: &K) -> Result<bool, Error>
where
    K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: object
            .meta()
            .uid
            .clone()
            .map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(true),
        // Gone already, or replaced by another object of that name: nothing of ours to delete.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(source) => Err(kube_err("deleting", kind, &name)(source)),
    }
}

/// The Lease the client's replicas elect their leader on: `kube-system/resource-proxy-<client>`
/// in the client cluster ([`names::lease_name`]), with kube-support's defaults (15 s, renewed
/// 5 s before expiry).
pub fn lease_config(config: &Config, identity: impl Into<String>) -> LeaseConfig {
    LeaseConfig::new(
        names::SERVICE_NAMESPACE,
        names::lease_name(&config.client.name),
        identity,
    )
}

/// A replica identity for the Lease when no pod name is configured: `<hostname>-<pid>`.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Keeps the wiring applied while this replica leads: reconciles every `interval`, when it
/// becomes leader, and when the serving CA changes; publishes each report in `reports`. A
/// failed reconcile is logged and retried on the next tick. Returns when `shutdown` completes,
/// or with [`Error::ElectionEnded`] when the election's sender is gone (the replica can no
/// longer know whether it leads, and stops writing).
///
/// `leader` comes from [`kube_support::leader::Leadership::subscribe`] on [`lease_config`]'s
/// Lease.
pub async fn run(
    wiring: Wiring,
    mut leader: watch::Receiver<bool>,
    mut serving: watch::Receiver<ServingMaterial>,
    interval: Duration,
    reports: watch::Sender<Option<WiringReport>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut serving_open = true;
    let mut ca_pem = serving.borrow_and_update().ca_pem.clone();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            _ = ticker.tick() => {}
            changed = leader.changed() => {
                if changed.is_err() {
                    return Err(Error::ElectionEnded);
                }
                let leads = *leader.borrow_and_update();
                tracing::info!(leader = leads, client = %wiring.config.client.name,
                    "{}", if leads { "became leader; wiring the client cluster" }
                          else { "lost leadership; no longer writing wiring" });
            }
            changed = serving.changed(), if serving_open => {
                match changed {
                    Ok(()) => {
                        let material = serving.borrow_and_update().clone();
                        if material.ca_pem != ca_pem {
                            tracing::info!("the serving CA changed; republishing the caBundle");
                            ca_pem = material.ca_pem;
                        }
                    }
                    Err(_) => {
                        serving_open = false;
                        tracing::warn!("the serving certificate source stopped; keeping the last CA");
                    }
                }
            }
        }
        // The sender is gone once the election task ended: whatever the last value said, this
        // replica no longer knows that it leads.
        if leader.has_changed().is_err() {
            return Err(Error::ElectionEnded);
        }
        if !*leader.borrow() {
            continue;
        }
        match wiring.reconcile_once(&ca_pem).await {
            Ok(report) => {
                reports.send_replace(Some(report));
            }
            Err(error) => {
                tracing::warn!(%error, "reconciling the wiring failed; retrying on the next tick");
            }
        }
    }
}
