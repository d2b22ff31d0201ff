//! The config API's TLS per plane in a round: each plane's Secret written, how to push to it,
//! the pods rechecked during a CA rotation, and the certificates' expiry published.

use super::*;

impl Controller {
    /// During a CA rotation: the pods of a partition that last presented a certificate of the
    /// old CA are pushed again (same version) until they present one of the new CA; only then is
    /// the previous CA retired.
    pub(super) fn recheck_planes(
        &self,
        planes: &mut Planes,
        key: &PartitionKey,
        endpoints: &[String],
        round: &RoundCa,
        outcome: &mut Outcome,
    ) {
        for ep in endpoints {
            let presented = planes.presented(ep);
            if presented.is_some() && !round.on_active(presented.as_deref()) {
                planes.repush(key, ep);
                outcome.again = true;
            }
        }
    }

    /// The expiry series of this round's planes (those of planes gone removed) and each plane's
    /// condition ([`config_expiry::verdict`]).
    pub(super) fn publish_expiry(
        &self,
        certs: &BTreeMap<PartitionKey, PlaneCerts>,
    ) -> BTreeMap<PartitionKey, crate::conditions::Verdict> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let family = &self.metrics.config_tls_expiry;
        let mut published = self
            .tls_planes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut verdicts = BTreeMap::new();
        let mut planes = BTreeSet::new();
        for (key, c) in certs {
            let plane = config_expiry::plane_label(key);
            for (kind, at) in c.series() {
                let labels = TlsExpiryLabels {
                    plane: plane.clone(),
                    kind,
                };
                match at {
                    Some(at) => {
                        family.get_or_create(&labels).set(at);
                    }
                    None => {
                        family.remove(&labels);
                    }
                }
            }
            let verdict = config_expiry::verdict(&plane, c, now);
            if !verdict.status {
                tracing::warn!(plane = %plane, reason = %verdict.reason, "{}", verdict.message);
            }
            verdicts.insert(key.clone(), verdict);
            planes.insert(plane);
        }
        for gone in published.difference(&planes) {
            for (kind, _) in PlaneCerts::default().series() {
                family.remove(&TlsExpiryLabels {
                    plane: gone.clone(),
                    kind,
                });
            }
        }
        *published = planes;
        verdicts
    }

    /// Writes a partition's TLS Secret when it must change; how to push to it.
    pub(super) async fn plane_transport(
        &self,
        tls: &ConfigTls,
        round: &RoundCa,
        key: &PartitionKey,
        model: &Model,
        snap: &crate::world::Snapshot,
    ) -> Result<PlaneTls, String> {
        let now = std::time::SystemTime::now();
        match key {
            PartitionKey::Shared => {
                let target = tls.shared_target(&self.settings.shared_plane_service);
                tls.plane(round, &target, snap, now).await
            }
            PartitionKey::Dedicated(gw) => {
                let names = PlaneNames::for_gateway(&gw.name);
                let gateway = model
                    .gateways
                    .get(gw)
                    .map(|g| g.gateway.as_ref())
                    .ok_or_else(|| format!("Gateway {gw} is not served"))?;
                let target = PlaneTarget {
                    namespace: &gw.namespace,
                    secret: &names.config_tls_secret,
                    service: &names.config_service,
                    gateway: Some(gateway),
                };
                tls.plane(round, &target, snap, now).await
            }
        }
    }

    /// A partition's proxies and its token.
    pub(super) async fn partition_target(
        &self,
        key: &PartitionKey,
        model: &Model,
        snap: &crate::world::Snapshot,
    ) -> (planes::ConfigEndpoints, Result<String, String>) {
        match key {
            PartitionKey::Shared => {
                let ns = &self.settings.namespace;
                let endpoints = planes::config_endpoints(
                    &snap.endpoint_slices,
                    ns,
                    &self.settings.shared_plane_service,
                );
                let token = self.shared_token(snap).await;
                (endpoints, token)
            }
            PartitionKey::Dedicated(gw) => {
                let names = PlaneNames::for_gateway(&gw.name);
                let endpoints = planes::config_endpoints(
                    &snap.endpoint_slices,
                    &gw.namespace,
                    &names.config_service,
                );
                let token = match model.gateways.get(gw).map(|g| &g.plane) {
                    Some(Plane::Serve(r)) => match &r.auth {
                        AuthToken::Existing(t) => Ok(t.clone()),
                        AuthToken::Generate => Err(format!(
                            "the data plane's token Secret {}/{} is being created",
                            gw.namespace, names.auth_secret
                        )),
                    },
                    _ => Err(format!("Gateway {gw} is not served")),
                };
                (endpoints, token)
            }
        }
    }

    /// The shared plane's token, from its Secret; created (random) when missing.
    pub(super) async fn shared_token(
        &self,
        snap: &crate::world::Snapshot,
    ) -> Result<String, String> {
        let ns = &self.settings.namespace;
        let name = &self.settings.shared_plane_auth_secret;
        if let Some(s) = snap
            .secrets
            .iter()
            .find(|s| s.namespace().as_deref() == Some(ns.as_str()) && s.name_any() == *name)
        {
            return secret_value(s, AUTH_TOKEN_KEY).ok_or_else(|| {
                format!("Secret {ns}/{name} has no key {AUTH_TOKEN_KEY:?} (the shared plane's config-API token)")
            });
        }
        let token = random_token();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "tunnel-gateway-controller".to_owned(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                AUTH_TOKEN_KEY.to_owned(),
                ByteString(token.clone().into_bytes()),
            )])),
            ..Default::default()
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(secret = %format!("{ns}/{name}"), "created the shared plane's config-API token");
                Ok(token)
            }
            // Created meanwhile (another replica, or the operator): the next round reads it.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Err(format!("Secret {ns}/{name} was just created; retrying"))
            }
            Err(e) => Err(format!("creating Secret {ns}/{name}: {e}")),
        }
    }
}

/// A plane's certificates this round: the CAs and client certificates of `round`, the serving
/// certificate of its Secret, or why the Secret is unavailable.
pub(super) fn plane_certs(round: &RoundCa, plane: Result<&PlaneTls, &String>) -> PlaneCerts {
    PlaneCerts {
        ca: round.ca_not_after(),
        client: round.client_not_after(),
        serving: plane.ok().and_then(|p| p.serving_not_after),
        problem: plane.err().cloned(),
    }
}
