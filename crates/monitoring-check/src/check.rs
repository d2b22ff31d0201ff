//! The comparison: every metric a query selects must be a series the scraped processes export,
//! and every label it matches, groups by or asks Grafana for must be on that series, either
//! from the process (seen on its samples) or from the scrape (the monitors' target labels).

use std::collections::BTreeSet;
use std::fmt;

use crate::exposition::Exposition;
use crate::manifests::Monitoring;
use crate::promql;

/// Something a query asks for that the processes do not export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Unparsable {
        source: String,
        error: String,
    },
    UnknownMetric {
        source: String,
        metric: String,
    },
    UnknownLabel {
        source: String,
        metric: String,
        label: String,
        exported: Vec<String>,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unparsable { source, error } => write!(f, "{source}: cannot parse: {error}"),
            Problem::UnknownMetric { source, metric } => {
                write!(f, "{source}: no series {metric} is exported")
            }
            Problem::UnknownLabel {
                source,
                metric,
                label,
                exported,
            } => write!(
                f,
                "{source}: {metric} has no label {label} (it has {exported:?} and the scrape's)"
            ),
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    /// Metrics that are exported but had no sample in the scrape, so their labels could not be
    /// checked: (source, metric, labels the query needs).
    pub unverified: Vec<(String, String, Vec<String>)>,
    /// Selectors checked.
    pub selectors: usize,
}

impl Report {
    /// The problems, one a line (empty when there are none).
    pub fn problems_text(&self) -> String {
        self.problems.iter().map(|p| format!("{p}\n")).collect()
    }
}

