//! Container probes as the kubelet runs them: startup first, then liveness and readiness;
//! a failed liveness or startup probe stops the container and its restart policy takes over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::super::probe::{self, Prober};
use super::{State, Worker};
use crate::netns::PodNetwork;

/// The probes of one container run, and a pending kill by a failed liveness or startup probe.
#[derive(Default)]
pub(super) struct Probes {
    pub(super) startup: Option<Prober>,
    pub(super) readiness: Option<Prober>,
    pub(super) liveness: Option<Prober>,
    /// When a container told to stop (SIGTERM) for a failed probe gets SIGKILL.
    pub(super) kill_at: Option<Instant>,
}

impl Worker {
    /// Runs container `i`'s due probes; a failed liveness or startup probe stops the container
    /// (SIGTERM, SIGKILL after the grace period) and the restart policy takes over.
    pub(super) async fn probe(&mut self, i: usize) {
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
}
