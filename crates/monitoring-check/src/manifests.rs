//! The queries of a monitoring directory (`deploy/<product>/monitoring/`): every expression of
//! its PrometheusRules, every panel target and query variable of its Grafana dashboards (`*.json`),
//! and the labels its PodMonitors and ServiceMonitors give the series at scrape time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One PromQL expression and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// File and item, for the report (`dashboard.json: panel "Requests by code"`).
    pub source: String,
    pub expr: String,
    /// Labels the query needs besides those in `expr` (a Grafana `label_values(expr, label)`).
    pub labels: Vec<String>,
}

/// What a monitoring directory queries and what its monitors add.
#[derive(Debug, Default, Clone)]
pub struct Monitoring {
    pub queries: Vec<Query>,
    /// Labels Prometheus attaches to every scraped series of these monitors: the target labels
    /// the Prometheus Operator sets and the monitors' relabelings' `targetLabel`s.
    pub scrape_labels: BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Parse(PathBuf, String),
    #[error("{0}: no PrometheusRule and no dashboard")]
    Empty(PathBuf),
}

/// Target labels the Prometheus Operator gives every series of a PodMonitor's targets.
const POD_MONITOR_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "container",
    "endpoint",
    "job",
    "instance",
];
/// ... and of a ServiceMonitor's.
const SERVICE_MONITOR_LABELS: &[&str] = &[
    "namespace",
    "service",
    "pod",
    "container",
    "endpoint",
    "job",
    "instance",
];

/// Reads `dir`: every `*.yaml` but `kustomization.yaml` (one object each), every `*.json`
/// (a dashboard each).
pub fn load(dir: &Path) -> Result<Monitoring, LoadError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LoadError::Io(dir.to_owned(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut m = Monitoring::default();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let read = || std::fs::read_to_string(&path).map_err(|e| LoadError::Io(path.clone(), e));
        let parse = |e: String| LoadError::Parse(path.clone(), e);
        if name.ends_with(".json") {
            let v: Value = serde_json::from_str(&read()?).map_err(|e| parse(e.to_string()))?;
            dashboard(&name, &v, &mut m.queries);
        } else if name.ends_with(".yaml") && name != "kustomization.yaml" {
            let v: Value = serde_saphyr::from_str(&read()?).map_err(|e| parse(e.to_string()))?;
            object(&name, &v, &mut m);
        }
    }
    if m.queries.is_empty() {
        return Err(LoadError::Empty(dir.to_owned()));
    }
    Ok(m)
}

fn object(file: &str, v: &Value, m: &mut Monitoring) {
    let spec = &v["spec"];
    match v["kind"].as_str() {
        Some("PrometheusRule") => {
            for group in spec["groups"].as_array().into_iter().flatten() {
                for rule in group["rules"].as_array().into_iter().flatten() {
                    let what = rule["alert"]
                        .as_str()
                        .map(|a| format!("alert {a}"))
                        .or_else(|| rule["record"].as_str().map(|r| format!("record {r}")))
                        .unwrap_or_default();
                    m.queries.push(Query {
                        source: format!("{file}: {what}"),
                        expr: rule["expr"].as_str().unwrap_or_default().to_owned(),
                        labels: Vec::new(),
                    });
                }
            }
        }
        Some(kind @ ("PodMonitor" | "ServiceMonitor")) => {
            let (defaults, endpoints) = if kind == "PodMonitor" {
                (POD_MONITOR_LABELS, "podMetricsEndpoints")
            } else {
                (SERVICE_MONITOR_LABELS, "endpoints")
            };
            m.scrape_labels
                .extend(defaults.iter().map(|l| (*l).to_owned()));
            for endpoint in spec[endpoints].as_array().into_iter().flatten() {
                for r in endpoint["relabelings"].as_array().into_iter().flatten() {
                    if let Some(t) = r["targetLabel"].as_str()
                        && !t.starts_with("__")
                    {
                        m.scrape_labels.insert(t.to_owned());
                    }
                }
            }
        }
        _ => {}
    }
}

fn dashboard(file: &str, v: &Value, out: &mut Vec<Query>) {
    fn panels(file: &str, list: &Value, out: &mut Vec<Query>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(Query {
                        source: format!("{file}: panel {title:?}"),
                        expr: expr.to_owned(),
                        labels: Vec::new(),
                    });
                }
            }
            // Collapsed rows hold their panels.
            panels(file, &p["panels"], out);
        }
    }
    panels(file, &v["panels"], out);
    for var in v["templating"]["list"].as_array().into_iter().flatten() {
        let query = var["query"]
            .as_str()
            .or_else(|| var["query"]["query"].as_str());
        if var["type"] == "query"
            && let Some(q) = query
            && let Some((expr, label)) = label_values(q)
        {
            out.push(Query {
                source: format!(
                    "{file}: variable {}",
                    var["name"].as_str().unwrap_or_default()
                ),
                expr: expr.to_owned(),
                labels: vec![label.to_owned()],
            });
        }
    }
}

/// Grafana's `label_values(<selector>, <label>)`: the selector and the label.
fn label_values(q: &str) -> Option<(&str, &str)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (expr, label) = inner.rsplit_once(',')?;
    Some((expr.trim(), label.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_splits_selector_and_label() {
        assert_eq!(
            label_values("label_values(a_total{x=\"1,2\"}, target)"),
            Some(("a_total{x=\"1,2\"}", "target"))
        );
        assert_eq!(label_values("label_values(target)"), None);
        assert_eq!(label_values("query_result(a)"), None);
    }

    #[test]
    fn rules_dashboards_and_monitors_are_read() {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path();
        std::fs::write(
            dir.join("rule.yaml"),
            "kind: PrometheusRule\nspec:\n  groups:\n  - rules:\n    - alert: A\n      expr: a_total > 0\n    - record: r\n      expr: sum(b)\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("pm.yaml"),
            "kind: PodMonitor\nspec:\n  podMetricsEndpoints:\n  - port: m\n    relabelings:\n    - {sourceLabels: [x], targetLabel: gateway}\n    - {sourceLabels: [y], targetLabel: __tmp}\n",
        )
        .unwrap();
        std::fs::write(dir.join("kustomization.yaml"), "kind: Component\n").unwrap();
        std::fs::write(
            dir.join("d.json"),
            r#"{"panels": [{"title": "P", "targets": [{"expr": "c"}]},
                           {"type": "row", "panels": [{"title": "Q", "targets": [{"expr": "d"}]}]}],
                "templating": {"list": [{"name": "t", "type": "query", "query": "label_values(e, target)"},
                                        {"name": "ds", "type": "datasource", "query": "prometheus"}]}}"#,
        )
        .unwrap();
        let m = load(dir).unwrap();
        let got: Vec<(&str, &str, Vec<String>)> = m
            .queries
            .iter()
            .map(|q| (q.source.as_str(), q.expr.as_str(), q.labels.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("d.json: panel \"P\"", "c", vec![]),
                ("d.json: panel \"Q\"", "d", vec![]),
                ("d.json: variable t", "e", vec!["target".to_owned()]),
                ("rule.yaml: alert A", "a_total > 0", vec![]),
                ("rule.yaml: record r", "sum(b)", vec![]),
            ]
        );
        assert!(m.scrape_labels.contains("gateway"));
        assert!(m.scrape_labels.contains("pod"));
        assert!(!m.scrape_labels.contains("__tmp"));
    }

    #[test]
    fn a_directory_without_queries_is_an_error() {
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("kustomization.yaml"), "kind: Component\n").unwrap();
        assert!(matches!(load(work.path()), Err(LoadError::Empty(_))));
    }
}
