#!/usr/bin/env bash
# RP-17 benchmark: GET and LIST of a custom resource on loopback against a real kube-apiserver,
# (a) direct to the target, (b) through nginx as a plain TLS pass-through hop (stream module),
# (c) through the resource proxy alone (front-proxy client certificate, as the aggregator
# calls it), (d) through the client kube-apiserver and the proxy (the tenant's path), and, as a
# reference for what terminating TLS costs any proxy, (e) through nginx as an HTTP proxy that
# terminates TLS on both legs as the proxy does (client certificate checked against the
# front-proxy CA, keep-alive TLS connections to the target with a client certificate); then the
# proxy's memory while it holds WATCHES idle watches. Prints a table with ratios to (a) and (b).
#
#   scripts/bench-resource-proxy.sh
#   DURATION=3 CONCURRENCY=8 WATCHES=2000 ACCESS=all REPEAT=1 scripts/bench-resource-proxy.sh
#
# Each cell runs the five paths one after the other, REPEAT times (default 3), and prints the
# median of each figure (a shared machine drifts; interleaving spreads the drift over all five).
# A second table measures one-connection latency with the paths interleaved request by request
# (`rp-load interleave`, DURATION x REPEAT seconds): every path sees the same moment of the
# machine, so the added medians are compared without the drift between runs. A third does the
# same for CPU per request of (b), (c) and (e) alone (the proxy serves (d) too), from the
# scheduler's nanosecond counts, in CPU_ROUNDS rounds (default REPEAT) of DURATION seconds per
# kind, GET and LIST alternating: it prints the whole run's figures and in how many rounds the
# proxy used no more CPU per request than nginx (e). For LIST the latency table has (s): direct
# with the owner selector the proxy adds, so the target's own time for it shows apart from the
# proxy's, and (f): nginx (e) adding that selector too, the peer doing a LIST's whole duty (TLS
# on both legs and the owner scope; the target filters by it for both).
#
# ACCESS (default owned) is the listener's accessResources: in `owned` mode a named GET is checked
# for ownership on its own answer (RP-7) and LIST carries the owner selector; `all` forwards as is.
# The machine's load average is printed before and after the cells (shared machines skew them).
# For (b), (c) and (e) the CPU time (user + system, from /proc) and the context switches of the nginx
# and proxy processes per request are printed beside each cell.
#
# Idle CPUs poll rather than halt while it runs (IDLE=poll, the default; IDLE=halt keeps the
# machine's default): see scripts/lib/idle.sh.
#
# The load generator is the `rp-load` example of the resource-proxy crate (client certificates).
# nginx (and its stream module) and procps come from Debian's packages, installed when missing.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DURATION="${DURATION:-5}"
CONCURRENCY="${CONCURRENCY:-16}"
WATCHES="${WATCHES:-10000}"
HOLD="${HOLD:-10}"
# The watch figures (RSS, connections, active_watches) are read 2 s into the hold; a shorter hold
# would read them after the watches closed.
if ! [[ "$HOLD" =~ ^[0-9]+$ ]] || [ "$HOLD" -lt 5 ]; then
  echo "HOLD=$HOLD: must be a whole number of seconds, at least 5 (the watch figures are read 2 s into the hold)" >&2
  exit 2
fi
REPEAT="${REPEAT:-3}"
CPU_ROUNDS="${CPU_ROUNDS:-$REPEAT}"
PROXY_PORT=19100
METRICS_PORT=19190
NGINX_PORT=19443
NGINX_L7_PORT=19543
NGINX_SCOPED_PORT=19544
# The owner selector the proxy adds to a LIST of this client's (tenancy::selector::scope_query).
OWNER_SELECTOR="labelSelector=vcluster.com%2Fowner-project%3Dbench%2Cvcluster.com%2Fowner-vcluster%3Dbench"
# The proxy, nginx (b) and nginx (e) run on one CPU, the same one: the install manifests give
# the proxy a CPU limit of 1 (so it runs a single-threaded scheduler, service_support::runtime)
# and each nginx runs one worker process. The clusters and the load generator are not pinned.
PROXY_CPU="${PROXY_CPU:-1}"
# shellcheck source=scripts/lib/resource-proxy-bench.sh
source "$ROOT/scripts/lib/resource-proxy-bench.sh"
# shellcheck source=scripts/lib/idle.sh
source "$ROOT/scripts/lib/idle.sh"
# shellcheck source=scripts/lib/cpu.sh
source "$ROOT/scripts/lib/cpu.sh"

