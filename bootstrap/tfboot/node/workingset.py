"""The memory the kernel counts against the limit, now: the working set, read cheaply, and
what fills it.

kubelet's ``container_memory_working_set_bytes``, the figure eviction and dashboards use:
the cgroup's usage minus its inactive file cache (cgroup v2 ``memory.current`` and
``memory.stat``'s ``inactive_file``; v1 ``memory.usage_in_bytes`` and ``total_inactive_file``),
read in the cgroup whose limit is in force. ``split`` reads apart what of it no trim of a
heap can give back: the active page cache no process maps (``active_file`` less
``mapped_file``: a dataset read with ``read``, not a framework's libraries), which the kernel
reclaims by itself as the limit nears, and ``/dev/shm``'s and other shared memory pages
(``shmem``), which only deleting their files frees. Where no cgroup holds the limit
(``HOST_MEMORY_LIMIT_MB`` given as a figure, in a container or not), the resident sets of
this process and its descendants (``/proc/PID/statm``), their shared pages apart.

The files are opened once and read with ``pread`` at each call: a reading is two reads (one,
where the usage alone is below the level the caller cares about), no open, no allocation
beyond the bytes read. A forked child shares the descriptors, which is
harmless: ``pread`` keeps no offset. Never raises: an unreadable file reads as None.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from .proctree import descendants

STATM = "/proc/self/statm"
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Each version's usage file and the memory.stat keys of its inactive file cache, its active
# file cache, the file pages mapped into processes and its shared memory.
FILES = {1: ("memory.usage_in_bytes", (b"\ntotal_inactive_file ", b"\ntotal_active_file ",
                                       b"\ntotal_mapped_file ", b"\ntotal_shmem ")),
         2: ("memory.current", (b"\ninactive_file ", b"\nactive_file ", b"\nfile_mapped ",
                                b"\nshmem "))}  # fmt: skip
TREE_EVERY_S = 1.0  # a process tree's members are listed again at most this often


class Reading(NamedTuple):
    """One reading, in bytes: the working set, and what of it is active page cache and
    shared memory (0 where not read apart)."""

    working: int
    cache: int = 0
    shm: int = 0

    @property
    def pressure(self) -> int:
        """What the kernel cannot reclaim by itself: the working set less its page cache."""
        return max(0, self.working - self.cache)

    @property
    def heap(self) -> int:
        """What a trim could give back some of: anonymous memory, shared memory apart."""
        return max(0, self.working - self.cache - self.shm)


READ = 1 << 16  # memory.stat is about 2 KiB


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _numbers(fd: int, keys: tuple[bytes, ...] = (b"",)) -> list[int | None] | None:
    """The numbers in ``fd`` (the one a file holds, or the one after each key); None where
    the file cannot be read, a None for a key absent."""
    try:
        data = b"\n" + os.pread(fd, READ, 0)
    except OSError:
        return None
    found: list[int | None] = []
    for key in keys:
        at = data.find(key) + len(key) if key else 1
        end = data.find(b"\n", at)
        try:
            found.append(None if key and at < len(key) else
                         int(data[at : end if end >= 0 else None].split()[0]))  # fmt: skip
        except (ValueError, IndexError):
            found.append(None)
    return found


def _number(fd: int) -> int | None:
    """The one number a file holds; None if absent."""
    found = _numbers(fd)
    return None if found is None else found[0]


def resident() -> int | None:
    """This process's resident set in bytes (``/proc/self/statm``'s second field)."""
    try:
        with open(STATM, "rb") as statm:
            return int(statm.read(256).split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


class WorkingSet:
    """Reads one scope's working set: a cgroup directory's, or this process's resident set."""

    __slots__ = ("_stat", "_usage", "keys", "source")

    def __init__(self, version: int | None = None, directory: str = "") -> None:
        """``directory`` (a path on this machine) of a cgroup of ``version``; none: this
        process's resident set."""
        self._usage = self._stat = None
        usage, self.keys = FILES.get(version or 0, ("", ()))
        if usage and directory:
            self._usage = _open(os.path.join(directory, usage))
            self._stat = _open(os.path.join(directory, "memory.stat"))
        if self._usage is not None and self._stat is not None:
            inactive = self.keys[0].decode().strip()
            self.source = f"{os.path.join(directory, usage)} minus memory.stat's {inactive}"
        else:
            self.close()
            self.source = f"this process's resident set ({STATM})"

    def read(self, below: int = 0) -> int | None:
        """The working set in bytes now; None where it cannot be read. Where the usage alone
        is at most ``below``, the usage (the working set's upper bound: one read, not two)."""
        found = self.split(below)
        return None if found is None else found.working

    def split(self, below: int = 0) -> Reading | None:
        """The working set now and what of it is page cache and shared memory; None where it
        cannot be read. Where the usage alone is at most ``below``, the usage, unsplit."""
        if self._usage is None or self._stat is None:
            found = resident()
            return None if found is None else Reading(found)
        usage = _number(self._usage)
        if usage is None or usage <= below:
            return None if usage is None else Reading(usage)
        inactive, active, mapped, shm = _numbers(self._stat, self.keys) or (None,) * 4
        working = max(0, usage - (inactive or 0))
        # Pages mapped into processes (a framework's libraries, a memory-mapped dataset) are
        # in use: only the active cache beyond them is the kernel's to reclaim.
        cache = max(0, (active or 0) - (mapped or 0))
        return Reading(working, min(working, cache), min(working, shm or 0))

    def close(self) -> None:
        for fd in (self._usage, self._stat):
            if fd is not None:
                os.close(fd)
        self._usage = self._stat = None


