#!/usr/bin/env bash
# TG-15 benchmark: tunnel-proxy beside nginx and HAProxy (same route by Host, keep-alive to the
# backend, one worker/thread each) and direct to the backend, on loopback. Proxy, nginx and
# HAProxy are pinned to CPU 0; wrk and the backend to CPU 1 (the machine has 2 cores). Each run
# is DURATION seconds (default 5); every cell is run REPEAT times (default 3), the four targets
# interleaved, and the median of each figure is printed (a shared machine drifts; interleaving
# spreads the drift over all of them). The last two columns compare the proxy with the better
# peer of the cell (the higher r/s; the lower p99). The "us/req" columns are each server's CPU
# per request during its runs (scheduler nanoseconds of all its processes and threads over the
# requests wrk completed): with 1 MiB bodies wrk and the backend on CPU 1 bound the throughput of
# all three, so their CPU says more than their r/s (docs/benchmarks.md). "won" counts the
# interleaved rounds in which the proxy was at least the better peer of the same round: on a
# machine whose speed swings between runs, a median ratio can go against the proxy when most
# rounds did not. The line "each against the better of the other two" counts the same for every
# server: when the three are level, each wins about a third of the rounds, and no peer meets the
# target either. CELLS picks the cells (default all four: "empty:1 empty:64 1m:1 1m:64").
# Idle CPUs poll rather than halt while it runs (IDLE=poll, the default; IDLE=halt keeps the
# machine's default): see scripts/lib/idle.sh.
# The cell empty:1 also runs "across": wrk straight to a second backend pinned to the
# servers' CPU, so each request crosses the two CPUs as through a server, with no server. A line
# for that cell gives every path's share of stalled requests (slower than STALL_US, default
# 300 µs; scripts/lib/wrk-stalls.lua) and across's p99: where the machine itself stalls about 1 %
# of the round trips that cross its CPUs, a one-connection p99 measures those stalls, not the
# server (docs/benchmarks.md, "What sets the one-connection p99").
#
#   scripts/bench-tunnel-proxy.sh            # full table
#   DURATION=3 REPEAT=1 scripts/bench-tunnel-proxy.sh
#   CELLS=empty:1 REPEAT=21 scripts/bench-tunnel-proxy.sh   # one cell, many rounds
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/tunnel-proxy-bench.sh
source "$ROOT/scripts/lib/tunnel-proxy-bench.sh"
# shellcheck source=scripts/lib/idle.sh
source "$ROOT/scripts/lib/idle.sh"
# shellcheck source=scripts/lib/cpu.sh
source "$ROOT/scripts/lib/cpu.sh"
DURATION="${DURATION:-5}"
REPEAT="${REPEAT:-3}"
CELLS="${CELLS:-empty:1 empty:64 1m:1 1m:64}"
for cell in $CELLS; do
  case "$cell" in
    empty:[0-9]* | 1m:[0-9]*) ;;
    *) echo "CELLS: '$cell' is not BODY:CONNS with BODY empty or 1m" >&2; exit 2 ;;
  esac
done
PROXY_CPU="${PROXY_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
BACKEND_PORT=18090
ACROSS_PORT=18091
PROXY_PORT=18080
ADMIN_PORT=18081
NGINX_PORT=18070
HAPROXY_PORT=18060
HOST=bench.example.com

install_missing wrk=wrk nginx=nginx haproxy=haproxy taskset=util-linux curl=curl pgrep=procps
build_bench
LOAD_BEFORE="$(cut -d" " -f1-3 /proc/loadavg)"

taskset -c "$LOAD_CPU" "$BIN/examples/bench-backend" "127.0.0.1:$BACKEND_PORT" &
PIDS+=($!)
taskset -c "$PROXY_CPU" "$BIN/examples/bench-backend" "127.0.0.1:$ACROSS_PORT" &
PIDS+=($!)
wait_port "$BACKEND_PORT"
wait_port "$ACROSS_PORT"

PROXY_LOG_FORMAT=text RUST_LOG=warn taskset -c "$PROXY_CPU" "$BIN/tunnel-proxy" \
  --listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" --log-format text &
PIDS+=($!)
declare -A SERVER_PID=([proxy]=$!)
wait_port "$ADMIN_PORT"
push_route "$ADMIN_PORT" "$HOST" "$BACKEND_PORT"

nginx_conf "$WORK/nginx" "$NGINX_PORT" "$HOST" "$BACKEND_PORT"
taskset -c "$PROXY_CPU" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" &
PIDS+=($!)
SERVER_PID[nginx]=$!
wait_port "$NGINX_PORT"

