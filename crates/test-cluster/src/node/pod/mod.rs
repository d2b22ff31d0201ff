//! One Pod on the node: its network namespace (the node's with `hostNetwork`), a process per
//! container, its status, and its graceful deletion.
//!
//! A worker owns everything of its Pod (the [`PodNetwork`], the [`ManagedProcess`]es), so
//! whatever ends the worker (the Pod's removal, the agent stopping) ends them too.
//!
//! Starting, probing and restarting containers is here; [`stop`] stops them (hooks, signals, grace)
//! and removes the Pod object; [`status`] writes what the node reports (status and Events).
//!
//! Native sidecars (init containers with `restartPolicy: Always`) follow the kubelet: each starts
//! in its turn among the init containers, and the next one (or the app containers) starts only
//! once it has *started* (running, past its startup probe); it is restarted with back-off
//! whenever it exits, whatever the Pod's restart policy; its readiness counts toward the Pod's;
//! and it is stopped after the app containers (see [`stop`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::sync::watch;

use super::probe::{self, Prober};
use super::volumes::{self, Volumes};
use super::{Context, now};
use super::{crilog, env};
use crate::netns::{GATEWAY, PodNetwork};
use crate::process::ManagedProcess;

mod status;
mod stop;

use status::state_json;
use stop::delete_now;

/// How often a worker looks at its processes.
const POLL: Duration = Duration::from_millis(200);
/// How soon a container whose configuration failed (a missing Secret) is tried again.
const CONFIG_RETRY: Duration = Duration::from_secs(1);
/// How often a running Pod's volumes are brought up to date (the kubelet: about a minute; tokens
/// are requested anew each time, valid an hour).
const VOLUME_REFRESH: Duration = Duration::from_secs(20);
/// How long a postStart hook may take before it counts as failed.
const POST_START_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest crash-loop back-off, as the kubelet's.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Where a container's output goes, under the agent's directory.
pub(super) fn log_path(dir: &Path, namespace: &str, pod: &str, container: &str) -> PathBuf {
    dir.join("pods")
        .join(format!("{namespace}_{pod}"))
        .join(format!("{container}.log"))
}

enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        process: ManagedProcess,
        started: String,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        started: String,
        finished: String,
    },
}

struct ContainerRun {
    spec: Container,
    /// An init container with `restartPolicy: Always`: runs for the Pod's life.
    sidecar: bool,
    /// Whether it ever got past its startup probe (a sidecar then lets the next one start, and
    /// a restart does not hold them back again).
    has_started: bool,
    state: State,
    /// The state before the last restart (`lastState`).
    last: Option<Value>,
    restarts: i32,
    /// When a container waiting in back-off starts again.
    restart_at: Option<Instant>,
    /// Whether it ever ran (an `ErrImagePull` container never does).
    ever_started: bool,
    /// The probes of the current run.
    probes: Probes,
    /// The environment and working directory of the current run, for exec hooks.
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    /// Whether the current run has a mount namespace of its own (exec hooks join it).
    mount_ns: bool,
}

/// The probes of one container run, and a pending kill by a failed liveness or startup probe.
#[derive(Default)]
struct Probes {
    startup: Option<Prober>,
    readiness: Option<Prober>,
    liveness: Option<Prober>,
    /// When a container told to stop (SIGTERM) for a failed probe gets SIGKILL.
    kill_at: Option<Instant>,
}

impl ContainerRun {
    /// Exited with 0 and not to run again (an init container that did its work).
    fn completed(&self) -> bool {
        self.restart_at.is_none() && matches!(self.state, State::Terminated { exit_code: 0, .. })
    }

    /// Running and past its startup probe.
    fn started(&self) -> bool {
        matches!(self.state, State::Running { .. })
            && self.probes.startup.as_ref().is_none_or(|p| p.passing)
    }

    /// Started, passing its readiness probe, and not being killed.
    fn ready(&self) -> bool {
        self.started()
            && self.probes.kill_at.is_none()
            && self.probes.readiness.as_ref().is_none_or(|p| p.passing)
    }

    /// Whether the containers after this init container may start: it completed, or (a
    /// sidecar) it has started once.
    fn initialized(&self) -> bool {
        if self.sidecar {
            self.has_started
        } else {
            self.completed()
        }
    }
}

struct Worker {
    context: Arc<Context>,
    pod: Pod,
    namespace: String,
    name: String,
    uid: String,
    net: Option<PodNetwork>,
    /// The init containers (first, in order), then the app containers.
    containers: Vec<ContainerRun>,
    init_count: usize,
    start_time: String,
    reported: Option<Value>,
    /// The Pod's volumes, once they could all be prepared.
    volumes: Option<Volumes>,
    /// The last `FailedMount` message, and when preparing the volumes is tried again.
    mount_error: Option<String>,
    mount_retry: Instant,
    /// When the volumes are next brought up to date with their sources.
    volumes_refresh: Instant,
}

