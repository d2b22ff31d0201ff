//! The owner labels as an access boundary in the targets, applied by the proxy when
//! `applyOwnerLabelPolicy: true` (off by default).
//!
//! The rule is the ValidatingAdmissionPolicy shipped in `deploy/resource-proxy/target/`
//! (embedded here, so the proxy applies exactly what an administrator would): on the guarded
//! resources only a proxy identity (`loft:vcluster:<projectNamespace>:<name>`) may set
//! [`OWNER_VCLUSTER_LABEL`] and [`OWNER_PROJECT_LABEL`], only to its own values, and (unless the
//! parameter `allowTakeover` is `"true"`) not over another client's; nobody else may add, change
//! or remove them. In each target the proxy, in this order:
//!
//! 1. creates the parameter ConfigMap `kube-system/vcluster-owner-labels` if it is missing
//!    (create only: its exemptions belong to the administrator, and the bindings deny every
//!    guarded write while it is missing);
//! 2. server-side applies the policy [`POLICY_NAME`] (identical content from every proxy, so
//!    the applies of several clients share its fields and change nothing);
//! 3. server-side applies one binding per proxied resource ([`binding_name`]), guarding it in
//!    every version. Clients proxying the same resource apply the same binding; one proxying a
//!    `*.group/version` entry guards every resource of the group.
//!
//! It does so at start and again every [`REAPPLY_INTERVAL`] (every [`RETRY_INTERVAL`] after a
//! failure). A failure, a missing permission above all, does not stop the proxy: it logs a
//! warning (once per distinct cause) and sets `vcluster_proxy_owner_label_policy_applied` to 0.
//! Stale bindings (a resource that left the configuration) are not deleted: they keep guarding
//! objects that carry owner labels.
//!
//! [`OWNER_VCLUSTER_LABEL`]: crate::tenancy::labels::OWNER_VCLUSTER_LABEL
//! [`OWNER_PROJECT_LABEL`]: crate::tenancy::labels::OWNER_PROJECT_LABEL

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::{Config, Resources, TargetRef};
use crate::metrics::TargetLabels;
use crate::target::{TargetClient, TargetError};

/// The policy, as shipped.
pub const POLICY_YAML: &str =
    include_str!("../../../deploy/resource-proxy/target/owner-label-policy.yaml");
/// The binding an administrator installs (its name and resources are replaced per resource).
pub const BINDING_YAML: &str =
    include_str!("../../../deploy/resource-proxy/target/owner-label-binding.yaml");
/// The parameter ConfigMap with its defaults.
pub const PARAMS_YAML: &str =
    include_str!("../../../deploy/resource-proxy/target/owner-label-params.yaml");

/// Name of the policy, its parameter ConfigMap and the administrator's binding.
pub const POLICY_NAME: &str = "vcluster-owner-labels";
/// Namespace of the parameter ConfigMap.
pub const PARAMS_NAMESPACE: &str = "kube-system";
/// Field manager of the applies.
pub const FIELD_MANAGER: &str = "resource-proxy";
/// How often an applied policy is applied again (drift).
pub const REAPPLY_INTERVAL: Duration = Duration::from_secs(600);
/// How soon a failed apply is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(60);

/// Longest object name (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

/// Why the policy could not be applied in a target.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The target's RBAC does not let the proxy identity write the object.
    #[error("the proxy identity may not write {object} in the target (403): {message}")]
    Forbidden {
        /// `<Kind> <name>`.
        object: String,
        /// The target's message.
        message: String,
    },
    /// The target refused the object otherwise.
    #[error("the target answered {code} for {object}: {message}")]
    Refused {
        /// `<Kind> <name>`.
        object: String,
        /// HTTP status.
        code: u16,
        /// The target's message (or body).
        message: String,
    },
    /// The target could not be reached.
    #[error("the target could not be reached for {object}: {source}")]
    Unreachable {
        /// `<Kind> <name>`.
        object: String,
        /// The connection failure.
        #[source]
        source: TargetError,
    },
}

impl ApplyError {
    /// Whether the cause is a missing permission.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, ApplyError::Forbidden { .. })
    }
}

/// `vcluster_proxy_owner_label_policy_applied{target}`: 1 when the last apply in the target
/// succeeded, 0 when it failed.
#[derive(Clone, Default)]
pub struct PolicyMetrics {
    applied: Family<TargetLabels, Gauge>,
}

impl PolicyMetrics {
    /// The series, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "vcluster_proxy_owner_label_policy_applied",
            "1 when the owner-label policy was applied in the target by the last attempt, 0 when it failed",
            metrics.applied.clone(),
        );
        metrics
    }

    /// The current value for `target` (`None` before the first attempt).
    pub fn applied(&self, target: &str) -> Option<i64> {
        self.applied
            .get(&TargetLabels {
                target: target.to_owned(),
            })
            .map(|g| g.get())
    }

    fn set(&self, target: &str, applied: bool) {
        self.applied
            .get_or_create(&TargetLabels {
                target: target.to_owned(),
            })
            .set(i64::from(applied));
    }
}

