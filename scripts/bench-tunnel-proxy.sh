#!/usr/bin/env bash
# TG-15 benchmark: tunnel-proxy beside nginx (same route, upstream keep-alive) and direct to
# the backend, on loopback. Proxy and nginx are pinned to CPU 0; wrk and the backend to CPU 1
# (the machine has 2 cores). Each run is DURATION seconds (default 5); every cell is run
# REPEAT times (default 3), proxy, nginx and direct interleaved, and the median of each
# figure is printed (a shared machine drifts; interleaving spreads the drift over all three).
# Idle CPUs poll rather than halt while it runs (IDLE=poll, the default; IDLE=halt keeps the
# machine's default): see scripts/lib/idle.sh.
#
#   scripts/bench-tunnel-proxy.sh            # full table
#   DURATION=3 REPEAT=1 scripts/bench-tunnel-proxy.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/tunnel-proxy-bench.sh
source "$ROOT/scripts/lib/tunnel-proxy-bench.sh"
# shellcheck source=scripts/lib/idle.sh
source "$ROOT/scripts/lib/idle.sh"
DURATION="${DURATION:-5}"
REPEAT="${REPEAT:-3}"
PROXY_CPU="${PROXY_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
BACKEND_PORT=18090
PROXY_PORT=18080
ADMIN_PORT=18081
NGINX_PORT=18070
HOST=bench.example.com

install_missing wrk=wrk nginx=nginx taskset=util-linux curl=curl
build_bench

taskset -c "$LOAD_CPU" "$BIN/examples/bench-backend" "127.0.0.1:$BACKEND_PORT" &
PIDS+=($!)
wait_port "$BACKEND_PORT"

PROXY_LOG_FORMAT=text RUST_LOG=warn taskset -c "$PROXY_CPU" "$BIN/tunnel-proxy" \
  --listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" --log-format text &
PIDS+=($!)
wait_port "$ADMIN_PORT"
push_route "$ADMIN_PORT" "$HOST" "$BACKEND_PORT"

nginx_conf "$WORK/nginx" "$NGINX_PORT" "$HOST" "$BACKEND_PORT"
taskset -c "$PROXY_CPU" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" &
PIDS+=($!)
wait_port "$NGINX_PORT"

# wrk latency to milliseconds
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    printf "%.3f", n }'
}

run() { # target port conns path -> "rps p50 p99"
  local out
  out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$3" -d"${DURATION}s" --latency -H "Host: $HOST" "http://127.0.0.1:$2/$4")"
  local rps p50 p99
  rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
  p50="$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")"
  p99="$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")"
  if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers from $1: $out" >&2; exit 1; fi
  echo "$rps $p50 $p99"
}

median() { # numbers -> their median
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}

# warm-up (pools, page cache)
for port in $BACKEND_PORT $PROXY_PORT $NGINX_PORT; do
  taskset -c "$LOAD_CPU" wrk -t1 -c8 -d1s -H "Host: $HOST" "http://127.0.0.1:$port/empty" >/dev/null
done

printf "%-6s %-6s | %10s %8s %8s | %10s %8s %8s | %10s %8s %8s | %9s %9s\n" \
  body conns "proxy r/s" p50ms p99ms "nginx r/s" p50ms p99ms "direct r/s" p50ms p99ms "rps p/n" "p99 p/n"
for path in empty 1m; do
  for conns in 1 64; do
    declare -A s=()
    for ((r = 0; r < REPEAT; r++)); do
      for t in proxy:$PROXY_PORT nginx:$NGINX_PORT direct:$BACKEND_PORT; do
        read -r rps p50 p99 <<<"$(run "${t%%:*}" "${t##*:}" "$conns" "$path")"
        s[${t%%:*}rps]+="$rps " s[${t%%:*}p50]+="$p50 " s[${t%%:*}p99]+="$p99 "
      done
    done
    echo "samples $path c=$conns: proxy r/s ${s[proxyrps]}p99 ${s[proxyp99]}| nginx r/s ${s[nginxrps]}p99 ${s[nginxp99]}" >&2
    for k in "${!s[@]}"; do
      # shellcheck disable=SC2086 # word splitting intended: the samples
      s[$k]="$(median ${s[$k]})"
    done
    prps=${s[proxyrps]} pp50=${s[proxyp50]} pp99=${s[proxyp99]}
    nrps=${s[nginxrps]} np50=${s[nginxp50]} np99=${s[nginxp99]}
    drps=${s[directrps]} dp50=${s[directp50]} dp99=${s[directp99]}
    unset s
    printf "%-6s %-6s | %10.0f %8s %8s | %10.0f %8s %8s | %10.0f %8s %8s | %9.2f %9.2f\n" \
      "$path" "$conns" "$prps" "$pp50" "$pp99" "$nrps" "$np50" "$np99" "$drps" "$dp50" "$dp99" \
      "$(awk -v a="$prps" -v b="$nrps" 'BEGIN {print a / b}')" \
      "$(awk -v a="$pp99" -v b="$np99" 'BEGIN {print (b > 0 ? a / b : 0)}')"
  done
done
echo "proxy/nginx pinned to CPU $PROXY_CPU; wrk and backend to CPU $LOAD_CPU; $IDLE_NOTE; ${DURATION}s per run, median of $REPEAT interleaved runs; rps p/n > 1 and p99 p/n < 1 favour the proxy"
