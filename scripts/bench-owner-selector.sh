#!/usr/bin/env bash
# What the owner selector costs the target API server on a LIST (docs/resource-proxy.md, "A peer
# with a LIST's whole duty"): on the setup of scripts/bench-resource-proxy.sh (a target cluster
# with ten owned widgets), LISTs direct to the target without a query and with equivalent
# selectors, interleaved request by request on one connection each (`rp-load interleave`), for
# DURATION seconds (default 20), ROUNDS times (default 3):
#   a       no query
#   two     the proxy's selector: both owner labels, equality (tenancy::selector::scope_query)
#   set     the same two requirements, set-based (`in (…)`)
#   one     one owner label
#   exists  one owner label, existence only
#   limit   no selector, `limit=500` (what any query string costs)
# Prints each path's median and its excess over (a).
#
#   scripts/bench-owner-selector.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DURATION="${DURATION:-20}"
ROUNDS="${ROUNDS:-3}"
# shellcheck source=scripts/lib/resource-proxy-bench.sh
source "$ROOT/scripts/lib/resource-proxy-bench.sh"
# shellcheck source=scripts/lib/idle.sh
source "$ROOT/scripts/lib/idle.sh"

echo "building rp-load (release) and test-cluster" >&2
cargo build --release -q -p resource-proxy --example rp-load
cargo build --release -q -p test-cluster
start_clusters

AUTH=(--cert "$TPKI/admin.crt" --key "$TPKI/admin.key")
LIST="https://127.0.0.1:$TPORT$(widgets_path list)"
PROJECT=vcluster.com%2Fowner-project
VCLUSTER=vcluster.com%2Fowner-vcluster
ARGS=(path a "$LIST" "${AUTH[@]}"
  path two "$LIST?labelSelector=$PROJECT%3Dbench%2C$VCLUSTER%3Dbench" "${AUTH[@]}"
  path set "$LIST?labelSelector=$PROJECT+in+%28bench%29%2C$VCLUSTER+in+%28bench%29" "${AUTH[@]}"
  path one "$LIST?labelSelector=$PROJECT%3Dbench" "${AUTH[@]}"
  path exists "$LIST?labelSelector=$PROJECT" "${AUTH[@]}"
  path limit "$LIST?limit=500" "${AUTH[@]}")

echo "LIST of ten widgets direct to the target, paths interleaved request by request, ${DURATION} s per round; $IDLE_NOTE" >&2
printf '| round | requests per path | (a) p50 ms | two | set | one | exists | limit | added: two | set | one | exists | limit | errors |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for ((r = 1; r <= ROUNDS; r++)); do
  out="$("$BIN/examples/rp-load" interleave --duration "$DURATION" "${ARGS[@]}" | tr '\n' ' ')"
  awk -v round="$r" -v out="$out" "$INTERLEAVED_AWK"'
    BEGIN {
      interleaved(out, v)
      k = split("two set one exists limit", paths, " ")
      line = sprintf("| %d | %s | %s", round, v["a", "requests"], v["a", "p50_ms"])
      for (i = 1; i <= k; i++) line = line sprintf(" | %s", v[paths[i], "p50_ms"])
      for (i = 1; i <= k; i++) line = line sprintf(" | %.3f", v[paths[i], "p50_ms"] - v["a", "p50_ms"])
      for (i = 1; i <= k; i++) errors += v[paths[i], "errors"]
      print line sprintf(" | %d |", errors + v["a", "errors"])
    }'
done
