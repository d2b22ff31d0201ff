#!/usr/bin/env bash
# What `make images` needs for static binaries: the Rust musl target (rustup) and musl-gcc
# (Debian's musl-tools, for ring's C code). Idempotent: a second run checks and returns at once.
# Prints the C compiler to use as CC_x86_64_unknown_linux_musl.
set -euo pipefail

TARGET=x86_64-unknown-linux-musl

if ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "install-musl: adding the Rust target $TARGET (once)" >&2
  rustup target add "$TARGET" >&2
fi

if ! command -v musl-gcc >/dev/null 2>&1; then
  echo "install-musl: installing musl-tools from Debian (once)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
fi
command -v musl-gcc