class ProcessTree:
    """Reads the resident sets of this process and its descendants, summed, their shared
    pages (``statm``'s third field: files mapped and shared memory) read apart; the members
    are listed again at most every ``TREE_EVERY_S``."""

    __slots__ = ("_listed", "_pids", "source")

    def __init__(self) -> None:
        self._pids: list[int] = []
        self._listed = -TREE_EVERY_S
        self.source = "the resident sets of this process and its descendants (/proc/PID/statm)"

    def read(self, below: int = 0) -> int | None:
        found = self.split(below)
        return None if found is None else found.working

    def split(self, below: int = 0) -> Reading | None:
        """This process's tree now (``below`` is not used: one reading serves)."""
        now = time.monotonic()
        pid = os.getpid()
        if now - self._listed >= TREE_EVERY_S or (self._pids and self._pids[0] != pid):
            self._pids, self._listed = [pid, *descendants(pid)], now
        working = shared = 0
        for member in self._pids:
            try:
                with open(f"/proc/{member}/statm", "rb") as statm:
                    fields = statm.read(256).split()
                working += int(fields[1]) * PAGE
                shared += int(fields[2]) * PAGE
            except (OSError, ValueError, IndexError):
                if member == pid:
                    return None
        return Reading(working, 0, shared)

    def close(self) -> None:
        self._pids = []


def cgroup_version(limit_file: str) -> int:
    """The cgroup version of a memory limit file (``memory.max``, ``memory.high``: 2;
    ``memory.limit_in_bytes``: 1); 0 for none."""
    name = os.path.basename(limit_file)
    return 2 if name in ("memory.max", "memory.high") else 1 if name.startswith("memory.") else 0


def reader(root: str, limit_file: str) -> WorkingSet | ProcessTree:
    """The working set of the cgroup whose limit file is ``limit_file`` (under ``root``);
    this process's tree for "" or a file of no cgroup."""
    found = cgroup_version(limit_file)
    if not found:
        return ProcessTree()
    return WorkingSet(found, os.path.dirname(os.path.join(root, limit_file.lstrip("/"))))


def working_set_now(root: str, limit_file: str) -> int | None:
    """One reading of ``reader``'s working set, in bytes."""
    found = reader(root, limit_file)
    try:
        return found.read()
    finally:
        found.close()
