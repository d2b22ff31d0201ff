#!/usr/bin/env bash
# Load-independent count for the resource proxy (docs/resource-proxy.md "Where the time goes"):
# user-space instructions (callgrind) per proxied GET and per LIST of ten objects at one
# connection, on the setup of scripts/bench-resource-proxy.sh (client and target clusters,
# owned widgets, the proxy called with the front-proxy client certificate). The proxy runs
# under `valgrind --tool=callgrind --instr-atstart=no` with its defaults (tokio's worker per
# core, the binary's allocator). Per kind: WARMUP seconds of one-connection requests with the
# counters off, then `callgrind_control -i on`, DURATION seconds of one-connection requests
# (`rp-load get`), `-i off` and a dump; the figure is the dump's instructions over the
# requests completed. Wall-clock time does not enter it, but what a window costs whatever it
# holds does (rp-load's TLS handshake with the proxy, a few million instructions, and the
# proxy's timers, watches and Lease meanwhile): spread over the few hundred requests a window
# holds under valgrind on a loaded machine, it is 5-15 % of the figure. So each kind also gets a
# window of SHORT seconds (default 2), and the marginal figure (difference of instructions over
# difference of requests of the two windows) cancels the fixed part; compare marginal figures.
# A last window of DURATION seconds without requests shows the proxy's background work.
#
#   scripts/count-resource-proxy.sh                       # the tree's proxy (built in release)
#   RUNS=2 scripts/count-resource-proxy.sh before=/tmp/a/resource-proxy after=/tmp/b/resource-proxy
#
# Several binaries (NAME=PATH, or PATH) are counted on the same clusters, alternated RUNS times
# (default 1); each run starts the binary afresh. One line per run and kind, e.g.
#   after get run 1: 455 requests in 8 s, 0 errors, 46834163 instructions, 102932 per request; ...; marginal 91000 per request
# rp-load and test-cluster are built from this tree (release, CARGO_TARGET_DIR as in the
# bench); BUILD=0 builds nothing and takes them from $CARGO_TARGET_DIR/release as they are.
# COPY_DUMPS=DIR keeps each window's callgrind dump there (callgrind.NAME.KIND.RUN) for
# callgrind_annotate.
# Needs valgrind (installed from Debian's packages when missing).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WARMUP="${WARMUP:-3}"
DURATION="${DURATION:-8}"
SHORT="${SHORT:-2}"
RUNS="${RUNS:-1}"
PROXY_PORT=19300
METRICS_PORT=19390
# shellcheck source=scripts/lib/resource-proxy-bench.sh
source "$ROOT/scripts/lib/resource-proxy-bench.sh"

if ! command -v valgrind >/dev/null 2>&1; then
  echo "installing valgrind from Debian packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

PROXIES=("$@")
if [ "${BUILD:-1}" = 0 ]; then
  echo "BUILD=0: using $BIN/test-cluster and $BIN/examples/rp-load as they are" >&2
elif [ ${#PROXIES[@]} -eq 0 ]; then
  echo "building resource-proxy (release)" >&2
  cargo build --release -q -p resource-proxy --bin resource-proxy
  cp "$BIN/resource-proxy" "$WORK/resource-proxy"
  PROXIES=("tree=$WORK/resource-proxy")
fi
if [ "${BUILD:-1}" != 0 ]; then
  echo "building rp-load (release) and test-cluster" >&2
  cargo build --release -q -p resource-proxy --example rp-load
  cargo build --release -q -p test-cluster
fi

start_clusters
proxy_config "$WORK/proxy.yaml" "$PROXY_PORT" "$METRICS_PORT"
load() { # kind, seconds
  "$BIN/examples/rp-load" get "https://127.0.0.1:$PROXY_PORT$(widgets_path "$1")" "${FRONT_AUTH[@]}" \
    --concurrency 1 --duration "$2"
}

# Counts one window: instructions while `rp-load` runs for the given seconds (kind idle: none, the
# window is spent idle). Prints "<requests> <errors> <instructions>".
window() { # pid, kind, seconds, dump name
  local pid="$1" kind="$2" secs="$3" out dump ir
  callgrind_control -i on "$pid" >/dev/null 2>&1
  if [ "$kind" = idle ]; then sleep "$secs"; out="requests=0 errors=0"; else out="$(load "$kind" "$secs")"; fi
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  dump="$(ls -t "$WORK"/callgrind.out* | head -1)"
  ir="$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  [ -z "${COPY_DUMPS:-}" ] || cp "$dump" "$COPY_DUMPS/callgrind.$4"
  echo "$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$out") $(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$out") $ir"
}

count() { # name, binary, run
  local name="$1" proxy="$2" run="$3" pid kind long short
  rm -f "$WORK"/callgrind.out*
  RUST_LOG=warn valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$WORK/callgrind.out" \
    "$proxy" --config "$WORK/proxy.yaml" --identity bench-0 >"$WORK/proxy.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_for "the proxy's listener (under valgrind)" 300 port_open "$PROXY_PORT"
  for kind in get list; do
    load "$kind" "$WARMUP" >/dev/null
    read -r -a long <<<"$(window "$pid" "$kind" "$DURATION" "$name.$kind.$run")"
    read -r -a short <<<"$(window "$pid" "$kind" "$SHORT" "$name.$kind-short.$run")"
    awk -v name="$name" -v kind="$kind" -v run="$run" -v d="$DURATION" -v s="$SHORT" \
      -v n="${long[0]}" -v e="${long[1]}" -v ir="${long[2]}" -v n2="${short[0]}" -v e2="${short[1]}" -v ir2="${short[2]}" 'BEGIN {
      printf "%s %s run %d: %d requests in %d s, %d errors, %d instructions, %.0f per request; %d requests in %d s, %d instructions; marginal %.0f per request\n",
        name, kind, run, n, d, e + e2, ir, ir / n, n2, s, ir2, (ir - ir2) / (n - n2) }'
  done
  read -r -a long <<<"$(window "$pid" idle "$DURATION" "$name.idle.$run")"
  echo "$name idle run $run: ${long[2]} instructions in $DURATION s without requests"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

echo "one connection, ${WARMUP} s warm-up, ${DURATION} s counted per kind, $RUNS run(s) per binary; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= RUNS; r++)); do
  for p in "${PROXIES[@]}"; do
    if [[ "$p" == *=* ]]; then count "${p%%=*}" "${p#*=}" "$r"; else count "$(basename "$p")" "$p" "$r"; fi
  done
done
