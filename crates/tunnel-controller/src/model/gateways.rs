//! Gateways of this controller's classes and their listeners: which are accepted and
//! programmed, where their routes go (the shared plane, or a dedicated one as
//! [`crate::model::dedicated`] decides), which listeners routes may attach to, and which of those are
//! served (an HTTPS listener whose certificate does not resolve takes routes but serves none).

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::apis::standard::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersTlsMode,
};
use kube::ResourceExt;

use super::classes::{ClassSettings, Classes};
use super::types::{
    GatewayOutcome, ListenerOutcome, Model, PERMISSIVE_HOSTNAME, Plane, SUPPORTED_KINDS,
};
use crate::conditions::Verdict;
use crate::keys::{GATEWAY_GROUP, ObjKey, PartitionKey};
use crate::model::dedicated::claims;
use crate::model::dedicated::{self, ClassPolicy, Decision, Verification};
use crate::names::{self, PlaneNames};
use crate::observe::world::Snapshot;
use crate::translate::{self, BackendIndex};

/// Decides every Gateway of `classes` into `model`: dedicated planes first (one decision per
/// class over all its Gateways with a parametersRef), then each Gateway's outcome.
pub(super) fn decide(
    snap: &Snapshot,
    classes: &Classes,
    verifications: &BTreeMap<String, Verification>,
    idx: &BackendIndex,
    model: &mut Model,
) {
    let class_settings = &classes.accepted;
    let mut decisions: BTreeMap<ObjKey, Decision> = BTreeMap::new();
    for (class, cs) in class_settings {
        let dedicated: Vec<Arc<Gateway>> = snap
            .gateways
            .iter()
            .filter(|g| g.spec.gateway_class_name == *class)
            .filter(|g| {
                g.spec
                    .infrastructure
                    .as_ref()
                    .and_then(|i| i.parameters_ref.as_ref())
                    .is_some()
            })
            .cloned()
            .collect();
        decisions.extend(dedicated::decide(
            &dedicated,
            snap,
            &ClassPolicy {
                class_tunnel: &cs.tunnel_id,
                credentials: &cs.credentials,
                allow_shared_tunnels: cs.allow_shared_tunnels,
                max_per_namespace: cs.max_per_namespace,
            },
            verifications,
            &mut model.verify_requests,
        ));
    }

    for gw in &snap.gateways {
        if !classes.ours.contains(&gw.spec.gateway_class_name) {
            continue;
        }
        let key = ObjKey::of(gw.as_ref());
        let outcome = gateway_outcome(
            gw,
            class_settings.get(&gw.spec.gateway_class_name),
            decisions.get(&key),
            snap,
            idx,
        );
        model.gateways.insert(key, outcome);
    }
}

/// The advisory [`PERMISSIVE_HOSTNAME`] on listeners that admit routes of every namespace
/// without a hostname of their own: any tenant's route may serve any hostname through them.
fn permissive_listeners(
    gw: &Gateway,
    class: Option<&ClassSettings>,
    listeners: &mut [ListenerOutcome],
) {
    let guard = if class.is_some_and(|c| c.ownership.is_some()) {
        "hostname ownership limits each namespace to its delegated hostnames"
    } else {
        "set a hostname, restrict allowedRoutes.namespaces, or turn on hostname ownership in the GatewayClassConfig"
    };
    for (l, out) in gw.spec.listeners.iter().zip(listeners) {
        let all = l
            .allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
            .and_then(|n| n.from.clone())
            == Some(GatewayListenersAllowedRoutesNamespacesFrom::All);
        if all && l.hostname.as_deref().is_none_or(str::is_empty) {
            out.verdicts.push(Verdict::new(
                PERMISSIVE_HOSTNAME,
                true,
                "PermissiveHostname",
                format!("routes of every namespace may attach and name any hostname: {guard}"),
            ));
        }
    }
}

