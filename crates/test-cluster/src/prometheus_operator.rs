//! The Prometheus Operator CRDs the monitoring manifests use (ServiceMonitor, PodMonitor,
//! PrometheusRule), at the version `scripts/fetch-prometheus-operator-crds.sh` pins, taken from
//! the operator's Go module and cached by version.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::Error;
use crate::binaries::run_script;

/// The directory holding the CRD YAML files (fetched once per process).
pub fn crd_dir() -> Result<PathBuf, Error> {
    static DIR: OnceLock<Result<PathBuf, Arc<Error>>> = OnceLock::new();
    DIR.get_or_init(|| run_script("fetch-prometheus-operator-crds.sh").map_err(Arc::new))
        .clone()
        .map_err(Error::Once)
}

/// Installs the CRDs and waits until they are established. Returns their names.
pub async fn install_crds(client: &kube::Client) -> Result<Vec<String>, Error> {
    let all = crate::manifests::yaml_dir(&crd_dir()?)?;
    crate::manifests::apply_crds_yaml(client, &all).await
}
