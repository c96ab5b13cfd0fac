"""A process and its descendants, read from ``/proc`` at one moment: their resident memory
summed and their CPU time, and when a process started.

Descendants are found through ``/proc/PID/task/TID/children`` (every thread's children), so
no walk over every process of the node is needed. A process that ends while it is read is
left out. Linux only; elsewhere the tree is this process alone (``getrusage``).
"""

from __future__ import annotations

import os

MAX_PROCESSES = 4096  # a job's tree larger than this is read no further
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as source:
            return source.read(65536).decode("ascii", "replace")
    except OSError:
        return None


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid``."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        text = _read(f"/proc/{pid}/task/{thread}/children") or ""
        found += [int(p) for p in text.split() if p.isdigit()]
    return found


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself), at most ``MAX_PROCESSES``."""
    found: list[int] = []
    todo = children(pid)
    while todo and len(found) < MAX_PROCESSES:
        child = todo.pop()
        found.append(child)
        todo += children(child)
    return found


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (which may hold spaces)."""
    text = _read(f"/proc/{pid}/stat")
    if text is None or ")" not in text:
        return None
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` so far (0 when it is gone)."""
    fields = _stat(pid)
    if fields is None or len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def resident_bytes(pid: int) -> int:
    """The resident set of ``pid`` now (0 when it is gone)."""
    text = _read(f"/proc/{pid}/statm")
    parts = text.split() if text else []
    return int(parts[1]) * _PAGE if len(parts) > 1 and parts[1].isdigit() else 0


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields and fields[1].isdigit() else None


def started(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch (``/proc/stat``'s ``btime``)."""
    fields = _stat(pid)
    boot = next((line.split()[1] for line in (_read("/proc/stat") or "").splitlines()
                 if line.startswith("btime ")), None)  # fmt: skip
    if fields is None or len(fields) < 20 or boot is None or not fields[19].isdigit():
        return None
    return int(boot) + int(fields[19]) / _TICKS


class Tree:
    """One reading of a process tree: its resident memory summed, the live descendants'
    CPU time, and how many processes it held."""

    __slots__ = ("cpu_seconds", "processes", "resident_bytes")

    def __init__(self, pid: int) -> None:
        pids = [pid, *descendants(pid)]
        self.processes = len(pids)
        self.resident_bytes = sum(resident_bytes(p) for p in pids)
        self.cpu_seconds = sum(cpu_seconds(p) for p in pids[1:])
