"""The limits in force while the job runs: the memory limit and the CPU quota, read again at
each reading.

A resize (Kubernetes's in-place resize, VPA's in-place mode, ``docker update``) rewrites a
running container's ``memory.max`` / ``memory.limit_in_bytes`` and ``cpu.max`` /
``cpu.cfs_quota_us`` and sends the process nothing: only a reading sees it. Every limit file
on the process's cgroup path is opened once and read with ``pread`` at each call (one read a
file, no open), and the tightest wins, as ``node.cgroup`` reads them at the framework's
import: the container's cgroup and its visible parents; for memory, ``memory.high`` where
lower, and a limit at or above the host's memory is none. Never raises: a file that cannot
be read counts as no limit at its level, and where none can be read the reading is unknown.
"""

from __future__ import annotations

import os

from .cgroup import (
    CgroupError,
    cpu_quota_files,
    host_memory,
    memory_bytes,
    memory_limit_files,
    quota_cpus,
    shown,
)

READ = 64  # a limit file holds one or two numbers, or "max"


def _open(root: str, name: str) -> int | None:
    try:
        return os.open(os.path.join(root, name.lstrip("/")), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _text(fd: int) -> str:
    return os.pread(fd, READ, 0).decode("ascii", "replace")


def _tightest(found: list[tuple[float | None, str]]) -> tuple[float | None, str] | None:
    """The smallest of the levels' limits read ((None, "") where none holds one); None where
    none could be read."""
    if not found:
        return None
    limits = [(value, name) for value, name in found if value is not None]
    return min(limits) if limits else (None, "")


class LimitFiles:
    """The memory limit files of this process's cgroup path, open for reading again."""

    __slots__ = ("_files", "total")

    def __init__(self, root: str) -> None:
        try:
            names = memory_limit_files(root)
        except CgroupError:
            names = []
        opened = ((_open(root, name), shown(name)) for name in names)
        self._files = [(fd, name) for fd, name in opened if fd is not None]
        self.total = host_memory(root)

    def read(self) -> tuple[int | None, str] | None:
        """The tightest limit now, in bytes, and its file ((None, "") for no limit); None
        where no file could be read."""
        found: list[tuple[float | None, str]] = []
        for fd, name in self._files:
            try:
                value = memory_bytes(name, _text(fd))
            except (OSError, CgroupError):
                continue
            if value is not None and self.total is not None and value >= self.total:
                value = None
            found.append((value, name))
        best = _tightest(found)
        return None if best is None else (None if best[0] is None else int(best[0]), best[1])

    def close(self) -> None:
        for fd, _name in self._files:
            os.close(fd)
        self._files = []


class QuotaFiles:
    """The CPU quota files of this process's cgroup path, open for reading again."""

    __slots__ = ("_files",)

    def __init__(self, root: str) -> None:
        try:
            pairs = cpu_quota_files(root)
        except CgroupError:
            pairs = []
        self._files: list[tuple[int, int, str]] = []
        for quota, period in pairs:
            fds = _open(root, quota), _open(root, period)
            if fds[0] is not None and fds[1] is not None:
                self._files.append((fds[0], fds[1], shown(quota)))
            else:
                for fd in fds:
                    if fd is not None:
                        os.close(fd)

    def read(self) -> tuple[float | None, str] | None:
        """The tightest quota now, in CPUs, and its file ((None, "") for none); None where no
        file could be read."""
        found: list[tuple[float | None, str]] = []
        for quota, period, name in self._files:
            try:
                found.append((quota_cpus(name, _text(quota), _text(period)), name))
            except (OSError, CgroupError):
                continue
        return _tightest(found)

    def close(self) -> None:
        for quota, period, _name in self._files:
            os.close(quota)
            if period != quota:
                os.close(period)
        self._files = []
