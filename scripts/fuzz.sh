#!/usr/bin/env bash
# Coverage-guided fuzzing of the hand-written parsers (fuzz/, its own Cargo workspace) with
# cargo-fuzz and libFuzzer, on stable Rust (`--sanitizer none`; see docs/development.md).
#
#   scripts/fuzz.sh smoke                 # every target for FUZZ_SMOKE_SECONDS (default 12) each
#   scripts/fuzz.sh long                  # every target for FUZZ_SECONDS (default 300) each
#   scripts/fuzz.sh run TARGET [SECONDS]  # one target (default FUZZ_SECONDS)
#   scripts/fuzz.sh repro TARGET FILE     # run one input (a crash artifact) once, with its panic
#   scripts/fuzz.sh build                 # build every target
#   scripts/fuzz.sh list                  # the targets
#
# The targets are the [[bin]] entries of fuzz/Cargo.toml. Each run reads the committed seeds
# (fuzz/seeds/TARGET) and grows a local corpus (fuzz/corpus/TARGET, not committed); a failing
# input is written to fuzz/artifacts/TARGET/ and fails the run. cargo-fuzz is installed once,
# cached by version under $CACHE_ROOT/tools (~/.cache/kube-tenancy/tools).
#
# The instrumented build goes to FUZZ_TARGET_DIR, by default a cache directory outside the
# checkout keyed by the compiler version ($CACHE_ROOT/fuzz-target/rustc-<version>): a fresh
# clone on the same machine (CI) reuses the dependencies built before instead of a cold build;
# a new toolchain starts a new directory (delete the old ones). The run logs are written there
# too (logs/TARGET.log).
set -euo pipefail

CARGO_FUZZ_VERSION=${CARGO_FUZZ_VERSION:-0.13.2}
CACHE_ROOT=${CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-tenancy}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FUZZ_DIR="$ROOT/fuzz"

die() { echo "fuzz: $*" >&2; exit 1; }
log() { echo "fuzz: $*" >&2; }

# --- cargo-fuzz, installed by this script and cached by version ---------------------------------
cargo_fuzz() {
  local root="$CACHE_ROOT/tools/cargo-fuzz-$CARGO_FUZZ_VERSION"
  if [ ! -x "$root/bin/cargo-fuzz" ]; then
    log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $root"
    cargo install --quiet --locked --version "$CARGO_FUZZ_VERSION" --root "$root.tmp" cargo-fuzz \
      || die "could not install cargo-fuzz $CARGO_FUZZ_VERSION"
    rm -rf "$root" && mv "$root.tmp" "$root"
  fi
  echo "$root/bin/cargo-fuzz"
}

targets() {
  sed -n '/^\[\[bin\]\]/,/^$/s/^name = "\(.*\)"$/\1/p' "$FUZZ_DIR/Cargo.toml"
}

FUZZ_TARGET_DIR=${FUZZ_TARGET_DIR:-$CACHE_ROOT/fuzz-target/rustc-$(cd "$FUZZ_DIR" && rustc -V | cut -d' ' -f2)}

# Stable Rust: no sanitizer (ASan needs nightly); debug assertions and overflow checks stay on.
FUZZ_FLAGS=(--sanitizer none --target-dir "$FUZZ_TARGET_DIR")

build() {
  local cf; cf=$(cargo_fuzz)
  (cd "$ROOT" && "$cf" build "${FUZZ_FLAGS[@]}")
}

run() {
  local target=$1 seconds=$2 cf; cf=$(cargo_fuzz)
  [ -d "$FUZZ_DIR/seeds/$target" ] || die "no seeds for $target (fuzz/seeds/$target)"
  mkdir -p "$FUZZ_DIR/corpus/$target" "$FUZZ_TARGET_DIR/logs"
  local dict=() out="$FUZZ_TARGET_DIR/logs/$target.log"
  [ -f "$FUZZ_DIR/dicts/$target.dict" ] && dict=(-dict="$FUZZ_DIR/dicts/$target.dict")
  log "$target: ${seconds}s (output in $out)"
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: a leak or a blow-up.
  if (cd "$ROOT" && "$cf" run "${FUZZ_FLAGS[@]}" "$target" \
    "$FUZZ_DIR/corpus/$target" "$FUZZ_DIR/seeds/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    "${dict[@]}" ${FUZZ_ARGS:-}) >"$out" 2>&1; then
    log "$target: $(grep -m1 '^Done' "$out"), $(grep -o 'cov: [0-9]*' "$out" | tail -n1)," \
      "corpus of $(find "$FUZZ_DIR/corpus/$target" -type f | wc -l)"
  else
    grep -v '^#[0-9]' "$out" | tail -n 60 >&2
    log "$target: FAILED (full output: $out)"
    return 1
  fi
}

all() {
  local seconds=$1 start failed=() t; start=$(date +%s)
  build
  for t in $(targets); do
    run "$t" "$seconds" || failed+=("$t")
  done
  log "all targets done in $(( $(date +%s) - start ))s"
  # What each failure was, again last (a CI summary may show only the end of the output).
  for t in "${failed[@]}"; do
    log "$t failed with:"
    grep -E 'panicked at|^==[0-9]+== ?ERROR|^SUMMARY|Test unit written to|^thread ' \
      "$FUZZ_TARGET_DIR/logs/$t.log" | head -n 8 >&2 || true
  done
  [ ${#failed[@]} -eq 0 ] || die "failing targets: ${failed[*]} (reproduce: scripts/fuzz.sh repro TARGET fuzz/artifacts/TARGET/crash-...)"
}

case "${1:-}" in
  smoke) all "${FUZZ_SMOKE_SECONDS:-12}" ;;
  long) all "${FUZZ_SECONDS:-300}" ;;
  run) [ $# -ge 2 ] || die "usage: $0 run TARGET [SECONDS]"; build; run "$2" "${3:-${FUZZ_SECONDS:-300}}" ;;
  repro)
    [ $# -eq 3 ] || die "usage: $0 repro TARGET FILE"
    cf=$(cargo_fuzz)
    (cd "$ROOT" && RUST_BACKTRACE=1 "$cf" run "${FUZZ_FLAGS[@]}" "$2" "$(realpath "$3")")
    ;;
  build) build ;;
  list) targets ;;
  *) die "usage: $0 smoke|long|run TARGET [SECONDS]|repro TARGET FILE|build|list" ;;
esac
