//! One Pod on the node: its network namespace (the node's with `hostNetwork`), a process per
//! container, its status, and its graceful deletion.
//!
//! A worker owns everything of its Pod (the [`PodNetwork`], the [`ManagedProcess`]es), so
//! whatever ends the worker (the Pod's removal, the agent stopping) ends them too.
//!
//! Starting and restarting containers is here; [`command`] builds a container's process
//! (command line, environment, user), [`mounts`] the Pod's volumes, [`probes`] runs the probes;
//! [`stop`] stops the containers (hooks, signals, grace) and removes the Pod object; [`status`]
//! writes what the node reports (status and Events).
//!
//! Native sidecars (init containers with `restartPolicy: Always`) follow the kubelet: each starts
//! in its turn among the init containers, and the next one (or the app containers) starts only
//! once it has *started* (running, past its startup probe); it is restarted with back-off
//! whenever it exits, whatever the Pod's restart policy; its readiness counts toward the Pod's;
//! and it is stopped after the app containers (see [`stop`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;
use tokio::sync::watch;

use super::crilog;
use super::probe::Prober;
use super::volumes::Volumes;
use super::{Context, now};
use crate::netns::PodNetwork;
use crate::process::ManagedProcess;

mod command;
mod mounts;
mod probes;
mod status;
mod stop;

use command::Entrypoint;
use probes::Probes;
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
