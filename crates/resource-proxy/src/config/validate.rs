//! The rules of the configuration: every violation is collected, each naming its key path
//! (`customResources['widgets.example.com/v1'].accessResources`).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::dns::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};
use super::error::{FieldError, ValidationErrors};
use super::file::{ClientCertificateSection, ConfigFile, CustomResourceProxy, TargetSection};
use super::resolved::{DEFAULT_BASE_PORT, PeerAddress, TargetRef};

const WILDCARD: &str = "*";

/// A parsed `customResources` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ResourceKey {
    /// `None` for `*`.
    pub(super) resource: Option<String>,
    pub(super) group: String,
    pub(super) version: String,
}

/// Splits `resource.group/version` like vCluster (`schema.ParseGroupResource` on the part before
/// the slash: resource up to the first dot, group after it), then checks each part's syntax.
pub(super) fn parse_resource_key(key: &str) -> Result<ResourceKey, String> {
    let parts: Vec<&str> = key.split('/').collect();
    let [group_resource, version] = parts.as_slice() else {
        return Err("it must contain exactly one '/'".to_owned());
    };
    let Some((resource, group)) = group_resource.split_once('.') else {
        return Err(format!("{group_resource:?} has no group"));
    };
    if resource.is_empty() {
        return Err("the resource part is empty".to_owned());
    }
    if resource != WILDCARD && !is_dns1123_label(resource) {
        return Err(format!(
            "resource {resource:?} must be '*' or a lower-case resource plural (DNS label)"
        ));
    }
    if !is_dns1123_subdomain(group) {
        return Err(format!(
            "group {group:?} must be a lower-case DNS subdomain"
        ));
    }
    if !is_dns1035_label(version) {
        return Err(format!(
            "version {version:?} must be a lower-case DNS label starting with a letter"
        ));
    }
    Ok(ResourceKey {
        resource: (resource != WILDCARD).then(|| resource.to_owned()),
        group: group.to_owned(),
        version: (*version).to_owned(),
    })
}

pub(super) fn parse_peer_address(s: &str) -> Result<PeerAddress, String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, port) = rest
            .split_once("]:")
            .ok_or_else(|| "expected [ipv6]:port".to_owned())?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{host:?} is not an IPv6 address"));
        }
        (host, port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| "expected host:port".to_owned())?;
        if host.contains(':') {
            return Err("an IPv6 address must be written in brackets: [addr]:port".to_owned());
        }
        if host.parse::<Ipv4Addr>().is_err() && !is_dns1123_subdomain(&host.to_ascii_lowercase()) {
            return Err(format!("{host:?} is neither an IP address nor a DNS name"));
        }
        (host, port)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("port {port:?} must be a number from 1 to 65535"))?;
    Ok(PeerAddress {
        host: host.to_owned(),
        port,
    })
}

