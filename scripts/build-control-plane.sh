#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries the tests and the demo run (kube-apiserver,
# kube-controller-manager, kubectl, etcd) from the Go module proxy, and caches them by version.
#
#   scripts/build-control-plane.sh          # builds if missing, prints the bin directory
#
# Versions: K8S_VERSION (default below), ETCD_VERSION. Cache: $CACHE_ROOT (~/.cache/kube-tenancy).
# The binaries land in $CACHE_ROOT/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/, which is what the
# test harness finds through `control-plane-bin-dir` below (or $KT_BIN_DIR when set).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
OUT="$CACHE_ROOT/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

die() { echo "build-control-plane: $*" >&2; exit 1; }
log() { echo "build-control-plane: $*" >&2; }

if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] && [ -x "$OUT/kubectl" ] && [ -x "$OUT/etcd" ]; then
  echo "$OUT"
  exit 0
fi

. "$(dirname "$0")/lib/go.sh"
go_env build-control-plane
GOV=$(go env GOVERSION)
case "$GOV" in
  go1.2[6-9]*|go1.[3-9]*) ;;
  *) die "Go $GOV is too old: Kubernetes ${K8S_VERSION} needs Go >= 1.26" ;;
esac

STAGING="v0.${K8S_VERSION#v1.}"
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
WORK="$CACHE_ROOT/src/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$WORK/k8s" "$WORK/etcd" "$OUT.tmp"

# --- Kubernetes: wrapper module that replaces every staging module with its published tag ----
log "resolving k8s.io/kubernetes@$K8S_VERSION from the module proxy"
cd "$WORK/k8s"
cat > go.mod <<MOD
module example.invalid/k8sbins

go 1.26.0
MOD
go mod download k8s.io/kubernetes@"$K8S_VERSION" \
  || die "could not fetch k8s.io/kubernetes@$K8S_VERSION from the Go module proxy ($(go env GOPROXY))"
KMOD="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
[ -f "$KMOD" ] || die "k8s.io/kubernetes go.mod not found at $KMOD"
staging=$(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*|\1|p' "$KMOD")
[ -n "$staging" ] || die "no staging replace lines found in $KMOD"
for m in $staging; do
  go mod edit -replace="$m=$m@$STAGING"
done
go mod edit -require=k8s.io/kubernetes@"$K8S_VERSION"
for cmd in kube-apiserver kube-controller-manager kubectl; do
  mkdir -p "cmd/$cmd"
done
cat > cmd/kube-apiserver/main.go <<'GO'
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
cat > cmd/kube-controller-manager/main.go <<'GO'
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
GO
cat > cmd/kubectl/main.go <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
log "go mod tidy (kubernetes wrapper; first run downloads ~1 GB of modules)"
go mod tidy || die "go mod tidy failed for the kubernetes wrapper module"
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
log "building kube-apiserver, kube-controller-manager, kubectl $K8S_VERSION (several minutes on a cold cache)"
go build -trimpath -ldflags "$LDF" -o "$OUT.tmp/" ./cmd/... || die "go build of the Kubernetes binaries failed"

# --- etcd: wrapper around etcdmain ---------------------------------------------------------------
log "building etcd $ETCD_VERSION"
cd "$WORK/etcd"
cat > go.mod <<MOD
module example.invalid/etcdbin

go 1.26.0
MOD
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go get go.etcd.io/etcd/server/v3@"$ETCD_VERSION" || die "could not fetch go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go mod tidy || die "go mod tidy failed for the etcd wrapper module"
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" . || die "go build of etcd failed"

"$OUT.tmp/kube-apiserver" --version >&2
"$OUT.tmp/etcd" --version >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
