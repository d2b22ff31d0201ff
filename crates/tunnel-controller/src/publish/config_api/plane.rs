//! The config API's TLS of one plane in a round: its Secret written and how to push to it, the
//! pods pushed again during a CA rotation, and the certificates it holds now.

use crate::keys::PartitionKey;
use crate::model::Model;
use crate::names::PlaneNames;
use crate::observe::world::Snapshot;
use crate::publish::config_api::expiry::PlaneCerts;
use crate::publish::config_api::tls::{ConfigTls, PlaneTarget, PlaneTls, RoundCa};
use crate::publish::planes::Planes;

/// During a CA rotation: the pods of a partition that last presented a certificate of the old
/// CA are pushed again (same version) until they present one of the new CA; only then is the
/// previous CA retired. True when one was, so the next round should come soon.
pub fn recheck(
    planes: &mut Planes,
    key: &PartitionKey,
    endpoints: &[String],
    round: &RoundCa,
) -> bool {
    let mut again = false;
    for ep in endpoints {
        let presented = planes.presented(ep);
        if presented.is_some() && !round.on_active(presented.as_deref()) {
            planes.repush(key, ep);
            again = true;
        }
    }
    again
}

/// Writes a partition's TLS Secret when it must change; how to push to it.
pub async fn transport(
    tls: &ConfigTls,
    round: &RoundCa,
    key: &PartitionKey,
    shared_plane_service: &str,
    model: &Model,
    snap: &Snapshot,
) -> Result<PlaneTls, String> {
    let now = std::time::SystemTime::now();
    match key {
        PartitionKey::Shared => {
            let target = tls.shared_target(shared_plane_service);
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

/// A plane's certificates this round: the CAs and client certificates of `round`, the serving
/// certificate of its Secret, or why the Secret is unavailable.
pub fn certs(round: &RoundCa, plane: Result<&PlaneTls, &String>) -> PlaneCerts {
    PlaneCerts {
        ca: round.ca_not_after(),
        client: round.client_not_after(),
        serving: plane.ok().and_then(|p| p.serving_not_after),
        problem: plane.err().cloned(),
    }
}
