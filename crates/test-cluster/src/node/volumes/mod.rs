//! A Pod's volumes and a container's mounts.
//!
//! [`prepare`] writes every volume of a Pod into a directory of its own under the Pod's state
//! directory: Secret, ConfigMap and downwardAPI volumes, projected volumes (Secrets, ConfigMaps,
//! the downward API, ServiceAccount tokens from the TokenRequest API bound to the Pod) and
//! emptyDirs. [`plan`] turns a container's `volumeMounts` and `workingDir` into the steps its
//! process takes between fork and exec ([`mounts::MountPlan::apply`]): a mount namespace of its own
//! (`unshare(CLONE_NEWNS)`, `/` made recursively private), then bind mounts of the volume
//! directories, so the host's mount table never changes.
//!
//! A `mountPath` (or `workingDir`) that does not exist on the host is not created on the host.
//! Its nearest existing ancestor `A` is shadowed instead: a harness-owned directory `S` gets an
//! entry for each entry of `A` (a recursive bind mount of each directory, a bind mount of each
//! file, a copy of each symlink) plus the missing directories, and `S` is bind-mounted over `A`
//! (for `A = /` the process `chroot`s into `S`). So the container sees every host file it would
//! have seen, and the new mount point; the host sees nothing.
//!
//! A container from an image runs in the image's root instead (`image_root`): mount points
//! are created in that per-container copy, the host's `/proc` and `/dev` are bound into it with
//! the volumes, then the process `chroot`s into it; `workingDir` is a path inside the image.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::Api;
use kube::api::PostParams;

use super::env::source;

mod mounts;

pub(super) use mounts::plan;

/// The mode of a projected file when the volume sets none (the API's default, 0644).
const DEFAULT_MODE: i32 = 0o644;

/// Where the ServiceAccount's token, `ca.crt` and `namespace` are mounted, as the
/// ServiceAccount admission plugin would mount its `kube-api-access-*` volume.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The node's own volumes, named so no Pod volume (a DNS label) can take their names.
const API_ACCESS: &str = "kube-api-access:node";
const ETC_HOSTS: &str = "etc-hosts:node";

/// A Pod's prepared volumes: volume name → its directory on the host.
pub(super) struct Volumes {
    volumes: BTreeMap<String, Prepared>,
    /// Mounts every container gets unless it mounts something at that path itself:
    /// (mountPath, volume, subPath).
    implicit: Vec<(&'static str, &'static str, &'static str)>,
}

struct Prepared {
    dir: PathBuf,
    /// Secret, ConfigMap, downwardAPI and projected volumes are always mounted read-only.
    read_only: bool,
}

/// One file of a volume: its path in the volume, content and mode.
struct VolumeFile {
    path: String,
    data: Vec<u8>,
    mode: i32,
}

/// What the Pod's volumes are made of, read from the API.
pub(super) struct Sources<'a> {
    pub client: &'a kube::Client,
    pub pod: &'a Pod,
    /// A downward API `fieldRef` (as for environment variables).
    pub field: &'a (dyn Fn(&str) -> Result<String, String> + Sync),
    /// The cluster's CA certificate (PEM), for the ServiceAccount's `ca.crt`.
    pub api_ca: &'a str,
    /// The node's extra `/etc/hosts` entries.
    pub hosts: &'a BTreeMap<String, std::net::IpAddr>,
}

/// Writes every volume of the Pod under `root` (`root/<volume>`), replacing what an earlier
/// Pod of the same name left. The error is the kubelet's `FailedMount` message.
pub(super) async fn prepare(sources: &Sources<'_>, root: &Path) -> Result<Volumes, String> {
    let (contents, automounted) = contents(sources).await?;
    let mut volumes = BTreeMap::new();
    for (name, files, read_only) in contents {
        let dir = root.join(&name);
        let written = match &files {
            Some(files) => write_volume(&dir, files),
            None => write_volume(&dir, &[]),
        };
        written.map_err(|e| format!("MountVolume.SetUp failed for volume {name:?} : {e}"))?;
        volumes.insert(name, Prepared { dir, read_only });
    }
    let mut implicit = Vec::new();
    if automounted {
        implicit.push((SERVICE_ACCOUNT_DIR, API_ACCESS, ""));
    }
    implicit.push(("/etc/hosts", ETC_HOSTS, "hosts"));
    Ok(Volumes { volumes, implicit })
}

