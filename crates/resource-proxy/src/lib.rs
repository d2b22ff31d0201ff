//! The resource proxy: an aggregated-API server that serves a client (tenant) cluster's
//! configured custom-resource group/versions from a target cluster.
//!
//! The modules follow a request's way through the proxy:
//!
//! 1. [`config`]: the YAML configuration, its validation and the listeners it resolves to
//!    (RP-1, RP-2), and the names of the wiring objects they imply (RP-3).
//! 2. [`listen`]: the TLS listeners, one per group/version, their serving certificate, and who may
//!    call them (RP-4).
//! 3. [`request`]: the request path of a listener: routing, discovery with local fallback
//!    (RP-13), and the resource request in named steps (RP-5 to RP-8, RP-12, RP-14). It speaks
//!    the Kubernetes API as [`api`] defines it (request classification, `Status` answers) and
//!    applies the rules of [`tenancy`].
//! 4. [`tenancy`]: what makes a client see only its own objects: owner labels on writes (RP-6),
//!    the owner selector and answer ownership (RP-7), owner references kept out of the target's
//!    garbage collector (RP-8).
//! 5. [`target`]: the connection to a target cluster: peers, their health and their source
//!    (RP-9 to RP-11), HTTP/1.1 exchanges and HTTP/2 watch streams.
//!
//! Beside the request path: [`wiring`] keeps the APIServices, Services and deletion protection
//! applied in the client cluster while this replica leads (RP-2, RP-3, RP-16), [`reconcile`]
//! keeps the target free of what deleted client namespaces left behind (also after an outage),
//! and [`metrics`] holds the Prometheus series (RP-15). [`owner_label_policy`] optionally applies,
//! in the targets, the ValidatingAdmissionPolicy that makes the owner labels an access boundary
//! there.
//!
//! Layers: [`config`], [`api`] and [`tenancy`] are pure (no I/O beyond reading the configuration
//! file) and import none of the others; [`target`] knows nothing of requests, [`listen`] nothing
//! of the request path it serves.

pub mod api;
pub mod config;
pub mod tenancy;

// The modules with I/O, behind the default `server` feature (the fuzz targets build the crate
// without it: see Cargo.toml).
#[cfg(feature = "server")]
pub mod listen;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod owner_label_policy;
#[cfg(feature = "server")]
pub mod reconcile;
#[cfg(feature = "server")]
pub mod request;
#[cfg(feature = "server")]
pub mod target;
#[cfg(feature = "server")]
pub mod wiring;
