#!/usr/bin/env python3
"""Where a server's wake-ups go, from a `perf script` of its system calls and the scheduler.

Used by `scripts/count-tunnel-proxy.sh wakeups`. The input is
`perf script -F comm,pid,tid,cpu,time,event,trace` of a recording with the events
raw_syscalls:sys_enter, raw_syscalls:sys_exit, sched:sched_wakeup and sched:sched_switch.
The server's thread is the one of COMM-prefixed processes making the most system calls (all three
servers compared do their work on one thread). Per wake-up it prints the distribution (µs) of:

- wake-up -> switched in: the scheduler's `sched_wakeup` of the thread to its `sched_switch` onto
  the CPU;
- switched in -> epoll_wait returns: the rest of the wait, inside the kernel;
- epoll_wait returns -> first write: the critical path, what the server does before the message
  it forwards leaves (a `write`, `writev`, `sendto` or `sendmsg`);
- last write -> next epoll_wait: what it does after, off the critical path.

    wakeup-segments.py PERF_SCRIPT_OUTPUT COMM
"""

import re
import sys
from collections import Counter

WRITES = {1, 20, 44, 46}  # write, writev, sendto, sendmsg
WAITS = {7, 232, 281}  # poll, epoll_wait, epoll_pwait
LINE = re.compile(r"^\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")


def events(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                comm, _pid, tid, _cpu, t, name, rest = m.groups()
                yield float(t) * 1e6, comm, int(tid), name, rest


def quantiles(xs):
    if not xs:
        return "none"
    xs = sorted(xs)
    n = len(xs)
    return f"n={n} p10={xs[n // 10]:.0f} p50={xs[n // 2]:.0f} p90={xs[n * 9 // 10]:.0f}"


def main(path, comm):
    evs = sorted(events(path), key=lambda e: e[0])
    calls = Counter(
        tid for _, c, tid, name, _ in evs if c.startswith(comm) and name.endswith("sys_enter")
    )
    if not calls:
        sys.exit(f"no system calls of a process named {comm}* in {path}")
    tid = calls.most_common(1)[0][0]
    seg = {k: [] for k in ("wake", "rest", "critical", "after")}
    woken = switched = returned = wrote = None
    for t, _, ev_tid, name, rest in evs:
        if name == "sched:sched_wakeup":
            m = re.search(r"pid=(\d+)", rest)
            if m and int(m.group(1)) == tid:
                woken = t
            continue
        if name == "sched:sched_switch":
            m = re.search(r"next_pid=(\d+)", rest)
            if m and int(m.group(1)) == tid:
                switched = t
                if woken is not None:
                    seg["wake"].append(t - woken)
                    woken = None
            continue
        if ev_tid != tid:
            continue
        m = re.match(r"NR (\d+)", rest)
        if not m:
            continue
        nr = int(m.group(1))
        if name.endswith("sys_exit") and nr in WAITS:
            returned, wrote = t, None
            if switched is not None:
                seg["rest"].append(t - switched)
                switched = None
        elif name.endswith("sys_enter") and nr in WRITES and returned is not None:
            seg["critical"].append(t - returned)
            returned = None
        elif name.endswith("sys_exit") and nr in WRITES:
            wrote = t
        elif name.endswith("sys_enter") and nr in WAITS and wrote is not None:
            seg["after"].append(t - wrote)
            wrote = None
    print(f"{comm} (thread {tid}, {calls[tid]} system calls), microseconds per wake-up:")
    print(f"  wake-up -> switched in:            {quantiles(seg['wake'])}")
    print(f"  switched in -> epoll_wait returns: {quantiles(seg['rest'])}")
    print(f"  epoll_wait returns -> first write: {quantiles(seg['critical'])}")
    print(f"  last write -> next epoll_wait:     {quantiles(seg['after'])}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
