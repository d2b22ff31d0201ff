//! Test-only: the Helm charts under `charts/` as their tests use them. [`template`] renders a
//! chart with values (YAML, as a user's `-f values.yaml`) through the real `helm` (built by
//! `scripts/build-helm.sh`) and parses the objects; [`lint`] runs `helm lint --strict`. A chart
//! that refuses its values comes back as [`Error::Helm`] with helm's message, which names the
//! field.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The tunnel gateway's chart and the namespace its guide installs it into.
pub const TUNNEL_GATEWAY: Chart = Chart {
    name: "tunnel-gateway",
    namespace: "tunnel-gateway-system",
};
/// The resource proxy's chart (kube-system only).
pub const RESOURCE_PROXY: Chart = Chart {
    name: "resource-proxy",
    namespace: "kube-system",
};

/// A chart of this repository and the namespace it is rendered for.
#[derive(Debug, Clone, Copy)]
pub struct Chart {
    pub name: &'static str,
    pub namespace: &'static str,
}

impl Chart {
    /// `charts/<name>`.
    pub fn dir(&self) -> PathBuf {
        test_cluster::repo_root().join("charts").join(self.name)
    }

    /// The same chart rendered for another namespace.
    pub fn in_namespace(self, namespace: &'static str) -> Chart {
        Chart { namespace, ..self }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("helm: {0}")]
    Setup(#[from] test_cluster::Error),
    #[error("running helm: {0}")]
    Io(#[from] std::io::Error),
    /// helm refused (a schema violation, a failed template, a lint finding): its stderr.
    #[error("helm {args} failed: {stderr}")]
    Helm { args: String, stderr: String },
    #[error("parsing what helm rendered: {0}")]
    Parse(String),
}

/// Runs helm with `args` and `values` on stdin (`-f -`); stdout, or [`Error::Helm`].
fn helm(args: &[&str], values: &str) -> Result<String, Error> {
    let mut child = Command::new(test_cluster::helm()?)
        .args(args)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(values.as_bytes())?;
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Helm {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// `helm template` of `chart` with `values` (its CRDs included): the rendered objects.
pub fn template(chart: Chart, values: &str) -> Result<Vec<Value>, Error> {
    let dir = chart.dir();
    let yaml = helm(
        &[
            "template",
            chart.name,
            &dir.to_string_lossy(),
            "--namespace",
            chart.namespace,
            "--include-crds",
        ],
        values,
    )?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).map_err(|e| Error::Parse(e.to_string()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `helm lint --strict` of `chart` with `values`: its report.
pub fn lint(chart: Chart, values: &str) -> Result<String, Error> {
    let dir = chart.dir();
    helm(
        &[
            "lint",
            "--strict",
            &dir.to_string_lossy(),
            "--namespace",
            chart.namespace,
        ],
        values,
    )
}

/// The object of `kind` named `name` among `objects`, if rendered.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// Every Pod template among `objects` (Deployments, DaemonSets), by `kind/name`.
pub fn pod_templates(objects: &[Value]) -> Vec<(String, &Value)> {
    objects
        .iter()
        .filter(|o| o["spec"]["template"]["spec"].is_object())
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                ),
                &o["spec"]["template"]["spec"],
            )
        })
        .collect()
}
