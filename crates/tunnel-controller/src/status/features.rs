//! The Gateway API features this implementation supports, as `GatewayClass.status.supportedFeatures`
//! lists them (Gateway API v1.5.1 feature names). The conformance suite reads this list when it is
//! given none, so `make conformance` (docs/conformance/README.md) checks that each one passes:
//! a feature is listed here only when its conformance tests pass against the install.
//!
//! Left out although the proxy implements them, because their tests cannot pass through
//! Cloudflare's edge (docs/conformance/README.md): `HTTPRouteBackendProtocolH2C` (the test's
//! client speaks cleartext HTTP/2 to the Gateway's address), `GRPCRouteNamedRouteRule` (gRPC
//! over cleartext HTTP/2, likewise) and `HTTPRouteParentRefPort` (the edge serves fixed ports and
//! the tunnel does not carry the one a visitor used). `GatewayInfrastructurePropagation` is also
//! left out: dedicated planes carry `spec.infrastructure` labels and annotations
//! ([`crate::model::dedicated`]), but a Gateway of the shared plane (as the suite's is) has no
//! resources of its own to carry them.

/// Sorted, unique.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "Gateway",
    "GatewayBackendClientCertificate",
    "GatewayHTTPListenerIsolation",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_sorted_and_unique() {
        let mut sorted = SUPPORTED_FEATURES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, SUPPORTED_FEATURES);
    }
}
