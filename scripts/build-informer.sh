#!/usr/bin/env bash
# Builds the controller-runtime informer client of the resource proxy's e2e test
# (crates/resource-proxy/tests/informer-go) from the Go module proxy, cached by the hash of its
# sources, and prints the binary's path.
#
#   scripts/build-informer.sh
set -euo pipefail

SRC="$(cd "$(dirname "$0")/../crates/resource-proxy/tests/informer-go" && pwd)"
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
HASH=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-16)
OUT="$CACHE_ROOT/bin/informer-$HASH"

if [ -x "$OUT/informer" ]; then
  echo "$OUT/informer"
  exit 0
fi
. "$(dirname "$0")/lib/go.sh"
go_env build-informer
GOFLAGS="$GOFLAGS -mod=readonly"
mkdir -p "$OUT.tmp"
(cd "$SRC" && go build -o "$OUT.tmp/informer" .) >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT/informer"
