//! A Gateway's dedicated data plane as Kubernetes objects (TG-7): the proxy Deployment
//! (`cf-proxy-<gw>`: a stock `cloudflared` behind the proxy), the headless config Service
//! (`cf-proxy-<gw>-config`), the NetworkPolicy that admits the config API only from the
//! controller, the HPA when autoscaling is set, the PodDisruptionBudget when the plane runs more
//! than one pod, and the generated config-API token Secret when the GatewayConfig brings none.
//!
//! With the config API over mutual TLS (the controller's default) the proxy mounts the Secret
//! `cf-proxy-<gw>-config-tls` the controller writes ([`crate::publish::config_api::tls`]) and takes pushes on
//! 8443 only; the admin port 8081 keeps the probes and `/metrics`. The Service and the
//! NetworkPolicy follow: the controller reaches 8443, monitoring 8081.
//!
//! The proxy is a native sidecar (an init container with `restartPolicy: Always`) and the
//! connector the main container: the kubelet starts the connector only once the proxy's startup
//! probe (`/readyz`: a config is loaded) passes, so a connector never registers with Cloudflare
//! in front of a proxy without routes; on deletion it stops the connector first (unregister,
//! finish the requests in flight), then the proxy.
//!
//! The pods meet the `restricted` Pod Security Standard (both containers: non-root with a
//! numeric UID/GID, read-only root filesystem, no privilege escalation, every capability dropped,
//! RuntimeDefault seccomp) and carry requests and limits, so a plane can be rendered into a
//! namespace that enforces `restricted`.
//!
//! [`render`] is pure: the same inputs give the same objects, and every field the API server
//! would otherwise default is written out, so the objects can be compared with what is live and
//! server-side applied without drift. Every object carries a controller ownerReference to the
//! Gateway; [`owned_by_gateway`](crate::names::owned_by_gateway) is the guard against adopting or
//! deleting an object at a rendered name that someone else owns.

use std::collections::BTreeMap;

use gateway_api::apis::standard::gateways::Gateway;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
    MetricIdentifier, MetricSpec, MetricTarget, PodsMetricSource,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Service, ServicePort,
    ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rand::Rng;

use crate::api::{
    Autoscaling, DEFAULT_AUTH_TOKEN_KEY, DEFAULT_AUTOSCALING_METRIC, DEFAULT_REPLICAS,
    DEFAULT_TUNNEL_TOKEN_KEY, GatewayConfig,
};
use crate::names::{PlaneNames, label_value, sha256_hex};

/// Selector label naming the Gateway a plane serves (value through [`label_value`]).
pub const LABEL_GATEWAY: &str = "cf.k8s.lex.la/gateway";
/// GEP-1762 well-known labels: on metadata only, never in a selector.
pub const LABEL_GATEWAY_NAME: &str = "gateway.networking.k8s.io/gateway-name";
pub const LABEL_GATEWAY_CLASS_NAME: &str = "gateway.networking.k8s.io/gateway-class-name";
const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const APP_NAME: &str = "tunnel-proxy";
const MANAGED_BY: &str = "tunnel-controller";

/// Pod-template annotations holding sha256 hashes of the resolved tokens: rotating either
/// Secret changes the template and so rolls the pods.
pub const ANNOTATION_TUNNEL_TOKEN_HASH: &str = "cf.k8s.lex.la/tunnel-token-hash";
pub const ANNOTATION_AUTH_TOKEN_HASH: &str = "cf.k8s.lex.la/auth-token-hash";

/// The proxy's data port (traffic from the connector over localhost; no in-cluster ingress).
pub const PROXY_PORT: i32 = 8080;
/// The proxy's admin port: `/metrics`, `/healthz`, `/readyz`, and the config API in plain HTTP
/// when the controller runs without TLS.
pub const ADMIN_PORT: i32 = 8081;
pub const ADMIN_PORT_NAME: &str = "admin";
/// The config API over mutual TLS (`--config-listen`).
pub const CONFIG_API_TLS_PORT: i32 = 8443;
/// The config Service's port (and, with TLS, the container's 8443).
pub const CONFIG_API_PORT_NAME: &str = "config-api";
/// Where the proxy reads its config API certificates (`--config-tls-dir`).
const CONFIG_TLS_DIR: &str = "/etc/tunnel-proxy/config-tls";
const CONFIG_TLS_VOLUME: &str = "config-tls";
/// The API server's default `defaultMode` of a Secret volume (0644), written out so the
/// rendered object compares equal to the live one.
const SECRET_VOLUME_DEFAULT_MODE: i32 = 0o644;
/// cloudflared's metrics server: `/ready` there is the connector's readiness, probed by the
/// kubelet (the NetworkPolicy admits no pod to it).
const CONNECTOR_METRICS_PORT: i32 = 20241;
const CONNECTOR_METRICS_PORT_NAME: &str = "metrics";
/// Time beyond the connector's drain grace period for the proxy's drain and the processes'
/// exit: `terminationGracePeriodSeconds` = grace + this.
pub const DRAIN_MARGIN_SECONDS: i64 = 15;
/// The proxy's wait for in-flight requests once told to stop (the connector is gone by then);
/// inside the margin.
const PROXY_DRAIN_TIMEOUT_SECONDS: i64 = 10;
/// The proxy's startup probe (`/readyz`, a config loaded): polled every second, so the
/// connector starts within a second of the first push; a day of failures before the kubelet
/// restarts the proxy, so a plane waiting for its controller is not restart-looped.
const STARTUP_PERIOD_SECONDS: i32 = 1;
const STARTUP_FAILURE_THRESHOLD: i32 = 86_400;
/// UID and GID of the containers: the distroless `nonroot` user the cloudflared image uses.
const NONROOT_ID: i64 = 65532;

/// A fresh config-API token for the generated Secret: 32 random bytes, hex. The caller creates
/// the Secret once and reads it back afterwards; the token is never rotated.
pub fn generate_auth_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything besides the Gateway and its GatewayConfig that the objects depend on.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderInputs {
    /// The controller's namespace and its pods' labels: the only peer admitted to the config API.
    pub controller_namespace: String,
    pub controller_pod_labels: BTreeMap<String, String>,
    /// Namespaces additionally admitted to the config port (Prometheus scraping `/metrics`).
    /// An empty selector would match every namespace, so it counts as unset.
    pub monitoring_namespace_selector: Option<LabelSelector>,
    /// The controller's `--proxy-image`, used when the GatewayConfig sets no `image`.
    pub default_proxy_image: Option<String>,
    /// The stock cloudflared image.
    pub connector_image: String,
    /// How long cloudflared serves in-flight requests after SIGTERM (its `--grace-period`).
    pub drain_grace_seconds: i64,
    /// The connector token's value (only its hash is rendered).
    pub tunnel_token: String,
    /// The config-API token's value: the `authTokenSecretRef` Secret's, else the generated
    /// Secret's (from [`generate_auth_token`] when it does not exist yet).
    pub auth_token: String,
    /// The controller pushes over mutual TLS (its `--config-api-tls`): the proxy mounts the
    /// plane's TLS Secret and serves the config API on [`CONFIG_API_TLS_PORT`] only.
    pub config_tls: bool,
}

