"""What tfboot's readings while the job runs cost: the limits read again, the working set, glibc's
free memory, each timed in this process and turned into a share of one CPU at its cadence.

A resize changes a container's limits with no signal, so tfboot reads them again while the
job runs: the memory governor reads the working set (every 10 ms to 1 s, by the distance to
its levels), the memory limit at each of its readings and glibc's free memory once a second;
the CPU quota is read every 2 s where PyTorch's threads follow it. Each reading is timed here
over many calls on this machine's own cgroup (``--root`` for another tree), side by side with
the call it replaces (parsing ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` and reading
the files afresh, as at the import). Usage::

    .venv/bin/python bench/reading_cost.py --calls 20000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from tfboot.budget.hostpolicy import KEPT_EVERY_S, SLOW_S
from tfboot.executor.follow import FOLLOW_S
from tfboot.executor.governor import Glibc
from tfboot.node.cgroup import cpu_quota, memory_limit
from tfboot.node.livelimits import LimitFiles, QuotaFiles
from tfboot.node.workingset import reader


def timed(call: Callable[[], object], calls: int) -> float:
    """Seconds per call, the best of three passes."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--root", default="/")
    args = parser.parse_args()
    limits, quota = LimitFiles(args.root), QuotaFiles(args.root)
    found = memory_limit(args.root)
    working = reader(args.root, found.source if found else "")
    glibc = Glibc()
    rows = [
        ("CPU quota, files kept open (pread)", lambda: quota.read(), FOLLOW_S),
        ("CPU quota, read afresh (as at the import)", lambda: cpu_quota(args.root), FOLLOW_S),
        ("memory limit, files kept open (pread)", lambda: limits.read(), SLOW_S),
        ("memory limit, read afresh (as at the import)", lambda: memory_limit(args.root), SLOW_S),
        ("working set and what fills it", lambda: working.split(), SLOW_S),
        ("glibc's free memory (mallinfo2)", glibc.free, KEPT_EVERY_S),
    ]
    print(f"root {args.root}; {args.calls} calls a pass, the best of three")
    print("| reading | microseconds a call | every (s) | share of one CPU |")
    print("|---|---|---|---|")
    for name, call, every in rows:
        seconds = timed(call, args.calls)
        print(f"| {name} | {seconds * 1e6:.2f} | {every:g} | {seconds / every:.5%} |")


if __name__ == "__main__":
    main()
