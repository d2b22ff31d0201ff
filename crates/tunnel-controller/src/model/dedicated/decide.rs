//! Which Gateways get a dedicated data plane this round (TG-7 .. TG-10), without I/O: each
//! Gateway carrying `spec.infrastructure.parametersRef` has its GatewayConfig and Secrets
//! resolved, its claim verified (the verdicts come from [`crate::publish::cloudflare::verify`] through the
//! controller's cache), arbitrated against the other claims ([`super::claims`]) and counted
//! against its namespace's cap ([`super::cap`]); one claim set feeds partitioning, status and
//! rendering, so they cannot disagree.

use std::collections::BTreeMap;
use std::sync::Arc;

use cloudflare_api::ConnectorToken;
use gateway_api::apis::standard::gateways::Gateway;
use kube::ResourceExt;

use super::cap::{self, Contender, Slot};
use super::claims::{
    self, ClaimPolicy, ClaimVerdict, Claimant, EVENT_TUNNEL_CLAIM_REJECTED, Sharing,
};
use crate::api::{
    DEFAULT_API_TOKEN_KEY, DEFAULT_AUTH_TOKEN_KEY, DEFAULT_TUNNEL_TOKEN_KEY, GROUP, GatewayConfig,
};
use crate::conditions::Verdict;
use crate::credentials::{Credentials, secret_value};
use crate::keys::{GatewayKey, ObjKey};
use crate::names::{self, PlaneNames};
use crate::observe::world::Snapshot;

/// The class-wide inputs of the decision.
#[derive(Debug, Clone)]
pub struct ClassPolicy<'a> {
    pub class_tunnel: &'a str,
    pub credentials: &'a Credentials,
    pub allow_shared_tunnels: bool,
    pub max_per_namespace: Option<i32>,
}

/// The config-API token of a plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthToken {
    /// From the `authTokenSecretRef` Secret, or the generated Secret that exists.
    Existing(String),
    /// Nothing yet: the provisioner generates `cf-proxy-<gw>-auth`.
    Generate,
}

/// A Gateway's resolved configuration.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub config: Arc<GatewayConfig>,
    pub tunnel_token: String,
    pub token: ConnectorToken,
    /// The credentials that write this tunnel's document (the GatewayConfig's, else the class's).
    pub credentials: Credentials,
    pub auth: AuthToken,
}

/// What the Cloudflare API said about a claim (cached by the controller per token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    Verified,
    /// Refused, with the Gateway's `Accepted=False` verdict.
    Refused(Verdict),
    /// Not known yet (never asked, or the API gave no answer).
    Pending(String),
}

/// A claim the controller must verify before the next decision.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    pub key: String,
    pub token: ConnectorToken,
    pub credentials: Credentials,
}

/// The decision for one dedicated Gateway.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Render and serve its plane.
    Serve {
        resolved: Box<Resolved>,
        sharing: Option<Sharing>,
    },
    /// It holds its tunnel but its configuration stopped resolving (or verifying): the plane
    /// keeps serving its last config, new changes fail closed, the Gateway says why.
    Keep { tunnel: String, accepted: Verdict },
    /// No plane: refused by the cap or the claim rule, or nothing resolves.
    Refuse {
        accepted: Verdict,
        programmed: Verdict,
        /// What its routes say on this parent.
        route: Verdict,
        /// The Warning Event reason for the refusal.
        event: &'static str,
    },
}

/// The verification cache key of a token (with the credentials that verify it).
pub fn verification_key(tunnel_token: &str, credentials: &Credentials) -> String {
    names::sha256_hex(&format!("{tunnel_token}\n{}", credentials.api_token))
}