/// The plane of one Gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub deployment: Deployment,
    pub config_service: Service,
    pub network_policy: NetworkPolicy,
    /// Present when the GatewayConfig sets `autoscaling`.
    pub hpa: Option<HorizontalPodAutoscaler>,
    /// Present when the plane never runs fewer than two pods (`replicas`, or the HPA's
    /// `minReplicas`, above one): at most one pod evicted at a time. With one pod a budget
    /// would either block every drain or protect nothing, so there is none.
    pub pdb: Option<PodDisruptionBudget>,
    /// Present when the GatewayConfig has no `authTokenSecretRef`: create it if absent, never
    /// update it.
    pub generated_auth_secret: Option<Secret>,
}

/// Why a plane cannot be rendered. Each surfaces as `Accepted=False` with reason
/// [`RenderError::REASON`] and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(
        "no proxy image for the data plane: set spec.image in GatewayConfig {config}, or the controller's --proxy-image default"
    )]
    NoImage { config: String },
    #[error("Gateway {0} has no UID yet, so the plane cannot carry an ownerReference to it")]
    GatewayWithoutUid(String),
    #[error(
        "the controller's pod labels are unknown, so the data plane's NetworkPolicy cannot admit the controller alone; set them in the controller's configuration"
    )]
    NoControllerPodLabels,
}

impl RenderError {
    /// The Gateway `Accepted` reason for every render failure.
    pub const REASON: &'static str = "InvalidParameters";
}

/// Renders the plane of `gateway` as configured by `config` (its
/// `spec.infrastructure.parametersRef`). With `autoscaling` set, the Deployment leaves
/// `replicas` to the HPA.
pub fn render(
    gateway: &Gateway,
    config: &GatewayConfig,
    inputs: &RenderInputs,
) -> Result<Rendered, RenderError> {
    let gw_name = gateway.metadata.name.clone().unwrap_or_default();
    let namespace = gateway.metadata.namespace.clone().unwrap_or_default();
    let uid = gateway
        .metadata
        .uid
        .clone()
        .ok_or_else(|| RenderError::GatewayWithoutUid(format!("{namespace}/{gw_name}")))?;
    let image = config
        .spec
        .image
        .clone()
        .or_else(|| inputs.default_proxy_image.clone())
        .filter(|i| !i.is_empty())
        .ok_or_else(|| RenderError::NoImage {
            config: format!(
                "{}/{}",
                config.metadata.namespace.as_deref().unwrap_or(&namespace),
                config.metadata.name.as_deref().unwrap_or_default()
            ),
        })?;
    if inputs.controller_pod_labels.is_empty() {
        return Err(RenderError::NoControllerPodLabels);
    }

    let names = PlaneNames::for_gateway(&gw_name);
    let selector = BTreeMap::from([
        (LABEL_APP_NAME.to_owned(), APP_NAME.to_owned()),
        (LABEL_GATEWAY.to_owned(), label_value(&gw_name)),
    ]);
    let infra = gateway.spec.infrastructure.as_ref();
    let mut labels = infra.and_then(|i| i.labels.clone()).unwrap_or_default();
    labels.extend(selector.clone());
    labels.extend([
        (LABEL_COMPONENT.to_owned(), "proxy".to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_GATEWAY_NAME.to_owned(), label_value(&gw_name)),
        (
            LABEL_GATEWAY_CLASS_NAME.to_owned(),
            label_value(&gateway.spec.gateway_class_name),
        ),
    ]);
    let annotations = infra
        .and_then(|i| i.annotations.clone())
        .filter(|a| !a.is_empty());
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.clone()),
        labels: Some(labels.clone()),
        annotations: annotations.clone(),
        owner_references: Some(vec![OwnerReference {
            api_version: "gateway.networking.k8s.io/v1".to_owned(),
            kind: "Gateway".to_owned(),
            name: gw_name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    };

    let tunnel_secret = SecretKeySelector {
        name: config.spec.tunnel_token_secret_ref.name.clone(),
        key: config
            .spec
            .tunnel_token_secret_ref
            .key_or(DEFAULT_TUNNEL_TOKEN_KEY)
            .to_owned(),
        optional: None,
    };
    let (auth_secret, generated_auth_secret) = match &config.spec.auth_token_secret_ref {
        Some(r) => (
            SecretKeySelector {
                name: r.name.clone(),
                key: r.key_or(DEFAULT_AUTH_TOKEN_KEY).to_owned(),
                optional: None,
            },
            None,
        ),
        None => (
            SecretKeySelector {
                name: names.auth_secret.clone(),
                key: DEFAULT_AUTH_TOKEN_KEY.to_owned(),
                optional: None,
            },
            Some(Secret {
                metadata: meta(&names.auth_secret),
                type_: Some("Opaque".to_owned()),
                data: Some(BTreeMap::from([(
                    DEFAULT_AUTH_TOKEN_KEY.to_owned(),
                    ByteString(inputs.auth_token.clone().into_bytes()),
                )])),
                ..Secret::default()
            }),
        ),
    };

    let mut pod_annotations = annotations.clone().unwrap_or_default();
    pod_annotations.extend([
        (
            ANNOTATION_TUNNEL_TOKEN_HASH.to_owned(),
            sha256_hex(&inputs.tunnel_token),
        ),
        (
            ANNOTATION_AUTH_TOKEN_HASH.to_owned(),
            sha256_hex(&inputs.auth_token),
        ),
        (
            "kubectl.kubernetes.io/default-container".to_owned(),
            "proxy".to_owned(),
        ),
    ]);

    let tls_secret = inputs
        .config_tls
        .then_some(names.config_tls_secret.as_str());
    let pod = pod_spec(
        &image,
        config,
        inputs,
        &tunnel_secret,
        &auth_secret,
        tls_secret,
        &selector,
    );

    let autoscaling = config.spec.autoscaling.as_ref();
    let min_pods = match autoscaling {
        Some(a) => hpa_min_replicas(a),
        None => config.spec.replicas.unwrap_or(DEFAULT_REPLICAS),
    };
    let deployment = Deployment {
        metadata: meta(&names.deployment),
        spec: Some(DeploymentSpec {
            replicas: match autoscaling {
                Some(_) => None,
                None => Some(config.spec.replicas.unwrap_or(DEFAULT_REPLICAS)),
            },
            selector: match_labels(selector.clone()),
            // Surge before removing: a rollout never takes a registered connector away first.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(10),
            progress_deadline_seconds: Some(600),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };

    let config_port = if inputs.config_tls {
        CONFIG_API_TLS_PORT
    } else {
        ADMIN_PORT
    };
    let config_service = config_service(meta(&names.config_service), &selector, config_port);
    let network_policy =
        network_policy(meta(&names.network_policy), &selector, inputs, config_port);
    let hpa = autoscaling.map(|a| hpa(meta(&names.deployment), &names.deployment, a));
    let pdb = (min_pods > 1).then(|| pdb(meta(&names.deployment), &selector));

    Ok(Rendered {
        deployment,
        config_service,
        network_policy,
        hpa,
        pdb,
        generated_auth_secret,
    })
}

/// The proxy (a sidecar) and the connector, locked down: non-root, read-only root filesystem, no
/// capabilities, no service-account token, RuntimeDefault seccomp. With `tls_secret` the proxy
/// mounts it (a required volume: the pods wait until the controller has written it).
fn pod_spec(
    image: &str,
    config: &GatewayConfig,
    inputs: &RenderInputs,
    tunnel_secret: &SecretKeySelector,
    auth_secret: &SecretKeySelector,
    tls_secret: Option<&str>,
    selector: &BTreeMap<String, String>,
) -> PodSpec {
    let grace = inputs.drain_grace_seconds.max(0);
    PodSpec {
        init_containers: Some(vec![proxy_container(
            image,
            config.spec.resources.clone(),
            auth_secret,
            tls_secret.is_some(),
        )]),
        volumes: tls_secret.map(|secret| {
            vec![Volume {
                name: CONFIG_TLS_VOLUME.to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.to_owned()),
                    default_mode: Some(SECRET_VOLUME_DEFAULT_MODE),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            }]
        }),
        containers: vec![connector_container(
            &inputs.connector_image,
            tunnel_secret,
            grace,
        )],
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        restart_policy: Some("Always".to_owned()),
        dns_policy: Some("ClusterFirst".to_owned()),
        scheduler_name: Some("default-scheduler".to_owned()),
        termination_grace_period_seconds: Some(grace + DRAIN_MARGIN_SECONDS),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(NONROOT_ID),
            run_as_group: Some(NONROOT_ID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                localhost_profile: None,
            }),
            ..PodSecurityContext::default()
        }),
        topology_spread_constraints: Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".to_owned(),
            when_unsatisfiable: "ScheduleAnyway".to_owned(),
            label_selector: Some(match_labels(selector.clone())),
            ..TopologySpreadConstraint::default()
        }]),
        ..PodSpec::default()
    }
}

