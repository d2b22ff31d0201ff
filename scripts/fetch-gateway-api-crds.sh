#!/usr/bin/env bash
# Prints the directory holding the Gateway API standard-channel CRDs of GATEWAY_API_VERSION,
# taken from the sigs.k8s.io/gateway-api Go module (module proxy, cached in the Go module cache).
set -euo pipefail
GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.5.1}
. "$(dirname "$0")/lib/go.sh"
go_env fetch-gateway-api-crds
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
printf 'module example.invalid/gwapi\n\ngo 1.26.0\n' > go.mod
dir=$(go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -n "$dir" ] && [ -d "$dir/config/crd/standard" ] || {
  echo "fetch-gateway-api-crds: sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION has no config/crd/standard" >&2; exit 1; }
echo "$dir/config/crd/standard"