/// Decides every dedicated Gateway of one class.
pub fn decide(
    gateways: &[Arc<Gateway>],
    snap: &Snapshot,
    policy: &ClassPolicy<'_>,
    verifications: &BTreeMap<String, Verification>,
    requests: &mut Vec<VerifyRequest>,
) -> BTreeMap<ObjKey, Decision> {
    let mut resolved: BTreeMap<ObjKey, Result<Resolved, Verdict>> = BTreeMap::new();
    let mut claimants = Vec::new();
    let mut contenders = Vec::new();
    for gw in gateways {
        let key = ObjKey::of(gw.as_ref());
        // A resolved configuration counts only once the Cloudflare API has verified its token;
        // until then the claim is asked for and the Gateway says why it waits.
        let r = resolve(gw, snap, policy.credentials).and_then(|res| {
            let vkey = verification_key(&res.tunnel_token, &res.credentials);
            match verifications.get(&vkey) {
                Some(Verification::Verified) => Ok(res),
                Some(Verification::Refused(v)) => Err(v.clone()),
                answer => {
                    requests.push(VerifyRequest {
                        key: vkey,
                        token: res.token.clone(),
                        credentials: res.credentials.clone(),
                    });
                    let why = match answer {
                        Some(Verification::Pending(why)) => {
                            format!("verifying the tunnel claim with the Cloudflare API: {why}")
                        }
                        _ => "verifying the tunnel claim with the Cloudflare API".to_owned(),
                    };
                    Err(Verdict::fail("Accepted", "TunnelVerificationPending", why))
                }
            }
        });
        let verified_tunnel = r.as_ref().ok().map(|res| res.token.tunnel_id().to_owned());
        claimants.push(Claimant::new(gw, verified_tunnel.as_deref()));
        contenders.extend(Contender::of(gw));
        resolved.insert(key, r);
    }
    let claims = claims::arbitrate(
        &claimants,
        ClaimPolicy {
            class_tunnel: policy.class_tunnel,
            allow_shared_tunnels: policy.allow_shared_tunnels,
        },
    );
    let slots = cap::allot(&contenders, policy.max_per_namespace);

    let mut out = BTreeMap::new();
    for gw in gateways {
        let key = ObjKey::of(gw.as_ref());
        let gkey = GatewayKey::of(gw);
        let r = resolved.remove(&key).expect("resolved every gateway");
        let decision = if let Some(Slot::Refused(refusal)) = slots.get(&gkey) {
            let [accepted, programmed] = refusal.gateway_verdicts();
            Decision::Refuse {
                accepted,
                programmed,
                route: refusal.route_verdict(),
                event: cap::DATA_PLANE_QUOTA_EXCEEDED,
            }
        } else {
            match (claims.get(&gkey), r) {
                (Some(ClaimVerdict::Rejected(rej)), _) => Decision::Refuse {
                    accepted: rej.gateway_verdict(),
                    programmed: Verdict::fail(
                        "Programmed",
                        "Invalid",
                        "the tunnel claim is refused",
                    ),
                    route: rej.route_verdict(),
                    event: EVENT_TUNNEL_CLAIM_REJECTED,
                },
                (Some(ClaimVerdict::Holds { sharing, .. }), Ok(res)) => Decision::Serve {
                    resolved: Box::new(res),
                    sharing: sharing.clone(),
                },
                (Some(ClaimVerdict::Holds { tunnel, .. }), Err(accepted)) => Decision::Keep {
                    tunnel: tunnel.clone(),
                    accepted,
                },
                (_, Err(accepted)) => unresolved(&key, accepted),
                // Verified claims always get a claim verdict; kept total for safety.
                (_, Ok(_)) => unresolved(
                    &key,
                    Verdict::fail(
                        "Accepted",
                        "TunnelVerificationPending",
                        "the tunnel claim is being decided",
                    ),
                ),
            }
        };
        out.insert(key, decision);
    }
    out
}

/// No tunnel is known for the Gateway (its configuration does not resolve or its claim is not
/// verified, and it advertises none): no plane, and it says why.
fn unresolved(key: &ObjKey, accepted: Verdict) -> Decision {
    let event = if accepted.reason.starts_with("Tunnel") {
        EVENT_TUNNEL_CLAIM_REJECTED
    } else {
        "RenderFailed"
    };
    Decision::Refuse {
        programmed: Verdict::fail("Programmed", "Invalid", accepted.message.clone()),
        route: Verdict::fail(
            "Accepted",
            accepted.reason.clone(),
            format!(
                "parent Gateway {key} has no data plane: {}",
                accepted.message
            ),
        ),
        accepted,
        event,
    }
}

