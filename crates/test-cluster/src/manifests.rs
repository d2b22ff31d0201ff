//! Applies YAML manifests (one or many documents) with server-side apply, for any kind the
//! cluster serves, and waits for CRDs to be established.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

use crate::Error;

/// The field manager of everything the harness applies.
pub const FIELD_MANAGER: &str = "test-cluster";

/// Applies every document in `yaml`; namespaced objects without a namespace go to
/// `default_namespace`. Returns the applied objects.
pub async fn apply_yaml(
    client: &kube::Client,
    yaml: &str,
    default_namespace: &str,
) -> Result<Vec<DynamicObject>, Error> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| Error::Manifest(e.to_string()))?;
    let mut applied = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        applied.push(apply_value(client, doc, default_namespace).await?);
    }
    Ok(applied)
}

/// Applies one object given as JSON.
pub async fn apply_value(
    client: &kube::Client,
    doc: serde_json::Value,
    default_namespace: &str,
) -> Result<DynamicObject, Error> {
    let obj: DynamicObject =
        serde_json::from_value(doc.clone()).map_err(|e| Error::Manifest(e.to_string()))?;
    let types = obj
        .types
        .as_ref()
        .ok_or_else(|| Error::Manifest("a document has no apiVersion/kind".into()))?;
    let gvk = GroupVersionKind::try_from(types).map_err(|e| Error::Manifest(e.to_string()))?;
    let name = obj
        .metadata
        .name
        .clone()
        .ok_or_else(|| Error::Manifest(format!("a {} has no metadata.name", gvk.kind)))?;
    let (resource, caps) = discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            obj.metadata
                .namespace
                .as_deref()
                .unwrap_or(default_namespace),
            &resource,
        ),
    };
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(doc),
        )
        .await?)
}

/// Waits until every named CRD reports `Established=True`.
pub async fn wait_crds_established(
    client: &kube::Client,
    names: &[String],
    timeout: Duration,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    for name in names {
        loop {
            let established = api
                .get_opt(name)
                .await?
                .and_then(|crd| crd.status)
                .and_then(|s| s.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Manifest(format!(
                    "CRD {name} not established after {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Every `*.yaml` file of `dir` except `kustomization.yaml`, in name order, as one
/// multi-document YAML.
pub fn yaml_dir(dir: &std::path::Path) -> Result<String, Error> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    let mut all = String::new();
    for f in files {
        all.push_str(&std::fs::read_to_string(&f).map_err(|e| Error::io(&f, e))?);
        all.push_str("\n---\n");
    }
    Ok(all)
}

/// Applies YAML and waits for the CRDs among it to be established.
pub async fn apply_crds_yaml(client: &kube::Client, yaml: &str) -> Result<Vec<String>, Error> {
    let applied = apply_yaml(client, yaml, "default").await?;
    let crds: Vec<String> = applied
        .iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
        })
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    wait_crds_established(client, &crds, Duration::from_secs(30)).await?;
    Ok(crds)
}

/// `to` relative to `from` (both absolute): kustomize refuses absolute component paths.
pub fn relative_path(from: &std::path::Path, to: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut rel = std::path::PathBuf::new();
    for c in from.components() {
        if matches!(c, Component::Normal(_)) {
            rel.push("..");
        }
    }
    for c in to.components() {
        if let Component::Normal(n) = c {
            rel.push(n);
        }
    }
    rel
}

/// A kustomization in a temporary directory: the bases `resources` with the kustomize
/// `components` (absolute paths of directories), as a user composes an opt-in component.
pub fn kustomization_with(
    resources: &[&std::path::Path],
    components: &[&std::path::Path],
) -> Result<tempfile::TempDir, Error> {
    let work = tempfile::tempdir().map_err(|e| Error::io(&std::env::temp_dir(), e))?;
    let dir = work
        .path()
        .canonicalize()
        .map_err(|e| Error::io(work.path(), e))?;
    let list = |paths: &[&std::path::Path]| -> String {
        paths
            .iter()
            .map(|p| format!("- {}\n", relative_path(&dir, p).display()))
            .collect()
    };
    let file = dir.join("kustomization.yaml");
    std::fs::write(
        &file,
        format!(
            "resources:\n{}components:\n{}",
            list(resources),
            list(components)
        ),
    )
    .map_err(|e| Error::io(&file, e))?;
    Ok(work)
}
