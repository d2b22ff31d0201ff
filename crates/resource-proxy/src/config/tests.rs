//! The configuration from YAML text to the resolved view and the `check-config` output.

use std::path::PathBuf;

use super::validate::parse_peer_address;
use super::*;

const TARGETS: &str = r#"
targets:
  default/target:
    peers:
      static: ["127.0.0.1:6443"]
    tls:
      caFile: /ca.crt
      serverName: kubernetes.default.svc
    credential:
      tokenFile: /token
  other/target-b:
    peers:
      static: ["127.0.0.1:7443"]
    tls:
      caFile: /ca.crt
      serverName: kubernetes.default.svc
    credential:
      tokenFile: /token
"#;

fn with_resources(resources: &str) -> String {
    format!(
        "client:\n  name: client-a\n  project: default\n  kubeconfig: /kc\n{TARGETS}\ncustomResources:\n{resources}"
    )
}

fn errors(yaml: &str) -> Vec<FieldError> {
    match ConfigFile::from_yaml(yaml).unwrap().validate() {
        Ok(()) => Vec::new(),
        Err(e) => e.0,
    }
}

fn error_paths(yaml: &str) -> Vec<String> {
    errors(yaml).into_iter().map(|e| e.path).collect()
}

fn resolved(yaml: &str) -> Config {
    Config::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn example_config_in_deploy_parses_and_resolves() {
    let config = resolved(include_str!(
        "../../../../deploy/resource-proxy/example-config.yaml"
    ));
    assert_eq!(
        config.client.target_user(),
        "loft:vcluster:p-default:client-a"
    );
    let got: Vec<(String, u16, &Resources, AccessMode)> = config
        .listeners
        .iter()
        .map(|l| (l.group_version(), l.port, &l.resources, l.access))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "example.com/v1".to_owned(),
                9100,
                &Resources::Named(vec!["gadgets".into(), "widgets".into()]),
                AccessMode::Owned
            ),
            (
                "reports.example.com/v1alpha1".to_owned(),
                9101,
                &Resources::Wildcard,
                AccessMode::All
            ),
        ]
    );
}

#[test]
fn valid_minimal_config_resolves_with_defaults() {
    let config = resolved(&with_resources(
        "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster:\n      name: target\n",
    ));
    assert_eq!(config.client.project_namespace, "p-default");
    assert_eq!(
        config.client_cluster,
        ClusterAccess::Kubeconfig("/kc".into())
    );
    assert_eq!(config.metrics_address, DEFAULT_METRICS_ADDRESS);
    assert_eq!(config.serving, None);
    let l = &config.listeners[0];
    assert_eq!(l.group_version(), "example.com/v1");
    assert_eq!(l.port, 9100);
    assert_eq!(l.address().to_string(), "127.0.0.1:9100");
    assert_eq!(l.access, AccessMode::Owned);
    assert_eq!(
        l.target,
        TargetRef {
            project: "default".into(),
            name: "target".into()
        }
    );
    assert_eq!(l.resources, Resources::Named(vec!["widgets".into()]));
}

#[test]
fn project_namespace_can_be_set() {
    let yaml = with_resources("  {}\n").replace(
        "  project: default\n",
        "  project: default\n  projectNamespace: loft-p-default\n",
    );
    let config = resolved(&yaml);
    assert_eq!(
        config.client.target_user(),
        "loft:vcluster:loft-p-default:client-a"
    );
}

#[test]
fn ports_follow_the_alphabetical_order_of_group_versions() {
    let yaml = with_resources(
        "  zebras.zoo.io/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v2:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 gadgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 off.aaa.io/v1:\n    enabled: false\n    targetVirtualCluster: {name: target}\n",
    );
    let config = resolved(&yaml);
    let got: Vec<(String, u16)> = config
        .listeners
        .iter()
        .map(|l| (l.group_version(), l.port))
        .collect();
    assert_eq!(
        got,
        vec![
            ("example.com/v1".to_owned(), 9100),
            ("example.com/v2".to_owned(), 9101),
            ("zoo.io/v1".to_owned(), 9102),
        ]
    );
    assert_eq!(
        config.listeners[0].resources,
        Resources::Named(vec!["gadgets".into(), "widgets".into()])
    );
}