if ! command -v nginx >/dev/null 2>&1 || [ ! -f /usr/lib/nginx/modules/ngx_stream_module.so ] ||
  ! command -v pgrep >/dev/null 2>&1; then
  echo "installing nginx, its stream module and procps (pgrep) from Debian packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx libnginx-mod-stream procps >/dev/null
fi

echo "building resource-proxy, rp-load (release) and test-cluster" >&2
cargo build --release -q -p resource-proxy --bin resource-proxy --example rp-load
cargo build --release -q -p test-cluster

start_clusters

proxy_config "$WORK/proxy.yaml" "$PROXY_PORT" "$METRICS_PORT"
RUST_LOG=warn taskset -c "$PROXY_CPU" "$BIN/resource-proxy" --config "$WORK/proxy.yaml" --identity bench-0 >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=($PROXY_PID)
wait_for "the proxy's listener" 60 port_open "$PROXY_PORT"
wait_for "the APIService" 90 sh -c "'$KUBECTL' --kubeconfig '$CKC' get widgets -n $NS"

mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 20000; }
stream {
  server {
    listen 127.0.0.1:$NGINX_PORT;
    proxy_pass 127.0.0.1:$TPORT;
  }
}
CONF
taskset -c "$PROXY_CPU" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" &
NGINX_PID=$!
PIDS+=($NGINX_PID)
wait_for "nginx" 20 port_open "$NGINX_PORT"

# (e): nginx terminating TLS on both legs, as the proxy does (no labels, no masking).
# (f), the same worker: (e) on another port, adding the owner selector to every request as the
# proxy does to a LIST (used for LISTs only; the request's own query follows it).
# l7_server PORT PROXY_PASS: a server of the two, the caller's front-proxy certificate checked,
# keep-alive TLS to the target with its admin certificate.
l7_server() {
  cat <<SERVER
  server {
    listen 127.0.0.1:$1 ssl;
    ssl_certificate $CPKI/apiserver.crt;
    ssl_certificate_key $CPKI/apiserver.key;
    ssl_client_certificate $CPKI/front-proxy-ca.crt;
    ssl_verify_client on;
    location / {
      proxy_pass $2;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_ssl_certificate $TPKI/admin.crt;
      proxy_ssl_certificate_key $TPKI/admin.key;
      proxy_ssl_trusted_certificate $TPKI/ca.crt;
      proxy_ssl_verify on;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
    }
  }
SERVER
}
mkdir -p "$WORK/nginx-l7"
cat >"$WORK/nginx-l7/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $WORK/nginx-l7/nginx.pid;
error_log $WORK/nginx-l7/error.log warn;
events { worker_connections 20000; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream target { server 127.0.0.1:$TPORT; keepalive 64; keepalive_requests 1000000; }
$(l7_server "$NGINX_L7_PORT" "https://target")
$(l7_server "$NGINX_SCOPED_PORT" "https://target\$uri?$OWNER_SELECTOR&\$args")
}
CONF
taskset -c "$PROXY_CPU" nginx -c "$WORK/nginx-l7/nginx.conf" -p "$WORK/nginx-l7" &
NGINX_L7_PID=$!
PIDS+=($NGINX_L7_PID)
wait_for "nginx (L7)" 20 port_open "$NGINX_L7_PORT"
wait_for "nginx (L7, scoped)" 20 port_open "$NGINX_SCOPED_PORT"