fn gateway_outcome(
    gw: &Arc<Gateway>,
    class: Option<&ClassSettings>,
    decision: Option<&Decision>,
    snap: &Snapshot,
    idx: &BackendIndex,
) -> GatewayOutcome {
    let mut listeners = listener_outcomes(gw, idx);
    permissive_listeners(gw, class, &mut listeners);
    let (client_cert, resolved_refs) = translate::gateway_client_cert(gw, idx);
    let attachable = listeners.iter().filter(|l| l.attachable).count();
    let served = listeners.iter().filter(|l| l.served).count();
    let key = ObjKey::of(gw.as_ref());
    let mut out = GatewayOutcome {
        gateway: gw.clone(),
        kind: "Gateway",
        accepted: Verdict::ok("Accepted", "the Gateway is accepted"),
        programmed: Verdict::ok("Programmed", "routes are served by the shared data plane"),
        resolved_refs,
        listeners,
        addresses: Vec::new(),
        partition: None,
        tunnel: None,
        client_cert,
        plane: Plane::Shared,
        route_refusal: None,
        accepted_event: None,
        sharing: None,
        credentials: class.map(|c| c.credentials.clone()),
        ownership: class.and_then(|c| c.ownership.clone()),
        dns_owner: class.and_then(|c| c.dns_owner.clone()),
        owner_id: class.map(|c| c.owner_id.clone()),
    };
    let refuse = |out: &mut GatewayOutcome, v: Verdict| {
        out.programmed = Verdict::fail("Programmed", "Invalid", v.message.clone());
        out.accepted = v;
    };
    let requested = gw.spec.addresses.as_deref().unwrap_or_default();
    let unsupported: Vec<String> = requested
        .iter()
        .filter(|a| a.r#type.as_deref().unwrap_or("IPAddress") != "Hostname")
        .map(|a| {
            format!(
                "{} {:?}",
                a.r#type.as_deref().unwrap_or("IPAddress"),
                a.value.as_deref().unwrap_or_default()
            )
        })
        .collect();
    if !unsupported.is_empty() {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "UnsupportedAddress",
                format!(
                    "spec.addresses: only type Hostname is supported (the tunnel's <tunnel-id>{}), not {}",
                    claims::TUNNEL_HOSTNAME_SUFFIX,
                    unsupported.join(", ")
                ),
            ),
        );
        return out;
    }
    let Some(class) = class else {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "InvalidParameters",
                format!(
                    "GatewayClass {} is not accepted; see its status",
                    gw.spec.gateway_class_name
                ),
            ),
        );
        return out;
    };
    match decision {
        None => {
            out.addresses = vec![claims::tunnel_address(&class.tunnel_id)];
            out.partition = Some(PartitionKey::Shared);
            out.tunnel = Some(class.tunnel_id.clone());
        }
        Some(Decision::Serve { resolved, sharing }) => {
            let tunnel = resolved.token.tunnel_id().to_ascii_lowercase();
            out.addresses = claims::status_addresses(gw, Some(&tunnel));
            out.partition = Some(PartitionKey::Dedicated(key.clone()));
            out.tunnel = Some(tunnel);
            out.credentials = Some(resolved.credentials.clone());
            out.sharing = sharing.clone();
            out.programmed = plane_programmed(gw, snap);
            out.plane = Plane::Serve(resolved.clone());
        }
        Some(Decision::Keep { tunnel, accepted }) => {
            out.addresses = claims::status_addresses(gw, Some(tunnel));
            out.plane = Plane::Keep;
            out.route_refusal = Some(Verdict::fail(
                "Accepted",
                accepted.reason.clone(),
                format!(
                    "parent Gateway {key} takes no new configuration (its data plane keeps serving the last one): {}",
                    accepted.message
                ),
            ));
            refuse(&mut out, accepted.clone());
            out.accepted_event = Some("RenderFailed");
            return out;
        }
        Some(Decision::Refuse {
            accepted,
            programmed,
            route,
            event,
        }) => {
            out.addresses = claims::status_addresses(gw, None);
            out.plane = Plane::Remove;
            out.route_refusal = Some(route.clone());
            out.accepted = accepted.clone();
            out.programmed = programmed.clone();
            out.accepted_event = Some(event);
            return out;
        }
    }
    // Requested addresses: each must be the hostname of the tunnel the Gateway is served by (a
    // Hostname without value gets it).
    let own = out
        .tunnel
        .as_deref()
        .map(|t| claims::tunnel_address(t).value);
    let unusable: Vec<&str> = requested
        .iter()
        .filter_map(|a| a.value.as_deref())
        .filter(|v| Some(v.trim_end_matches('.').to_ascii_lowercase()) != own)
        .collect();
    if !unusable.is_empty() {
        let message = format!(
            "spec.addresses {} cannot be used: a Gateway's address is the hostname of the tunnel it is served by ({}); nothing is served through it",
            unusable.join(", "),
            own.as_deref().unwrap_or("none")
        );
        out.programmed = Verdict::fail("Programmed", "AddressNotUsable", message.clone());
        out.route_refusal = Some(Verdict::fail(
            "Accepted",
            "Pending",
            format!("parent Gateway {key} is not programmed: {message}"),
        ));
        out.addresses = claims::status_addresses(gw, None);
        out.partition = None;
        out.tunnel = None;
        if let Plane::Serve(_) = out.plane {
            out.plane = Plane::Keep;
        }
        return out;
    }
    if attachable == 0 {
        refuse(
            &mut out,
            Verdict::fail(
                "Accepted",
                "ListenersNotValid",
                "no listener is valid; see the listener conditions",
            ),
        );
        out.partition = None;
        out.tunnel = None;
        return out;
    }
    if served == 0 {
        out.programmed = Verdict::fail(
            "Programmed",
            "Invalid",
            "no listener is programmed (see the listener conditions): routes attach, but nothing is served through this Gateway",
        );
    }
    if served < out.listeners.len() {
        out.accepted = Verdict::new(
            "Accepted",
            true,
            "ListenersNotValid",
            "some listeners are not valid; see the listener conditions",
        );
    }
    out
}

