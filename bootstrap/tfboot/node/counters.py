"""What the container has used so far: its cgroup's memory and CPU counters, or rusage.

Host memory, cgroup v2: ``memory.peak`` (kernel 5.19 and later), else ``memory.current``
(sampled by the caller), and ``memory.events`` (``high``, ``max``, ``oom``, ``oom_kill``).
cgroup v1: ``memory.max_usage_in_bytes``, ``memory.failcnt`` and ``memory.oom_control``'s
``oom_kill``. Without a memory cgroup: the largest resident set of this process or of any
child it waited for (``getrusage``). Page cache counts in a cgroup's figures: the source
says which file each figure came from.

CPU, cgroup v2: ``cpu.stat``'s ``usage_usec``, ``nr_periods``, ``nr_throttled``; v1:
``cpuacct.usage`` (ns) and ``cpu.stat``'s ``nr_periods``, ``nr_throttled``. Without one:
this process's and its waited-for children's CPU time.

Counters only: a run's figures are the difference between two readings. Read through
``cgroup.read_text``; a file that is missing or malformed is left out, never raised.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from ..values import digits
from .cgroup import CgroupError, leaf, read_text, shown
from .cpu import cgroup_root

# memory.events' counters that a run's report names (cgroup v2).
EVENTS = ("high", "max", "oom", "oom_kill")


# Plain classes, not dataclasses: this module loads with the report, whose import must stay
# far under a millisecond (bench/usage_cost.py), and each dataclass costs a tenth of one.
class Memory:
    """The container's memory so far: the peak and the current use, in bytes, and events
    (name -> count since the cgroup began)."""

    __slots__ = ("current", "current_source", "events", "events_source", "peak", "peak_source")

    def __init__(self, peak: int | None = None, peak_source: str = "",
                 current: int | None = None, current_source: str = "",
                 events: dict[str, int] | None = None, events_source: str = "",
                 ) -> None:  # fmt: skip
        self.peak, self.peak_source = peak, peak_source
        self.current, self.current_source = current, current_source
        self.events, self.events_source = events or {}, events_source


class Cpu:
    """CPU counters: seconds of CPU used, and CFS periods (all, throttled) when limited;
    ``wall``: when they were read (``time.monotonic``)."""

    __slots__ = ("periods", "periods_source", "seconds", "source", "throttled", "wall")

    def __init__(self, seconds: float, source: str, periods: int | None = None,
                 throttled: int | None = None, periods_source: str = "") -> None:  # fmt: skip
        self.seconds, self.source = seconds, source
        self.periods, self.throttled, self.periods_source = periods, throttled, periods_source
        self.wall = time.monotonic()


def _read(root: str, path: str) -> dict[str, int] | None:
    """A ``name value`` file (``cpu.stat``, ``memory.events``) as a dict; None if unreadable.
    A line that is not a name and a whole number is skipped."""
    try:
        text = read_text(root, path)
    except CgroupError:
        return None
    found = {}
    for entry in text.splitlines():
        parts = entry.split()
        number = digits(parts[1]) if len(parts) == 2 else None
        if number is not None:
            found[parts[0]] = number
    return found


def _number(root: str, path: str) -> int | None:
    """A file holding one number of bytes or nanoseconds; None if missing or malformed."""
    try:
        return digits(read_text(root, path))
    except CgroupError:
        return None


def rss_peak() -> tuple[int, str]:
    """The largest resident set of this process or of a child it waited for (KiB on Linux)."""
    import resource  # only where no cgroup counts memory

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) * 1024, "getrusage ru_maxrss (this process or one child)"


def memory(env: Mapping[str, str] | None = None) -> Memory:
    """The container's memory counters; the process tree's max RSS without a memory cgroup."""
    root = cgroup_root(env)
    found = leaf(root, "memory")
    if found is None:
        peak, source = rss_peak()
        return Memory(peak, source)
    version, directory = found
    join = os.path.join
    if version == 2:
        peak_path, current_path = join(directory, "memory.peak"), join(directory, "memory.current")
        events_path = join(directory, "memory.events")
        events = _read(root, events_path) or {}
        kept = {name: events[name] for name in EVENTS if name in events}
    else:
        peak_path = join(directory, "memory.max_usage_in_bytes")
        current_path = join(directory, "memory.usage_in_bytes")
        events_path = join(directory, "memory.oom_control")
        control = _read(root, events_path) or {}
        kept = {"oom_kill": control["oom_kill"]} if "oom_kill" in control else {}
        failcnt = _number(root, join(directory, "memory.failcnt"))
        if failcnt is not None:
            kept["max"] = failcnt  # times the usage hit the limit
    peak, current = _number(root, peak_path), _number(root, current_path)
    if peak is None and current is None:
        rss, source = rss_peak()
        return Memory(rss, source)
    return Memory(
        peak,
        shown(peak_path) if peak is not None else "",
        current,
        shown(current_path) if current is not None else "",
        kept,
        shown(events_path) if kept else "",
    )


def cpu(env: Mapping[str, str] | None = None) -> Cpu:
    """The container's CPU counters; this process's and its children's CPU time without."""
    root = cgroup_root(env)
    found = leaf(root, "cpu")
    stat_path, stat = "", None
    usage: tuple[float, str] | None = None
    if found is not None:
        version, directory = found
        stat_path = os.path.join(directory, "cpu.stat")
        stat = _read(root, stat_path)
        if version == 2 and stat is not None and "usage_usec" in stat:
            usage = (stat["usage_usec"] / 1e6, shown(stat_path) + " usage_usec")
    if usage is None:
        account = leaf(root, "cpuacct")
        if account is not None and account[0] == 1:
            path = os.path.join(account[1], "cpuacct.usage")
            nanoseconds = _number(root, path)
            usage = None if nanoseconds is None else (nanoseconds / 1e9, shown(path))
    if usage is None:
        times = os.times()
        spent = times.user + times.system + times.children_user + times.children_system
        usage = (spent, "this process and its children (os.times)")
    if stat is not None and "nr_periods" in stat and "nr_throttled" in stat:
        return Cpu(*usage, stat["nr_periods"], stat["nr_throttled"], shown(stat_path))
    return Cpu(*usage)