/// The headless Service the pushes resolve: every plane pod, ready or not, on the config port.
fn config_service(metadata: ObjectMeta, selector: &BTreeMap<String, String>, port: i32) -> Service {
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector.clone()),
            session_affinity: Some("None".to_owned()),
            ports: Some(vec![ServicePort {
                name: Some(CONFIG_API_PORT_NAME.to_owned()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Ingress to the config port (`config_port`) only from the controller's pods (labels AND
/// namespace in one peer) and, optionally, to the admin port (`/metrics`) from the monitoring
/// namespaces; nothing to the data port.
fn network_policy(
    metadata: ObjectMeta,
    selector: &BTreeMap<String, String>,
    inputs: &RenderInputs,
    config_port: i32,
) -> NetworkPolicy {
    let rule = |peer: NetworkPolicyPeer, port: i32| NetworkPolicyIngressRule {
        from: Some(vec![peer]),
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".to_owned()),
            end_port: None,
        }]),
    };
    let mut rules = vec![rule(
        NetworkPolicyPeer {
            pod_selector: Some(match_labels(inputs.controller_pod_labels.clone())),
            namespace_selector: Some(match_labels(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_owned(),
                inputs.controller_namespace.clone(),
            )]))),
            ip_block: None,
        },
        config_port,
    )];
    if let Some(monitoring) = inputs
        .monitoring_namespace_selector
        .as_ref()
        .filter(|s| !selects_everything(s))
    {
        rules.push(rule(
            NetworkPolicyPeer {
                namespace_selector: Some(monitoring.clone()),
                ..NetworkPolicyPeer::default()
            },
            ADMIN_PORT,
        ));
    }
    NetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(selector.clone())),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(rules),
            egress: None,
        }),
    }
}

/// autoscaling/v2 on the in-flight gauge as a Pods metric, average value per pod.
fn hpa(metadata: ObjectMeta, deployment: &str, a: &Autoscaling) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata,
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".to_owned()),
                kind: "Deployment".to_owned(),
                name: deployment.to_owned(),
            },
            min_replicas: Some(hpa_min_replicas(a)),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Pods".to_owned(),
                pods: Some(PodsMetricSource {
                    metric: MetricIdentifier {
                        name: a
                            .metric_name
                            .clone()
                            .unwrap_or_else(|| DEFAULT_AUTOSCALING_METRIC.to_owned()),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "AverageValue".to_owned(),
                        average_value: Some(Quantity(a.target_inflight_per_pod.to_string())),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    }
}

fn hpa_min_replicas(a: &Autoscaling) -> i32 {
    a.min_replicas
        .unwrap_or(DEFAULT_REPLICAS)
        .min(a.max_replicas)
}

/// One pod of the plane may be evicted at a time (a drain proceeds, a rollout's surge pod is
/// not counted against it). A pod that is not Ready may always be evicted
/// (`unhealthyPodEvictionPolicy: AlwaysAllow`): it serves nothing, and a plane whose connector
/// cannot register must not hold a node drain hostage.
fn pdb(metadata: ObjectMeta, selector: &BTreeMap<String, String>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            min_available: None,
            selector: Some(match_labels(selector.clone())),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
        }),
        status: None,
    }
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    }
}

fn selects_everything(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

fn secret_env(name: &str, secret: &SecretKeySelector) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(secret.clone()),
            ..EnvVarSource::default()
        }),
        value: None,
    }
}

fn env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    }
}

/// What the API server would default: `Always` for an untagged or `:latest` image without a
/// digest, else `IfNotPresent`.
fn pull_policy(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    let latest =
        !image.contains('@') && last.split_once(':').is_none_or(|(_, tag)| tag == "latest");
    if latest { "Always" } else { "IfNotPresent" }.to_owned()
}

fn locked_down() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        ..SecurityContext::default()
    }
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.to_owned())),
        ("memory".to_owned(), Quantity(memory.to_owned())),
    ])
}

/// An HTTP probe of the proxy's admin port.
fn probe(path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    probe_on(ADMIN_PORT_NAME, path, period, timeout, failures)
}

fn probe_on(port: &str, path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(port.to_owned()),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        success_threshold: Some(1),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

fn container_defaults(name: &str, image: &str) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some(pull_policy(image)),
        security_context: Some(locked_down()),
        termination_message_path: Some("/dev/termination-log".to_owned()),
        termination_message_policy: Some("File".to_owned()),
        ..Container::default()
    }
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