fn yaml(text: &str) -> Value {
    // The embedded files are tested to parse (`embedded_manifests_parse`).
    serde_saphyr::from_str(text).unwrap_or(Value::Null)
}

/// The guarded resources of `target`: `(group, Some(resource))` per named resource,
/// `(group, None)` for a wildcard entry (every resource of the group).
pub fn guarded_resources(
    config: &Config,
    target: &TargetRef,
) -> BTreeSet<(String, Option<String>)> {
    let mut out = BTreeSet::new();
    for listener in config.listeners.iter().filter(|l| &l.target == target) {
        match &listener.resources {
            Resources::Wildcard => {
                out.insert((listener.group.clone(), None));
            }
            Resources::Named(names) => {
                for r in names {
                    out.insert((listener.group.clone(), Some(r.clone())));
                }
            }
        }
    }
    out
}

/// The binding's name: `vcluster-owner-labels.<resource>.<group>`, or
/// `vcluster-owner-labels-all.<group>` for every resource of a group (the prefixes differ, so
/// no resource and group can give another's name). Over 253 characters, it is cut and ends with
/// a hash of the full name.
pub fn binding_name(group: &str, resource: Option<&str>) -> String {
    let full = match resource {
        Some(r) => format!("{POLICY_NAME}.{r}.{group}"),
        None => format!("{POLICY_NAME}-all.{group}"),
    };
    if full.len() <= MAX_NAME_LEN {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    // ASCII (validated names), so byte slicing is on char boundaries.
    let keep = full[..MAX_NAME_LEN - hash.len() - 1].trim_end_matches(['-', '.']);
    format!("{keep}-{hash}")
}

/// The binding guarding one resource (every resource of the group for `None`) in all versions.
pub fn binding(group: &str, resource: Option<&str>) -> Value {
    let mut binding = yaml(BINDING_YAML);
    binding["metadata"] = json!({"name": binding_name(group, resource)});
    binding["spec"]["matchResources"]["resourceRules"] = json!([{
        "apiGroups": [group],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [resource.unwrap_or("*")],
    }]);
    binding
}

/// Applies the policy in `target` for the resources `config` proxies to it.
pub async fn apply(
    client: &TargetClient,
    config: &Config,
    target: &TargetRef,
) -> Result<Vec<String>, ApplyError> {
    let params = yaml(PARAMS_YAML);
    let created = send(
        client,
        Method::POST,
        format!("/api/v1/namespaces/{PARAMS_NAMESPACE}/configmaps"),
        "application/json",
        &params,
        &format!("ConfigMap {PARAMS_NAMESPACE}/{POLICY_NAME}"),
    )
    .await;
    match created {
        Ok(()) => tracing::info!(
            target = %target,
            configmap = %format!("{PARAMS_NAMESPACE}/{POLICY_NAME}"),
            "created the owner-label policy's parameters with their defaults (nobody exempt)"
        ),
        // It exists: the administrator's exemptions stay as they are.
        Err(ApplyError::Refused { code: 409, .. }) => {}
        Err(e) => return Err(e),
    }
    apply_one(
        client,
        POLICIES,
        "ValidatingAdmissionPolicy",
        &yaml(POLICY_YAML),
    )
    .await?;
    let mut bindings = Vec::new();
    for (group, resource) in guarded_resources(config, target) {
        let binding = binding(&group, resource.as_deref());
        apply_one(
            client,
            BINDINGS,
            "ValidatingAdmissionPolicyBinding",
            &binding,
        )
        .await?;
        bindings.push(binding_name(&group, resource.as_deref()));
    }
    Ok(bindings)
}

async fn apply_one(
    client: &TargetClient,
    collection: &str,
    kind: &str,
    object: &Value,
) -> Result<(), ApplyError> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    send(
        client,
        Method::PATCH,
        format!("{collection}/{name}?fieldManager={FIELD_MANAGER}&force=true"),
        "application/apply-patch+yaml",
        object,
        &format!("{kind} {name}"),
    )
    .await
}

async fn send(
    client: &TargetClient,
    method: Method,
    path: String,
    content_type: &str,
    body: &Value,
    object: &str,
) -> Result<(), ApplyError> {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(Bytes::from(body.to_string()))
        .expect("a valid request");
    let resp = client
        .send(req)
        .await
        .map_err(|source| ApplyError::Unreachable {
            object: object.to_owned(),
            source,
        })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    Err(if status == StatusCode::FORBIDDEN {
        ApplyError::Forbidden {
            object: object.to_owned(),
            message,
        }
    } else {
        ApplyError::Refused {
            object: object.to_owned(),
            code: status.as_u16(),
            message,
        }
    })
}