/// Resolves a Gateway's GatewayConfig, tunnel token, credentials and config-API token.
pub fn resolve(gw: &Gateway, snap: &Snapshot, class: &Credentials) -> Result<Resolved, Verdict> {
    let invalid = |m: String| Verdict::fail("Accepted", "InvalidParameters", m);
    let ns = gw.namespace().unwrap_or_default();
    let pref = gw
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
        .ok_or_else(|| invalid("no spec.infrastructure.parametersRef".into()))?;
    if pref.group != GROUP || pref.kind != "GatewayConfig" {
        return Err(invalid(format!(
            "spec.infrastructure.parametersRef names {}/{}; only {GROUP}/GatewayConfig is supported",
            pref.group, pref.kind
        )));
    }
    let config = snap
        .gateway_configs
        .iter()
        .find(|c| c.namespace().as_deref() == Some(ns.as_str()) && c.name_any() == pref.name)
        .cloned()
        .ok_or_else(|| invalid(format!("GatewayConfig {ns}/{} does not exist", pref.name)))?;
    let secret = |name: &str, key: &str, what: &str| -> Result<String, Verdict> {
        let s = snap
            .secrets
            .iter()
            .find(|s| s.namespace().as_deref() == Some(ns.as_str()) && s.name_any() == name)
            .ok_or_else(|| invalid(format!("{what}: Secret {ns}/{name} does not exist")))?;
        secret_value(s, key)
            .ok_or_else(|| invalid(format!("{what}: Secret {ns}/{name} has no key {key:?}")))
    };
    let tref = &config.spec.tunnel_token_secret_ref;
    let tunnel_token = secret(
        &tref.name,
        tref.key_or(DEFAULT_TUNNEL_TOKEN_KEY),
        "the connector token (tunnelTokenSecretRef)",
    )?;
    let token = ConnectorToken::parse(&tunnel_token).map_err(|e| {
        invalid(format!(
            "the connector token in Secret {ns}/{} is not a tunnel token: {e}",
            tref.name
        ))
    })?;
    let credentials = match &config.spec.cloudflare_credentials_secret_ref {
        Some(c) => Credentials {
            api_token: secret(
                &c.name,
                c.key_or(DEFAULT_API_TOKEN_KEY),
                "the Cloudflare credentials (cloudflareCredentialsSecretRef)",
            )?,
            account_id: Some(token.account_tag().to_owned()),
        },
        None => class.clone(),
    };
    let auth = match &config.spec.auth_token_secret_ref {
        Some(a) => AuthToken::Existing(secret(
            &a.name,
            a.key_or(DEFAULT_AUTH_TOKEN_KEY),
            "the config-API token (authTokenSecretRef)",
        )?),
        None => {
            let name = PlaneNames::for_gateway(&gw.name_any()).auth_secret;
            match snap
                .secrets
                .iter()
                .find(|s| s.namespace().as_deref() == Some(ns.as_str()) && s.name_any() == name)
            {
                None => AuthToken::Generate,
                Some(s) if names::owned_by_gateway(&s.metadata, gw) => AuthToken::Existing(
                    secret_value(s, DEFAULT_AUTH_TOKEN_KEY).ok_or_else(|| {
                        invalid(format!(
                            "Secret {ns}/{name} has no key {DEFAULT_AUTH_TOKEN_KEY:?}"
                        ))
                    })?,
                ),
                Some(_) => {
                    return Err(invalid(format!(
                        "Secret {ns}/{name} exists and is not owned by this Gateway, so it is not used as the data plane's token; delete it or set authTokenSecretRef on the GatewayConfig"
                    )));
                }
            }
        }
    };
    Ok(Resolved {
        config,
        tunnel_token,
        token,
        credentials,
        auth,
    })
}
