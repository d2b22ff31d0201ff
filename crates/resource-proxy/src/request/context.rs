//! What one listener knows: its group/version, target, caller authentication, owner labels,
//! discovery and metrics. Every step of the request path reads it.

use std::sync::Arc;

use super::discovery::Discovery;
use crate::config::GroupVersionListener;
use crate::listen::caller_auth::Authenticator;
use crate::metrics::{Metrics, RequestSeries};
use crate::reconcile::namespaces::NamespaceCleaner;
use crate::target::TargetClient;
use crate::tenancy::labels::OwnerLabels;

/// Everything one listener needs to answer requests: its group/version, target, caller
/// authentication, owner labels and metrics.
pub struct ListenerContext {
    pub listener: GroupVersionListener,
    pub target: TargetClient,
    pub auth: Authenticator,
    pub owner: OwnerLabels,
    pub client_cluster: kube::Client,
    pub discovery: Discovery,
    pub metrics: Metrics,
    /// The client's namespaces in the target (mirroring, RP-8).
    pub namespaces: Arc<NamespaceCleaner>,
    /// The series every request updates, resolved once.
    pub(super) series: RequestSeries,
}

impl ListenerContext {
    /// The listener of `listener`'s group/version, proxying to `target`.
    pub fn new(
        listener: GroupVersionListener,
        target: TargetClient,
        auth: Authenticator,
        owner: OwnerLabels,
        client_cluster: kube::Client,
        metrics: Metrics,
    ) -> Self {
        ListenerContext {
            namespaces: Arc::new(NamespaceCleaner::new(
                target.clone(),
                owner.clone(),
                [&listener],
                metrics.clone(),
            )),
            discovery: Discovery::new(&listener),
            series: RequestSeries::new(&metrics, target.name(), listener.group_version()),
            listener,
            target,
            auth,
            owner,
            client_cluster,
            metrics,
        }
    }

    /// Shares `cleaner` (every group/version of the client in this target) instead of one of
    /// this listener's own.
    pub fn with_namespaces(mut self, cleaner: Arc<NamespaceCleaner>) -> Self {
        self.namespaces = cleaner;
        self
    }
}