/// `Some(s)` unless absent or empty: vCluster's Go types treat an empty string as not written.
pub(super) fn written(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

const DNS_LABEL_RULE: &str = "must be a DNS label (lower-case alphanumerics or '-', starting and ending alphanumeric, at most 63 characters)";

struct Collector(Vec<FieldError>);

impl Collector {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn dns_label(&mut self, path: String, value: &str) {
        if !is_dns1123_label(value) {
            self.push(path, format!("invalid value {value:?}: {DNS_LABEL_RULE}"));
        }
    }

    fn required_path(&mut self, path: String, value: &Option<PathBuf>) {
        match value {
            Some(p) if !p.as_os_str().is_empty() => {}
            _ => self.push(path, "is required"),
        }
    }
}

fn entry_path(key: &str) -> String {
    format!("customResources['{key}']")
}

fn target_path(key: &str) -> String {
    format!("targets['{key}']")
}

impl ConfigFile {
    /// The client's project as written, for defaults.
    pub(super) fn client_project(&self) -> Option<&str> {
        written(&self.client.project)
    }

    /// Checks every rule; returns all violations.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = Collector(Vec::new());
        self.validate_client(&mut errs);
        let keys = self.validate_entries(&mut errs);
        self.validate_group_versions(&keys, &mut errs);
        for (key, target) in &self.targets {
            validate_target(key, target, &mut errs);
        }
        self.validate_ports(&keys, &mut errs);
        if errs.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errs.0))
        }
    }

    fn validate_client(&self, errs: &mut Collector) {
        let client = &self.client;
        match written(&client.name) {
            Some(name) => errs.dns_label("client.name".into(), name),
            None => errs.push("client.name", "is required"),
        }
        match written(&client.project) {
            Some(project) => errs.dns_label("client.project".into(), project),
            None => errs.push("client.project", "is required"),
        }
        if let Some(ns) = written(&client.project_namespace) {
            errs.dns_label("client.projectNamespace".into(), ns);
        }
        let has_kubeconfig = client
            .kubeconfig
            .as_ref()
            .is_some_and(|p| !p.as_os_str().is_empty());
        if has_kubeconfig == client.in_cluster {
            errs.push(
                "client",
                "set exactly one of client.kubeconfig or client.inCluster: true",
            );
        }
    }

    /// Per-entry rules; returns the parsed keys of the entries whose key is valid.
    fn validate_entries(&self, errs: &mut Collector) -> BTreeMap<String, ResourceKey> {
        let mut keys = BTreeMap::new();
        for (key, entry) in &self.custom_resources {
            let path = entry_path(key);
            match parse_resource_key(key) {
                Ok(parsed) => {
                    keys.insert(key.clone(), parsed);
                }
                Err(why) => errs.push(
                    path.clone(),
                    format!(
                        "invalid resource path {key:?}, expected format 'resource.group/version' \
                         or '*.group/version' (e.g. 'resource.my-org.com/v1'): {why}"
                    ),
                ),
            }
            let target = entry.target_virtual_cluster.clone().unwrap_or_default();
            match written(&target.name) {
                Some(name) => errs.dns_label(format!("{path}.targetVirtualCluster.name"), name),
                None => errs.push(
                    format!("{path}.targetVirtualCluster.name"),
                    "is required: targetVirtualCluster names the target tenant cluster",
                ),
            }
            if let Some(project) = written(&target.project) {
                errs.dns_label(format!("{path}.targetVirtualCluster.project"), project);
            }
            if let Some(scope) = written(&entry.scope) {
                if scope != "Namespaced" && scope != "Cluster" {
                    errs.push(
                        format!("{path}.scope"),
                        format!("invalid value {scope:?}, must be 'Namespaced' or 'Cluster'"),
                    );
                } else if keys
                    .get(key)
                    .is_some_and(|k: &ResourceKey| k.resource.is_none())
                {
                    errs.push(
                        format!("{path}.scope"),
                        "is only valid on an entry that names its resource: a wildcard entry \
                         takes every resource's scope from the target's discovery",
                    );
                }
            }
            if let Some(mode) = written(&entry.access_resources)
                && mode != "owned"
                && mode != "all"
            {
                errs.push(
                    format!("{path}.accessResources"),
                    format!("invalid value {mode:?}, must be 'owned' or 'all'"),
                );
            }
        }
        keys
    }

    /// Rules across the enabled entries of one group/version, and target existence.
    fn validate_group_versions(&self, keys: &BTreeMap<String, ResourceKey>, errs: &mut Collector) {
        for (gv, entries) in self.enabled_by_group_version(keys) {
            let wildcards: Vec<&str> = entries
                .iter()
                .filter(|(_, k, _)| k.resource.is_none())
                .map(|(key, _, _)| *key)
                .collect();
            let explicit: Vec<&str> = entries
                .iter()
                .filter(|(_, k, _)| k.resource.is_some())
                .map(|(key, _, _)| *key)
                .collect();
            if !wildcards.is_empty() && !explicit.is_empty() {
                errs.push(
                    entry_path(wildcards[0]),
                    format!(
                        "a wildcard entry and explicit entries ({}) are all enabled for {gv}; a \
                         wildcard already routes the whole group/version, enable only one kind",
                        quoted_list(&explicit)
                    ),
                );
            }
            let (first_key, _, first) = entries[0];
            for (key, _, entry) in &entries[1..] {
                if as_written_target(entry) != as_written_target(first) {
                    errs.push(
                        format!("{}.targetVirtualCluster", entry_path(key)),
                        format!(
                            "differs from customResources['{first_key}'].targetVirtualCluster; all \
                             enabled entries of {gv} must name the same target, written the same \
                             way (defaults are not applied before comparing)"
                        ),
                    );
                }
                if written(&entry.access_resources) != written(&first.access_resources) {
                    errs.push(
                        format!("{}.accessResources", entry_path(key)),
                        format!(
                            "differs from customResources['{first_key}'].accessResources; all \
                             enabled entries of {gv} must have the same access mode, written the \
                             same way (defaults are not applied before comparing)"
                        ),
                    );
                }
            }
        }
        let Some(client_project) = self.client_project() else {
            return;
        };
        for (key, entry) in &self.custom_resources {
            if !entry.enabled {
                continue;
            }
            let target = entry.target_virtual_cluster.clone().unwrap_or_default();
            let Some(name) = written(&target.name) else {
                continue;
            };
            let project = written(&target.project).unwrap_or(client_project);
            let target_key = format!("{project}/{name}");
            if !self.targets.contains_key(&target_key) {
                errs.push(
                    format!("{}.targetVirtualCluster", entry_path(key)),
                    format!("target {target_key:?} is not defined in targets"),
                );
            }
        }
    }

    fn validate_ports(&self, keys: &BTreeMap<String, ResourceKey>, errs: &mut Collector) {
        let base = self.listeners.base_port.unwrap_or(DEFAULT_BASE_PORT);
        let count = self.enabled_by_group_version(keys).len();
        if base == 0 {
            errs.push("listeners.basePort", "must be from 1 to 65535");
        } else if count > 0 && usize::from(base) + count - 1 > usize::from(u16::MAX) {
            errs.push(
                "listeners.basePort",
                format!("{base} + {count} group/versions exceeds port 65535"),
            );
        }
        match (
            &self.listeners.serving_cert_file,
            &self.listeners.serving_key_file,
        ) {
            (Some(_), None) => errs.push(
                "listeners.servingKeyFile",
                "is required with servingCertFile",
            ),
            (None, Some(_)) => errs.push(
                "listeners.servingCertFile",
                "is required with servingKeyFile",
            ),
            _ => {}
        }
        if self.listeners.serving_ca_file.is_some() && self.listeners.serving_cert_file.is_none() {
            errs.push(
                "listeners.servingCaFile",
                "is only valid with servingCertFile and servingKeyFile",
            );
        }
        if let Some(address) = &self.metrics.address {
            match address.parse::<SocketAddr>() {
                Ok(addr) => {
                    let port = usize::from(addr.port());
                    if base != 0 && port >= usize::from(base) && port < usize::from(base) + count {
                        errs.push(
                            "metrics.address",
                            format!(
                                "port {port} is also a group/version listener port ({base}..{})",
                                usize::from(base) + count - 1
                            ),
                        );
                    }
                }
                Err(_) => errs.push(
                    "metrics.address",
                    format!("invalid value {address:?}: expected ip:port, e.g. 0.0.0.0:9099"),
                ),
            }
        }
    }

    /// Enabled entries with a valid key, grouped by `<group>/<version>`, sorted by that string;
    /// entries within a group sorted by key.
    pub(super) fn enabled_by_group_version<'a>(
        &'a self,
        keys: &'a BTreeMap<String, ResourceKey>,
    ) -> BTreeMap<String, Vec<(&'a str, &'a ResourceKey, &'a CustomResourceProxy)>> {
        let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for (key, entry) in &self.custom_resources {
            if !entry.enabled {
                continue;
            }
            if let Some(parsed) = keys.get(key) {
                out.entry(format!("{}/{}", parsed.group, parsed.version))
                    .or_default()
                    .push((key.as_str(), parsed, entry));
            }
        }
        out
    }
}