/// Brings the prepared volumes up to date with their sources (a changed Secret or ConfigMap, a
/// fresh token), file by file in place, so directory mounts see the change (a `subPath` mount
/// keeps the file it mounted, as with the kubelet). On error nothing is changed.
pub(super) async fn refresh(sources: &Sources<'_>, volumes: &Volumes) -> Result<(), String> {
    let (contents, _) = contents(sources).await?;
    for (name, files, _) in contents {
        if let (Some(files), Some(prepared)) = (files, volumes.volumes.get(&name)) {
            update_volume(&prepared.dir, &files)
                .map_err(|e| format!("MountVolume.SetUp failed for volume {name:?} : {e}"))?;
        }
    }
    Ok(())
}

/// Every volume's files (`None` for an emptyDir) and whether it is read-only, the node's own
/// (`/etc/hosts`, the ServiceAccount's files) included; and whether the latter are mounted.
#[allow(clippy::type_complexity)]
async fn contents(
    sources: &Sources<'_>,
) -> Result<(Vec<(String, Option<Vec<VolumeFile>>, bool)>, bool), String> {
    let mut contents = Vec::new();
    let declared = sources
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    for volume in &declared {
        let files = render(sources, volume).await.map_err(|e| {
            format!(
                "MountVolume.SetUp failed for volume {:?} : {e}",
                volume.name
            )
        })?;
        let read_only = files.is_some();
        contents.push((volume.name.clone(), files, read_only));
    }
    let automounted = automount(sources).await?;
    if automounted {
        let failed =
            |e: String| format!("MountVolume.SetUp failed for volume {API_ACCESS:?} : {e}");
        let token = token(sources, None, None).await.map_err(failed)?;
        let namespace = sources.pod.metadata.namespace.clone().unwrap_or_default();
        let file = |path: &str, data: String| VolumeFile {
            path: path.to_owned(),
            data: data.into_bytes(),
            mode: DEFAULT_MODE,
        };
        let files = vec![
            file("token", token),
            file("ca.crt", sources.api_ca.to_owned()),
            file("namespace", namespace),
        ];
        contents.push((API_ACCESS.to_owned(), Some(files), true));
    }
    contents.push((ETC_HOSTS.to_owned(), Some(vec![etc_hosts(sources)?]), false));
    Ok((contents, automounted))
}

/// Whether the Pod gets its ServiceAccount's token: the Pod's `automountServiceAccountToken`,
/// else the ServiceAccount's, else yes.
async fn automount(sources: &Sources<'_>) -> Result<bool, String> {
    let spec = sources.pod.spec.as_ref();
    if let Some(automount) = spec.and_then(|s| s.automount_service_account_token) {
        return Ok(automount);
    }
    let namespace = sources
        .pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default();
    let account = spec
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(sources.client.clone(), namespace);
    match api.get_opt(&account).await {
        Ok(Some(sa)) => Ok(sa.automount_service_account_token.unwrap_or(true)),
        Ok(None) => Err(format!(
            "MountVolume.SetUp failed for volume {API_ACCESS:?} : serviceaccount {account:?} not found"
        )),
        Err(e) => Err(format!("reading serviceaccount {account:?}: {e}")),
    }
}

/// The Pod's `/etc/hosts`: localhost, the Pod's own name on its address, the node's entries.
fn etc_hosts(sources: &Sources<'_>) -> Result<VolumeFile, String> {
    let ip = (sources.field)("status.podIP")?;
    let name = sources.pod.metadata.name.clone().unwrap_or_default();
    let mut hosts = format!(
        "# Kubernetes-managed hosts file (kube-tenancy test node).\n\
         127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}\t{name}\n"
    );
    for (host, address) in sources.hosts {
        hosts.push_str(&format!("{address}\t{host}\n"));
    }
    Ok(VolumeFile {
        path: "hosts".into(),
        data: hosts.into_bytes(),
        mode: DEFAULT_MODE,
    })
}

