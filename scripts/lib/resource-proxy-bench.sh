# Sourced by the resource-proxy benchmark scripts (not run): the setup they share.
# scripts/bench-resource-proxy.sh measures rates and latencies, scripts/count-resource-proxy.sh
# counts instructions; both need the same two clusters, target CRD, objects and proxy config.
#
# Expects ROOT (the repository). Sets CARGO_TARGET_DIR (default target-resource-proxy), BIN
# (its release directory), NS, ACCESS (default owned), WORK (a temporary directory removed on
# exit, with the clusters stopped and every pid in PIDS killed). Functions:
#   start_clusters        client and target clusters (test-cluster), the `widgets` CRD and ten
#                         owned widgets w0..w9 in namespace NS of the target; sets KUBECTL, CKC,
#                         TKC (kubeconfigs), CPKI, TPKI (their PKI directories), CPORT, TPORT
#   proxy_config F P M    writes the proxy's config to F: listeners from port P, metrics on M
#   widgets_path get|list the request path of the GET (w0) or the LIST
#   INTERLEAVED_AWK       an awk function to put before a program reading `rp-load interleave`'s
#                         output joined on one line: interleaved(out, v) sets v[path, key]
#   wait_for WHAT SECS CMD...   port_open PORT
# and FRONT_AUTH: rp-load's flags for calling the proxy as the aggregator does (front-proxy
# client certificate, X-Remote-User/Group).

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-resource-proxy}"
BIN="$CARGO_TARGET_DIR/release"
NS=bench
ACCESS="${ACCESS:-owned}"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  "$BIN/test-cluster" down --state-dir "$WORK/cp" >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() { # what, seconds, command...
  local what="$1" secs="$2"; shift 2
  for _ in $(seq 1 $((secs * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  echo "timed out waiting for $what" >&2
  exit 1
}
port_open() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_clusters() {
  echo "starting the client and target clusters" >&2
  "$BIN/test-cluster" up --clusters client,target --state-dir "$WORK/cp" >"$WORK/cp.log" 2>&1 &
  PIDS+=($!)
  wait_for "the control plane" 240 test -f "$WORK/cp/ready"
  KUBECTL="$(sed -n 's/^export KUBECTL=//p' "$WORK/cp/env")"
  CKC="$WORK/cp/client/kubeconfig"
  TKC="$WORK/cp/target/kubeconfig"
  TPKI="$WORK/cp/target/pki"
  CPKI="$WORK/cp/client/pki"
  TPORT="$(port_of "$TKC")"
  CPORT="$(port_of "$CKC")"
  FRONT_AUTH=(--cert "$CPKI/front-proxy-client.crt" --key "$CPKI/front-proxy-client.key"
    --header "X-Remote-User: admin" --header "X-Remote-Group: system:masters")

  "$KUBECTL" --kubeconfig "$TKC" apply -f - >/dev/null <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.test}
spec:
  group: example.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
YAML
  "$KUBECTL" --kubeconfig "$TKC" wait --for=condition=Established crd/widgets.example.test --timeout=60s >/dev/null
  for kc in "$TKC" "$CKC"; do "$KUBECTL" --kubeconfig "$kc" create namespace "$NS" >/dev/null; done
  # Ten widgets of this client (owner labels), one is the GET target.
  for i in $(seq 0 9); do
    cat <<YAML
---
apiVersion: example.test/v1
kind: Widget
metadata:
  name: w$i
  namespace: $NS
  labels: {vcluster.com/owner-vcluster: bench, vcluster.com/owner-project: bench}
spec: {size: $i}
YAML
  done | "$KUBECTL" --kubeconfig "$TKC" apply -f - >/dev/null
}
port_of() { sed -n 's#.*server: https://127.0.0.1:\([0-9]*\).*#\1#p' "$1" | head -1; }

proxy_config() { # file, listeners' base port, metrics port
  cat >"$1" <<YAML
client: {name: bench, project: bench, kubeconfig: $CKC}
customResources:
  widgets.example.test/v1:
    enabled: true
    accessResources: $ACCESS
    targetVirtualCluster: {name: target, project: bench}
targets:
  bench/target:
    peers: {static: ["127.0.0.1:$TPORT"]}
    tls: {caFile: $TPKI/ca.crt, serverName: localhost}
    credential: {clientCertificate: {certFile: $TPKI/admin.crt, keyFile: $TPKI/admin.key}}
listeners: {basePort: $2}
metrics: {address: "127.0.0.1:$3"}
YAML
}

INTERLEAVED_AWK='
  function interleaved(out, v,   n, kv, i, p, m) {
    n = split(out, kv, " ")
    for (i = 1; i <= n; i++) {
      split(kv[i], p, "=")
      if (p[1] == "path") m = p[2]; else v[m, p[1]] = p[2]
    }
  }'

widgets_path() {
  if [ "$1" = get ]; then echo "/apis/example.test/v1/namespaces/$NS/widgets/w0"; else echo "/apis/example.test/v1/namespaces/$NS/widgets"; fi
}