fn as_written_target(entry: &CustomResourceProxy) -> (Option<&str>, Option<&str>) {
    match &entry.target_virtual_cluster {
        Some(t) => (written(&t.name), written(&t.project)),
        None => (None, None),
    }
}

fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn parse_target_key(key: &str) -> Result<TargetRef, String> {
    let Some((project, name)) = key.split_once('/') else {
        return Err("expected <project>/<name>".to_owned());
    };
    if !is_dns1123_label(project) || !is_dns1123_label(name) {
        return Err(
            "expected <project>/<name>, both DNS labels (lower-case alphanumerics or '-')"
                .to_owned(),
        );
    }
    Ok(TargetRef {
        project: project.to_owned(),
        name: name.to_owned(),
    })
}

fn validate_target(key: &str, target: &TargetSection, errs: &mut Collector) {
    let path = target_path(key);
    if let Err(why) = parse_target_key(key) {
        errs.push(path.clone(), format!("invalid key {key:?}: {why}"));
    }
    match &target.peers {
        None => errs.push(format!("{path}.peers"), "is required"),
        Some(peers) => match (&peers.static_peers, &peers.endpoint_slice) {
            (Some(list), None) => {
                if list.is_empty() {
                    errs.push(
                        format!("{path}.peers.static"),
                        "must list at least one host:port",
                    );
                }
                for (i, peer) in list.iter().enumerate() {
                    if let Err(why) = parse_peer_address(peer) {
                        errs.push(
                            format!("{path}.peers.static[{i}]"),
                            format!("invalid value {peer:?}: {why}"),
                        );
                    }
                }
            }
            (None, Some(slice)) => {
                let p = format!("{path}.peers.endpointSlice");
                errs.required_path(format!("{p}.kubeconfig"), &slice.kubeconfig);
                match written(&slice.namespace) {
                    Some(ns) => errs.dns_label(format!("{p}.namespace"), ns),
                    None => errs.push(format!("{p}.namespace"), "is required"),
                }
                match written(&slice.service) {
                    Some(svc) => errs.dns_label(format!("{p}.service"), svc),
                    None => errs.push(format!("{p}.service"), "is required"),
                }
            }
            _ => errs.push(
                format!("{path}.peers"),
                "set exactly one of peers.static or peers.endpointSlice",
            ),
        },
    }
    match &target.tls {
        None => errs.push(format!("{path}.tls"), "is required (caFile and serverName)"),
        Some(tls) => {
            errs.required_path(format!("{path}.tls.caFile"), &tls.ca_file);
            if written(&tls.server_name).is_none() {
                errs.push(format!("{path}.tls.serverName"), "is required");
            }
        }
    }
    match &target.credential {
        None => errs.push(format!("{path}.credential"), "is required"),
        Some(cred) => {
            let p = format!("{path}.credential");
            let kinds = usize::from(cred.client_certificate.is_some())
                + usize::from(cred.token_file.is_some())
                + usize::from(cred.impersonate.is_some());
            if kinds != 1 {
                errs.push(
                    p.clone(),
                    "set exactly one of clientCertificate, tokenFile or impersonate",
                );
            }
            validate_base_credential(&p, &cred.client_certificate, &cred.token_file, errs);
            if let Some(imp) = &cred.impersonate {
                let ip = format!("{p}.impersonate");
                if usize::from(imp.client_certificate.is_some())
                    + usize::from(imp.token_file.is_some())
                    != 1
                {
                    errs.push(
                        ip.clone(),
                        "set exactly one privileged credential: clientCertificate or tokenFile",
                    );
                }
                validate_base_credential(&ip, &imp.client_certificate, &imp.token_file, errs);
                for (i, g) in imp.groups.iter().enumerate() {
                    if g.is_empty() {
                        errs.push(format!("{ip}.groups[{i}]"), "must not be empty");
                    }
                }
            }
        }
    }
}

fn validate_base_credential(
    path: &str,
    cert: &Option<ClientCertificateSection>,
    token: &Option<PathBuf>,
    errs: &mut Collector,
) {
    if let Some(cert) = cert {
        errs.required_path(
            format!("{path}.clientCertificate.certFile"),
            &cert.cert_file,
        );
        errs.required_path(format!("{path}.clientCertificate.keyFile"), &cert.key_file);
    }
    if token.is_some() {
        errs.required_path(format!("{path}.tokenFile"), token);
    }
}
