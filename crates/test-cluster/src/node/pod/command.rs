//! A container's process as the kubelet would start it: command line (a mapped executable or
//! an image's entrypoint), environment (the image's, the `kubernetes` Service's, the
//! container's with the downward API), the user it runs as.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Container;

use super::super::{env, probe, volumes};
use super::{Worker, log_path};
use crate::netns::GATEWAY;

impl Worker {
    /// The container's command line and environment. For a mapped image its executable stands
    /// in for the entrypoint: `command[0]` (a path inside the image) is replaced by it, the rest
    /// of `command` and then `args` follow. For an image of the store, Kubernetes' rules: the
    /// container's `command` replaces the image's `Entrypoint`, its `args` the image's `Cmd`;
    /// the image's `Env` comes first; the process runs chrooted in a copy of the image's root.
    /// Also says whether the process gets a mount namespace of its own (volumes, `workingDir`,
    /// an image's root) and the user it runs as (`None`: the node's, root).
    pub(super) async fn command(
        &self,
        i: usize,
        source: Entrypoint,
    ) -> Result<(Command, bool, Option<(u32, u32)>), String> {
        let spec = &self.containers[i].spec;
        for p in [
            &spec.startup_probe,
            &spec.readiness_probe,
            &spec.liveness_probe,
        ] {
            if let Some(message) = p.as_ref().and_then(probe::unsupported) {
                return Err(message);
            }
        }
        let vars = env::build(&self.context.client, &self.namespace, spec, |path| {
            self.field(path)
        })
        .await?;
        let defined: BTreeMap<&str, &str> =
            vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let dir = log_path(&self.context.dir, &self.namespace, &self.name, &spec.name)
            .with_extension("d");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (mut cmd, root, cwd, user) = match source {
            Entrypoint::Executable(executable) => {
                let mut cmd = Command::new(executable);
                if let Some(command) = &spec.command {
                    if let Some(first) = command.first() {
                        std::os::unix::process::CommandExt::arg0(
                            &mut cmd,
                            env::expand(first, &defined),
                        );
                    }
                    cmd.args(command.iter().skip(1).map(|a| env::expand(a, &defined)));
                }
                cmd.args(spec.args.iter().flatten().map(|a| env::expand(a, &defined)));
                cmd.env_clear().env(
                    "PATH",
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                );
                (cmd, None, dir, None)
            }
            Entrypoint::Image(reference) => {
                let root = self.pod_dir().join("rootfs").join(&spec.name);
                let context = Arc::clone(&self.context);
                let image = reference.clone();
                let config = tokio::task::spawn_blocking(move || context.images.config(&image))
                    .await
                    .map_err(|e| format!("unpacking the image: {e}"))??;
                let user = self.user(spec, config.ids().map_err(|e| e.to_string())?)?;
                let context = Arc::clone(&self.context);
                let at = root.clone();
                tokio::task::spawn_blocking(move || {
                    context.images.root(&reference, &at, user.0 != 0)
                })
                .await
                .map_err(|e| format!("preparing the image's root: {e}"))??;
                let argv: Vec<String> = match (&spec.command, &spec.args) {
                    (Some(command), args) => command
                        .iter()
                        .chain(args.iter().flatten())
                        .cloned()
                        .collect(),
                    (None, Some(args)) => config
                        .entrypoint
                        .iter()
                        .flatten()
                        .chain(args)
                        .cloned()
                        .collect(),
                    (None, None) => config
                        .entrypoint
                        .iter()
                        .flatten()
                        .chain(config.cmd.iter().flatten())
                        .cloned()
                        .collect(),
                };
                let Some((program, rest)) = argv.split_first() else {
                    return Err(format!(
                        "the image {:?} has no entrypoint and the container no command",
                        spec.image.as_deref().unwrap_or_default()
                    ));
                };
                let mut cmd = Command::new(env::expand(program, &defined));
                cmd.args(rest.iter().map(|a| env::expand(a, &defined)));
                cmd.env_clear().envs(
                    config
                        .env
                        .iter()
                        .flatten()
                        .filter_map(|e| e.split_once('=')),
                );
                let cwd = PathBuf::from(config.working_dir.as_deref().unwrap_or("/"));
                (cmd, Some(root), cwd, Some(user))
            }
        };
        cmd.env("HOSTNAME", &self.name).envs(api_env()).envs(vars);
        let volumes = self
            .volumes
            .as_ref()
            .ok_or("the pod's volumes are not ready")?;
        let scratch = self.pod_dir().join("mounts").join(&spec.name);
        match volumes::plan(spec, volumes, &scratch, &cwd, root.as_deref())? {
            Some(plan) => {
                plan.apply(&mut cmd);
                Ok((cmd, true, user))
            }
            None => {
                cmd.current_dir(spec.working_dir.as_deref().map_or(cwd.as_path(), Path::new));
                Ok((cmd, false, user))
            }
        }
    }

