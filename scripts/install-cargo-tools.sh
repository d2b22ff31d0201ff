#!/usr/bin/env bash
# Installs a cargo tool the Makefile's checks use, pinned below and cached by version, and prints
# the directory holding its binary (put it first on PATH to run `cargo <tool>`).
#
#   scripts/install-cargo-tools.sh cargo-deny      # builds once, prints ~/.cache/kube-tenancy/tools/cargo-deny-<version>-debug/bin
#
# Tools are built from crates.io with `cargo install --locked` into
# $CACHE_ROOT/tools/<tool>-<version>-debug (~/.cache/kube-tenancy); a second run prints the directory at
# once. Bump a version here; the cache key follows.
set -euo pipefail

declare -A VERSIONS=(
  [cargo-deny]=0.20.2
  [cargo-machete]=0.9.2
)

die() { echo "install-cargo-tools: $*" >&2; exit 1; }

tool=${1:-}
[ -n "$tool" ] || die "usage: $0 TOOL (one of: ${!VERSIONS[*]})"
version=${VERSIONS[$tool]:-}
[ -n "$version" ] || die "unknown tool '$tool' (one of: ${!VERSIONS[*]})"

CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
root="$CACHE_ROOT/tools/$tool-$version-debug"
if [ ! -x "$root/bin/$tool" ]; then
  echo "install-cargo-tools: building $tool $version (once; cached in $root)" >&2
  rm -rf "$root.tmp"
  # A debug build: the checks run for seconds either way (cargo-deny 4 s, cargo-machete 7 s on
  # this workspace), and an optimised build costs several minutes more of a fresh CI machine's
  # two cores (cargo-deny: 1.5 CPU-minutes in debug).
  cargo install --quiet --locked --debug --version "=$version" --root "$root.tmp" "$tool"
  rm -rf "$root"
  mv "$root.tmp" "$root"
fi
echo "$root/bin"