#[test]
fn ports_sort_by_the_group_version_string() {
    // '.' sorts before '/', so example.com.au/v1 comes before example.com/v1.
    let yaml = with_resources(
        "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 a.example.com.au/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
    );
    let config = resolved(&yaml);
    assert_eq!(config.listeners[0].group_version(), "example.com.au/v1");
    assert_eq!(config.listeners[1].group_version(), "example.com/v1");
}

#[test]
fn base_port_is_configurable() {
    let yaml = format!(
        "{}listeners:\n  basePort: 20000\n",
        with_resources(
            "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n"
        )
    );
    assert_eq!(resolved(&yaml).listeners[0].port, 20000);
}

#[test]
fn wildcard_entry_resolves_to_wildcard_resources() {
    let config = resolved(&with_resources(
        "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
    ));
    assert_eq!(config.listeners[0].resources, Resources::Wildcard);
}

#[test]
fn only_the_resources_of_enabled_entries_are_routed_and_a_wildcard_routes_all() {
    let config = resolved(&with_resources(
        "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
         \x20 gadgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
         \x20 sprockets.example.com/v1:\n    enabled: false\n    targetVirtualCluster: {name: target}\n\
         \x20 '*.other.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
    ));
    let named = &config.listeners[0].resources;
    let wildcard = &config.listeners[1].resources;
    for (resource, routed_by_named) in [
        ("widgets", true),
        ("gadgets", true),
        ("widgets/status", true),
        ("widgets/scale", true),
        ("gadgets/status", true),
        // A disabled entry routes nothing.
        ("sprockets", false),
        ("sprockets/status", false),
        // Exact plurals only: no singular, prefix, kind or case variant.
        ("widget", false),
        ("widgetsx", false),
        ("Widgets", false),
        ("Widget", false),
        ("", false),
        ("namespaces", false),
        // A subresource named like a routed resource does not route its parent.
        ("sprockets/widgets", false),
    ] {
        assert_eq!(named.routes(resource), routed_by_named, "{resource}");
        assert!(wildcard.routes(resource), "wildcard: {resource}");
    }
}

#[test]
fn target_project_defaults_to_the_client_project_and_access_all_is_kept() {
    let config = resolved(&with_resources(
        "  widgets.example.com/v1:\n    enabled: true\n    accessResources: all\n    targetVirtualCluster: {name: target-b, project: other}\n",
    ));
    assert_eq!(config.listeners[0].target.to_string(), "other/target-b");
    assert_eq!(config.listeners[0].access, AccessMode::All);
}

#[test]
fn bad_key_shapes_are_rejected_naming_the_key() {
    for key in [
        "widgets.example.com",
        "widgets/v1",
        "widgets.example.com/v1/x",
        ".example.com/v1",
        "widgets.example.com/",
        "Widgets.example.com/v1",
        "widgets.Example.com/v1",
        "widgets.example.com/1v",
        "widgets.*.com/v1",
    ] {
        let errs = errors(&with_resources(&format!(
            "  '{key}':\n    targetVirtualCluster: {{name: target}}\n"
        )));
        assert_eq!(errs.len(), 1, "{key}: {errs:?}");
        assert_eq!(errs[0].path, format!("customResources['{key}']"));
        assert!(
            errs[0]
                .message
                .contains("expected format 'resource.group/version'"),
            "{}",
            errs[0].message
        );
    }
}

