#!/usr/bin/env bash
# Builds the Gateway API conformance backend `echo-basic` (sigs.k8s.io/gateway-api/conformance/
# echo-basic) from the Go module proxy and caches it by version; the test node maps the image
# `echo-basic` to it.
#
#   scripts/build-echo-basic.sh          # builds if missing, prints the binary's path
#
# Version: GATEWAY_API_VERSION (default: the Gateway API version the workspace uses).
# Cache: $CACHE_ROOT (~/.cache/kube-tenancy)/bin/echo-basic-$GATEWAY_API_VERSION/echo-basic.
set -euo pipefail

GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.5.1}
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
OUT="$CACHE_ROOT/bin/echo-basic-$GATEWAY_API_VERSION"

die() { echo "build-echo-basic: $*" >&2; exit 1; }
log() { echo "build-echo-basic: $*" >&2; }

if [ -x "$OUT/echo-basic" ]; then
  echo "$OUT/echo-basic"
  exit 0
fi

. "$(dirname "$0")/lib/go-env.sh"
go_build_env build-echo-basic 25 "the Gateway API conformance module"

# The conformance module replaces sigs.k8s.io/gateway-api with its parent directory, so
# `go install ...@version` refuses it: a wrapper module pins both at the same tag instead.
WORK="$CACHE_ROOT/src/echo-basic-$GATEWAY_API_VERSION"
rm -rf "$WORK" "$OUT.tmp"
mkdir -p "$WORK" "$OUT.tmp"
cd "$WORK"
cat > go.mod <<MOD
module example.invalid/echobasic

go 1.24.0

require (
	sigs.k8s.io/gateway-api $GATEWAY_API_VERSION
	sigs.k8s.io/gateway-api/conformance $GATEWAY_API_VERSION
)
MOD
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
GO
log "resolving sigs.k8s.io/gateway-api/conformance@$GATEWAY_API_VERSION from the module proxy"
go mod tidy >/dev/null 2>&1 || go mod download all \
  || die "could not fetch sigs.k8s.io/gateway-api/conformance@$GATEWAY_API_VERSION ($(go env GOPROXY))"
log "building echo-basic"
go build -trimpath -o "$OUT.tmp/echo-basic" sigs.k8s.io/gateway-api/conformance/echo-basic \
  || die "building echo-basic failed"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT/echo-basic"