/// A volume's files, or `None` for an emptyDir.
async fn render(sources: &Sources<'_>, volume: &Volume) -> Result<Option<Vec<VolumeFile>>, String> {
    if volume.empty_dir.is_some() {
        return Ok(None);
    }
    let mut files = Vec::new();
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = s.default_mode.unwrap_or(DEFAULT_MODE);
        let data = secret(sources, &name, s.optional.unwrap_or(false)).await?;
        project(
            &mut files,
            data,
            s.items.as_deref(),
            mode,
            "secret",
            s.optional,
        )?;
    } else if let Some(c) = &volume.config_map {
        let mode = c.default_mode.unwrap_or(DEFAULT_MODE);
        let data = config_map(sources, &c.name, c.optional.unwrap_or(false)).await?;
        project(
            &mut files,
            data,
            c.items.as_deref(),
            mode,
            "configmap",
            c.optional,
        )?;
    } else if let Some(d) = &volume.downward_api {
        let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
        downward(
            &mut files,
            sources,
            d.items.as_deref().unwrap_or_default(),
            mode,
        )?;
    } else if let Some(p) = &volume.projected {
        let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
        for source in p.sources.iter().flatten() {
            if let Some(s) = &source.secret {
                let data = secret(sources, &s.name, s.optional.unwrap_or(false)).await?;
                project(
                    &mut files,
                    data,
                    s.items.as_deref(),
                    mode,
                    "secret",
                    s.optional,
                )?;
            } else if let Some(c) = &source.config_map {
                let data = config_map(sources, &c.name, c.optional.unwrap_or(false)).await?;
                project(
                    &mut files,
                    data,
                    c.items.as_deref(),
                    mode,
                    "configmap",
                    c.optional,
                )?;
            } else if let Some(d) = &source.downward_api {
                downward(
                    &mut files,
                    sources,
                    d.items.as_deref().unwrap_or_default(),
                    mode,
                )?;
            } else if let Some(t) = &source.service_account_token {
                let token = token(sources, t.audience.as_deref(), t.expiration_seconds).await?;
                files.push(VolumeFile {
                    path: t.path.clone(),
                    data: token.into_bytes(),
                    mode,
                });
            } else {
                return Err(
                    "a projected source other than secret, configMap, downwardAPI and \
                            serviceAccountToken is not supported by this node"
                        .into(),
                );
            }
        }
    } else {
        return Err(
            "only secret, configMap, downwardAPI, projected and emptyDir volumes are \
                    supported by this node"
                .into(),
        );
    }
    Ok(Some(files))
}

async fn secret(
    sources: &Sources<'_>,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let secret =
        source::<Secret>(sources.client, namespace(sources), "secret", name, optional).await?;
    Ok(secret.map(|secret| {
        secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    }))
}

async fn config_map(
    sources: &Sources<'_>,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let cm = source::<ConfigMap>(
        sources.client,
        namespace(sources),
        "configmap",
        name,
        optional,
    )
    .await?;
    Ok(cm.map(|cm| {
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        data.extend(
            cm.binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0)),
        );
        data
    }))
}

fn namespace<'a>(sources: &Sources<'a>) -> &'a str {
    sources
        .pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
}

