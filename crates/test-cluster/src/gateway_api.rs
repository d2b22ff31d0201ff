//! The Gateway API CRDs (standard channel) of the version the `gateway-api` crate tracks, taken
//! from the `sigs.k8s.io/gateway-api` Go module by `scripts/fetch-gateway-api-crds.sh`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use crate::Error;
use crate::binaries::repo_root;

/// The Gateway API release whose CRDs are installed.
pub const GATEWAY_API_VERSION: &str = "v1.5.1";

/// The directory holding the standard-channel CRD YAML files (fetched once per process).
pub fn crd_dir() -> Result<PathBuf, Error> {
    static DIR: OnceLock<Result<PathBuf, Arc<Error>>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = repo_root().join("scripts/fetch-gateway-api-crds.sh");
        let out = Command::new("bash")
            .arg(&script)
            .env("GATEWAY_API_VERSION", GATEWAY_API_VERSION)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| Arc::new(Error::io(&script, e)))?;
        if !out.status.success() {
            return Err(Arc::new(Error::Script {
                script,
                status: out.status,
            }));
        }
        Ok(PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim(),
        ))
    })
    .clone()
    .map_err(Error::Once)
}

/// Every standard-channel manifest, concatenated as one multi-document YAML.
pub fn standard_manifests() -> Result<String, Error> {
    crate::manifests::yaml_dir(&crd_dir()?)
}

/// Installs the Gateway API CRDs (and the upstream safe-upgrade admission policy) and waits
/// until the CRDs are established. Returns the CRD names.
pub async fn install_crds(client: &kube::Client) -> Result<Vec<String>, Error> {
    crate::manifests::apply_crds_yaml(client, &standard_manifests()?).await
}