#[test]
fn missing_target_name_is_rejected_even_when_disabled() {
    let paths = error_paths(&with_resources(
        "  widgets.example.com/v1:\n    enabled: false\n  gadgets.example.com/v1:\n    targetVirtualCluster: {project: default}\n",
    ));
    assert_eq!(
        paths,
        vec![
            "customResources['gadgets.example.com/v1'].targetVirtualCluster.name",
            "customResources['widgets.example.com/v1'].targetVirtualCluster.name",
        ]
    );
}

#[test]
fn target_name_and_project_must_be_dns_labels() {
    let errs = errors(&with_resources(
        "  widgets.example.com/v1:\n    targetVirtualCluster: {name: Target_1, project: 'a.b'}\n",
    ));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "customResources['widgets.example.com/v1'].targetVirtualCluster.name",
            "customResources['widgets.example.com/v1'].targetVirtualCluster.project",
        ]
    );
    assert!(errs[0].message.contains("\"Target_1\""));
}

#[test]
fn bad_access_mode_is_rejected() {
    let errs = errors(&with_resources(
        "  widgets.example.com/v1:\n    accessResources: mine\n    targetVirtualCluster: {name: target}\n",
    ));
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs[0].to_string(),
        "customResources['widgets.example.com/v1'].accessResources: invalid value \"mine\", must be 'owned' or 'all'"
    );
}

#[test]
fn scope_marks_named_resources_cluster_scoped_and_is_checked() {
    let config = resolved(&with_resources(
        "  regions.example.com/v1:\n    enabled: true\n    scope: Cluster\n    targetVirtualCluster: {name: target}\n\
         \x20 widgets.example.com/v1:\n    enabled: true\n    scope: Namespaced\n    targetVirtualCluster: {name: target}\n\
         \x20 gadgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
    ));
    assert_eq!(config.listeners[0].cluster_scoped, ["regions"]);
    assert!(
        render_listeners(&config)
            .contains("resources:  gadgets, regions (cluster-scoped), widgets")
    );

    let errs = errors(&with_resources(
        "  regions.example.com/v1:\n    scope: cluster\n    targetVirtualCluster: {name: target}\n\
         \x20 '*.other.com/v1':\n    scope: Cluster\n    targetVirtualCluster: {name: target}\n",
    ));
    let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "customResources['*.other.com/v1'].scope: is only valid on an entry that names its \
             resource: a wildcard entry takes every resource's scope from the target's discovery",
            "customResources['regions.example.com/v1'].scope: invalid value \"cluster\", must be \
             'Namespaced' or 'Cluster'",
        ]
    );
}

#[test]
fn wildcard_and_explicit_enabled_for_one_group_version_is_rejected() {
    let errs = errors(&with_resources(
        "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
    ));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "customResources['*.example.com/v1']");
    assert!(errs[0].message.contains("'widgets.example.com/v1'"));
}

#[test]
fn wildcard_and_explicit_are_fine_when_one_is_disabled_or_versions_differ() {
    assert!(errors(&with_resources(
            "  '*.example.com/v1':\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v1:\n    enabled: false\n    targetVirtualCluster: {name: target}\n\
             \x20 widgets.example.com/v2:\n    enabled: true\n    targetVirtualCluster: {name: target}\n",
        ))
        .is_empty());
}

#[test]
fn enabled_entries_disagreeing_on_target_are_rejected() {
    let paths = error_paths(&with_resources(
        "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target-b, project: other}\n",
    ));
    assert_eq!(
        paths,
        vec!["customResources['b.example.com/v1'].targetVirtualCluster"]
    );
}

#[test]
fn entries_are_compared_as_written_before_defaults() {
    // Same effective target and mode, written differently: both differences are errors.
    let paths = error_paths(&with_resources(
        "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    enabled: true\n    accessResources: owned\n    targetVirtualCluster: {name: target, project: default}\n",
    ));
    assert_eq!(
        paths,
        vec![
            "customResources['b.example.com/v1'].targetVirtualCluster",
            "customResources['b.example.com/v1'].accessResources",
        ]
    );
}

