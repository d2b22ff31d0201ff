//! Defaults: a validated file becomes the resolved [`Config`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::error::ValidationErrors;
use super::file::{ClientCertificateSection, ConfigFile, TargetSection};
use super::resolved::{
    AccessMode, BaseCredential, ClientIdentity, ClusterAccess, Config, Credential,
    DEFAULT_BASE_PORT, DEFAULT_ENDPOINT_PORT_NAME, DEFAULT_METRICS_ADDRESS, GroupVersionListener,
    PeerSource, Resources, ServingCertificate, Target, TargetRef,
};
use super::validate::{
    ResourceKey, parse_peer_address, parse_resource_key, parse_target_key, written,
};

impl ConfigFile {
    /// Validates, then applies defaults.
    pub fn resolve(self) -> Result<Config, ValidationErrors> {
        self.validate()?;
        let valid = "validated above";
        let client_name = written(&self.client.name).expect(valid).to_owned();
        let project = written(&self.client.project).expect(valid).to_owned();
        let client = ClientIdentity {
            project_namespace: written(&self.client.project_namespace)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("p-{project}")),
            name: client_name,
            project,
        };
        let client_cluster = match &self.client.kubeconfig {
            Some(path) if !self.client.in_cluster => ClusterAccess::Kubeconfig(path.clone()),
            _ => ClusterAccess::InCluster,
        };
        let keys: BTreeMap<String, ResourceKey> = self
            .custom_resources
            .keys()
            .filter_map(|k| parse_resource_key(k).ok().map(|p| (k.clone(), p)))
            .collect();
        let base = self.listeners.base_port.unwrap_or(DEFAULT_BASE_PORT);
        let listeners = self
            .enabled_by_group_version(&keys)
            .into_values()
            .enumerate()
            .map(|(index, entries)| {
                let (_, first_parsed, first) = entries[0];
                let target = first.target_virtual_cluster.clone().unwrap_or_default();
                let named: Vec<String> = entries
                    .iter()
                    .filter_map(|(_, k, _)| k.resource.clone())
                    .collect();
                GroupVersionListener {
                    group: first_parsed.group.clone(),
                    version: first_parsed.version.clone(),
                    // Bounded by validate_ports.
                    port: base + u16::try_from(index).expect(valid),
                    cluster_scoped: entries
                        .iter()
                        .filter(|(_, _, e)| written(&e.scope) == Some("Cluster"))
                        .filter_map(|(_, k, _)| k.resource.clone())
                        .collect(),
                    resources: if named.is_empty() {
                        Resources::Wildcard
                    } else {
                        Resources::Named(named)
                    },
                    target: TargetRef {
                        project: written(&target.project)
                            .unwrap_or(&client.project)
                            .to_owned(),
                        name: written(&target.name).expect(valid).to_owned(),
                    },
                    access: match written(&first.access_resources) {
                        Some("all") => AccessMode::All,
                        _ => AccessMode::Owned,
                    },
                    entries: entries
                        .iter()
                        .map(|(key, _, _)| (*key).to_owned())
                        .collect(),
                }
            })
            .collect();
        let targets = self
            .targets
            .iter()
            .map(|(key, t)| {
                (
                    parse_target_key(key).expect(valid),
                    resolve_target(t, &client),
                )
            })
            .collect();
        let metrics_address = self
            .metrics
            .address
            .as_deref()
            .map(|a| a.parse().expect(valid))
            .unwrap_or(DEFAULT_METRICS_ADDRESS);
        let serving = match (
            &self.listeners.serving_cert_file,
            &self.listeners.serving_key_file,
        ) {
            (Some(cert), Some(key)) => Some(ServingCertificate {
                cert_file: cert.clone(),
                key_file: key.clone(),
                ca_file: self.listeners.serving_ca_file.clone(),
            }),
            _ => None,
        };
        Ok(Config {
            client,
            client_cluster,
            listeners,
            targets,
            metrics_address,
            serving,
            apply_owner_label_policy: self.apply_owner_label_policy,
        })
    }
}

fn resolve_base(
    cert: &Option<ClientCertificateSection>,
    token: &Option<PathBuf>,
) -> BaseCredential {
    match (cert, token) {
        (Some(c), _) => BaseCredential::ClientCertificate {
            cert_file: c.cert_file.clone().unwrap_or_default(),
            key_file: c.key_file.clone().unwrap_or_default(),
        },
        (None, t) => BaseCredential::TokenFile(t.clone().unwrap_or_default()),
    }
}

/// Only called on a validated section.
fn resolve_target(t: &TargetSection, client: &ClientIdentity) -> Target {
    let peers = t.peers.clone().unwrap_or_default();
    let peers = match (peers.static_peers, peers.endpoint_slice) {
        (Some(list), _) => PeerSource::Static(
            list.iter()
                .filter_map(|p| parse_peer_address(p).ok())
                .collect(),
        ),
        (None, slice) => {
            let s = slice.unwrap_or_default();
            PeerSource::EndpointSlice {
                kubeconfig: s.kubeconfig.unwrap_or_default(),
                namespace: s.namespace.unwrap_or_default(),
                service: s.service.unwrap_or_default(),
                port_name: written(&s.port_name)
                    .unwrap_or(DEFAULT_ENDPOINT_PORT_NAME)
                    .to_owned(),
            }
        }
    };
    let tls = t.tls.clone().unwrap_or_default();
    let cred = t.credential.clone().unwrap_or_default();
    let credential = match cred.impersonate {
        Some(imp) => Credential::Impersonate {
            using: resolve_base(&imp.client_certificate, &imp.token_file),
            user: client.target_user(),
            groups: imp.groups,
        },
        None => Credential::Direct(resolve_base(&cred.client_certificate, &cred.token_file)),
    };
    Target {
        peers,
        ca_file: tls.ca_file.unwrap_or_default(),
        server_name: tls.server_name.unwrap_or_default(),
        credential,
    }
}
