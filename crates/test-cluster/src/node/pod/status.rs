//! What the node reports of a Pod: its status (phase, conditions, container states) and its
//! Events.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{ContainerRun, State, Worker};
use crate::netns::GATEWAY;
use crate::node::now;

impl Worker {
    pub(super) async fn report(&mut self) {
        let status = self.status();
        if self.reported.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.context.client.clone(), &self.namespace);
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            Ok(_) => self.reported = Some(status),
            Err(e) => tracing::warn!(pod = %self.name, error = %e, "reporting pod status"),
        }
    }

    pub(super) fn status(&self) -> Value {
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always");
        let (inits, apps) = self.containers.split_at(self.init_count);
        let initialized = inits.iter().all(ContainerRun::initialized);
        // An init container that failed and will not run again fails the Pod (a sidecar is not
        // run to completion: it does not count).
        let init_failed = inits.iter().any(|c| {
            !c.sidecar
                && c.restart_at.is_none()
                && matches!(c.state, State::Terminated { exit_code, .. } if exit_code != 0)
        });
        // Sidecars' readiness counts toward the Pod's.
        let all_ready = initialized
            && !apps.is_empty()
            && apps.iter().all(ContainerRun::ready)
            && inits.iter().filter(|c| c.sidecar).all(ContainerRun::ready);
        let terminated: Vec<i32> = apps
            .iter()
            .filter_map(|c| match c.state {
                State::Terminated { exit_code, .. } if c.restart_at.is_none() => Some(exit_code),
                _ => None,
            })
            .collect();
        let all_done = !apps.is_empty() && terminated.len() == apps.len();
        let phase = if init_failed {
            "Failed"
        } else if !initialized {
            "Pending"
        } else if all_done && policy != "Always" {
            if terminated.iter().all(|code| *code == 0) {
                "Succeeded"
            } else {
                "Failed"
            }
        } else if apps.iter().any(|c| c.ever_started) {
            "Running"
        } else {
            "Pending"
        };
        let condition = |kind: &str, ok: bool| {
            json!({"type": kind, "status": if ok { "True" } else { "False" },
                   "lastTransitionTime": self.start_time})
        };
        let ip = self.pod_ip();
        // As the kubelet: a plain init container is `ready` once it completed.
        let statuses = |containers: &[ContainerRun], init: bool| -> Vec<Value> {
            containers
                .iter()
                .map(|c| {
                    let ready = if init && !c.sidecar {
                        matches!(c.state, State::Terminated { exit_code: 0, .. })
                    } else {
                        c.ready()
                    };
                    let mut s = json!({
                        "name": c.spec.name,
                        "image": c.spec.image.clone().unwrap_or_default(),
                        "imageID": "",
                        "ready": ready,
                        "started": c.started(),
                        "restartCount": c.restarts,
                        "state": state_json(&c.state),
                        "lastState": c.last.clone().unwrap_or_else(|| json!({})),
                    });
                    if let State::Running { process, .. } = &c.state {
                        s["containerID"] = json!(format!("process://{}", process.pid()));
                    }
                    s
                })
                .collect()
        };
        let mut status = json!({
            "phase": phase,
            "hostIP": GATEWAY.to_string(),
            "hostIPs": [{"ip": GATEWAY.to_string()}],
            "startTime": self.start_time,
            "conditions": [
                condition("PodReadyToStartContainers", self.net.is_some()),
                condition("Initialized", initialized),
                condition("Ready", all_ready),
                condition("ContainersReady", all_ready),
                condition("PodScheduled", true),
            ],
            "containerStatuses": statuses(apps, false),
        });
        if !inits.is_empty() {
            status["initContainerStatuses"] = json!(statuses(inits, true));
        }
        if !ip.is_empty() {
            status["podIP"] = json!(ip);
            status["podIPs"] = json!([{ "ip": ip }]);
        }
        status
    }

    pub(super) async fn event(&self, kind: &str, reason: &str, message: &str) {
        let api: Api<Event> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let now = now();
        let event = json!({
            "metadata": {"generateName": format!("{}.", self.name)},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": self.namespace,
                               "name": self.name, "uid": self.uid},
            "type": kind, "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": self.context.spec.name},
            "reportingComponent": "kubelet", "reportingInstance": self.context.spec.name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        });
        let created = match serde_json::from_value::<Event>(event) {
            Ok(event) => api.create(&PostParams::default(), &event).await.err(),
            Err(e) => Some(kube::Error::SerdeError(e)),
        };
        if let Some(e) = created {
            tracing::warn!(pod = %self.name, reason, error = %e, "recording an event");
        }
    }
}

pub(super) fn state_json(state: &State) -> Value {
    match state {
        State::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        State::Running { started, .. } => json!({"running": {"startedAt": started}}),
        State::Terminated {
            exit_code,
            signal,
            started,
            finished,
        } => {
            let mut t = json!({
                "exitCode": exit_code,
                "reason": if *exit_code == 0 { "Completed" } else { "Error" },
                "startedAt": started,
                "finishedAt": finished,
            });
            if let Some(signal) = signal {
                t["signal"] = json!(signal);
            }
            json!({ "terminated": t })
        }
    }
}