/// `Programmed` of a dedicated Gateway: True once its Deployment reports a ready replica (a Pod
/// is Ready only with a config loaded and its connector registered); until then it says how far
/// the Pods are, since their own status says why they wait.
fn plane_programmed(gw: &Gateway, snap: &Snapshot) -> Verdict {
    let ns = gw.namespace().unwrap_or_default();
    let name = PlaneNames::for_gateway(&gw.name_any()).deployment;
    let deployment = snap
        .deployments
        .iter()
        .find(|d| d.namespace().as_deref() == Some(ns.as_str()) && d.name_any() == name)
        .filter(|d| names::owned_by_gateway(&d.metadata, gw));
    let ready = deployment
        .and_then(|d| d.status.as_ref().and_then(|s| s.ready_replicas))
        .unwrap_or(0);
    if ready > 0 {
        return Verdict::ok(
            "Programmed",
            format!("the dedicated data plane {ns}/{name} has {ready} ready replica(s)"),
        );
    }
    let progress = match deployment.and_then(|d| d.spec.as_ref()) {
        None => "it is not created yet".to_owned(),
        Some(spec) => format!(
            "0 of {} Pods ready; their status and Events say why",
            spec.replicas.unwrap_or(1)
        ),
    };
    Verdict::fail(
        "Programmed",
        "Pending",
        format!(
            "waiting for a ready replica of the dedicated data plane Deployment {ns}/{name}: {progress}"
        ),
    )
}