/// Runs the Pod `rx` carries until it is gone (`None`) or deleted.
pub(super) async fn run(context: Arc<Context>, mut rx: watch::Receiver<Option<Pod>>) {
    let Some(pod) = rx.borrow_and_update().clone() else {
        return;
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        // Finished before this agent saw it: nothing to run, only its deletion to complete.
        let mut pod = pod;
        while pod.metadata.deletion_timestamp.is_none() {
            if rx.changed().await.is_err() {
                return;
            }
            match rx.borrow_and_update().clone() {
                Some(next) => pod = next,
                None => return,
            }
        }
        delete_now(&context, &namespace, &name, &uid).await;
        return;
    }
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.unwrap_or_default();
    let init_count = inits.len();
    let containers = inits
        .into_iter()
        .chain(spec.containers)
        .enumerate()
        .map(|(i, spec)| ContainerRun {
            sidecar: i < init_count && spec.restart_policy.as_deref() == Some("Always"),
            has_started: false,
            spec,
            state: State::Waiting {
                // The kubelet's reason for app containers while init containers run.
                reason: if i >= init_count && init_count > 0 {
                    "PodInitializing"
                } else {
                    "ContainerCreating"
                }
                .into(),
                message: String::new(),
            },
            last: None,
            restarts: 0,
            restart_at: Some(Instant::now()),
            ever_started: false,
            probes: Probes::default(),
            env: Vec::new(),
            cwd: PathBuf::new(),
            mount_ns: false,
        })
        .collect();
    let mut worker = Worker {
        context,
        pod,
        namespace,
        name,
        uid,
        net: None,
        containers,
        init_count,
        start_time: now(),
        reported: None,
        volumes: None,
        mount_error: None,
        mount_retry: Instant::now(),
        volumes_refresh: Instant::now() + VOLUME_REFRESH,
    };
    worker.drive(&mut rx).await;
}

