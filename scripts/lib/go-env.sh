# Sourced by the scripts that build Go tools from the Go module proxy (not run): checks the
# machine's Go and sets the environment every such build uses.
#
#   go_build_env <script name> <minimum minor version of Go 1.x> <what needs it>
#
# The module proxy is reachable; the checksum database may not be, so the proxy's checksums are
# trusted (GOSUMDB_OVERRIDE sets another). Builds are static (CGO_ENABLED=0) and never switch to
# another toolchain (GOTOOLCHAIN=local).
go_build_env() {
  local name=$1 min_minor=$2 what=$3 gov minor
  command -v go >/dev/null 2>&1 \
    || { echo "$name: no Go toolchain on PATH (need Go >= 1.$min_minor for $what; install the 'golang' toolchain or put go on PATH)" >&2; exit 1; }
  gov=$(go env GOVERSION)
  minor=$(echo "$gov" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  if [ -z "$minor" ] || [ "$minor" -lt "$min_minor" ]; then
    echo "$name: Go $gov is too old: $what needs Go >= 1.$min_minor" >&2
    exit 1
  fi
  export GOTOOLCHAIN=local GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0
  export GOSUMDB=${GOSUMDB_OVERRIDE:-off}
  export GOPATH=${GOPATH:-$HOME/go}
}
