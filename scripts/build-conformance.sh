#!/usr/bin/env bash
# Compiles the Gateway API conformance driver (conformance/, a Go module pinning
# sigs.k8s.io/gateway-api and /conformance at GATEWAY_API_VERSION) with `go test -c` and caches
# the test binary by version and by a hash of conformance/*; prints the binary's path.
#
#   scripts/build-conformance.sh          # builds if missing, prints the binary's path
#
# Cache: $CACHE_ROOT (~/.cache/kube-tenancy)/bin/conformance-<version>-<hash>/conformance.test.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC="$ROOT/conformance"
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}

die() { echo "build-conformance: $*" >&2; exit 1; }
log() { echo "build-conformance: $*" >&2; }

VERSION=$(sed -n 's#^[[:space:]]*sigs.k8s.io/gateway-api/conformance \(v[^ ]*\).*#\1#p' "$SRC/go.mod")
[ -n "$VERSION" ] || die "conformance/go.mod requires no sigs.k8s.io/gateway-api/conformance"
HASH=$(cd "$SRC" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)
OUT="$CACHE_ROOT/bin/conformance-$VERSION-$HASH"

if [ -x "$OUT/conformance.test" ]; then
  echo "$OUT/conformance.test"
  exit 0
fi

. "$ROOT/scripts/lib/go.sh"
go_env build-conformance

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
log "building the conformance driver against sigs.k8s.io/gateway-api/conformance@$VERSION"
(cd "$SRC" && go test -c -trimpath -o "$OUT.tmp/conformance.test" .) \
  || die "building the conformance driver failed"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT/conformance.test"