haproxy_conf "$WORK/haproxy" "$HAPROXY_PORT" "$HOST" "$BACKEND_PORT"
taskset -c "$PROXY_CPU" haproxy -db -f "$WORK/haproxy/haproxy.cfg" &
PIDS+=($!)
SERVER_PID[haproxy]=$!
wait_port "$HAPROXY_PORT"

# wrk latency to milliseconds
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    printf "%.3f", n }'
}

# server_cpu_ns NAME: CPU nanoseconds so far of the server NAME (scripts/lib/cpu.sh); 0 for
# direct, whose backend is not measured.
server_cpu_ns() {
  if [ -n "${SERVER_PID[$1]:-}" ]; then cpu_ns "${SERVER_PID[$1]}"; else echo 0; fi
}

run() { # target port conns path -> "rps p50 p99 us_per_request stalled_percent"
  local out before
  before="$(server_cpu_ns "$1")"
  out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$3" -d"${DURATION}s" --latency -s "$ROOT/scripts/lib/wrk-stalls.lua" \
    -H "Host: $HOST" "http://127.0.0.1:$2/$4")"
  local rps p50 p99 stalled
  rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
  p50="$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")"
  p99="$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")"
  stalled="$(sed -n 's/^stalled=//p' <<<"$out")"
  if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers from $1: $out" >&2; exit 1; fi
  local us
  us="$(awk -v a="$before" -v b="$(server_cpu_ns "$1")" -v n="$(awk '/ requests in / {print $1}' <<<"$out")" \
    'BEGIN {printf "%.1f", (n > 0 ? (b - a) / n / 1000 : 0)}')"
  echo "$rps $p50 $p99 $us $stalled"
}

median() { # numbers -> their median
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}

# warm-up (pools, page cache)
for port in $BACKEND_PORT $ACROSS_PORT $PROXY_PORT $NGINX_PORT $HAPROXY_PORT; do
  taskset -c "$LOAD_CPU" wrk -t1 -c8 -d1s -H "Host: $HOST" "http://127.0.0.1:$port/empty" >/dev/null
done

printf "%-6s %-5s | %10s %7s %7s %7s | %10s %7s %7s %7s | %10s %7s %7s %7s | %10s %7s %7s | %8s %8s | %7s %7s\n" \
  body conns "proxy r/s" p50ms p99ms us/req "nginx r/s" p50ms p99ms us/req "haproxy r/s" p50ms p99ms \
  us/req "direct r/s" p50ms p99ms "rps p/b" "p99 p/b" "rps won" "p99 won"