impl Worker {
    async fn drive(&mut self, rx: &mut watch::Receiver<Option<Pod>>) {
        let world = Arc::clone(&self.context.world);
        let pod = format!("{}-{}", self.namespace, self.name);
        let host_network = self
            .pod
            .spec
            .as_ref()
            .is_some_and(|s| s.host_network == Some(true));
        // `ip` runs a few times: off the runtime's threads.
        let net = tokio::task::spawn_blocking(move || {
            if host_network {
                Ok(world.host_network())
            } else {
                world.add_pod(&pod)
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(crate::Error::Network(format!(
                "creating the namespace: {e}"
            )))
        });
        match net {
            Ok(net) => self.net = Some(net),
            Err(e) => {
                let message = format!("creating the pod's network namespace: {e}");
                self.event("Warning", "FailedCreatePodSandBox", &message)
                    .await;
                for c in &mut self.containers {
                    c.restart_at = None;
                    c.state = State::Waiting {
                        reason: "ContainerCreating".into(),
                        message: message.clone(),
                    };
                }
            }
        }
        loop {
            if self.pod.metadata.deletion_timestamp.is_some() {
                self.terminate().await;
                for dir in ["volumes", "rootfs"] {
                    let dir = self.pod_dir().join(dir);
                    if let Err(e) = std::fs::remove_dir_all(&dir)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(pod = %self.name, error = %e, dir = %dir.display(), "removing the pod's files");
                    }
                }
                delete_now(&self.context, &self.namespace, &self.name, &self.uid).await;
                return;
            }
            self.step().await;
            self.report().await;
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    match rx.borrow_and_update().clone() {
                        Some(pod) => self.pod = pod,
                        // Removed without a graceful deletion: everything goes at once.
                        None => return,
                    }
                }
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Starts containers that are due, notices the ones that exited, applies the restart policy.
    async fn step(&mut self) {
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        if self.volumes.is_none() && self.net.is_some() {
            self.mount_volumes().await;
        } else if self.volumes.is_some()
            && Instant::now() >= self.volumes_refresh
            && self
                .containers
                .iter()
                .any(|c| matches!(c.state, State::Running { .. }))
        {
            self.refresh_volumes().await;
        }
        for i in 0..self.containers.len() {
            if let State::Running { process, started } = &mut self.containers[i].state
                && let Some(status) = process.exited()
            {
                let state = exit_state(status, started.clone());
                let init = i < self.init_count;
                let c = &mut self.containers[i];
                c.state = state;
                let failed =
                    matches!(c.state, State::Terminated { exit_code, .. } if exit_code != 0);
                // A sidecar runs for the Pod's life; an init container runs to completion:
                // again only after a failure.
                let restart = if c.sidecar {
                    true
                } else if init {
                    failed && policy != "Never"
                } else {
                    policy == "Always" || (policy == "OnFailure" && failed)
                };
                if restart {
                    // The first restart is at once; then 10 s, doubling up to 5 minutes.
                    let backoff = if c.restarts == 0 {
                        Duration::ZERO
                    } else {
                        (Duration::from_secs(10) * 2u32.saturating_pow(c.restarts as u32 - 1))
                            .min(MAX_BACKOFF)
                    };
                    c.restart_at = Some(Instant::now() + backoff);
                    if !backoff.is_zero() {
                        c.last = Some(state_json(&c.state));
                        c.state = State::Waiting {
                            reason: "CrashLoopBackOff".into(),
                            message: format!(
                                "back-off {}s restarting failed container={} pod={}_{}({})",
                                backoff.as_secs(),
                                c.spec.name,
                                self.name,
                                self.namespace,
                                self.uid
                            ),
                        };
                    }
                }
            }
            // Init containers one after the other, app containers once they all completed (or,
            // sidecars, started).
            let turn = self.containers[..i.min(self.init_count)]
                .iter()
                .all(ContainerRun::initialized);
            let due = turn
                && self.containers[i]
                    .restart_at
                    .is_some_and(|at| at <= Instant::now());
            if due && self.net.is_some() && self.volumes.is_some() {
                self.start_container(i).await;
            }
            self.probe(i).await;
            let c = &mut self.containers[i];
            c.has_started |= c.started();
        }
        // The app containers are done for good (restartPolicy Never or OnFailure): sidecars do
        // not keep the Pod alive; they are stopped as on deletion.
        let (inits, apps) = self.containers.split_at(self.init_count);
        let finished = !apps.is_empty()
            && apps
                .iter()
                .all(|c| c.restart_at.is_none() && matches!(c.state, State::Terminated { .. }));
        let sidecars_left = inits.iter().any(|c| {
            c.sidecar && (matches!(c.state, State::Running { .. }) || c.restart_at.is_some())
        });
        if finished && sidecars_left {
            let grace = self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            self.stop_all(grace).await;
        }
    }

    /// Runs container `i`'s due probes; a failed liveness or startup probe stops the container
    /// (SIGTERM, SIGKILL after the grace period) and the restart policy takes over.
    async fn probe(&mut self, i: usize) {
        let Some(ip) = self.net.as_ref().map(PodNetwork::ip) else {
            return;
        };
        let world = Arc::clone(&self.context.world);
        let pod_grace = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let now = Instant::now();
        let mut events = Vec::new();
        let Some(net) = self.net.as_ref() else {
            return;
        };
        let c = &mut self.containers[i];
        let State::Running { process, .. } = &mut c.state else {
            return;
        };
        let exec = probe::ExecIn {
            net,
            pid: process.pid(),
            env: &c.env,
        };
        if let Some(at) = c.probes.kill_at {
            if at <= now {
                process.kill();
            }
            return;
        }
        let name = c.spec.name.clone();
        let mut kill = None;
        if let Some(startup) = c.probes.startup.as_mut().filter(|p| !p.passing) {
            if startup.due(now)
                && let Err(message) = startup.probe(&world, ip, &c.spec, &exec).await
            {
                events.push(("Unhealthy", format!("Startup probe failed: {message}")));
                if startup.failed() {
                    kill = Some(("startup", startup.termination_grace()));
                }
            }
        } else {
            if let Some(liveness) = c.probes.liveness.as_mut()
                && liveness.due(now)
                && let Err(message) = liveness.probe(&world, ip, &c.spec, &exec).await
            {
                events.push(("Unhealthy", format!("Liveness probe failed: {message}")));
                if liveness.failed() {
                    kill = Some(("liveness", liveness.termination_grace()));
                }
            }
            if let Some(readiness) = c.probes.readiness.as_mut()
                && readiness.due(now)
                && let Err(message) = readiness.probe(&world, ip, &c.spec, &exec).await
            {
                events.push(("Unhealthy", format!("Readiness probe failed: {message}")));
            }
        }
        if let Some((kind, grace)) = kill {
            let grace = grace.unwrap_or(pod_grace).max(0) as u64;
            process.signal(Signal::SIGTERM);
            c.probes.kill_at = Some(Instant::now() + Duration::from_secs(grace));
            events.push((
                "Killing",
                format!("Container {name} failed {kind} probe, will be restarted"),
            ));
        }
        for (reason, message) in events {
            let kind = if reason == "Killing" {
                "Normal"
            } else {
                "Warning"
            };
            self.event(kind, reason, &message).await;
        }
    }

    async fn start_container(&mut self, i: usize) {
        let c = &mut self.containers[i];
        c.restart_at = None;
        let container = c.spec.name.clone();
        let image = c.spec.image.clone().unwrap_or_default();
        let source = match self.context.spec.images.get(&image) {
            Some(executable) => Entrypoint::Executable(executable.clone()),
            None if self.context.images.has(&image) => Entrypoint::Image(image.clone()),
            None => {
                let known: Vec<&str> = self
                    .context
                    .spec
                    .images
                    .keys()
                    .map(String::as_str)
                    .chain(self.context.images.references())
                    .collect();
                let message = format!(
                    "image {image:?} is neither in this node's image map nor in its image store (it knows: {}); no image is pulled",
                    known.join(", ")
                );
                let event = format!("Failed to pull image {image:?}: {message}");
                self.wait(i, "ErrImagePull", message, &event).await;
                return;
            }
        };
        let (cmd, mount_ns, user) = match self.command(i, source).await {
            Ok(cmd) => cmd,
            Err(message) => {
                let event = format!("Error: {message}");
                self.wait(i, "CreateContainerConfigError", message, &event)
                    .await;
                // As the kubelet: tried again, so a Secret that appears later is picked up.
                self.containers[i].restart_at = Some(Instant::now() + CONFIG_RETRY);
                return;
            }
        };
        let log = log_path(&self.context.dir, &self.namespace, &self.name, &container);
        let net = self.net.as_ref().expect("started only with a network");
        let env: Vec<(OsString, OsString)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
            .collect();
        let cwd = cmd
            .get_current_dir()
            .map(Path::to_owned)
            .unwrap_or_default();
        let spawned = log
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|e| crate::Error::io(&log, e))
            .and_then(|()| {
                let mut process = net.spawn_piped_as(
                    &format!("{}/{}/{container}", self.namespace, self.name),
                    cmd,
                    &log,
                    user,
                )?;
                crilog::capture(&mut process, &log)?;
                Ok(process)
            });
        match spawned {
            Ok(process) => {
                let c = &mut self.containers[i];
                if matches!(c.state, State::Terminated { .. }) {
                    c.last = Some(state_json(&c.state));
                }
                if c.ever_started {
                    c.restarts += 1;
                }
                self.event(
                    "Normal",
                    "Started",
                    &format!("Started container {container}"),
                )
                .await;
                let c = &mut self.containers[i];
                c.ever_started = true;
                c.env = env;
                c.cwd = cwd;
                c.mount_ns = mount_ns;
                c.state = State::Running {
                    process,
                    started: now(),
                };
                let at = Instant::now();
                c.probes = Probes {
                    startup: Prober::new(c.spec.startup_probe.as_ref(), at),
                    readiness: Prober::new(c.spec.readiness_probe.as_ref(), at),
                    liveness: Prober::new(c.spec.liveness_probe.as_ref(), at),
                    kill_at: None,
                };
                self.post_start(i).await;
            }
            Err(e) => {
                let message = e.to_string();
                self.event("Warning", "Failed", &format!("Error: {message}"))
                    .await;
                let c = &mut self.containers[i];
                c.ever_started = true;
                c.state = State::Terminated {
                    exit_code: 128,
                    signal: None,
                    started: now(),
                    finished: now(),
                };
                c.restart_at = Some(Instant::now() + Duration::from_secs(10));
            }
        }
    }