/// The keys of a Secret or ConfigMap as files: all of them, or the `items` (a missing key is
/// an error unless the source is optional). A missing optional source projects nothing.
fn project(
    files: &mut Vec<VolumeFile>,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    kind: &str,
    optional: Option<bool>,
) -> Result<(), String> {
    let Some(mut data) = data else {
        return Ok(());
    };
    match items {
        None => files.extend(
            data.into_iter()
                .map(|(path, data)| VolumeFile { path, data, mode }),
        ),
        Some(items) => {
            for item in items {
                match data.remove(&item.key) {
                    Some(data) => files.push(VolumeFile {
                        path: item.path.clone(),
                        data,
                        mode: item.mode.unwrap_or(mode),
                    }),
                    None if optional.unwrap_or(false) => {}
                    None => {
                        return Err(format!(
                            "{kind} references non-existent config key: {}",
                            item.key
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn downward(
    files: &mut Vec<VolumeFile>,
    sources: &Sources<'_>,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
) -> Result<(), String> {
    let meta = &sources.pod.metadata;
    let map = |m: &Option<BTreeMap<String, String>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v:?}\n"))
            .collect::<String>()
    };
    for item in items {
        let Some(f) = &item.field_ref else {
            return Err(format!(
                "downwardAPI {}: resourceFieldRef is not supported by this node",
                item.path
            ));
        };
        let value = match f.field_path.as_str() {
            "metadata.labels" => map(&meta.labels),
            "metadata.annotations" => map(&meta.annotations),
            path => (sources.field)(path)?,
        };
        files.push(VolumeFile {
            path: item.path.clone(),
            data: value.into_bytes(),
            mode: item.mode.unwrap_or(mode),
        });
    }
    Ok(())
}

/// A token for the Pod's ServiceAccount, bound to the Pod (TokenRequest API).
async fn token(
    sources: &Sources<'_>,
    audience: Option<&str>,
    expiration: Option<i64>,
) -> Result<String, String> {
    let pod = sources.pod;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let named = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty());
    // The apiserver binds a token to a Pod only if the Pod names the account; with the
    // ServiceAccount admission plugin off, a Pod that names none gets `default`'s token unbound.
    let bound = named.is_some().then(|| BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
    });
    let account = named.unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(sources.client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audience.map(|a| vec![a.to_owned()]).unwrap_or_default()),
            expiration_seconds: Some(expiration.unwrap_or(3600)),
            bound_object_ref: bound,
        }),
        ..TokenRequest::default()
    };
    let created = api
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("requesting a token for serviceaccount {account:?}: {e}"))?;
    created
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("the token request for serviceaccount {account:?} has no token"))
}

/// Writes `files` into a fresh `dir`.
fn write_volume(dir: &Path, files: &[VolumeFile]) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    update_volume(dir, files)
}

/// Makes `dir` hold exactly `files`: each changed file replaced by a rename (a reader sees the
/// old or the new content), files no longer projected removed.
fn update_volume(dir: &Path, files: &[VolumeFile]) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut keep = BTreeSet::new();
    for file in files {
        let relative = relative(&file.path).ok_or_else(|| {
            format!(
                "path {:?} must be relative and may not contain '..'",
                file.path
            )
        })?;
        let path = dir.join(relative);
        keep.insert(path.clone());
        let mode = (file.mode & 0o777) as u32;
        let same = std::fs::read(&path).is_ok_and(|d| d == file.data)
            && std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o777 == mode);
        if same {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let temp = path.with_file_name(format!("..{name}.tmp"));
        std::fs::write(&temp, &file.data).map_err(|e| io(&temp, e))?;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(&temp, e))?;
        std::fs::rename(&temp, &path).map_err(|e| io(&path, e))?;
    }
    remove_others(dir, &keep).map_err(|e| io(dir, e))
}

/// Removes the files under `dir` that are not in `keep` (directories stay).
fn remove_others(dir: &Path, keep: &BTreeSet<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            remove_others(&path, keep)?;
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// `path` as a relative path of normal components only.
fn relative(path: &str) -> Option<&Path> {
    let p = Path::new(path);
    (!path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))).then_some(p)
}

/// An absolute path of normal components only (a `mountPath` or `workingDir`).
fn absolute(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    let mut components = p.components();
    (components.next() == Some(Component::RootDir)
        && components.all(|c| matches!(c, Component::Normal(_)) || c == Component::CurDir))
    .then(|| p.components().collect())
}
