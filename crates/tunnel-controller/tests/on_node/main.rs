//! The install as deployed: `kubectl apply -k deploy/tunnel-gateway` on a harness cluster with the
//! node agent runs the controller's Deployment, the shared plane's Pods and the dedicated planes
//! the controller renders (the real tunnel-proxy beside the connector stand-in) from the project's
//! images (`make images-test`), and requests sent to the Cloudflare double's edge travel edge →
//! connector → proxy Pod → echo-basic Pod.
//!
//! The double runs in this process on host loopback; the node's private network namespace sees
//! its API and connector port at `10.244.0.1` under the names every Pod's `/etc/hosts` carries.
//! Each test starts its own cluster ([`support::Install`]), one test at a time.
//!
//! - [`helm`]: the same install from the Helm chart: leader, a route through the edge, `helm
//!   upgrade` to new image tags under traffic, `helm uninstall`.
//! - [`install`]: the controller's two replicas and Lease, the shared plane through the edge
//!   (404 and 530 included), a dedicated plane, a shared plane Pod deleted under traffic.
//! - [`isolation`]: the per-Gateway isolation guide on real Pods: `Programmed` follows the
//!   plane's readiness, a token rotation under traffic, a refused claim.

mod support;

mod helm;
mod install;
mod isolation;