/// Checks every query of `monitoring` against `exported`.
pub fn check(monitoring: &Monitoring, exported: &Exposition) -> Report {
    let mut report = Report::default();
    for q in &monitoring.queries {
        let selectors = match promql::selectors(&q.expr) {
            Ok(s) => s,
            Err(e) => {
                report.problems.push(Problem::Unparsable {
                    source: q.source.clone(),
                    error: format!("{e} in {:?}", q.expr),
                });
                continue;
            }
        };
        for s in selectors {
            report.selectors += 1;
            if !exported.has_series(&s.metric) {
                report.problems.push(Problem::UnknownMetric {
                    source: q.source.clone(),
                    metric: s.metric,
                });
                continue;
            }
            let needed: BTreeSet<String> = s
                .labels()
                .into_iter()
                .chain(q.labels.iter().cloned())
                .filter(|l| !monitoring.scrape_labels.contains(l))
                .collect();
            match exported.labels(&s.metric) {
                None if !needed.is_empty() => report.unverified.push((
                    q.source.clone(),
                    s.metric,
                    needed.into_iter().collect(),
                )),
                None => {}
                Some(have) => {
                    for label in needed.difference(have) {
                        report.problems.push(Problem::UnknownLabel {
                            source: q.source.clone(),
                            metric: s.metric.clone(),
                            label: label.clone(),
                            exported: have.iter().cloned().collect(),
                        });
                    }
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::manifests::Query;

    /// What a process of the fixture exports: a counter with samples, a histogram with samples,
    /// a gauge, and a counter family nothing has touched.
    const METRICS: &str = "\
# HELP app_request Requests.
# TYPE app_request counter
app_request_total{target=\"t\",code=\"200\"} 3
# TYPE app_duration_seconds histogram
app_duration_seconds_bucket{verb=\"get\",le=\"0.1\"} 1
app_duration_seconds_bucket{verb=\"get\",le=\"+Inf\"} 1
app_duration_seconds_sum{verb=\"get\"} 0.05
app_duration_seconds_count{verb=\"get\"} 1
# TYPE app_inflight gauge
app_inflight 0
# TYPE app_failures counter
# EOF
";

    fn monitoring(exprs: &[&str]) -> Monitoring {
        Monitoring {
            queries: exprs
                .iter()
                .enumerate()
                .map(|(i, e)| Query {
                    source: format!("q{i}"),
                    expr: (*e).to_owned(),
                    labels: Vec::new(),
                })
                .collect(),
            scrape_labels: ["namespace", "pod"].map(str::to_owned).into(),
        }
    }

    fn problems(exprs: &[&str]) -> Vec<String> {
        let mut e = Exposition::default();
        e.add(METRICS);
        check(&monitoring(exprs), &e)
            .problems
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn queries_of_exported_series_and_labels_pass() {
        let none: Vec<String> = Vec::new();
        for expr in [
            "sum by (target, code) (rate(app_request_total{code=\"200\"}[5m]))",
            "histogram_quantile(0.99, sum by (le, verb) (rate(app_duration_seconds_bucket[5m])))",
            "sum(rate(app_duration_seconds_count[5m])) / sum(rate(app_duration_seconds_sum[5m]))",
            "sum by (namespace, pod) (app_inflight)",
        ] {
            assert_eq!(problems(&[expr]), none, "{expr}");
        }
    }

    #[test]
    fn a_panel_naming_a_metric_that_does_not_exist_fails() {
        let cases: &[(&str, &str)] = &[
            (
                "rate(app_requests_total[5m])",
                "q0: no series app_requests_total is exported",
            ),
            // A counter is stored with _total; the registered name alone is no series.
            (
                "rate(app_request[5m])",
                "q0: no series app_request is exported",
            ),
            // A histogram has no series under its bare name.
            (
                "app_duration_seconds",
                "q0: no series app_duration_seconds is exported",
            ),
            (
                "app_inflight_total",
                "q0: no series app_inflight_total is exported",
            ),
        ];
        for (expr, want) in cases {
            assert_eq!(problems(&[expr]), [*want], "{expr}");
        }
    }

    #[test]
    fn a_label_the_series_do_not_carry_fails() {
        assert_eq!(
            problems(&["sum by (verb) (rate(app_request_total[5m]))"]),
            [
                "q0: app_request_total has no label verb (it has [\"code\", \"target\"] and the scrape's)"
            ]
        );
        // `le` is on _bucket only.
        assert_eq!(
            problems(&["sum by (le) (app_duration_seconds_sum)"]).len(),
            1
        );
        assert_eq!(problems(&["app_inflight{gateway=\"x\"}"]).len(), 1);
        assert_eq!(
            problems(&["app_request_total{target=~\"a(\"}"]).len(),
            0,
            "values are not checked"
        );
        assert_eq!(problems(&["sum(rate(app_request_total[5m])"]).len(), 1);
    }

    #[test]
    fn labels_of_a_family_without_samples_are_reported_unverified() {
        let mut e = Exposition::default();
        e.add(METRICS);
        let r = check(
            &monitoring(&["sum by (reason) (rate(app_failures_total[5m]))"]),
            &e,
        );
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(
            r.unverified,
            [(
                "q0".to_owned(),
                "app_failures_total".to_owned(),
                vec!["reason".to_owned()]
            )]
        );
    }

    #[test]
    fn grafana_variables_need_their_label() {
        let mut m = monitoring(&[]);
        m.queries.push(Query {
            source: "var".into(),
            expr: "app_request_total".into(),
            labels: vec!["hostname".into()],
        });
        let mut e = Exposition::default();
        e.add(METRICS);
        assert_eq!(check(&m, &e).problems.len(), 1);
    }

    /// Cluster-free: every query shipped under deploy/ parses and names something (the e2e
    /// tests check them against the running processes).
    #[test]
    fn every_shipped_query_parses() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        for product in ["tunnel-gateway", "resource-proxy"] {
            let m = crate::manifests::load(&deploy.join(product).join("monitoring")).unwrap();
            let alerts = m
                .queries
                .iter()
                .filter(|q| q.source.contains("alert "))
                .count();
            let panels = m
                .queries
                .iter()
                .filter(|q| q.source.contains("panel "))
                .count();
            assert!(
                alerts >= 5 && panels >= 10,
                "{product}: {alerts} alerts, {panels} panels"
            );
            for q in &m.queries {
                let s = promql::selectors(&q.expr)
                    .unwrap_or_else(|e| panic!("{}: {e}: {}", q.source, q.expr));
                assert!(!s.is_empty(), "{}: selects nothing: {}", q.source, q.expr);
            }
        }
    }
}
