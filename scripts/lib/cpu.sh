# Sourced by the benchmark scripts (not run): a process's CPU time from the scheduler.

# cpu_ns PID: CPU nanoseconds so far of PID and its child processes (nginx's workers), all
# threads, from /proc/<pid>/task/*/schedstat (nanoseconds, not /proc/<pid>/stat's 10 ms ticks).
cpu_ns() {
  local pid n=0 ns
  for pid in "$1" $(pgrep -P "$1" || true); do
    # A child gone between pgrep and here counts nothing (its time has left /proc with it).
    ns="$(awk '{s += $1} END {printf "%.0f", s}' /proc/"$pid"/task/*/schedstat 2>/dev/null || true)"
    n=$((n + ${ns:-0}))
  done
  echo "$n"
}
