//! End to end: a real kube-apiserver with the Gateway API CRDs and ours, the
//! `tunnel-gateway-controller` binary, in-process tunnel-proxy instances standing in for the
//! shared plane's pods (the EndpointSlices of its headless config Service point at them), local
//! HTTP backends behind Services whose EndpointSlices point at them, and the Cloudflare contract
//! double. Users act with kubectl; the tests read what users read (statuses, Events, the tunnel's
//! ingress document, responses through the proxy).
//!
//! The world is shared by the tests of this binary (one control plane, one controller). Tests
//! that break something every route depends on (the Cloudflare API, the shared plane's pushes)
//! take the world exclusively; the others share it, each in its own namespace with its own
//! hostnames.

mod world;

mod access;
mod bad_input;
mod cloudflare;
mod dedicated;
mod dns;
mod listener_sets;
mod monitoring;
mod ownership;
mod pushes;
mod routing;
mod spec_rules;