    /// Runs container `i`'s postStart hook, as the kubelet before it starts the next container;
    /// if it fails the container is killed and its restart policy applies.
    async fn post_start(&mut self, i: usize) {
        let c = &self.containers[i];
        let Some(hook) = c.spec.lifecycle.as_ref().and_then(|l| l.post_start.clone()) else {
            return;
        };
        let deadline = Instant::now() + POST_START_TIMEOUT;
        let target = c.hook_target();
        let name = c.spec.name.clone();
        let ran = self
            .hook_env()
            .run(&target, &hook, "PostStartHook", deadline)
            .await;
        let Err(message) = ran else {
            return;
        };
        self.event("Warning", "FailedPostStartHook", &message).await;
        if let State::Running { process, .. } = &mut self.containers[i].state {
            process.kill();
        }
        let message = format!("FailedPostStartHook: container {name} is killed");
        self.event("Normal", "Killing", &message).await;
    }

    /// The container's command line and environment. For a mapped image its executable stands
    /// in for the entrypoint: `command[0]` (a path inside the image) is replaced by it, the rest
    /// of `command` and then `args` follow. For an image of the store, Kubernetes' rules: the
    /// container's `command` replaces the image's `Entrypoint`, its `args` the image's `Cmd`;
    /// the image's `Env` comes first; the process runs chrooted in a copy of the image's root.
    /// Also says whether the process gets a mount namespace of its own (volumes, `workingDir`,
    /// an image's root) and the user it runs as (`None`: the node's, root).
    async fn command(
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
    fn user(&self, spec: &Container, image: Option<(u32, u32)>) -> Result<(u32, u32), String> {
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

    /// The Pod's directory under the agent's: container logs, volumes, mount points.
    fn pod_dir(&self) -> PathBuf {
        self.context
            .dir
            .join("pods")
            .join(format!("{}_{}", self.namespace, self.name))
    }

    /// Brings the volumes up to date with their Secrets, ConfigMaps and tokens.
    async fn refresh_volumes(&mut self) {
        self.volumes_refresh = Instant::now() + VOLUME_REFRESH;
        let Some(volumes) = &self.volumes else {
            return;
        };
        let field = |path: &str| self.field(path);
        let sources = volumes::Sources {
            client: &self.context.client,
            pod: &self.pod,
            field: &field,
            api_ca: &self.context.api_ca,
            hosts: &self.context.spec.hosts,
        };
        if let Err(e) = volumes::refresh(&sources, volumes).await {
            tracing::warn!(pod = %self.name, error = %e, "refreshing the pod's volumes");
        }
    }

    /// Prepares the Pod's volumes (again every second while that fails, with a `FailedMount`
    /// Event for each new reason; the containers wait in `ContainerCreating` meanwhile).
    async fn mount_volumes(&mut self) {
        if Instant::now() < self.mount_retry {
            return;
        }
        self.mount_retry = Instant::now() + CONFIG_RETRY;
        let field = |path: &str| self.field(path);
        let sources = volumes::Sources {
            client: &self.context.client,
            pod: &self.pod,
            field: &field,
            api_ca: &self.context.api_ca,
            hosts: &self.context.spec.hosts,
        };
        let prepared = volumes::prepare(&sources, &self.pod_dir().join("volumes")).await;
        match prepared {
            Ok(v) => {
                self.volumes = Some(v);
                self.mount_error = None;
            }
            Err(message) => {
                // Not those waiting for another reason (refused, or for init containers).
                for c in &mut self.containers {
                    if matches!(&c.state, State::Waiting { reason, .. } if reason == "ContainerCreating")
                    {
                        c.state = State::Waiting {
                            reason: "ContainerCreating".into(),
                            message: message.clone(),
                        };
                    }
                }
                if self.mount_error.as_ref() != Some(&message) {
                    self.event("Warning", "FailedMount", &message).await;
                    self.mount_error = Some(message);
                }
            }
        }
    }

    /// A downward API field.
    fn field(&self, path: &str) -> Result<String, String> {
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

    fn pod_ip(&self) -> String {
        self.net
            .as_ref()
            .map(|n| n.ip().to_string())
            .unwrap_or_default()
    }

    /// Puts container `i` in `Waiting` for `reason`, with an Event when that is news.
    async fn wait(&mut self, i: usize, reason: &str, message: String, event: &str) {
        let c = &mut self.containers[i];
        if matches!(c.state, State::Terminated { .. }) {
            c.last = Some(state_json(&c.state));
        }
        let news = !matches!(&c.state, State::Waiting { reason: r, message: m } if r == reason && *m == message);
        c.state = State::Waiting {
            reason: reason.to_owned(),
            message,
        };
        if news {
            self.event("Warning", "Failed", event).await;
        }
    }
}

/// What runs for a container's image.
enum Entrypoint {
    /// The executable [`NodeSpec::image`](super::NodeSpec::image) maps the image to.
    Executable(PathBuf),
    /// The image of the node's store with this reference.
    Image(String),
}

/// The state of a container whose process exited with `status` (a signal's code as a shell's).
fn exit_state(status: std::process::ExitStatus, started: String) -> State {
    use std::os::unix::process::ExitStatusExt;
    State::Terminated {
        exit_code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        signal: status.signal(),
        started,
        finished: now(),
    }
}

/// The `kubernetes` Service's variables the kubelet gives every container; they point at the
/// API relayed into the node's namespace.
fn api_env() -> Vec<(String, String)> {
    let (host, port) = (GATEWAY.to_string(), super::API_PORT);
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
