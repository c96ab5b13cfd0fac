"""The memory the kernel counts against the limit, now: the working set, read cheaply.

kubelet's ``container_memory_working_set_bytes``, the figure eviction and dashboards use:
the cgroup's usage minus its inactive file cache (cgroup v2 ``memory.current`` and
``memory.stat``'s ``inactive_file``; v1 ``memory.usage_in_bytes`` and ``total_inactive_file``),
read in the cgroup whose limit is in force. Where no cgroup holds the limit (a limit given
by ``HOST_MEMORY_LIMIT_MB`` on a host), this process's resident set (``/proc/self/statm``).

The files are opened once and read with ``pread`` at each call: a reading is two reads (one,
where the usage alone is below the level the caller cares about), no open, no allocation
beyond the bytes read. A forked child shares the descriptors, which is
harmless: ``pread`` keeps no offset. Never raises: an unreadable file reads as None.
"""

from __future__ import annotations

import os

STATM = "/proc/self/statm"
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Each version's usage file and the memory.stat key of its inactive file cache.
FILES = {1: ("memory.usage_in_bytes", b"\ntotal_inactive_file "),
         2: ("memory.current", b"\ninactive_file ")}  # fmt: skip
READ = 1 << 16  # memory.stat is about 2 KiB


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _number(fd: int, key: bytes = b"") -> int | None:
    """The number in ``fd`` (the one a file holds, or the one after ``key``); None if absent."""
    try:
        data = b"\n" + os.pread(fd, READ, 0)
    except OSError:
        return None
    at = data.find(key) + len(key) if key else 1
    if key and at < len(key):
        return None
    end = data.find(b"\n", at)
    try:
        return int(data[at : end if end >= 0 else None].split()[0])
    except (ValueError, IndexError):
        return None


def resident() -> int | None:
    """This process's resident set in bytes (``/proc/self/statm``'s second field)."""
    try:
        with open(STATM, "rb") as statm:
            return int(statm.read(256).split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


class WorkingSet:
    """Reads one scope's working set: a cgroup directory's, or this process's resident set."""

    __slots__ = ("_stat", "_usage", "key", "source")

    def __init__(self, version: int | None = None, directory: str = "") -> None:
        """``directory`` (a path on this machine) of a cgroup of ``version``; none: this
        process's resident set."""
        self._usage = self._stat = None
        usage, self.key = FILES.get(version or 0, ("", b""))
        if usage and directory:
            self._usage = _open(os.path.join(directory, usage))
            self._stat = _open(os.path.join(directory, "memory.stat"))
        if self._usage is not None and self._stat is not None:
            inactive = self.key.decode().strip()
            self.source = f"{os.path.join(directory, usage)} minus memory.stat's {inactive}"
        else:
            self.close()
            self.source = f"this process's resident set ({STATM})"

    def read(self, below: int = 0) -> int | None:
        """The working set in bytes now; None where it cannot be read. Where the usage alone
        is at most ``below``, the usage (the working set's upper bound: one read, not two)."""
        if self._usage is None or self._stat is None:
            return resident()
        usage = _number(self._usage)
        if usage is None or usage <= below:
            return usage
        inactive = _number(self._stat, self.key)
        return max(0, usage - (inactive or 0))

    def close(self) -> None:
        for fd in (self._usage, self._stat):
            if fd is not None:
                os.close(fd)
        self._usage = self._stat = None


def cgroup_version(limit_file: str) -> int:
    """The cgroup version of a memory limit file (``memory.max``, ``memory.high``: 2;
    ``memory.limit_in_bytes``: 1); 0 for none."""
    name = os.path.basename(limit_file)
    return 2 if name in ("memory.max", "memory.high") else 1 if name.startswith("memory.") else 0


def reader(root: str, limit_file: str) -> WorkingSet:
    """The working set of the cgroup whose limit file is ``limit_file`` (under ``root``);
    this process's resident set for "" or a file of no cgroup."""
    found = cgroup_version(limit_file)
    directory = os.path.dirname(os.path.join(root, limit_file.lstrip("/"))) if found else ""
    return WorkingSet(found or None, directory)


def working_set_now(root: str, limit_file: str) -> int | None:
    """One reading of ``reader``'s working set, in bytes."""
    found = reader(root, limit_file)
    try:
        return found.read()
    finally:
        found.close()
