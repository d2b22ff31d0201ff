#!/usr/bin/env bash
# Load-independent counts per request for tunnel-proxy, nginx and HAProxy on the benchmark's
# route (docs/benchmarks.md "Where the time goes"): user-space instructions (callgrind) and
# system calls, context switches and CPU time (perf stat, /proc/PID/stat). The server under test
# is pinned to CPU 0, wrk and the backend to CPU 1, as in scripts/bench-tunnel-proxy.sh.
# `wakeups` records the server's system calls and the scheduler's events on all CPUs over 1 s
# of load and splits each wake-up into its parts (scripts/lib/wakeup-segments.py). Tracing
# slows every server several times over, so only its per-wake-up segments compare, not its
# request rate; idle CPUs poll during it (scripts/lib/idle.sh) as in the benchmark.
#
#   scripts/count-tunnel-proxy.sh instructions proxy 64 empty
#   scripts/count-tunnel-proxy.sh syscalls nginx 1 1m
#   scripts/count-tunnel-proxy.sh wakeups haproxy 1 empty
#
# Needs valgrind (instructions) or perf (syscalls, wakeups), wrk, nginx, haproxy and curl;
# installs what is missing from Debian's packages.
set -euo pipefail

MODE="${1:?instructions|syscalls|wakeups}"
WHAT="${2:?proxy|nginx|haproxy}"
CONNS="${3:-64}"
BODY="${4:-empty}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/tunnel-proxy-bench.sh
source "$ROOT/scripts/lib/tunnel-proxy-bench.sh"
BACKEND_PORT=18290
PORT=18280
ADMIN_PORT=18281
HOST=bench.example.com

install_missing wrk=wrk nginx=nginx haproxy=haproxy valgrind=valgrind perf=linux-perf curl=curl
build_bench

taskset -c 1 "$BIN/examples/bench-backend" "127.0.0.1:$BACKEND_PORT" &
PIDS+=($!)
wait_port "$BACKEND_PORT"

WRAP=()
if [ "$MODE" = instructions ]; then
  WRAP=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$WORK/callgrind.out")
fi
if [ "$WHAT" = proxy ]; then
  RUST_LOG=warn taskset -c 0 "${WRAP[@]}" "$BIN/tunnel-proxy" --listen "127.0.0.1:$PORT" \
    --admin-listen "127.0.0.1:$ADMIN_PORT" --log-format text 2>"$WORK/server.log" &
  SERVER=$!
  wait_port "$ADMIN_PORT"
  push_route "$ADMIN_PORT" "$HOST" "$BACKEND_PORT"
elif [ "$WHAT" = haproxy ]; then
  haproxy_conf "$WORK/haproxy" "$PORT" "$HOST" "$BACKEND_PORT"
  taskset -c 0 "${WRAP[@]}" haproxy -f "$WORK/haproxy/haproxy.cfg" -db 2>"$WORK/server.log" &
  SERVER=$!
else
  nginx_conf "$WORK/nginx" "$PORT" "$HOST" "$BACKEND_PORT" off
  taskset -c 0 "${WRAP[@]}" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>"$WORK/server.log" &
  SERVER=$!
fi
PIDS+=("$SERVER")
wait_port "$PORT"

load() { taskset -c 1 wrk -t1 -c"$CONNS" -d"$1" -H "Host: $HOST" "http://127.0.0.1:$PORT/$BODY"; }
requests() { awk '/requests in/ {print $1}'; }

load 2s >/dev/null
if [ "$MODE" = instructions ]; then
  callgrind_control -i on "$SERVER" >/dev/null
  n="$(load 5s | requests)"
  callgrind_control -i off "$SERVER" >/dev/null
  kill "$SERVER"
  wait "$SERVER" 2>/dev/null || true
  ir="$(callgrind_annotate "$WORK/callgrind.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  echo "$WHAT $CONNS conns $BODY: $n requests, $ir instructions, $((ir / n)) per request"
elif [ "$MODE" = wakeups ]; then
  # shellcheck source=scripts/lib/idle.sh
  source "$ROOT/scripts/lib/idle.sh"
  perf record -q -a -o "$WORK/perf.data" \
    -e raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_wakeup,sched:sched_switch -- sleep 1.4 \
    >/dev/null 2>&1 &
  REC=$!
  sleep 0.2
  n="$(load 1s | requests)"
  wait "$REC" || true
  perf script -i "$WORK/perf.data" -F comm,pid,tid,cpu,time,event,trace 2>/dev/null >"$WORK/perf.txt"
  echo "$WHAT $CONNS conns $BODY: $n requests in 1 s under tracing ($IDLE_NOTE)"
  comm="$(cat "/proc/$SERVER/comm")"
  python3 "$ROOT/scripts/lib/wakeup-segments.py" "$WORK/perf.txt" "$comm"
else
  cpu0="$(awk '{print $14 + $15}' "/proc/$SERVER/stat")"
  perf stat -e raw_syscalls:sys_enter,context-switches,page-faults,cpu-migrations -p "$SERVER" -o "$WORK/perf.txt" -- sleep 5 &
  STAT=$!
  n="$(load 5s | requests)"
  wait "$STAT" || true
  cpu1="$(awk '{print $14 + $15}' "/proc/$SERVER/stat")"
  sc="$(awk '/raw_syscalls:sys_enter/ {gsub(",", "", $1); print $1}' "$WORK/perf.txt")"
  cs="$(awk '/context-switches/ {gsub(",", "", $1); print $1}' "$WORK/perf.txt")"
  pf="$(awk '/page-faults/ {gsub(",", "", $1); print $1}' "$WORK/perf.txt")"
  mig="$(awk '/cpu-migrations/ {gsub(",", "", $1); print $1}' "$WORK/perf.txt")"
  tick="$(getconf CLK_TCK)"
  awk -v w="$WHAT" -v c="$CONNS" -v b="$BODY" -v n="$n" -v sc="$sc" -v cs="$cs" -v pf="$pf" -v mig="$mig" \
    -v t0="$cpu0" -v t1="$cpu1" -v hz="$tick" 'BEGIN {
      printf "%s %s conns %s: %d requests, %.2f system calls, %.2f context switches, %.1f us CPU per request; %d page faults, %d CPU migrations in all\n",
        w, c, b, n, sc / n, cs / n, (t1 - t0) / hz * 1e6 / n, pf, mig }'
fi
