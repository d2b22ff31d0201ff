//! The `check-config` output.

use super::names;
use super::resolved::{Config, Resources};

/// Text for `resource-proxy check-config FILE`: the client, the expected target identity, and
/// every listener with its port, resources, target, access mode and wiring names.
pub fn render_listeners(config: &Config) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &config.client;
    let _ = writeln!(
        out,
        "client: {} (project {}, project namespace {})",
        c.name, c.project, c.project_namespace
    );
    let _ = writeln!(out, "target identity: {}", c.target_user());
    let _ = writeln!(out, "metrics: {}", config.metrics_address);
    if config.listeners.is_empty() {
        let _ = writeln!(
            out,
            "listeners: none (no enabled customResources entry; the proxy would not start)"
        );
        return out;
    }
    let _ = writeln!(out, "listeners: {}", config.listeners.len());
    for l in &config.listeners {
        let resources = match &l.resources {
            Resources::Wildcard => "* (every resource the target serves)".to_owned(),
            Resources::Named(names) => names
                .iter()
                .map(|n| {
                    if l.cluster_scoped.contains(n) {
                        format!("{n} (cluster-scoped)")
                    } else {
                        n.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", l.group_version());
        let _ = writeln!(out, "  listen:     {}", l.address());
        let _ = writeln!(out, "  resources:  {resources}");
        let _ = writeln!(out, "  target:     {}", l.target);
        let _ = writeln!(out, "  access:     {}", l.access.as_str());
        let _ = writeln!(out, "  entries:    {}", l.entries.join(", "));
        let _ = writeln!(
            out,
            "  apiservice: {}",
            names::api_service_name(&l.group, &l.version)
        );
        let _ = writeln!(
            out,
            "  service:    {}/{}",
            names::SERVICE_NAMESPACE,
            names::service_name(&l.group, &l.version)
        );
    }
    out
}
