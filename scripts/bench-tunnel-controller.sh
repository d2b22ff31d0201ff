#!/usr/bin/env bash
# TG-15 benchmark, controller half: 1,000 HTTPRoutes over 100 Gateways created in a burst against
# a real kube-apiserver + etcd (the test-cluster binaries), with the release build of
# tunnel-gateway-controller running as the install's ServiceAccount, the Cloudflare contract
# double and two in-process tunnel-proxy instances as the shared plane. Prints the time to
# convergence (route statuses, proxy documents, the tunnel's ingress document), the controller's
# memory, its Cloudflare writes, sync rounds and status writes, and a baseline (the same creates
# with no controller running). Extra arguments go to the benchmark (`--help` lists them):
#
#   scripts/bench-tunnel-controller.sh
#   scripts/bench-tunnel-controller.sh --route-order round-robin --concurrency 16
#
# The controller logs at debug (`RUST_LOG`, default below): each sync round's duration and
# counts are in target/bench-tunnel-controller/tunnel-gateway-controller.log after the run.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export RUST_LOG="${RUST_LOG:-info,tunnel_controller=debug}"

bash scripts/build-control-plane.sh >/dev/null
echo "building tunnel-gateway-controller and the bench-controller example (release)" >&2
# Two builds: with the example, the dev-dependencies' features would be unified into the
# controller's; alone, the binary is exactly what `cargo build --release -p tunnel-controller` ships.
cargo build --release --locked -q -p tunnel-controller --bin tunnel-gateway-controller
cargo build --release --locked -q -p tunnel-controller --example bench-controller

echo "commit $(git rev-parse --short HEAD), $(nproc) CPUs" >&2
"$CARGO_TARGET_DIR/release/examples/bench-controller" \
  --controller-bin "$CARGO_TARGET_DIR/release/tunnel-gateway-controller" \
  --state-dir "${STATE_DIR:-$CARGO_TARGET_DIR/bench-tunnel-controller}" "$@"
