//! How a Pod's containers stop: SIGTERM, the grace period and SIGKILL, the lifecycle hooks
//! (preStop and postStart run here), and the removal of the Pod object once they are gone.
//!
//! The order is the kubelet's (`kuberuntime_termination_order.go`): every running container's
//! preStop hook starts at once; an app container (or a plain init container) gets SIGTERM when
//! its hook is done; a sidecar waits first for every app container and every later sidecar to
//! be gone, so sidecars stop after the app containers, in the reverse order of their start.
//! Each waits at most until the grace period ends, and every container gets at least
//! [`MIN_GRACE`] between SIGTERM and SIGKILL.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use nix::sys::signal::Signal;

use super::{ContainerRun, State, Worker, exit_state, log_path};
use crate::netns::PodNetwork;
use crate::node::{Context, crilog, now, probe};

/// The kubelet's shortest time between SIGTERM and SIGKILL, also once the grace period is spent.
const MIN_GRACE: Duration = Duration::from_secs(2);
/// How often a stopping Pod's processes are looked at.
const STOP_POLL: Duration = Duration::from_millis(50);

/// What a hook needs of its container, copied out so that the hooks of every container can run
/// while the Pod's processes are signalled.
pub(super) struct HookTarget {
    spec: Container,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    /// The process whose mount namespace, root and working directory an exec hook joins.
    mount_of: Option<u32>,
}

impl ContainerRun {
    pub(super) fn hook_target(&self) -> HookTarget {
        HookTarget {
            spec: self.spec.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            mount_of: match &self.state {
                State::Running { process, .. } if self.mount_ns => Some(process.pid()),
                _ => None,
            },
        }
    }
}

/// Where hooks run: the Pod's network namespace, its log files.
pub(super) struct HookEnv<'a> {
    context: &'a Context,
    net: Option<&'a PodNetwork>,
    namespace: &'a str,
    pod: &'a str,
}

impl Worker {
    pub(super) fn hook_env(&self) -> HookEnv<'_> {
        HookEnv {
            context: &self.context,
            net: self.net.as_ref(),
            namespace: &self.namespace,
            pod: &self.name,
        }
    }

    /// Stops every container of a Pod being deleted, within its deletion grace period.
    pub(super) async fn terminate(&mut self) {
        let grace = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        self.stop_all(grace).await;
    }

    /// Stops every running container in the kubelet's order (see the module doc) within
    /// `grace` seconds; none is restarted afterwards.
    pub(super) async fn stop_all(&mut self, grace: i64) {
        let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
        for c in &mut self.containers {
            c.restart_at = None;
        }
        let running: Vec<String> = self
            .containers
            .iter()
            .filter(|c| matches!(c.state, State::Running { .. }))
            .map(|c| c.spec.name.clone())
            .collect();
        for name in running {
            self.event("Normal", "Killing", &format!("Stopping container {name}"))
                .await;
        }
        let targets: Vec<(usize, HookTarget, LifecycleHandler)> = self
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.state, State::Running { .. }))
            .filter_map(|(i, c)| {
                let hook = c.spec.lifecycle.as_ref()?.pre_stop.clone()?;
                Some((i, c.hook_target(), hook))
            })
            .collect();
        let mut hook_pending = vec![false; self.containers.len()];
        for (i, _, _) in &targets {
            hook_pending[*i] = true;
        }
        let failures = {
            let env = HookEnv {
                context: &self.context,
                net: self.net.as_ref(),
                namespace: &self.namespace,
                pod: &self.name,
            };
            let containers = &mut self.containers;
            let init_count = self.init_count;
            let mut hooks: FuturesUnordered<_> = targets
                .iter()
                .map(|(i, target, hook)| {
                    let env = &env;
                    async move { (*i, env.run(target, hook, "PreStopHook", deadline).await) }
                })
                .collect();
            let mut failures = Vec::new();
            let mut kill_at: Vec<Option<Instant>> = vec![None; containers.len()];
            loop {
                let mut gone: Vec<bool> = Vec::with_capacity(containers.len());
                for c in containers.iter_mut() {
                    if let State::Running { process, started } = &mut c.state
                        && let Some(status) = process.exited()
                    {
                        c.state = exit_state(status, started.clone());
                    }
                    gone.push(!matches!(c.state, State::Running { .. }));
                }
                if gone.iter().all(|g| *g) {
                    break;
                }
                let tick = Instant::now();
                for i in 0..containers.len() {
                    if gone[i] || hook_pending[i] {
                        continue;
                    }
                    // A sidecar's turn: the app containers and every later sidecar are gone.
                    let turn = !containers[i].sidecar
                        || (gone[init_count..].iter().all(|g| *g)
                            && (i + 1..init_count).all(|j| !containers[j].sidecar || gone[j]));
                    let c = &mut containers[i];
                    let State::Running { process, started } = &mut c.state else {
                        continue;
                    };
                    match kill_at[i] {
                        None if turn || tick >= deadline => {
                            process.signal(Signal::SIGTERM);
                            kill_at[i] = Some(deadline.max(tick + MIN_GRACE));
                        }
                        Some(at) if tick >= at => {
                            process.kill();
                            c.state = State::Terminated {
                                exit_code: 128 + Signal::SIGKILL as i32,
                                signal: Some(Signal::SIGKILL as i32),
                                started: started.clone(),
                                finished: now(),
                            };
                        }
                        _ => {}
                    }
                }
                tokio::select! {
                    Some((i, result)) = hooks.next(), if !hooks.is_empty() => {
                        hook_pending[i] = false;
                        if let Err(message) = result {
                            failures.push(message);
                        }
                    }
                    () = tokio::time::sleep(STOP_POLL) => {}
                }
            }
            failures
        };
        for message in failures {
            self.event("Warning", "FailedPreStopHook", &message).await;
        }
    }
}

