//! Leader election on a `coordination.k8s.io/v1` Lease: every replica runs, one holds the lease
//! and does the writes; when it dies, another takes over once the lease expires.

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Error;

/// Where the lease lives and who we are.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (unique per replica: pod name, or host name plus pid).
    pub identity: String,
    /// How long a lease is valid without renewal; a successor waits at most this long.
    pub duration_seconds: u64,
    /// How long before expiry the holder renews.
    pub grace_seconds: u64,
}

impl LeaseConfig {
    /// A lease with a 15 s duration renewed 5 s before expiry (client-go's defaults are 15 s / 10 s
    /// renew deadline; this is the same order).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

/// A running election. `is_leader` follows the lease; dropping this releases the lease (if held)
/// so a successor does not wait for expiry.
pub struct Leadership {
    rx: watch::Receiver<bool>,
    task:
        JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

impl Leadership {
    /// Whether this replica holds the lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// A receiver that sees every change of leadership.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Releases the lease (if held) and waits until that is written.
    pub async fn release(self) {
        let Leadership { rx, task } = self;
        drop(rx);
        let _ = task.await;
    }

    /// Stops renewing at once without releasing: what a crashed replica looks like.
    pub fn abandon(self) {
        self.task.abort();
    }
}

/// Joins the election for `config`'s lease (creating the Lease if missing).
pub async fn elect(client: kube::Client, config: &LeaseConfig) -> Result<Leadership, Error> {
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration_seconds)
        .with_grace(config.grace_seconds)
        .build()
        .await
        .map_err(|source| Error::Lease {
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            source,
        })?;
    let (rx, task) = manager.watch().await;
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "joined leader election");
    Ok(Leadership { rx, task })
}
