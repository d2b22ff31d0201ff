#!/usr/bin/env bash
# TG-15 route propagation (gateway-api-bench's method): the controller benchmark's world (real
# kube-apiserver + etcd, the release controller, the Cloudflare double, two in-process
# tunnel-proxy instances as the shared plane) with 3,000 HTTPRoutes over 300 Gateways present;
# then one more route's backend is switched SWITCHES times (default 40) under a steady request
# stream through each proxy. Prints, per switch, the time from the API write to the first answer
# from the new backend (p50/p99/max), the failed requests and the old-backend answers after the
# switch point, and the controller's memory; then the controller's convergence at 10,000 routes
# over 1,000 Gateways (SCALE=0 skips it): created in a burst while the controller runs, and then
# (COLD=0 skips it) created first with the controller started over them, timed from its start.
# Peers' published figures: docs/benchmarks.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SWITCHES="${SWITCHES:-40}"
echo "== propagation: 3,000 routes over 300 Gateways, $SWITCHES switches" >&2
STATE_DIR="$ROOT/target/bench-propagation" bash "$ROOT/scripts/bench-tunnel-controller.sh" \
  --routes 3000 --gateways 300 --quiet-secs 3 --timeout-secs 300 --switches "$SWITCHES" "$@"
if [ "${SCALE:-1}" != 0 ]; then
  echo "== convergence: 10,000 routes over 1,000 Gateways" >&2
  STATE_DIR="$ROOT/target/bench-scale" bash "$ROOT/scripts/bench-tunnel-controller.sh" \
    --routes 10000 --gateways 1000 --quiet-secs 5 --timeout-secs 600 "$@"
  if [ "${COLD:-1}" != 0 ]; then
    echo "== convergence from a cold start: the same objects first, then the controller" >&2
    STATE_DIR="$ROOT/target/bench-scale" bash "$ROOT/scripts/bench-tunnel-controller.sh" \
      --routes 10000 --gateways 1000 --quiet-secs 5 --timeout-secs 600 --cold-start "$@"
  fi
fi