/// The proxy, a native sidecar. Without a tunnel token its `/readyz` means "a config is loaded
/// and not draining", not waiting for the connector (which starts only after it). With `tls`
/// it serves the config API over mutual TLS from the mounted Secret.
fn proxy_container(
    image: &str,
    resources: Option<ResourceRequirements>,
    auth_secret: &SecretKeySelector,
    tls: bool,
) -> Container {
    let mut ports = vec![port("http", PROXY_PORT), port(ADMIN_PORT_NAME, ADMIN_PORT)];
    let mut envs = vec![
        secret_env("PROXY_AUTH_TOKEN", auth_secret),
        // When the kubelet stops the proxy the connector is gone: nothing to serve through.
        env("PROXY_GRACE_PERIOD", "0s".to_owned()),
        env(
            "PROXY_DRAIN_TIMEOUT",
            format!("{PROXY_DRAIN_TIMEOUT_SECONDS}s"),
        ),
    ];
    let mut mounts = None;
    if tls {
        ports.push(port(CONFIG_API_PORT_NAME, CONFIG_API_TLS_PORT));
        envs.extend([
            env("PROXY_CONFIG_TLS_DIR", CONFIG_TLS_DIR.to_owned()),
            env(
                "TUNNEL_PROXY_CONFIG_LISTEN",
                format!("0.0.0.0:{CONFIG_API_TLS_PORT}"),
            ),
        ]);
        mounts = Some(vec![VolumeMount {
            name: CONFIG_TLS_VOLUME.to_owned(),
            mount_path: CONFIG_TLS_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]);
    }
    Container {
        restart_policy: Some("Always".to_owned()),
        ports: Some(ports),
        env: Some(envs),
        volume_mounts: mounts,
        resources: Some(resources.unwrap_or_else(|| ResourceRequirements {
            requests: Some(quantities("100m", "128Mi")),
            limits: Some(quantities("500m", "512Mi")),
            ..ResourceRequirements::default()
        })),
        startup_probe: Some(probe(
            "/readyz",
            STARTUP_PERIOD_SECONDS,
            1,
            STARTUP_FAILURE_THRESHOLD,
        )),
        liveness_probe: Some(probe("/healthz", 20, 5, 3)),
        readiness_probe: Some(probe("/readyz", 10, 3, 3)),
        ..container_defaults("proxy", image)
    }
}

/// Stock cloudflared, the main container. The token comes from the `TUNNEL_TOKEN` environment
/// variable (which `tunnel run` reads in place of `--token`), so it never appears in the process
/// arguments. Ready once registered with the edge (`/ready` on its metrics address).
fn connector_container(image: &str, tunnel_secret: &SecretKeySelector, grace: i64) -> Container {
    Container {
        args: Some(
            [
                "tunnel",
                "--no-autoupdate",
                "--metrics",
                &format!("0.0.0.0:{CONNECTOR_METRICS_PORT}"),
                "--grace-period",
                &format!("{grace}s"),
                "run",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        env: Some(vec![secret_env("TUNNEL_TOKEN", tunnel_secret)]),
        ports: Some(vec![port(
            CONNECTOR_METRICS_PORT_NAME,
            CONNECTOR_METRICS_PORT,
        )]),
        readiness_probe: Some(probe_on(CONNECTOR_METRICS_PORT_NAME, "/ready", 10, 3, 3)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("50m", "64Mi")),
            limits: Some(quantities("500m", "256Mi")),
            ..ResourceRequirements::default()
        }),
        ..container_defaults("cloudflared", image)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::GatewayConfigSpec;
    use crate::names::owned_by_gateway;

    const TUNNEL_TOKEN: &str =
        "eyJhIjoiMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYifQ-tunnel-secret";
    const AUTH_TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

    fn gateway(name: &str, infrastructure: serde_json::Value) -> Gateway {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": name, "namespace": "tenant-a", "uid": "uid-edge"},
            "spec": {
                "gatewayClassName": "cloudflare-tunnel",
                "infrastructure": infrastructure,
                "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS"}]
            }
        }))
        .unwrap()
    }

    fn edge() -> Gateway {
        gateway(
            "edge",
            json!({"parametersRef": {"group": "cf.k8s.lex.la", "kind": "GatewayConfig", "name": "edge-config"}}),
        )
    }

    fn config(spec: serde_json::Value) -> GatewayConfig {
        let spec: GatewayConfigSpec = serde_json::from_value(spec).unwrap();
        let mut c = GatewayConfig::new("edge-config", spec);
        c.metadata.namespace = Some("tenant-a".into());
        c
    }

    fn plain_config() -> GatewayConfig {
        config(json!({"tunnelTokenSecretRef": {"name": "edge-tunnel-token"}}))
    }

    fn inputs() -> RenderInputs {
        RenderInputs {
            controller_namespace: "cf-system".into(),
            controller_pod_labels: BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                "tunnel-controller".to_owned(),
            )]),
            monitoring_namespace_selector: None,
            default_proxy_image: Some("ghcr.io/example/tunnel-proxy:1.0.0".into()),
            connector_image: "cloudflare/cloudflared:2026.8.0".into(),
            drain_grace_seconds: 30,
            tunnel_token: TUNNEL_TOKEN.into(),
            auth_token: AUTH_TOKEN.into(),
            config_tls: true,
        }
    }

    fn ok(gw: &Gateway, cfg: &GatewayConfig, inputs: &RenderInputs) -> Rendered {
        render(gw, cfg, inputs).expect("renders")
    }

    fn all_meta(r: &Rendered) -> Vec<&ObjectMeta> {
        let mut v = vec![
            &r.deployment.metadata,
            &r.config_service.metadata,
            &r.network_policy.metadata,
        ];
        v.extend(r.hpa.as_ref().map(|h| &h.metadata));
        v.extend(r.pdb.as_ref().map(|p| &p.metadata));
        v.extend(r.generated_auth_secret.as_ref().map(|s| &s.metadata));
        v
    }

    fn pod(r: &Rendered) -> &PodSpec {
        r.deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    fn pod_meta(r: &Rendered) -> &ObjectMeta {
        r.deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
    }

    /// Every container of the plane's pods: the init containers (the proxy), then the others.
    fn containers(r: &Rendered) -> impl Iterator<Item = &Container> {
        let pod = pod(r);
        pod.init_containers.iter().flatten().chain(&pod.containers)
    }

    fn container<'a>(r: &'a Rendered, name: &str) -> &'a Container {
        containers(r).find(|c| c.name == name).unwrap()
    }

    fn env_of<'a>(c: &'a Container, name: &str) -> &'a EnvVar {
        c.env.iter().flatten().find(|e| e.name == name).unwrap()
    }

    #[test]
    fn the_plane_is_a_deployment_and_a_headless_config_service_named_after_the_gateway() {
        let r = ok(&edge(), &plain_config(), &inputs());
        assert_eq!(r.deployment.metadata.name.as_deref(), Some("cf-proxy-edge"));
        assert_eq!(r.deployment.metadata.namespace.as_deref(), Some("tenant-a"));
        let svc = &r.config_service;
        assert_eq!(svc.metadata.name.as_deref(), Some("cf-proxy-edge-config"));
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports = spec.ports.as_ref().unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some("config-api"));
        assert_eq!(ports[0].port, 8443);
        assert_eq!(
            spec.selector.as_ref(),
            r.deployment
                .spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .as_ref(),
            "the Service resolves exactly the plane's pods"
        );
        assert_eq!(
            PlaneNames::for_gateway("edge"),
            PlaneNames {
                deployment: "cf-proxy-edge".into(),
                config_service: "cf-proxy-edge-config".into(),
                network_policy: "cf-proxy-edge-netpol".into(),
                auth_secret: "cf-proxy-edge-auth".into(),
                config_tls_secret: "cf-proxy-edge-config-tls".into(),
            }
        );
    }

    #[test]
    fn the_selector_never_carries_the_gep_1762_labels() {
        let long = "g".repeat(70);
        let gw = gateway(&long, json!({"labels": {"team": "a"}}));
        let r = ok(&gw, &plain_config(), &inputs());
        let selectors = [
            r.deployment
                .spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .clone()
                .unwrap(),
            r.config_service
                .spec
                .as_ref()
                .unwrap()
                .selector
                .clone()
                .unwrap(),
            r.network_policy
                .spec
                .as_ref()
                .unwrap()
                .pod_selector
                .clone()
                .unwrap()
                .match_labels
                .unwrap(),
        ];
        for s in &selectors {
            assert!(!s.contains_key(LABEL_GATEWAY_NAME), "{s:?}");
            assert!(!s.contains_key(LABEL_GATEWAY_CLASS_NAME), "{s:?}");
            assert!(
                !s.contains_key("team"),
                "infrastructure labels stay out of selectors"
            );
            assert_eq!(s.get(LABEL_GATEWAY), Some(&label_value(&long)));
        }
        for meta in all_meta(&r).into_iter().chain([pod_meta(&r)]) {
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(
                labels.get(LABEL_GATEWAY_NAME),
                Some(&label_value(&long)),
                "same truncation as the selector label"
            );
            assert_eq!(
                labels.get(LABEL_GATEWAY_CLASS_NAME).map(String::as_str),
                Some("cloudflare-tunnel")
            );
        }
    }

    #[test]
    fn infrastructure_labels_and_annotations_propagate_and_the_controllers_keys_win() {
        let gw = gateway(
            "edge",
            json!({
                "labels": {"team": "a", LABEL_GATEWAY: "someone-else", LABEL_GATEWAY_NAME: "spoof"},
                "annotations": {"cost-center": "42", ANNOTATION_TUNNEL_TOKEN_HASH: "spoof"}
            }),
        );
        let cfg = config(json!({
            "tunnelTokenSecretRef": {"name": "t"},
            "autoscaling": {"maxReplicas": 4, "targetInflightPerPod": 50}
        }));
        let r = ok(&gw, &cfg, &inputs());
        assert_eq!(
            all_meta(&r).len(),
            6,
            "Deployment, Service, NetworkPolicy, HPA, PDB, Secret"
        );
        for meta in all_meta(&r).into_iter().chain([pod_meta(&r)]) {
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(labels["team"], "a");
            assert_eq!(labels[LABEL_GATEWAY], "edge");
            assert_eq!(labels[LABEL_GATEWAY_NAME], "edge");
            assert_eq!(meta.annotations.as_ref().unwrap()["cost-center"], "42");
        }
        assert_eq!(
            pod_meta(&r).annotations.as_ref().unwrap()[ANNOTATION_TUNNEL_TOKEN_HASH],
            sha256_hex(TUNNEL_TOKEN)
        );

        let relabelled = gateway("edge", json!({"labels": {"team": "b"}}));
        let r2 = ok(&relabelled, &cfg, &inputs());
        assert_ne!(
            r.deployment.spec.as_ref().unwrap().template,
            r2.deployment.spec.as_ref().unwrap().template,
            "changing infrastructure labels rolls the pods"
        );
        assert_eq!(
            r.deployment.spec.as_ref().unwrap().selector,
            r2.deployment.spec.as_ref().unwrap().selector,
            "the immutable selector does not move"
        );
    }

    #[test]
    fn rotating_either_token_rolls_the_pods_and_no_token_value_is_rendered() {
        let base = ok(&edge(), &plain_config(), &inputs());
        let annotations = pod_meta(&base).annotations.clone().unwrap();
        assert_eq!(
            annotations[ANNOTATION_TUNNEL_TOKEN_HASH],
            sha256_hex(TUNNEL_TOKEN)
        );
        assert_eq!(
            annotations[ANNOTATION_AUTH_TOKEN_HASH],
            sha256_hex(AUTH_TOKEN)
        );

        let mut rotated = inputs();
        rotated.tunnel_token = "rotated-tunnel-token".into();
        let r = ok(&edge(), &plain_config(), &rotated);
        assert_ne!(pod_meta(&r).annotations, pod_meta(&base).annotations);

        let mut rotated = inputs();
        rotated.auth_token = "rotated-auth-token".into();
        let byo = config(json!({
            "tunnelTokenSecretRef": {"name": "t"},
            "authTokenSecretRef": {"name": "my-auth"}
        }));
        let before = ok(&edge(), &byo, &inputs());
        let after = ok(&edge(), &byo, &rotated);
        assert_ne!(
            pod_meta(&before).annotations,
            pod_meta(&after).annotations,
            "a bring-your-own token rotation rolls the pods"
        );

        let text =
            serde_json::to_string(&(&base.deployment, &base.config_service, &base.network_policy))
                .unwrap();
        assert!(!text.contains(TUNNEL_TOKEN) && !text.contains(AUTH_TOKEN));
    }

    #[test]
    fn the_network_policy_admits_only_the_controller_pod_to_the_config_port() {
        let r = ok(&edge(), &plain_config(), &inputs());
        let spec = r.network_policy.spec.as_ref().unwrap();
        assert_eq!(
            spec.policy_types.as_deref(),
            Some(&["Ingress".to_owned()][..])
        );
        let rules = spec.ingress.as_ref().unwrap();
        assert_eq!(
            rules.len(),
            1,
            "one rule: nothing at all reaches 8080 or 8081"
        );
        let ports = rules[0].ports.as_ref().unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].port, Some(IntOrString::Int(8443)));
        let peers = rules[0].from.as_ref().unwrap();
        assert_eq!(peers.len(), 1);
        // Both selectors in ONE peer: AND, not OR. Two peers would admit every pod of the
        // controller's namespace and every pod with the controller's labels anywhere.
        assert_eq!(
            peers[0]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/name"],
            "tunnel-controller"
        );
        assert_eq!(
            peers[0]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "cf-system"
        );
        assert_eq!(
            spec.pod_selector.as_ref().unwrap().match_labels,
            r.deployment.spec.as_ref().unwrap().selector.match_labels
        );
    }

    #[test]
    fn the_monitoring_namespace_selector_is_admitted_to_the_admin_port_and_an_empty_one_is_not() {
        let monitoring = LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_owned(),
                "monitoring".to_owned(),
            )])),
            match_expressions: None,
        };
        let mut with = inputs();
        with.monitoring_namespace_selector = Some(monitoring.clone());
        let r = ok(&edge(), &plain_config(), &with);
        let rules = r.network_policy.spec.unwrap().ingress.unwrap();
        assert_eq!(rules.len(), 2);
        let port = |rule: &NetworkPolicyIngressRule| rule.ports.clone().unwrap()[0].port.clone();
        // The config port stays the controller's alone; monitoring reaches /metrics only.
        assert_eq!(rules[0].from.as_ref().unwrap().len(), 1);
        assert_eq!(port(&rules[0]), Some(IntOrString::Int(8443)));
        let peers = rules[1].from.as_ref().unwrap();
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].namespace_selector.as_ref(), Some(&monitoring));
        assert_eq!(peers[0].pod_selector, None);
        assert_eq!(rules[1].ports.as_ref().unwrap().len(), 1);
        assert_eq!(port(&rules[1]), Some(IntOrString::Int(8081)));

        with.monitoring_namespace_selector = Some(LabelSelector::default());
        let r = ok(&edge(), &plain_config(), &with);
        assert_eq!(
            r.network_policy.spec.unwrap().ingress.unwrap().len(),
            1,
            "an empty selector would admit every namespace"
        );
    }

    /// The config API's port, Secret and environment with the controller's TLS on and off.
    #[test]
    fn with_tls_the_proxy_mounts_the_planes_secret_and_takes_pushes_on_8443_only() {
        struct Case {
            tls: bool,
            config_port: i32,
            container_ports: [(&'static str, i32); 3],
        }
        let cases = [
            Case {
                tls: true,
                config_port: 8443,
                container_ports: [("http", 8080), ("admin", 8081), ("config-api", 8443)],
            },
            Case {
                tls: false,
                config_port: 8081,
                container_ports: [("http", 8080), ("admin", 8081), ("", 0)],
            },
        ];
        for case in cases {
            let mut i = inputs();
            i.config_tls = case.tls;
            let r = ok(&edge(), &plain_config(), &i);
            let svc = &r
                .config_service
                .spec
                .as_ref()
                .unwrap()
                .ports
                .as_ref()
                .unwrap()[0];
            assert_eq!(svc.name.as_deref(), Some("config-api"), "tls={}", case.tls);
            assert_eq!(svc.port, case.config_port, "tls={}", case.tls);
            assert_eq!(svc.target_port, Some(IntOrString::Int(case.config_port)));
            let rule = &r
                .network_policy
                .spec
                .as_ref()
                .unwrap()
                .ingress
                .as_ref()
                .unwrap()[0];
            assert_eq!(
                rule.ports.as_ref().unwrap()[0].port,
                Some(IntOrString::Int(case.config_port)),
                "tls={}",
                case.tls
            );

            let proxy = container(&r, "proxy");
            let ports: Vec<(&str, i32)> = proxy
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.as_deref().unwrap(), p.container_port))
                .collect();
            let expected: Vec<(&str, i32)> = case
                .container_ports
                .into_iter()
                .filter(|(n, _)| !n.is_empty())
                .collect();
            assert_eq!(ports, expected, "tls={}", case.tls);
            let env = |name: &str| {
                proxy
                    .env
                    .iter()
                    .flatten()
                    .find(|e| e.name == name)
                    .and_then(|e| e.value.clone())
            };
            let volumes = pod(&r).volumes.clone().unwrap_or_default();
            if case.tls {
                assert_eq!(
                    env("PROXY_CONFIG_TLS_DIR").as_deref(),
                    Some("/etc/tunnel-proxy/config-tls")
                );
                assert_eq!(
                    env("TUNNEL_PROXY_CONFIG_LISTEN").as_deref(),
                    Some("0.0.0.0:8443")
                );
                let mounts = proxy.volume_mounts.as_ref().unwrap();
                assert_eq!(mounts.len(), 1);
                assert_eq!(mounts[0].mount_path, "/etc/tunnel-proxy/config-tls");
                assert_eq!(mounts[0].read_only, Some(true));
                assert_eq!(volumes.len(), 1);
                assert_eq!(volumes[0].name, mounts[0].name);
                let secret = volumes[0].secret.as_ref().unwrap();
                // The name the controller writes (config_tls), never optional: the pods wait
                // for it rather than start without TLS.
                assert_eq!(
                    secret.secret_name.as_deref(),
                    Some(PlaneNames::for_gateway("edge").config_tls_secret.as_str())
                );
                assert_eq!(secret.optional, None);
                assert!(
                    container(&r, "cloudflared").volume_mounts.is_none(),
                    "the connector never sees the config API key"
                );
            } else {
                assert_eq!(env("PROXY_CONFIG_TLS_DIR"), None);
                assert_eq!(env("TUNNEL_PROXY_CONFIG_LISTEN"), None);
                assert!(proxy.volume_mounts.is_none());
                assert!(volumes.is_empty());
            }
        }
    }

    #[test]
    fn without_the_controllers_pod_labels_nothing_is_rendered() {
        let mut i = inputs();
        i.controller_pod_labels.clear();
        assert_eq!(
            render(&edge(), &plain_config(), &i),
            Err(RenderError::NoControllerPodLabels)
        );
    }

    #[test]
    fn autoscaling_renders_an_hpa_on_the_in_flight_gauge_and_leaves_replicas_to_it() {
        let cfg = config(json!({
            "tunnelTokenSecretRef": {"name": "t"},
            "autoscaling": {"minReplicas": 2, "maxReplicas": 10, "targetInflightPerPod": 50}
        }));
        let r = ok(&edge(), &cfg, &inputs());
        assert_eq!(r.deployment.spec.as_ref().unwrap().replicas, None);
        let hpa = r.hpa.as_ref().unwrap();
        assert_eq!(hpa.metadata.name.as_deref(), Some("cf-proxy-edge"));
        let spec = &hpa.spec;
        assert_eq!(spec.scale_target_ref.kind, "Deployment");
        assert_eq!(spec.scale_target_ref.name, "cf-proxy-edge");
        assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 10));
        let metric = &spec.metrics.as_ref().unwrap()[0];
        assert_eq!(metric.type_, "Pods");
        let pods = metric.pods.as_ref().unwrap();
        assert_eq!(pods.metric.name, "cftunnel_proxy_requests_in_flight");
        assert_eq!(pods.target.type_, "AverageValue");
        assert_eq!(pods.target.average_value, Some(Quantity("50".into())));

        let small = config(json!({
            "tunnelTokenSecretRef": {"name": "t"},
            "autoscaling": {"maxReplicas": 1, "targetInflightPerPod": 5, "metricName": "custom"}
        }));
        let spec = ok(&edge(), &small, &inputs()).hpa.unwrap().spec;
        assert_eq!(
            spec.min_replicas,
            Some(1),
            "the default minimum never exceeds the maximum"
        );
        assert_eq!(
            spec.metrics.unwrap()[0].pods.as_ref().unwrap().metric.name,
            "custom"
        );
    }

    #[test]
    fn without_autoscaling_there_is_no_hpa_and_replicas_default_to_two() {
        let r = ok(&edge(), &plain_config(), &inputs());
        assert!(r.hpa.is_none());
        assert_eq!(r.deployment.spec.as_ref().unwrap().replicas, Some(2));
        let three = config(json!({"tunnelTokenSecretRef": {"name": "t"}, "replicas": 3}));
        let r = ok(&edge(), &three, &inputs());
        assert_eq!(r.deployment.spec.as_ref().unwrap().replicas, Some(3));
    }

    #[test]
    fn a_disruption_budget_exists_exactly_when_the_plane_never_runs_fewer_than_two_pods() {
        let budget = |spec: serde_json::Value| ok(&edge(), &config(spec), &inputs()).pdb;
        let t = json!({"name": "t"});
        let pdb = budget(json!({"tunnelTokenSecretRef": t})).expect("default: two replicas");
        assert_eq!(pdb.metadata.name.as_deref(), Some("cf-proxy-edge"));
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec.min_available, None);
        assert_eq!(
            spec.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        let r = ok(&edge(), &plain_config(), &inputs());
        assert_eq!(
            spec.selector.as_ref(),
            Some(&r.deployment.spec.as_ref().unwrap().selector),
            "the budget selects exactly the plane's pods"
        );
        assert!(budget(json!({"tunnelTokenSecretRef": t, "replicas": 3})).is_some());
        assert!(budget(json!({"tunnelTokenSecretRef": t, "replicas": 1})).is_none());
        let scaled =
            |a: serde_json::Value| budget(json!({"tunnelTokenSecretRef": t, "autoscaling": a}));
        assert!(scaled(json!({"maxReplicas": 5, "targetInflightPerPod": 50})).is_some());
        assert!(
            scaled(json!({"minReplicas": 1, "maxReplicas": 5, "targetInflightPerPod": 50}))
                .is_none(),
            "the HPA may scale to one pod"
        );
        assert!(
            scaled(json!({"maxReplicas": 1, "targetInflightPerPod": 50})).is_none(),
            "minReplicas is capped by maxReplicas"
        );
    }

    #[test]
    fn without_an_auth_token_ref_the_controller_generates_the_token_secret_and_wires_the_proxy_to_it()
     {
        let r = ok(&edge(), &plain_config(), &inputs());
        let secret = r.generated_auth_secret.as_ref().unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("cf-proxy-edge-auth"));
        assert_eq!(
            secret.data.as_ref().unwrap()["auth-token"],
            ByteString(AUTH_TOKEN.as_bytes().to_vec())
        );
        let auth = env_of(container(&r, "proxy"), "PROXY_AUTH_TOKEN");
        let key_ref = auth
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (key_ref.name.as_str(), key_ref.key.as_str()),
            ("cf-proxy-edge-auth", "auth-token")
        );
        assert!(
            auth.value.is_none(),
            "the value is read from the Secret, never inlined"
        );

        let generated = generate_auth_token();
        assert_eq!(generated.len(), 64);
        assert!(generated.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(generated, generate_auth_token());
    }

    #[test]
    fn a_bring_your_own_auth_token_is_wired_and_nothing_is_generated() {
        let byo = config(json!({
            "tunnelTokenSecretRef": {"name": "edge-tunnel-token", "key": "token"},
            "authTokenSecretRef": {"name": "my-auth", "key": "bearer"}
        }));
        let r = ok(&edge(), &byo, &inputs());
        assert!(r.generated_auth_secret.is_none());
        let proxy = container(&r, "proxy");
        let auth = env_of(proxy, "PROXY_AUTH_TOKEN")
            .value_from
            .clone()
            .unwrap();
        let auth = auth.secret_key_ref.unwrap();
        assert_eq!(
            (auth.name.as_str(), auth.key.as_str()),
            ("my-auth", "bearer")
        );
        let tunnel = env_of(container(&r, "cloudflared"), "TUNNEL_TOKEN")
            .value_from
            .clone()
            .unwrap();
        let tunnel = tunnel.secret_key_ref.unwrap();
        assert_eq!(
            (tunnel.name.as_str(), tunnel.key.as_str()),
            ("edge-tunnel-token", "token")
        );
    }

    #[test]
    fn cloudflared_runs_the_tunnel_token_from_the_secret_and_reports_its_own_readiness() {
        let r = ok(&edge(), &plain_config(), &inputs());
        let cf = container(&r, "cloudflared");
        assert_eq!(cf.image.as_deref(), Some("cloudflare/cloudflared:2026.8.0"));
        let args = cf.args.clone().unwrap();
        assert_eq!(args.first().map(String::as_str), Some("tunnel"));
        assert_eq!(args.last().map(String::as_str), Some("run"));
        assert!(args.contains(&"--no-autoupdate".to_owned()));
        let metrics = args.iter().position(|a| a == "--metrics").unwrap();
        assert_eq!(args[metrics + 1], "0.0.0.0:20241");
        let token = env_of(cf, "TUNNEL_TOKEN").value_from.clone().unwrap();
        assert_eq!(token.secret_key_ref.unwrap().name, "edge-tunnel-token");
        // The kubelet probes the connector's /ready on its metrics port.
        let ports = cf.ports.as_ref().unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].container_port),
            (Some("metrics"), 20241)
        );
        let ready = cf
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/ready"));
        assert_eq!(ready.port, IntOrString::String("metrics".into()));
        // The proxy neither sees the connector token nor waits for the connector: it starts
        // first, and its /readyz means "a config is loaded".
        let proxy = container(&r, "proxy");
        for name in ["TUNNEL_TOKEN", "TUNNEL_PROXY_CONNECTOR_READY_URL"] {
            assert!(
                proxy.env.iter().flatten().all(|e| e.name != name),
                "{name} on the proxy"
            );
        }
    }

    #[test]
    fn the_proxy_is_a_sidecar_whose_first_config_lets_the_connector_start() {
        let r = ok(&edge(), &plain_config(), &inputs());
        let pod = pod(&r);
        let inits = pod.init_containers.as_ref().unwrap();
        assert_eq!(inits.len(), 1);
        assert_eq!(inits[0].name, "proxy");
        assert_eq!(
            inits[0].restart_policy.as_deref(),
            Some("Always"),
            "a native sidecar: runs for the pod's life"
        );
        let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["cloudflared"],
            "the connector is the main container"
        );
        // The kubelet starts the connector once the proxy's startup probe passes: /readyz, true
        // once a config is loaded.
        let startup = inits[0].startup_probe.as_ref().unwrap();
        let get = startup.http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some("/readyz"));
        assert_eq!(get.port, IntOrString::String("admin".into()));
        assert_eq!(
            startup.period_seconds,
            Some(1),
            "the connector follows a push at once"
        );
        let patience = i64::from(startup.period_seconds.unwrap())
            * i64::from(startup.failure_threshold.unwrap());
        assert!(
            patience >= 24 * 3600,
            "a plane waiting for its first config is restarted only after {patience} s"
        );
        assert_eq!(
            pod_meta(&r).annotations.as_ref().unwrap()["kubectl.kubernetes.io/default-container"],
            "proxy"
        );
    }

    #[test]
    fn no_proxy_image_anywhere_is_invalid_parameters_naming_both_places_to_set_it() {
        let mut no_default = inputs();
        no_default.default_proxy_image = None;
        let err = render(&edge(), &plain_config(), &no_default).unwrap_err();
        assert_eq!(
            err,
            RenderError::NoImage {
                config: "tenant-a/edge-config".into()
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("spec.image") && message.contains("--proxy-image"),
            "{message}"
        );
        assert_eq!(RenderError::REASON, "InvalidParameters");

        let own = config(
            json!({"tunnelTokenSecretRef": {"name": "t"}, "image": "registry.example/proxy:2"}),
        );
        let r = ok(&edge(), &own, &no_default);
        assert_eq!(
            container(&r, "proxy").image.as_deref(),
            Some("registry.example/proxy:2")
        );
        let r = ok(&edge(), &own, &inputs());
        assert_eq!(
            container(&r, "proxy").image.as_deref(),
            Some("registry.example/proxy:2"),
            "the GatewayConfig's image overrides the default"
        );
    }

    #[test]
    fn pods_run_non_root_read_only_without_capabilities_or_a_service_account_token() {
        let r = ok(&edge(), &plain_config(), &inputs());
        let pod = pod(&r);
        assert_eq!(pod.automount_service_account_token, Some(false));
        let psc = pod.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(
            psc.run_as_user,
            Some(65532),
            "numeric: the image's user may be a name"
        );
        assert_eq!(psc.run_as_group, Some(65532));
        assert_eq!(
            psc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        assert_eq!(containers(&r).count(), 2);
        for c in containers(&r) {
            let resources = c.resources.as_ref().unwrap();
            for (what, q) in [
                ("requests", &resources.requests),
                ("limits", &resources.limits),
            ] {
                let q = q.as_ref().unwrap();
                assert!(
                    q.contains_key("cpu") && q.contains_key("memory"),
                    "{} {what}",
                    c.name
                );
            }
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
            assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
            assert_eq!(
                sc.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_owned()][..]),
                "{}",
                c.name
            );
        }
        let proxy = container(&r, "proxy");
        for (probe, path) in [
            (&proxy.startup_probe, "/readyz"),
            (&proxy.liveness_probe, "/healthz"),
            (&proxy.readiness_probe, "/readyz"),
        ] {
            let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
            assert_eq!(get.path.as_deref(), Some(path));
            assert_eq!(get.port, IntOrString::String("admin".into()));
        }
    }

    #[test]
    fn termination_grace_covers_the_connectors_drain_then_the_proxys() {
        let r = ok(&edge(), &plain_config(), &inputs());
        assert_eq!(
            pod(&r).termination_grace_period_seconds,
            Some(30 + DRAIN_MARGIN_SECONDS)
        );
        // The kubelet stops the proxy (a sidecar) only after the connector is gone.
        assert_eq!(
            env_of(container(&r, "proxy"), "PROXY_GRACE_PERIOD")
                .value
                .as_deref(),
            Some("0s")
        );
        let args = container(&r, "cloudflared").args.clone().unwrap();
        let i = args.iter().position(|a| a == "--grace-period").unwrap();
        assert_eq!(args[i + 1], "30s");
        let drain = env_of(container(&r, "proxy"), "PROXY_DRAIN_TIMEOUT");
        let drain: i64 = drain
            .value
            .as_deref()
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap();
        assert!(
            drain < DRAIN_MARGIN_SECONDS,
            "the final wait fits in the margin"
        );
    }

    #[test]
    fn resources_default_when_unset_and_an_explicit_empty_value_means_none() {
        let r = ok(&edge(), &plain_config(), &inputs());
        let res = container(&r, "proxy").resources.clone().unwrap();
        assert_eq!(res.requests.unwrap()["memory"], Quantity("128Mi".into()));
        assert_eq!(res.limits.unwrap()["cpu"], Quantity("500m".into()));
        let empty = config(json!({"tunnelTokenSecretRef": {"name": "t"}, "resources": {}}));
        let r = ok(&edge(), &empty, &inputs());
        assert_eq!(
            container(&r, "proxy").resources,
            Some(ResourceRequirements::default())
        );
    }

    #[test]
    fn every_object_is_controlled_by_the_gateway_and_foreign_objects_are_not_ours() {
        let gw = edge();
        let r = ok(&gw, &plain_config(), &inputs());
        for meta in all_meta(&r) {
            assert!(owned_by_gateway(meta, &gw), "{:?}", meta.name);
            let owner = &meta.owner_references.as_ref().unwrap()[0];
            assert_eq!(owner.block_owner_deletion, Some(true));
        }
        let mut other = edge();
        other.metadata.uid = Some("uid-of-a-recreated-gateway".into());
        assert!(!owned_by_gateway(&r.deployment.metadata, &other));

        let mut stripped = r.deployment.metadata.clone();
        stripped.owner_references = None;
        assert!(
            !owned_by_gateway(&stripped, &gw),
            "a stripped reference is not ours"
        );

        let mut not_controller = r.deployment.metadata.clone();
        not_controller.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert!(!owned_by_gateway(&not_controller, &gw));

        let mut no_uid = edge();
        no_uid.metadata.uid = None;
        assert!(matches!(
            render(&no_uid, &plain_config(), &inputs()),
            Err(RenderError::GatewayWithoutUid(_))
        ));
    }

    #[test]
    fn rendering_is_deterministic() {
        let cfg = config(json!({
            "tunnelTokenSecretRef": {"name": "t"},
            "autoscaling": {"maxReplicas": 4, "targetInflightPerPod": 50}
        }));
        assert_eq!(ok(&edge(), &cfg, &inputs()), ok(&edge(), &cfg, &inputs()));
    }

    #[test]
    fn the_pull_policy_is_what_the_api_server_would_default() {
        assert_eq!(pull_policy("proxy"), "Always");
        assert_eq!(pull_policy("proxy:latest"), "Always");
        assert_eq!(pull_policy("registry:5000/proxy"), "Always");
        assert_eq!(pull_policy("registry:5000/proxy:1.2"), "IfNotPresent");
        assert_eq!(pull_policy("proxy@sha256:abcd"), "IfNotPresent");
    }
}