fn listener_outcomes(gw: &Gateway, idx: &BackendIndex) -> Vec<ListenerOutcome> {
    let mut seen: BTreeMap<(i32, String), String> = BTreeMap::new();
    gw.spec
        .listeners
        .iter()
        .map(|l| {
            let mut kinds: Vec<&'static str> = Vec::new();
            let mut invalid_kinds = Vec::new();
            match l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
                Some(asked) if !asked.is_empty() => {
                    for k in asked {
                        let group_ok = k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP;
                        match SUPPORTED_KINDS.iter().find(|s| **s == k.kind) {
                            Some(s) if group_ok => kinds.push(s),
                            _ => invalid_kinds.push(format!(
                                "{}/{}",
                                k.group.as_deref().unwrap_or(GATEWAY_GROUP),
                                k.kind
                            )),
                        }
                    }
                }
                _ => kinds.extend(SUPPORTED_KINDS),
            }
            // HTTPS is terminated at Cloudflare's edge; the listener is served like HTTP.
            let passthrough = l.tls.as_ref().and_then(|t| t.mode.as_ref())
                == Some(&GatewayListenersTlsMode::Passthrough);
            let protocol_ok = l.protocol == "HTTP" || (l.protocol == "HTTPS" && !passthrough);
            let host_key = (
                l.port,
                l.hostname.clone().unwrap_or_default().to_ascii_lowercase(),
            );
            let conflict = protocol_ok
                .then(|| seen.get(&host_key).cloned())
                .flatten();
            if protocol_ok && conflict.is_none() {
                seen.insert(host_key, l.name.clone());
            }
            let mut verdicts = Vec::new();
            let accepted = if l.protocol == "HTTPS" && passthrough {
                Verdict::fail(
                    "Accepted",
                    "UnsupportedProtocol",
                    "tls.mode Passthrough is not supported: Cloudflare terminates TLS at the edge",
                )
            } else if !protocol_ok {
                Verdict::fail(
                    "Accepted",
                    "UnsupportedProtocol",
                    format!(
                        "protocol {} is not supported: Cloudflare terminates TLS at the edge and the tunnel carries HTTP; use protocol HTTP or HTTPS",
                        l.protocol
                    ),
                )
            } else {
                Verdict::ok("Accepted", "the listener is accepted")
            };
            let certificates = if l.protocol == "HTTPS" && protocol_ok {
                listener_certificates("Gateway", &gw.namespace().unwrap_or_default(), l, idx)
            } else {
                Ok(())
            };
            let resolved = if let Err(v) = &certificates {
                v.clone()
            } else if invalid_kinds.is_empty() {
                Verdict::ok("ResolvedRefs", "all references resolve")
            } else {
                Verdict::fail(
                    "ResolvedRefs",
                    "InvalidRouteKinds",
                    format!(
                        "unsupported route kinds {}: supported are HTTPRoute and GRPCRoute",
                        invalid_kinds.join(", ")
                    ),
                )
            };
            let conflicted = match &conflict {
                Some(other) => Verdict::new(
                    "Conflicted",
                    true,
                    "HostnameConflict",
                    format!("listener {other} already serves this port and hostname"),
                ),
                None => Verdict::new("Conflicted", false, "NoConflicts", "no conflicts"),
            };
            let attachable = protocol_ok && conflict.is_none() && !kinds.is_empty();
            let served = attachable && certificates.is_ok();
            let programmed = if served {
                Verdict::ok("Programmed", "the listener is programmed")
            } else if attachable {
                Verdict::fail(
                    "Programmed",
                    "Invalid",
                    "the listener's certificate references do not resolve: routes attach to it, but nothing is served through it",
                )
            } else {
                Verdict::fail("Programmed", "Invalid", "the listener is not valid")
            };
            verdicts.extend([accepted, resolved, conflicted, programmed]);
            ListenerOutcome {
                name: l.name.clone(),
                supported_kinds: kinds,
                verdicts,
                attached_routes: 0,
                attachable,
                served,
            }
        })
        .collect()
}

/// An HTTPS listener's `tls.certificateRefs`: each must be a valid `kubernetes.io/tls` Secret
/// the listener's owner (`referrer_kind` `Gateway` or `ListenerSet`, in `referrer_ns`) may
/// reference. Cloudflare's edge presents its own certificate, so they are validated, not served;
/// the first problem is the listener's `ResolvedRefs=False`.
pub(super) fn listener_certificates(
    referrer_kind: &str,
    referrer_ns: &str,
    l: &GatewayListeners,
    idx: &BackendIndex,
) -> Result<(), Verdict> {
    let refs = l
        .tls
        .as_ref()
        .and_then(|t| t.certificate_refs.as_deref())
        .unwrap_or_default();
    if refs.is_empty() {
        return Err(Verdict::fail(
            "ResolvedRefs",
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs",
        ));
    }
    for r in refs {
        let reference = translate::SecretRef {
            group: r.group.as_deref(),
            kind: r.kind.as_deref(),
            namespace: r.namespace.as_deref(),
            name: &r.name,
        };
        translate::tls_secret(
            referrer_kind,
            referrer_ns,
            "tls.certificateRefs",
            reference,
            "InvalidCertificateRef",
            idx,
        )?;
    }
    Ok(())
}
