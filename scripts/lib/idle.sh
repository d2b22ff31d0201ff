# Sourced by the benchmark scripts (not run): how idle CPUs wait during the measurement.
#
# IDLE=poll (the default): for as long as the sourcing script runs, it holds a CPU latency
# request of 0 µs (PM QoS, /dev/cpu_dma_latency), so an idle CPU polls instead of halting. The
# kernel drops the request when the script exits; nothing on the machine is left changed.
# On a VM a halted vCPU is woken through the hypervisor. A loopback round trip through a hop is
# several such wake-ups, and they, not the servers, then set the one-connection figures (on
# the 2-core VM of docs/benchmarks.md, about 160 µs for a few µs of work).
# IDLE=halt keeps the machine's default, so both can be measured.
#
# IDLE_NOTE describes the mode in effect, for the scripts' headers.

IDLE="${IDLE:-poll}"
case "$IDLE" in
  poll)
    if { exec 9>/dev/cpu_dma_latency; } 2>/dev/null && printf '0x00000000' >&9 2>/dev/null; then
      IDLE_NOTE="idle CPUs poll (CPU latency request of 0 us held on /dev/cpu_dma_latency)"
    else
      IDLE_NOTE="IDLE=poll asked, but /dev/cpu_dma_latency could not be written: idle CPUs keep the machine's default"
      echo "warning: $IDLE_NOTE" >&2
    fi
    ;;
  halt) IDLE_NOTE="idle CPUs keep the machine's default (IDLE=halt)" ;;
  *)
    echo "IDLE must be poll or halt, not '$IDLE'" >&2
    exit 2
    ;;
esac