# "<CPU ticks> <context switches>" of a process and its children, all threads.
usage() {
  local ticks=0 switches=0 pid task
  for pid in "$1" $(pgrep -P "$1" || true); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    for task in /proc/"$pid"/task/*; do
      switches=$((switches + $(awk '/ctxt_switches/ {n += $2} END {print n}' "$task/status")))
    done
  done
  echo "$ticks $switches"
}
HZ="$(getconf CLK_TCK)"

TARGET_AUTH=(--cert "$TPKI/admin.crt" --key "$TPKI/admin.key")
CLIENT_AUTH=(--cert "$CPKI/admin.crt" --key "$CPKI/admin.key")
# Sets URL and AUTH (the load generator's flags) for a path (a|b|c|d|e|f) and a kind (get|list).
endpoint() {
  case "$1" in
    a) URL="https://127.0.0.1:$TPORT$(widgets_path "$2")"; AUTH=("${TARGET_AUTH[@]}") ;;
    b) URL="https://127.0.0.1:$NGINX_PORT$(widgets_path "$2")"; AUTH=("${TARGET_AUTH[@]}") ;;
    c) URL="https://127.0.0.1:$PROXY_PORT$(widgets_path "$2")"; AUTH=("${FRONT_AUTH[@]}") ;;
    d) URL="https://127.0.0.1:$CPORT$(widgets_path "$2")"; AUTH=("${CLIENT_AUTH[@]}") ;;
    e) URL="https://127.0.0.1:$NGINX_L7_PORT$(widgets_path "$2")"; AUTH=("${FRONT_AUTH[@]}") ;;
    f) URL="https://127.0.0.1:$NGINX_SCOPED_PORT$(widgets_path "$2")"; AUTH=("${FRONT_AUTH[@]}") ;;
  esac
}
run() { # mode(a|b|c|d|e) kind(get|list) conns
  endpoint "$1" "$2"
  local pid="" before after out
  case "$1" in b) pid="$NGINX_PID" ;; c) pid="$PROXY_PID" ;; e) pid="$NGINX_L7_PID" ;; esac
  [ -n "$pid" ] && before="$(usage "$pid")"
  out="$("$BIN/examples/rp-load" get "$URL" "${AUTH[@]}" --concurrency "$3" --duration "$DURATION")"
  if [ -n "$pid" ]; then
    after="$(usage "$pid")"
    out="$out $(awk -v b="$before" -v a="$after" -v hz="$HZ" -v out="$out" 'BEGIN {
      split(b, x, " "); split(a, y, " "); n = out; sub(/.*requests=/, "", n); n += 0
      printf "cpu_us=%.0f cs=%.1f", n ? (y[1] - x[1]) / hz * 1e6 / n : 0, n ? (y[2] - x[2]) / n : 0 }')"
  fi
  echo "$out"
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $IDLE_NOTE; the proxy and both nginx pinned to CPU $PROXY_CPU" >&2
echo "GET/LIST: $DURATION s per run, median of $REPEAT interleaved runs, 1 and $CONCURRENCY connections; ratios: r/s to direct (a), added p50 latency of the proxy (c-a) to nginx's (b-a)" >&2
printf '| request | conns | (a) direct r/s | p50 ms | p99 ms | (b) nginx r/s | p50 ms | p99 ms | (c) proxy r/s | p50 ms | p99 ms | (d) client+proxy r/s | p50 ms | p99 ms | (e) nginx L7 r/s | p50 ms | p99 ms | r/s c/a | r/s c/b | r/s e/a | added p50 c/b | errors | CPU µs/req b / c / e | ctx switches/req b / c / e |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for kind in get list; do
  # Warm-up (connections, caches).
  for m in a b c d e; do DURATION=1 run "$m" "$kind" 2 >/dev/null; done
  for conns in 1 "$CONCURRENCY"; do
    declare -A R
    errors=0
    for ((r = 0; r < REPEAT; r++)); do
      for m in a b c d e; do
        out="$(run "$m" "$kind" "$conns")"
        R[$m]+="$out;"
        errors=$((errors + $(field errors "$out")))
      done
    done
    awk -v kind="$kind" -v conns="$conns" -v errors="$errors" \
      -v a="${R[a]}" -v b="${R[b]}" -v c="${R[c]}" -v d="${R[d]}" -v e="${R[e]}" '
      # The median over the runs (";"-separated) of field k.
      function f(s, k,   runs, r, n, i, kv, p, v, m, j, t) {
        runs = split(s, r, ";"); m = 0
        for (j = 1; j <= runs; j++) {
          n = split(r[j], kv, " ")
          for (i = 1; i <= n; i++) { split(kv[i], p, "="); if (p[1] == k) v[++m] = p[2] + 0 }
        }
        if (m == 0) return "nan"
        for (i = 2; i <= m; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
      }
      BEGIN {
        added_c = f(c, "p50_ms") - f(a, "p50_ms"); added_b = f(b, "p50_ms") - f(a, "p50_ms");
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %s | %s | %s / %s / %s | %s / %s / %s |\n",
          kind, conns, f(a,"rps"), f(a,"p50_ms"), f(a,"p99_ms"), f(b,"rps"), f(b,"p50_ms"), f(b,"p99_ms"),
          f(c,"rps"), f(c,"p50_ms"), f(c,"p99_ms"), f(d,"rps"), f(d,"p50_ms"), f(d,"p99_ms"),
          f(e,"rps"), f(e,"p50_ms"), f(e,"p99_ms"),
          f(c,"rps") / f(a,"rps"), f(c,"rps") / f(b,"rps"), f(e,"rps") / f(a,"rps"),
          (added_b > 0 ? sprintf("%.2f", added_c / added_b) : "n/a"), errors,
          f(b,"cpu_us"), f(c,"cpu_us"), f(e,"cpu_us"), f(b,"cs"), f(c,"cs"), f(e,"cs")
      }'
    unset R
  done
done

echo "load average after the cells: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# One connection per path, one request in flight in all, the paths taken in a shuffled order
# every round: added medians over direct, measured at the same moments.
echo "one-connection latency, paths interleaved request by request, $((DURATION * REPEAT)) s per kind" >&2
printf '\n| request | requests per path | (a) direct p50 ms | (b) nginx | (c) proxy | (d) client+proxy | (e) nginx L7 | (s) direct with the owner selector | (f) nginx L7 with it | added p50 (b) nginx | (c) proxy | (e) nginx L7 | (f) nginx L7 with the selector | c/b | e/b | c/e | (c-s)/e | c/f | errors |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
# LIST only: (s), direct with the owner selector the proxy adds, so the target's own work for it
# can be told apart from the proxy's ((c-s)/e is the proxy's added median without it, over nginx
# (e)'s); (f), nginx (e) adding the selector, a peer paying the target's filtering too (c/f).
# Sets ARGS to `rp-load interleave`'s paths for a kind and the paths named after it.
interleave_args() { # kind, paths...
  local kind="$1" m
  shift
  ARGS=()
  for m in "$@"; do
    endpoint "$m" "$kind"
    ARGS+=(path "$m" "$URL" "${AUTH[@]}")
  done
}
for kind in get list; do
  interleave_args "$kind" a b c d e
  if [ "$kind" = list ]; then
    endpoint a list
    ARGS+=(path s "$URL?$OWNER_SELECTOR" "${AUTH[@]}")
    endpoint f list
    ARGS+=(path f "$URL" "${AUTH[@]}")
  fi
  out="$("$BIN/examples/rp-load" interleave --duration $((DURATION * REPEAT)) "${ARGS[@]}" | tr '\n' ' ')"
  awk -v kind="$kind" -v out="$out" "$INTERLEAVED_AWK"'
    # x over y, or "n/a" when y added nothing to divide by.
    function ratio(x, y) { return y > 0 ? sprintf("%.2f", x / y) : "n/a" }
    BEGIN {
      interleaved(out, v)
      add_b = v["b", "p50_ms"] - v["a", "p50_ms"]; add_c = v["c", "p50_ms"] - v["a", "p50_ms"]
      add_e = v["e", "p50_ms"] - v["a", "p50_ms"]
      sel = (("s", "p50_ms") in v) ? v["s", "p50_ms"] : ""
      scoped = (("f", "p50_ms") in v) ? v["f", "p50_ms"] : ""
      add_f = scoped == "" ? 0 : scoped - v["a", "p50_ms"]
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s | %s | %d |\n", kind, v["a", "requests"],
        v["a", "p50_ms"], v["b", "p50_ms"], v["c", "p50_ms"], v["d", "p50_ms"], v["e", "p50_ms"], (sel == "" ? "n/a" : sel),
        (scoped == "" ? "n/a" : scoped), add_b, add_c, add_e, (scoped == "" ? "n/a" : sprintf("%.3f", add_f)),
        ratio(add_c, add_b), ratio(add_e, add_b), ratio(add_c, add_e),
        (sel == "" ? "n/a" : ratio(v["c", "p50_ms"] - sel, add_e)),
        (scoped == "" ? "n/a" : ratio(add_c, add_f)),
        v["a", "errors"] + v["b", "errors"] + v["c", "errors"] + v["d", "errors"] + v["e", "errors"] + v["s", "errors"] + v["f", "errors"]
    }'
done

# CPU per request with the three hops interleaved request by request (one connection each, the
# order shuffled every round): each process serves the same number of requests at the same
# moments, so drift on the machine reaches all three alike, which the cells above (the paths one
# after the other) cannot give. CPU time is the scheduler's in nanoseconds (scripts/lib/cpu.sh).
echo "CPU per request, (b), (c) and (e) interleaved request by request, $CPU_ROUNDS rounds of $DURATION s per kind" >&2
printf '\n| request | requests per path | CPU µs/req (b) nginx | (c) proxy | (e) nginx L7 | c/e | rounds with c <= e | c/e of each round | errors |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
declare -A CPU=()
for ((r = 0; r < CPU_ROUNDS; r++)); do
  for kind in get list; do
    interleave_args "$kind" b c e
    before="$(cpu_ns "$NGINX_PID") $(cpu_ns "$PROXY_PID") $(cpu_ns "$NGINX_L7_PID")"
    out="$("$BIN/examples/rp-load" interleave --duration "$DURATION" "${ARGS[@]}" | tr '\n' ' ')"
    after="$(cpu_ns "$NGINX_PID") $(cpu_ns "$PROXY_PID") $(cpu_ns "$NGINX_L7_PID")"
    # This round's nanoseconds and requests of (b), (c), (e), then its errors.
    CPU[$kind]+="$(awk -v out="$out" -v before="$before" -v after="$after" "$INTERLEAVED_AWK"'
      BEGIN {
        interleaved(out, v)
        split(before, x, " "); split(after, y, " ")
        printf "%d %d %d %d %d %d %d;", y[1] - x[1], v["b", "requests"], y[2] - x[2], v["c", "requests"],
          y[3] - x[3], v["e", "requests"], v["b", "errors"] + v["c", "errors"] + v["e", "errors"]
      }')"
  done
done
for kind in get list; do
  awk -v kind="$kind" -v rounds="${CPU[$kind]}" '
    function us(ns, n) { return n > 0 ? ns / 1000 / n : 0 }
    BEGIN {
      k = split(rounds, rr, ";")
      for (i = 1; i < k; i++) {
        split(rr[i], f, " ")
        for (j = 1; j <= 6; j++) t[j] += f[j]
        errors += f[7]
        c = us(f[3], f[4]); e = us(f[5], f[6])
        if (e > 0 && c <= e) level++
        each = each (each == "" ? "" : " ") (e > 0 ? sprintf("%.2f", c / e) : "n/a")
      }
      c = us(t[3], t[4]); e = us(t[5], t[6])
      printf "| %s | %d | %.1f | %.1f | %.1f | %s | %d/%d | %s | %d |\n", kind, t[4], us(t[1], t[2]), c, e,
        (e > 0 ? sprintf("%.2f", c / e) : "n/a"), level, k - 1, each, errors
    }'
done
rss_kib() { sed -n 's/^VmRSS:\s*\([0-9]*\) kB/\1/p' "/proc/$PROXY_PID/status"; }
echo "watches: opening $WATCHES idle watches through the proxy (HTTP/2 to the proxy, multiplexed HTTP/2 to the target)" >&2
before="$(rss_kib)"
"$BIN/examples/rp-load" watch "https://127.0.0.1:$PROXY_PORT/apis/example.test/v1/namespaces/$NS/widgets?watch=true&resourceVersion=0&timeoutSeconds=3600&allowWatchBookmarks=false" \
  "${FRONT_AUTH[@]}" --count "$WATCHES" --hold "$HOLD" >"$WORK/watch.out" &
WATCH_PID=$!
PIDS+=($WATCH_PID)
wait_for "the watches to open" 600 grep -q '^open=' "$WORK/watch.out"
sleep 2
during="$(rss_kib)"
# Established connections to the target's port (remote side = TPORT), i.e. the proxy's.
target_conns="$(awk -v port="$(printf '%04X' "$TPORT")" '$4 == "01" { split($3, r, ":"); if (r[2] == port) n++ } END { print n + 0 }' /proc/net/tcp)"
active="$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | sed -n 's/^vcluster_proxy_active_watches{[^}]*} \([0-9]*\).*/\1/p')"
wait "$WATCH_PID"
printf '\n| watches | opened in | still open after %s s | proxy active_watches | connections to the target | proxy RSS before | proxy RSS with watches | per watch |\n|---|---|---|---|---|---|---|---|\n' "$HOLD"
awk -v n="$WATCHES" -v out="$(tr '\n' ' ' <"$WORK/watch.out")" -v active="$active" -v conns="$target_conns" -v before="$before" -v during="$during" '
  BEGIN {
    split(out, kv, " "); for (i in kv) { split(kv[i], p, "="); v[p[1]] = p[2] }
    printf "| %d | %.1f s | %s | %s | %s | %.1f MiB | %.1f MiB | %.1f KiB |\n", n, v["in_ms"] / 1000, v["still_open"], active, conns,
      before / 1024, during / 1024, (during - before) / n
  }'