#[test]
fn disabled_entries_may_disagree() {
    assert!(errors(&with_resources(
            "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 b.example.com/v1:\n    accessResources: all\n    targetVirtualCluster: {name: target-b}\n",
        ))
        .is_empty());
}

#[test]
fn enabled_entry_target_must_be_defined() {
    let errs = errors(&with_resources(
        "  a.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: missing}\n\
             \x20 b.example.com/v2:\n    enabled: false\n    targetVirtualCluster: {name: missing-too}\n",
    ));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(
        errs[0].to_string(),
        "customResources['a.example.com/v1'].targetVirtualCluster: target \"default/missing\" is not defined in targets"
    );
}

#[test]
fn all_errors_are_returned_at_once() {
    let yaml = "client:\n  name: Bad_Name\ncustomResources:\n  bad-key:\n    accessResources: x\n\
                    targets:\n  nope:\n    peers: {static: ['a:b']}\n";
    let paths = error_paths(yaml);
    assert_eq!(
        paths,
        vec![
            "client.name",
            "client.project",
            "client",
            "customResources['bad-key']",
            "customResources['bad-key'].targetVirtualCluster.name",
            "customResources['bad-key'].accessResources",
            "targets['nope']",
            "targets['nope'].peers.static[0]",
            "targets['nope'].tls",
            "targets['nope'].credential",
        ]
    );
    let text = ConfigFile::from_yaml(yaml)
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with("invalid configuration (10 errors):"),
        "{text}"
    );
}

#[test]
fn client_needs_exactly_one_way_to_reach_the_cluster() {
    let both = with_resources("  {}\n").replace(
        "  kubeconfig: /kc\n",
        "  kubeconfig: /kc\n  inCluster: true\n",
    );
    assert_eq!(error_paths(&both), vec!["client"]);
    let in_cluster = with_resources("  {}\n").replace("  kubeconfig: /kc\n", "  inCluster: true\n");
    assert_eq!(
        resolved(&in_cluster).client_cluster,
        ClusterAccess::InCluster
    );
}

#[test]
fn unknown_keys_are_parse_errors() {
    let err = ConfigFile::from_yaml("client:\n  nmae: x\n").unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err}");
    assert!(err.to_string().contains("nmae"), "{err}");
}

#[test]
fn target_sections_are_validated() {
    let yaml = "client: {name: c, project: p, inCluster: true}\ntargets:\n  p/t:\n    peers:\n      static: []\n      endpointSlice: {namespace: ns}\n    tls: {serverName: x}\n    credential:\n      tokenFile: /t\n      clientCertificate: {certFile: /c}\n  p/u:\n    peers:\n      endpointSlice: {namespace: NS}\n    tls: {caFile: /ca}\n    credential:\n      impersonate:\n        groups: ['']\n";
    let paths = error_paths(yaml);
    assert_eq!(
        paths,
        vec![
            "targets['p/t'].peers",
            "targets['p/t'].tls.caFile",
            "targets['p/t'].credential",
            "targets['p/t'].credential.clientCertificate.keyFile",
            "targets['p/u'].peers.endpointSlice.kubeconfig",
            "targets['p/u'].peers.endpointSlice.namespace",
            "targets['p/u'].peers.endpointSlice.service",
            "targets['p/u'].tls.serverName",
            "targets['p/u'].credential.impersonate",
            "targets['p/u'].credential.impersonate.groups[0]",
        ]
    );
}

#[test]
fn peer_addresses_are_parsed() {
    assert_eq!(
        parse_peer_address("[::1]:6443").unwrap().to_string(),
        "[::1]:6443"
    );
    assert_eq!(
        parse_peer_address("api.example.com:443").unwrap(),
        PeerAddress {
            host: "api.example.com".into(),
            port: 443
        }
    );
    for bad in [
        "::1:6443",
        "host",
        "host:0",
        "host:70000",
        "[zz]:1",
        "bad_host:1",
        ":1",
    ] {
        assert!(parse_peer_address(bad).is_err(), "{bad}");
    }
}