    /// The uid and gid a container of an image runs as: `runAsUser` / `runAsGroup` of the
    /// container's security context, else the Pod's, else the image's user, else root; refused
    /// (as the kubelet does) when `runAsNonRoot` is set and that is root.
    pub(super) fn user(
        &self,
        spec: &Container,
        image: Option<(u32, u32)>,
    ) -> Result<(u32, u32), String> {
        let pod = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref());
        let own = spec.security_context.as_ref();
        let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let uid = id(own.and_then(|s| s.run_as_user)).or(id(pod.and_then(|s| s.run_as_user)));
        let gid = id(own.and_then(|s| s.run_as_group)).or(id(pod.and_then(|s| s.run_as_group)));
        let uid = uid.or(image.map(|i| i.0)).unwrap_or(0);
        let gid = gid.or(image.map(|i| i.1)).unwrap_or(0);
        let non_root = own
            .and_then(|s| s.run_as_non_root)
            .or(pod.and_then(|s| s.run_as_non_root));
        if uid == 0 && non_root == Some(true) {
            return Err("container has runAsNonRoot and image will run as root".into());
        }
        Ok((uid, gid))
    }

    /// A downward API field.
    pub(super) fn field(&self, path: &str) -> Result<String, String> {
        let meta = &self.pod.metadata;
        let from_map = |map: &Option<BTreeMap<String, String>>, key: &str| {
            map.as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let key = |prefix: &str| {
            path.strip_prefix(prefix)
                .and_then(|k| k.strip_suffix("']"))
                .map(str::to_owned)
        };
        Ok(match path {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "metadata.uid" => self.uid.clone(),
            "spec.nodeName" => self.context.spec.name.clone(),
            "spec.serviceAccountName" => self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            "status.podIP" => self.pod_ip(),
            "status.hostIP" => GATEWAY.to_string(),
            _ => {
                if let Some(k) = key("metadata.labels['") {
                    from_map(&meta.labels, &k)
                } else if let Some(k) = key("metadata.annotations['") {
                    from_map(&meta.annotations, &k)
                } else {
                    return Err(format!("fieldRef {path} is not supported by this node yet"));
                }
            }
        })
    }

    pub(super) fn pod_ip(&self) -> String {
        self.net
            .as_ref()
            .map(|n| n.ip().to_string())
            .unwrap_or_default()
    }
}

/// What runs for a container's image.
pub(super) enum Entrypoint {
    /// The executable [`NodeSpec::image`](super::super::NodeSpec::image) maps the image to.
    Executable(PathBuf),
    /// The image of the node's store with this reference.
    Image(String),
}

/// The `kubernetes` Service's variables the kubelet gives every container; they point at the
/// API relayed into the node's namespace.
fn api_env() -> Vec<(String, String)> {
    let (host, port) = (GATEWAY.to_string(), super::super::API_PORT);
    let url = format!("tcp://{host}:{port}");
    vec![
        ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()),
        ("KUBERNETES_PORT".into(), url.clone()),
        (format!("KUBERNETES_PORT_{port}_TCP"), url),
        (format!("KUBERNETES_PORT_{port}_TCP_PROTO"), "tcp".into()),
        (format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.to_string()),
        (format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host),
    ]
}
