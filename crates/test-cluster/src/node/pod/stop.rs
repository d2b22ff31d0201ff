//! How a Pod's containers stop: SIGTERM, the grace period and SIGKILL, the lifecycle hooks
//! (preStop and postStart run here), and the removal of the Pod object once they are gone.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{LifecycleHandler, Pod};
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use nix::sys::signal::Signal;

use super::{ContainerRun, State, Worker, log_path};
use crate::netns::PodNetwork;
use crate::node::{Context, crilog, probe};

impl Worker {
    /// SIGTERM to every running container, up to the grace period for them to exit, SIGKILL.
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
            .unwrap_or(30)
            .max(0);
        let deadline = Instant::now() + Duration::from_secs(grace as u64);
        for c in &mut self.containers {
            c.restart_at = None;
        }
        // preStop hooks first, all containers at once, within the grace period.
        let hooks: Vec<_> = self
            .containers
            .iter()
            .filter(|c| matches!(c.state, State::Running { .. }))
            .filter_map(|c| {
                let hook = c.spec.lifecycle.as_ref()?.pre_stop.as_ref()?;
                Some(self.run_hook(c, hook, "PreStopHook", deadline))
            })
            .collect();
        let failures: Vec<String> = futures::future::join_all(hooks)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        for message in failures {
            self.event("Warning", "FailedPreStopHook", &message).await;
        }
        for c in &mut self.containers {
            if let State::Running { process, .. } = &mut c.state {
                process.signal(Signal::SIGTERM);
            }
        }
        if let Some(container) = self.containers.get(self.init_count) {
            let message = format!("Stopping container {}", container.spec.name);
            self.event("Normal", "Killing", &message).await;
        }
        loop {
            let running = self.containers.iter_mut().any(|c| match &mut c.state {
                State::Running { process, .. } => process.exited().is_none(),
                _ => false,
            });
            if !running || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for c in &mut self.containers {
            if let State::Running { process, .. } = &mut c.state {
                process.kill();
            }
        }
    }

    /// Runs container `c`'s `hook` (sleep, exec, httpGet; `kind` names it in messages:
    /// `PreStopHook`, `PostStartHook`) until it ends or `deadline`.
    pub(super) async fn run_hook(
        &self,
        c: &ContainerRun,
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
            let mut cmd = match &c.state {
                // In the container's mount namespace, root and working directory.
                State::Running { process, .. } if c.mount_ns => {
                    let mut cmd = Command::new("nsenter");
                    cmd.arg(format!("--target={}", process.pid()))
                        .args(["--mount", "--root", "--wd", "--", program]);
                    cmd
                }
                _ => Command::new(program),
            };
            cmd.args(args).env_clear().envs(c.env.iter().cloned());
            if !c.cwd.as_os_str().is_empty() {
                cmd.current_dir(&c.cwd);
            }
            let net = self.net.as_ref().ok_or("no network namespace")?;
            let log = log_path(&self.context.dir, &self.namespace, &self.name, name);
            let mut process = net
                .spawn_piped(
                    &format!("{}/{}/{name}/{kind}", self.namespace, self.name),
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
            let ip = self
                .net
                .as_ref()
                .map(PodNetwork::ip)
                .ok_or("no network namespace")?;
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