#[test]
fn endpoint_slice_and_impersonation_resolve() {
    let yaml = "client: {name: c, project: p, inCluster: true}\ncustomResources:\n  w.example.com/v1: {enabled: true, targetVirtualCluster: {name: t}}\ntargets:\n  p/t:\n    peers:\n      endpointSlice: {kubeconfig: /host.kc, namespace: vc-t, service: t}\n    tls: {caFile: /ca, serverName: t.vc-t}\n    credential:\n      impersonate:\n        tokenFile: /admin-token\n        groups: [system:authenticated]\n";
    let config = resolved(yaml);
    let target = &config.targets[&TargetRef {
        project: "p".into(),
        name: "t".into(),
    }];
    assert_eq!(
        target.peers,
        PeerSource::EndpointSlice {
            kubeconfig: "/host.kc".into(),
            namespace: "vc-t".into(),
            service: "t".into(),
            port_name: "https".into(),
        }
    );
    assert_eq!(
        target.credential,
        Credential::Impersonate {
            using: BaseCredential::TokenFile("/admin-token".into()),
            user: "loft:vcluster:p-p:c".into(),
            groups: vec!["system:authenticated".into()],
        }
    );
}

#[test]
fn listener_ports_must_fit_and_not_collide_with_metrics() {
    let base = with_resources(
        "  a.example.com/v1: {enabled: true, targetVirtualCluster: {name: target}}\n\
             \x20 a.example.com/v2: {enabled: true, targetVirtualCluster: {name: target}}\n",
    );
    assert_eq!(
        error_paths(&format!("{base}listeners:\n  basePort: 65535\n")),
        vec!["listeners.basePort"]
    );
    assert_eq!(
        error_paths(&format!("{base}metrics:\n  address: 127.0.0.1:9101\n")),
        vec!["metrics.address"]
    );
    assert_eq!(
        error_paths(&format!("{base}metrics:\n  address: localhost\n")),
        vec!["metrics.address"]
    );
    assert_eq!(
        error_paths(&format!("{base}listeners:\n  servingCertFile: /c\n")),
        vec!["listeners.servingKeyFile"]
    );
    assert_eq!(
        error_paths(&format!("{base}listeners:\n  servingCaFile: /ca\n")),
        vec!["listeners.servingCaFile"]
    );
    let files = format!(
        "{base}listeners:\n  servingCertFile: /c\n  servingKeyFile: /k\n  servingCaFile: /ca\n"
    );
    assert_eq!(
        resolved(&files).serving.and_then(|s| s.ca_file),
        Some(PathBuf::from("/ca"))
    );
}

#[test]
fn render_lists_every_listener_with_port_and_wiring() {
    let config = resolved(&with_resources(
        "  widgets.example.com/v1:\n    enabled: true\n    targetVirtualCluster: {name: target}\n\
             \x20 '*.other.io/v1beta1':\n    enabled: true\n    accessResources: all\n    targetVirtualCluster: {name: target}\n",
    ));
    let text = render_listeners(&config);
    assert!(
        text.contains("target identity: loft:vcluster:p-default:client-a"),
        "{text}"
    );
    assert!(text.contains("listeners: 2"), "{text}");
    assert!(
            text.contains(
                "example.com/v1\n  listen:     127.0.0.1:9100\n  resources:  widgets\n  target:     default/target\n  access:     owned\n"
            ),
            "{text}"
        );
    assert!(
        text.contains("other.io/v1beta1\n  listen:     127.0.0.1:9101\n  resources:  * "),
        "{text}"
    );
    assert!(
        text.contains(
            "  apiservice: v1beta1.other.io\n  service:    kube-system/proxy-other-io-v1beta1\n"
        ),
        "{text}"
    );
}

#[test]
fn render_says_when_nothing_is_enabled() {
    let config = resolved(&with_resources("  {}\n"));
    assert!(render_listeners(&config).contains("listeners: none"));
}
