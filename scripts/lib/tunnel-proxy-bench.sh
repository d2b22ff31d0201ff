# Shared by scripts/bench-tunnel-proxy.sh and scripts/count-tunnel-proxy.sh (sourced, not run):
# tool installation, the release build, process cleanup, port waits, and the nginx
# and HAProxy configurations they compare tunnel-proxy with. Expects ROOT to be set.

need() { command -v "$1" >/dev/null 2>&1; }

# install_missing "command=package" ...: installs from Debian what is not on PATH.
install_missing() {
  local missing=() pair
  for pair in "$@"; do
    need "${pair%%=*}" || missing+=("${pair#*=}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]} from Debian packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# build_bench: tunnel-proxy and the bench-backend example in release; sets BIN.
build_bench() {
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-tunnel-proxy}"
  echo "building tunnel-proxy and bench-backend (release)" >&2
  cargo build --release -q -p tunnel-proxy --bin tunnel-proxy --example bench-backend
  BIN="$CARGO_TARGET_DIR/release"
}

# A work directory removed, and the processes in PIDS killed, on exit.
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 300); do
    if (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "port $1 did not open" >&2
  exit 1
}

# push_route ADMIN_PORT HOST BACKEND_PORT: the one route both servers serve.
push_route() {
  curl -sf -X PUT -H 'content-type: application/json' "http://127.0.0.1:$1/config" -d @- >/dev/null <<JSON
{"version": 1, "routes": [{"kind": "HTTPRoute", "name": "bench/bench", "hostnames": ["$2"],
  "rules": [{"backends": [{"name": "bench/backend:80", "endpoints": ["127.0.0.1:$3"]}]}]}]}
JSON
}

# nginx_conf DIR PORT HOST BACKEND_PORT [MASTER on|off]: the same route with upstream
# keep-alive (without it the comparison is void) and no response buffering (both stream).
nginx_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<CONF
user root;
worker_processes 1;
daemon off;
master_process ${5:-on};
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  upstream backend {
    server 127.0.0.1:$4;
    keepalive 128;
  }
  server {
    listen 127.0.0.1:$2;
    server_name $3;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_buffering off;
    }
  }
}
CONF
}

# haproxy_conf DIR PORT HOST BACKEND_PORT: the same route in HAProxy, the same duties as nginx:
# one thread (nginx runs one worker), routing on the Host header, keep-alive to the backend
# (connections reused across client connections), no logging, no buffering beyond HAProxy's own.
haproxy_conf() {
  mkdir -p "$1"
  cat >"$1/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 8192
  pidfile $1/haproxy.pid
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend bench
  bind 127.0.0.1:$2
  acl route hdr(host),field(1,:) -i $3
  use_backend backend if route
backend backend
  server b1 127.0.0.1:$4 maxconn 1024
CONF
}