for cell in $CELLS; do
  path="${cell%%:*}" conns="${cell##*:}"
  declare -A s=()
  paths=(proxy:$PROXY_PORT nginx:$NGINX_PORT haproxy:$HAPROXY_PORT direct:$BACKEND_PORT)
  [ "$cell" != empty:1 ] || paths+=(across:$ACROSS_PORT)
  for ((r = 0; r < REPEAT; r++)); do
    for t in "${paths[@]}"; do
      read -r rps p50 p99 us stalled <<<"$(run "${t%%:*}" "${t##*:}" "$conns" "$path")"
      s[${t%%:*}rps]+="$rps " s[${t%%:*}p50]+="$p50 " s[${t%%:*}p99]+="$p99 " s[${t%%:*}us]+="$us "
      s[${t%%:*}stalled]+="$stalled "
    done
  done
  echo "samples $path c=$conns: proxy r/s ${s[proxyrps]}p99 ${s[proxyp99]}us ${s[proxyus]}| nginx r/s ${s[nginxrps]}p99 ${s[nginxp99]}us ${s[nginxus]}| haproxy r/s ${s[haproxyrps]}p99 ${s[haproxyp99]}us ${s[haproxyus]}" >&2
  # Each round's figures, one line per round: proxy, nginx, HAProxy r/s, then their p99s.
  # shellcheck disable=SC2086 # word splitting intended: the samples
  rounds="$(paste -d' ' <(printf '%s\n' ${s[proxyrps]}) <(printf '%s\n' ${s[nginxrps]}) \
    <(printf '%s\n' ${s[haproxyrps]}) <(printf '%s\n' ${s[proxyp99]}) \
    <(printf '%s\n' ${s[nginxp99]}) <(printf '%s\n' ${s[haproxyp99]}))"
  # The proxy's "won" is its part of the count of every server against the better of the other
  # two in the same round.
  won="$(awk -v cell="$path c=$conns" '
    function max(a, b) { return a > b ? a : b }
    function min(a, b) { return a < b ? a : b }
    { if ($1 >= max($2, $3)) r[1]++; if ($2 >= max($1, $3)) r[2]++; if ($3 >= max($1, $2)) r[3]++
      if ($4 <= min($5, $6)) p[1]++; if ($5 <= min($4, $6)) p[2]++; if ($6 <= min($4, $5)) p[3]++
      if ($1 >= $2) rn++; if ($1 >= $3) rh++; if ($4 <= $5) pn++; if ($4 <= $6) ph++ }
    END {
      printf "each against the better of the other two, rounds won (r/s, p99), %s: proxy %d/%d %d/%d, nginx %d/%d %d/%d, haproxy %d/%d %d/%d\n",
        cell, r[1], NR, p[1], NR, r[2], NR, p[2], NR, r[3], NR, p[3], NR > "/dev/stderr"
      printf "the proxy against each peer, rounds at least level (r/s, p99), %s: nginx %d/%d %d/%d, haproxy %d/%d %d/%d\n",
        cell, rn, NR, pn, NR, rh, NR, ph, NR > "/dev/stderr"
      printf "%d/%d %d/%d", r[1], NR, p[1], NR
    }' <<<"$rounds")"
  # The same comparison as the table's p/b columns, made within each round (the three share the
  # round's machine speed) and then taken at the median over the rounds.
  # shellcheck disable=SC2046 # word splitting intended: the ratios
  echo "proxy / better peer of the same round, median over the rounds (r/s, p99), $path c=$conns:" \
    "$(printf '%.3f' "$(median $(awk '{ print $1 / ($2 > $3 ? $2 : $3) }' <<<"$rounds"))")" \
    "$(printf '%.3f' "$(median $(awk '{ low = ($5 < $6 ? $5 : $6); print (low > 0 ? $4 / low : 0) }' <<<"$rounds"))")" >&2
  if [ "$cell" = empty:1 ]; then
    # shellcheck disable=SC2086 # word splitting intended: the samples
    echo "stalled requests (slower than ${STALL_US:-300} us), % of each path's, median over the rounds, empty c=1:" \
      "$(for t in proxy nginx haproxy direct across; do printf '%s %.2f, ' "$t" "$(median ${s[${t}stalled]})"; done)" \
      "across: p50 $(median ${s[acrossp50]}) ms, p99 $(median ${s[acrossp99]}) ms; stalled % per round:" \
      "$(for t in proxy nginx haproxy across; do printf '%s %s| ' "$t" "${s[${t}stalled]}"; done)" >&2
  fi
  for k in "${!s[@]}"; do
    # shellcheck disable=SC2086 # word splitting intended: the samples
    s[$k]="$(median ${s[$k]})"
  done
  row=("$path" "$conns")
  for t in proxy nginx haproxy; do row+=("${s[${t}rps]}" "${s[${t}p50]}" "${s[${t}p99]}" "${s[${t}us]}"); done
  row+=("${s[directrps]}" "${s[directp50]}" "${s[directp99]}")
  best_rps="$(awk -v a="${s[nginxrps]}" -v b="${s[haproxyrps]}" 'BEGIN {print (a > b ? a : b)}')"
  best_p99="$(awk -v a="${s[nginxp99]}" -v b="${s[haproxyp99]}" 'BEGIN {print (a < b ? a : b)}')"
  read -r won_rps won_p99 <<<"$won"
  printf "%-6s %-5s | %10.0f %7s %7s %7s | %10.0f %7s %7s %7s | %10.0f %7s %7s %7s | %10.0f %7s %7s | %8.2f %8.2f | %7s %7s\n" \
    "${row[@]}" \
    "$(awk -v a="${s[proxyrps]}" -v b="$best_rps" 'BEGIN {print a / b}')" \
    "$(awk -v a="${s[proxyp99]}" -v b="$best_p99" 'BEGIN {print (b > 0 ? a / b : 0)}')" \
    "$won_rps" "$won_p99"
  unset s
done
echo "proxy/nginx/haproxy pinned to CPU $PROXY_CPU; wrk and backend to CPU $LOAD_CPU; $IDLE_NOTE; ${DURATION}s per run, median of $REPEAT interleaved runs; p/b = proxy / better peer (rps p/b >= 1 and p99 p/b <= 1 meet TG-15); won = rounds the proxy was at least the better peer of the round; load before the run: $LOAD_BEFORE"
