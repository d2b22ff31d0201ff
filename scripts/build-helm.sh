#!/usr/bin/env bash
# Builds `helm` (v3) from the Go module proxy and caches it by version; prints the binary's path.
# The charts' tests (crates/charts) and the install guides use it.
#
#   scripts/build-helm.sh          # builds if missing, prints the path of helm
#
# Version: HELM_VERSION (default below: the newest v3 release the module proxy served when it was
# pinned; `go list -m -versions helm.sh/helm/v3` lists them). Cache: $CACHE_ROOT
# (~/.cache/kube-tenancy)/bin/helm-$HELM_VERSION/helm.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
OUT="$CACHE_ROOT/bin/helm-$HELM_VERSION"

if [ -x "$OUT/helm" ]; then
  echo "$OUT/helm"
  exit 0
fi

. "$(dirname "$0")/lib/go-env.sh"
go_build_env build-helm 26 "helm $HELM_VERSION"

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
echo "build-helm: building helm $HELM_VERSION from the Go module proxy ($(go env GOPROXY))" >&2
LDF="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
GOBIN="$OUT.tmp" go install -trimpath -ldflags "$LDF" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
  || { echo "build-helm: go install of helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed" >&2; exit 1; }
"$OUT.tmp/helm" version --short >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT/helm"
