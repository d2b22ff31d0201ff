#!/usr/bin/env bash
# Writes the manifests under deploy/ from the Helm charts (charts/), so the charts are the one
# source of truth: `helm template` with the default values (plus the switches below) and the
# objects of each template file written to the deploy/ file of the same name. Hand-written
# kustomize glue (kustomization.yaml, monitoring/controller-patch.yaml), examples/ and the
# resource proxy's sidecar/ and target/ layouts are not generated.
#
#   scripts/render-deploy.sh           # rewrites the generated files under deploy/
#   scripts/render-deploy.sh --check   # renders into a temporary directory; fails on any
#                                      # difference from deploy/ (the drift check of the tests)
#
# Switches on top of the defaults: tunnel-gateway namespace.create=true (the kustomization
# creates its namespace); the opt-in parts (hostname-ownership, monitoring) are rendered in a
# second pass with them on, into the kustomize components of the same names.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELM=${HELM:-$(bash "$ROOT/scripts/build-helm.sh")}
CHECK=false
case "${1:-}" in
  --check) CHECK=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if $CHECK; then OUT="$WORK/deploy"; else OUT="$ROOT/deploy"; fi

# render <chart> <namespace> <pass> [helm args...]: `helm template --output-dir` into $WORK/<pass>.
render() {
  local chart=$1 ns=$2 pass=$3
  shift 3
  "$HELM" template "$chart" "$ROOT/charts/$chart" --namespace "$ns" --include-crds \
    --output-dir "$WORK/$pass" "$@" >/dev/null
}

# emit <pass> <chart> <file in the chart> <file under deploy/>: one rendered template file with
# a header, without Helm's `# Source:` comments and its leading document separator.
emit() {
  local pass=$1 chart=$2 from=$3 to=$4
  local src="$WORK/$pass/$chart/$from"
  [ -f "$src" ] || { echo "render-deploy: $chart/$from rendered nothing in pass $pass" >&2; exit 1; }
  mkdir -p "$(dirname "$OUT/$to")"
  {
    echo "# Generated from charts/$chart/$from by scripts/render-deploy.sh: edit the chart, not this file."
    awk 'NR == 1 && $0 == "---" { next } /^# Source: / { next } { print }' "$src"
  } > "$OUT/$to"
}

render tunnel-gateway tunnel-gateway-system tg --set namespace.create=true
for f in namespace rbac controller shared-plane gatewayclass; do
  emit tg tunnel-gateway "templates/$f.yaml" "tunnel-gateway/$f.yaml"
done
emit tg tunnel-gateway crds/crds.yaml tunnel-gateway/crds.yaml
render tunnel-gateway tunnel-gateway-system tg-opt \
  --set hostnameOwnershipPolicy.enabled=true,podMonitor.enabled=true,prometheusRule.enabled=true
for f in hostname-ownership/policy hostname-ownership/binding monitoring/podmonitor-controller \
  monitoring/podmonitor-planes monitoring/prometheusrule monitoring/network-policy; do
  emit tg-opt tunnel-gateway "templates/$f.yaml" "tunnel-gateway/$f.yaml"
done
cp "$ROOT/charts/tunnel-gateway/dashboards/tunnel-gateway.json" "$OUT/tunnel-gateway/monitoring/dashboard.json"

render resource-proxy kube-system rp
for f in serviceaccount client-rbac configmap daemonset; do
  emit rp resource-proxy "templates/$f.yaml" "resource-proxy/$f.yaml"
done
render resource-proxy kube-system rp-opt --set podMonitor.enabled=true,prometheusRule.enabled=true
for f in monitoring/podmonitor monitoring/prometheusrule; do
  emit rp-opt resource-proxy "templates/$f.yaml" "resource-proxy/$f.yaml"
done
cp "$ROOT/charts/resource-proxy/dashboards/resource-proxy.json" "$OUT/resource-proxy/monitoring/dashboard.json"

if $CHECK; then
  stale=$(cd "$OUT" && find . -type f | sort | while read -r f; do
    cmp -s "$f" "$ROOT/deploy/$f" || echo "deploy/${f#./}"
  done)
  if [ -n "$stale" ]; then
    echo "render-deploy: these files differ from what the charts render (run scripts/render-deploy.sh):" >&2
    echo "$stale" >&2
    exit 1
  fi
  echo "render-deploy: deploy/ matches the charts"
fi
