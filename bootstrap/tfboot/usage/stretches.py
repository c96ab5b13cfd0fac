"""A run's stretches under one limit each: what the job used while one memory limit or one
CPU quota held, so each figure is judged against the limit in force when it happened.

A resize (an in-place Pod resize, ``docker update``) ends a stretch; the meter sees it at
its next sample (``TFBOOT_USAGE_INTERVAL``). A stretch's memory peak is the kernel's peak
where the kernel's rose during it (the run's highest came then), else the highest figure
sampled in it; its OOM kills and ``memory.high`` events are those counted during it. A
stretch's CPU is the CPU time used over its wall time and the share of CFS periods
throttled in it. At most ``MAX_STRETCHES`` are kept: the first and the latest.
"""

from __future__ import annotations

from typing import Any

from ..node import counters

MIB = 1 << 20
MAX_STRETCHES = 32


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def kept(stretches: list[dict[str, Any]], ended: dict[str, Any]) -> None:
    """Add ``ended`` to ``stretches``, dropping the second oldest past ``MAX_STRETCHES``."""
    stretches.append(ended)
    if len(stretches) > MAX_STRETCHES:
        del stretches[1]


class MemoryStretch:
    """The memory figures since a memory limit came into force."""

    __slots__ = ("events", "kernel", "peak")

    def __init__(self, now: counters.Memory | None, figure: int | None = None) -> None:
        self.kernel = None if now is None else now.peak
        self.events = {} if now is None else dict(now.events)
        self.peak = figure or 0

    def see(self, figure: int | None) -> None:
        """A figure sampled in this stretch (the cgroup's use, or the process tree's)."""
        self.peak = max(self.peak, figure or 0)

    def figures(self, now: counters.Memory | None) -> dict[str, Any]:
        """The stretch's peak and events as of ``now`` (None: the process tree's scope)."""
        peak = self.peak
        if now is not None and now.peak is not None and self.kernel is not None and \
                now.peak > self.kernel:  # fmt: skip
            peak = max(peak, now.peak)
        events = {} if now is None else now.events
        return {
            "peak_mib": _mib(peak) if peak else None,
            "oom_kills": _since(events, self.events, "oom_kill"),
            "high_events": _since(events, self.events, "high"),
        }


def _since(now: dict[str, int], before: dict[str, int], name: str) -> int | None:
    return now[name] - before.get(name, 0) if name in now else None


class CpuStretch:
    """The CPU figures since a CPU quota came into force."""

    __slots__ = ("start",)

    def __init__(self, now: counters.Cpu) -> None:
        self.start = now

    def figures(self, now: counters.Cpu) -> dict[str, Any]:
        """The CPUs used on average over the stretch, and its share of throttled periods."""
        wall = max(now.wall - self.start.wall, 1e-9)
        used = max(0.0, now.seconds - self.start.seconds)
        throttled = None
        if now.periods is not None and self.start.periods is not None:
            periods = now.periods - self.start.periods
            count = (now.throttled or 0) - (self.start.throttled or 0)
            throttled = round(count / periods, 4) if periods > 0 else 0.0
        return {"used_cpus": round(used / wall, 3), "throttled_fraction": throttled,
                "seconds": round(wall, 3)}  # fmt: skip
