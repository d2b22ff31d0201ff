#!/usr/bin/env bash
# Builds the Gateway API conformance backend `echo-basic` (sigs.k8s.io/gateway-api/conformance/
# echo-basic) from the Go module proxy and caches it by version; the test node maps the image
# `echo-basic` to it.
#
#   scripts/build-echo-basic.sh          # builds if missing, prints the binary's path
#
# Version: the one the conformance driver's module (conformance/go.mod) pins, so the backend and
# the suite always match; it is built inside that module.
# Cache: $CACHE_ROOT (~/.cache/kube-tenancy)/bin/echo-basic-<version>/echo-basic.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC="$ROOT/conformance"
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}

die() { echo "build-echo-basic: $*" >&2; exit 1; }
log() { echo "build-echo-basic: $*" >&2; }

VERSION=$(sed -n 's#^[[:space:]]*sigs.k8s.io/gateway-api/conformance \(v[^ ]*\).*#\1#p' "$SRC/go.mod")
[ -n "$VERSION" ] || die "conformance/go.mod requires no sigs.k8s.io/gateway-api/conformance"
OUT="$CACHE_ROOT/bin/echo-basic-$VERSION"

if [ -x "$OUT/echo-basic" ]; then
  echo "$OUT/echo-basic"
  exit 0
fi

. "$ROOT/scripts/lib/go.sh"
go_env build-echo-basic

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
log "building echo-basic of sigs.k8s.io/gateway-api/conformance@$VERSION"
(cd "$SRC" && go build -trimpath -o "$OUT.tmp/echo-basic" sigs.k8s.io/gateway-api/conformance/echo-basic) \
  || die "building echo-basic failed"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT/echo-basic"
