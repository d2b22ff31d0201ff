//! The Pod's directory and its volumes: prepared before the containers start (retried while a
//! Secret or ConfigMap is missing), refreshed while the Pod runs.

use std::path::PathBuf;
use std::time::Instant;

use super::super::volumes;
use super::{CONFIG_RETRY, State, VOLUME_REFRESH, Worker};

impl Worker {
    /// The Pod's directory under the agent's: container logs, volumes, mount points.
    pub(super) fn pod_dir(&self) -> PathBuf {
        self.context
            .dir
            .join("pods")
            .join(format!("{}_{}", self.namespace, self.name))
    }

    /// What the Pod's volumes are made of; `field` answers the downward API.
    fn sources<'a>(
        &'a self,
        field: &'a (dyn Fn(&str) -> Result<String, String> + Sync),
    ) -> volumes::Sources<'a> {
        volumes::Sources {
            client: &self.context.client,
            pod: &self.pod,
            field,
            api_ca: &self.context.api_ca,
            hosts: &self.context.spec.hosts,
        }
    }

    /// Brings the volumes up to date with their Secrets, ConfigMaps and tokens.
    pub(super) async fn refresh_volumes(&mut self) {
        self.volumes_refresh = Instant::now() + VOLUME_REFRESH;
        let Some(volumes) = &self.volumes else {
            return;
        };
        let field = |path: &str| self.field(path);
        let sources = self.sources(&field);
        if let Err(e) = volumes::refresh(&sources, volumes).await {
            tracing::warn!(pod = %self.name, error = %e, "refreshing the pod's volumes");
        }
    }

    /// Prepares the Pod's volumes (again every second while that fails, with a `FailedMount`
    /// Event for each new reason; the containers wait in `ContainerCreating` meanwhile).
    pub(super) async fn mount_volumes(&mut self) {
        if Instant::now() < self.mount_retry {
            return;
        }
        self.mount_retry = Instant::now() + CONFIG_RETRY;
        let field = |path: &str| self.field(path);
        let sources = self.sources(&field);
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
}
