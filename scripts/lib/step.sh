#!/usr/bin/env bash
# Runs a command as one named step of `make test-prepare` and marks its start and end with its
# duration: the steps run side by side, so their output interleaves, and these lines say where
# each began and how long it took (the phase times of a CI log).
#
#   scripts/lib/step.sh NAME COMMAND [ARG ...]
set -uo pipefail
name=$1
shift
start=$(date +%s)
echo "== step $name: started" >&2
"$@"
code=$?
took=$(($(date +%s) - start))
if [ "$code" -eq 0 ]; then
  echo "== step $name: done in ${took}s" >&2
else
  echo "== step $name: FAILED (exit $code) after ${took}s" >&2
fi
exit "$code"