impl HookEnv<'_> {
    /// Runs `hook` of the container `c` (sleep, exec, httpGet; `kind` names it in messages:
    /// `PreStopHook`, `PostStartHook`) until it ends or `deadline`.
    pub(super) async fn run(
        &self,
        c: &HookTarget,
        hook: &LifecycleHandler,
        kind: &str,
        deadline: Instant,
    ) -> Result<(), String> {
        let name = &c.spec.name;
        let deadline = tokio::time::Instant::from_std(deadline);
        if let Some(sleep) = &hook.sleep {
            let until =
                tokio::time::Instant::now() + Duration::from_secs(sleep.seconds.max(0) as u64);
            tokio::time::sleep_until(until.min(deadline)).await;
            Ok(())
        } else if let Some(exec) = &hook.exec {
            let argv = exec.command.clone().unwrap_or_default();
            let Some((program, args)) = argv.split_first() else {
                return Err(format!("{kind} for container {name}: empty exec command"));
            };
            let mut cmd = match c.mount_of {
                // In the container's mount namespace, root and working directory.
                Some(pid) => {
                    let mut cmd = Command::new("nsenter");
                    cmd.arg(format!("--target={pid}"))
                        .args(["--mount", "--root", "--wd", "--", program]);
                    cmd
                }
                None => Command::new(program),
            };
            cmd.args(args).env_clear().envs(c.env.iter().cloned());
            if !c.cwd.as_os_str().is_empty() {
                cmd.current_dir(&c.cwd);
            }
            let net = self.net.ok_or("no network namespace")?;
            let log = log_path(&self.context.dir, self.namespace, self.pod, name);
            let mut process = net
                .spawn_piped(
                    &format!("{}/{}/{name}/{kind}", self.namespace, self.pod),
                    cmd,
                    &log,
                )
                .and_then(|mut p| crilog::capture(&mut p, &log).map(|()| p))
                .map_err(|e| format!("{kind} for container {name} failed: {e}"))?;
            loop {
                if let Some(status) = process.exited() {
                    return if status.success() {
                        Ok(())
                    } else {
                        Err(format!("{kind} for container {name} failed: {status}"))
                    };
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "{kind} for container {name} did not finish in time"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else if let Some(http) = &hook.http_get {
            let ip = self.net.map(PodNetwork::ip).ok_or("no network namespace")?;
            let probe = k8s_openapi::api::core::v1::Probe {
                http_get: Some(http.clone()),
                ..Default::default()
            };
            tokio::time::timeout_at(
                deadline,
                probe::once(&self.context.world, ip, &c.spec, &probe),
            )
            .await
            .map_err(|_| format!("{kind} for container {name} did not finish in time"))?
            .map_err(|e| format!("{kind} for container {name} failed: {e}"))
        } else {
            Err(format!(
                "{kind} for container {name}: tcpSocket hooks are not supported"
            ))
        }
    }
}

/// Removes the Pod object now that its containers are gone (grace 0, this very Pod only).
pub(super) async fn delete_now(context: &Context, namespace: &str, name: &str, uid: &str) {
    let api: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => tracing::warn!(%namespace, %name, error = %e, "deleting a terminated pod"),
    }
}