/// Applies the policy in `target` now and keeps it applied (see the module doc); runs until
/// the task is dropped.
pub async fn keep_applied(
    client: TargetClient,
    config: std::sync::Arc<Config>,
    target: TargetRef,
    metrics: PolicyMetrics,
) {
    let mut last_error: Option<String> = None;
    loop {
        let wait = match apply(&client, &config, &target).await {
            Ok(bindings) => {
                if last_error.take().is_some() || metrics.applied(client.name()).is_none() {
                    tracing::info!(target = %target, policy = POLICY_NAME, ?bindings,
                        "applied the owner-label policy in the target: only this proxy's identity may set its owner labels there");
                }
                metrics.set(client.name(), true);
                REAPPLY_INTERVAL
            }
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    if e.is_forbidden() {
                        tracing::warn!(target = %target, error = %text,
                            "cannot apply the owner-label policy in the target: its RBAC does not allow this proxy identity; owner labels there are enforced only if an administrator installs deploy/resource-proxy/target (still serving)");
                    } else {
                        tracing::warn!(target = %target, error = %text,
                            "applying the owner-label policy in the target failed; retrying (still serving)");
                    }
                }
                last_error = Some(text);
                metrics.set(client.name(), false);
                RETRY_INTERVAL
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_manifests_parse() {
        let policy = yaml(POLICY_YAML);
        assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
        assert_eq!(policy["metadata"]["name"], POLICY_NAME);
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        let binding = yaml(BINDING_YAML);
        assert_eq!(binding["spec"]["policyName"], POLICY_NAME);
        assert_eq!(binding["spec"]["paramRef"]["name"], POLICY_NAME);
        assert_eq!(binding["spec"]["paramRef"]["namespace"], PARAMS_NAMESPACE);
        assert_eq!(
            binding["spec"]["paramRef"]["parameterNotFoundAction"],
            "Deny"
        );
        let params = yaml(PARAMS_YAML);
        assert_eq!(params["kind"], "ConfigMap");
        assert_eq!(params["metadata"]["name"], POLICY_NAME);
        assert_eq!(params["metadata"]["namespace"], PARAMS_NAMESPACE);
    }

    #[test]
    fn the_policy_names_the_label_keys_the_proxy_writes() {
        use crate::tenancy::labels::{OWNER_PROJECT_LABEL, OWNER_VCLUSTER_LABEL};
        for key in [OWNER_VCLUSTER_LABEL, OWNER_PROJECT_LABEL] {
            assert!(POLICY_YAML.contains(&format!("'{key}'")), "{key}");
        }
    }

    fn config_with(flag: &str, entries: &str) -> Config {
        Config::from_yaml(&format!(
            "client: {{name: client-a, project: default, kubeconfig: /k}}\n\
             {flag}\
             customResources:\n{entries}\
             targets:\n  default/target:\n    peers: {{static: [\"127.0.0.1:1\"]}}\n    \
             tls: {{caFile: /ca, serverName: localhost}}\n    \
             credential: {{tokenFile: /t}}\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn config(entries: &str) -> Config {
        config_with("applyOwnerLabelPolicy: true\n", entries)
    }

    #[test]
    fn one_binding_per_resource_whatever_the_version_and_one_per_wildcard_group() {
        let config = config(
            "  widgets.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}\n  \
             widgets.example.com/v2: {enabled: true, targetVirtualCluster: {name: target}}\n  \
             gadgets.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}\n  \
             \"*.reports.example.com/v1\": {enabled: true, targetVirtualCluster: {name: target}}\n  \
             other.example.org/v1: {enabled: false, targetVirtualCluster: {name: target}}\n",
        );
        assert!(config.apply_owner_label_policy);
        let target = TargetRef {
            project: "default".into(),
            name: "target".into(),
        };
        let guarded = guarded_resources(&config, &target);
        let names: Vec<String> = guarded
            .iter()
            .map(|(g, r)| binding_name(g, r.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                "vcluster-owner-labels.gadgets.example.com",
                "vcluster-owner-labels.widgets.example.com",
                "vcluster-owner-labels-all.reports.example.com",
            ]
        );
        let b = binding("reports.example.com", None);
        assert_eq!(
            b["spec"]["matchResources"]["resourceRules"],
            json!([{"apiGroups": ["reports.example.com"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["*"]}])
        );
        assert_eq!(b["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(b["spec"]["paramRef"]["parameterNotFoundAction"], "Deny");
    }

    #[test]
    fn the_policy_is_off_by_default() {
        let entry =
            "  widgets.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}\n";
        assert!(!config_with("", entry).apply_owner_label_policy);
        assert!(config(entry).apply_owner_label_policy);
    }

    #[test]
    fn long_binding_names_are_cut_with_a_hash_and_stay_distinct() {
        let group = format!("{}.example.com", "g".repeat(240));
        let a = binding_name(&group, Some("widgets"));
        let b = binding_name(&group, Some("gadgets"));
        assert!(a.len() <= MAX_NAME_LEN, "{}", a.len());
        assert_ne!(a, b);
        assert!(!a.contains(".-") && !a.contains("--"), "{a}");
        assert_eq!(binding_name(&group, Some("widgets")), a);
    }
}
