#!/usr/bin/env bash
# `make images` (release, into target/images/) and `make images-test` (PROFILE=image-test, into
# target/images/test/, what the tests run): the three images from static musl binaries, each an
# OCI image layout target/images/<image>/, its archive <image>.tar and SBOM <image>.spdx.json.
# See docs/development.md, "Images".
#
# Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the commit's time), the revision
# the commit's; the same sources, toolchain and CA bundle give the same digests.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

PROFILE=${PROFILE:-image}
OUT=${IMAGES_OUT:-target/images}
TARGET=x86_64-unknown-linux-musl
CARGO=${CARGO:-cargo}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}

CC_x86_64_unknown_linux_musl=$(bash scripts/install-musl.sh)
export CC_x86_64_unknown_linux_musl

# image name : Cargo package : binary
IMAGES=(
  "tunnel-gateway-controller:tunnel-controller:tunnel-gateway-controller"
  "tunnel-proxy:tunnel-proxy:tunnel-proxy"
  "resource-proxy:resource-proxy:resource-proxy"
)
args=()
for spec in "${IMAGES[@]}"; do
  IFS=: read -r _ package bin <<<"$spec"
  args+=(-p "$package" --bin "$bin")
done
$CARGO build --quiet --locked --profile "$PROFILE" --target "$TARGET" "${args[@]}"
$CARGO build --quiet --locked -p oci-image --bin oci-image

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
revision=$(git rev-parse HEAD)
mkdir -p "$OUT"
for spec in "${IMAGES[@]}"; do
  IFS=: read -r image package bin <<<"$spec"
  binary="target/$TARGET/$PROFILE/$bin"
  ./target/debug/oci-image build --name "ghcr.io/kube-tenancy/$image" --package "$package" \
    --binary "$binary" --target "$TARGET" --revision "$revision" --out "$OUT"
  printf '  %s\t%s MB\n' "$OUT/$image.tar" "$(( $(stat -c %s "$OUT/$image.tar") / 1048576 ))"
done
