//! What a `/metrics` text exports: the series names Prometheus will store and the label names
//! seen on each. prometheus-client writes OpenMetrics text: a family is declared by
//! `# TYPE <name> <type>` with the name it was registered under (`cftunnel_reconcile`) and its
//! samples carry the type's suffixes (`cftunnel_reconcile_total`; a histogram's `_bucket` with
//! `le`, `_sum`, `_count`). prometheus-client (0.26) writes nothing for a family without
//! children yet: a series that only failures create is absent until one happened. Other
//! exporters declare such a family without samples: its names are known from the type, its
//! labels are not.

use std::collections::{BTreeMap, BTreeSet};

/// The series of one or more scrapes.
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    /// Series name → label names seen on its samples (empty set: declared, no sample yet).
    series: BTreeMap<String, BTreeSet<String>>,
    /// Series names that had at least one sample.
    sampled: BTreeSet<String>,
}

/// Suffixes of the samples of each OpenMetrics type (`""`: the family name itself).
fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_sum", "_count", "_created"],
        "gaugehistogram" => &["_bucket", "_gsum", "_gcount"],
        "summary" => &["", "_sum", "_count", "_created"],
        "info" => &["_info"],
        _ => &[""],
    }
}

impl Exposition {
    /// Adds the families and samples of one `/metrics` text.
    pub fn add(&mut self, text: &str) {
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    for suffix in suffixes(kind) {
                        self.series.entry(format!("{name}{suffix}")).or_default();
                    }
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let end = line
                .find(|c: char| c == '{' || c.is_whitespace())
                .unwrap_or(line.len());
            let name = &line[..end];
            let labels = self.series.entry(name.to_owned()).or_default();
            if line[end..].starts_with('{') {
                labels.extend(label_names(&line[end + 1..]));
            }
            self.sampled.insert(name.to_owned());
        }
    }

    /// Whether a series of this name is exported (declared or sampled).
    pub fn has_series(&self, name: &str) -> bool {
        self.series.contains_key(name)
    }

    /// The label names seen on the series' samples; `None` if it had no sample.
    pub fn labels(&self, name: &str) -> Option<&BTreeSet<String>> {
        self.sampled
            .contains(name)
            .then(|| self.series.get(name))
            .flatten()
    }
}

/// The label names of `a="x",b="y\"z"}` (the text after the opening brace).
fn label_names(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.starts_with('}') || rest.is_empty() {
            return names;
        }
        let Some(eq) = rest.find('=') else {
            return names;
        };
        names.push(rest[..eq].trim().to_owned());
        // Skip the quoted value, escapes included.
        let value = &rest[eq + 1..];
        let mut chars = value.char_indices().skip(1);
        let mut end = value.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &value[end..];
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
    struct Labels {
        verb: String,
        code: String,
    }

    /// The text prometheus-client itself writes for a counter family, a histogram family, a
    /// plain gauge and a family nothing has touched yet.
    fn exposition() -> Exposition {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        let duration =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new([0.1, 1.0]));
        let idle = Family::<Labels, Counter>::default();
        let inflight = Gauge::<i64>::default();
        registry.register("rp_request", "requests", requests.clone());
        registry.register("rp_request_duration_seconds", "latency", duration.clone());
        registry.register("rp_failures", "failures", idle);
        registry.register("rp_inflight", "in flight", inflight.clone());
        let l = Labels {
            verb: "get".into(),
            code: "a\"b,c=d".into(),
        };
        requests.get_or_create(&l).inc();
        duration.get_or_create(&l).observe(0.5);
        inflight.set(2);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let mut e = Exposition::default();
        e.add(&text);
        e
    }

    #[test]
    fn series_names_carry_the_suffixes_prometheus_client_writes() {
        let e = exposition();
        for (name, exported) in [
            ("rp_request_total", true),
            ("rp_request", false),
            ("rp_request_duration_seconds_bucket", true),
            ("rp_request_duration_seconds_sum", true),
            ("rp_request_duration_seconds_count", true),
            ("rp_request_duration_seconds", false),
            ("rp_inflight", true),
            ("rp_inflight_total", false),
            // Untouched: not written at all.
            ("rp_failures_total", false),
        ] {
            assert_eq!(e.has_series(name), exported, "{name}");
        }
    }

    #[test]
    fn labels_come_from_samples_and_an_untouched_family_has_none() {
        let e = exposition();
        let names = |n: &str| e.labels(n).map(|l| l.iter().cloned().collect::<Vec<_>>());
        assert_eq!(names("rp_request_total").unwrap(), ["code", "verb"]);
        assert_eq!(
            names("rp_request_duration_seconds_bucket").unwrap(),
            ["code", "le", "verb"]
        );
        assert_eq!(
            names("rp_request_duration_seconds_sum").unwrap(),
            ["code", "verb"]
        );
        assert_eq!(names("rp_inflight").unwrap(), Vec::<String>::new());
        assert_eq!(names("rp_failures_total"), None);
    }

    #[test]
    fn plain_prometheus_text_counts_too() {
        let mut e = Exposition::default();
        e.add("# TYPE x_total counter\nx_total{a=\"1\"} 3 1700000000\ny 1\n# TYPE z counter\n");
        assert!(e.has_series("x_total"));
        assert!(e.has_series("y"));
        assert_eq!(e.labels("x_total").unwrap().len(), 1);
        // Declared without samples: the name is exported, its labels unknown.
        assert!(e.has_series("z_total"));
        assert_eq!(e.labels("z_total"), None);
    }
}
