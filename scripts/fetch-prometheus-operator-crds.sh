#!/usr/bin/env bash
# Prints the directory holding the Prometheus Operator CRDs the monitoring manifests use
# (ServiceMonitor, PodMonitor, PrometheusRule) at PROMETHEUS_OPERATOR_VERSION, taken from the
# github.com/prometheus-operator/prometheus-operator Go module (its example/prometheus-operator-crd/,
# fetched through the module proxy) and cached under ~/.cache/kube-tenancy by version. The
# smaller .../pkg/apis/monitoring module carries only Go types, no CRD YAML.
set -euo pipefail
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
CRDS=(servicemonitors podmonitors prometheusrules)
cache=${KUBE_TENANCY_CACHE:-$HOME/.cache/kube-tenancy}/prometheus-operator-crds/$PROMETHEUS_OPERATOR_VERSION
complete() { for c in "${CRDS[@]}"; do [ -s "$cache/monitoring.coreos.com_$c.yaml" ] || return 1; done; }
if ! complete; then
  . "$(dirname "$0")/lib/go.sh"
  go_env fetch-prometheus-operator-crds
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cd "$tmp"
  printf 'module example.invalid/promop\n\ngo 1.26.0\n' > go.mod
  module=github.com/prometheus-operator/prometheus-operator
  dir=$(go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  src="$dir/example/prometheus-operator-crd"
  [ -n "$dir" ] && [ -d "$src" ] || {
    echo "fetch-prometheus-operator-crds: $module@$PROMETHEUS_OPERATOR_VERSION has no example/prometheus-operator-crd" >&2; exit 1; }
  # Copied into a fresh directory, renamed into place: a concurrent run never sees half a set.
  mkdir -p "$(dirname "$cache")"
  stage=$(mktemp -d "$(dirname "$cache")/.stage.XXXXXX")
  for c in "${CRDS[@]}"; do cp "$src/monitoring.coreos.com_$c.yaml" "$stage/"; done
  chmod 755 "$stage"
  # An incomplete set (an interrupted older copy) is replaced.
  complete || rm -rf "$cache"
  if ! mv -T "$stage" "$cache" 2>/dev/null; then
    rm -rf "$stage"
    complete || { echo "fetch-prometheus-operator-crds: cannot fill $cache" >&2; exit 1; }
  fi
fi
echo "$cache"
