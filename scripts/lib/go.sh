# Sourced by the scripts that build or fetch from the Go module proxy: the environment they all
# need, in one place.
#
# go_env NAME: exits with NAME's message when there is no Go toolchain on PATH; otherwise sets
# up an offline build: the machine's Go only (no toolchain download), a writable module cache,
# no VCS stamping, static binaries, and the module proxy's checksums trusted (the proxy is
# reachable here, the checksum database may not be; go.sum files pin the sums where there is
# one; GOSUMDB_OVERRIDE names a checksum database instead).
go_env() {
  command -v go >/dev/null 2>&1 || {
    echo "$1: no Go toolchain on PATH (need Go >= 1.26; install the 'golang' toolchain or put go on PATH)" >&2
    exit 1
  }
  export GOTOOLCHAIN=local GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0
  export GOSUMDB=${GOSUMDB_OVERRIDE:-off}
  export GOPATH=${GOPATH:-$HOME/go}
}
