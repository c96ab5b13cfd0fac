"""The memory limit in force while the job runs, read again at each of the governor's readings.

A resize (Kubernetes's in-place resize, VPA's in-place mode, ``docker update``) rewrites a
running container's ``memory.max`` or ``memory.limit_in_bytes`` and sends the process
nothing: only a reading sees it. Every limit file on the process's cgroup path is opened
once and read with ``pread`` at each call (one read a file, no open), and the tightest wins,
as ``node.cgroup.memory_limit`` reads them at the framework's import: the container's cgroup
and its visible parents, ``memory.high`` where lower; a limit at or above the host's memory
is none. Never raises: a file that cannot be read counts as no limit at its level, and where
none can be read the reading is unknown.
"""

from __future__ import annotations

import os

from .cgroup import CgroupError, host_memory, memory_bytes, memory_limit_files, shown

READ = 64  # a limit file holds one number, or "max"


class LimitFiles:
    """The memory limit files of this process's cgroup path, open for reading again."""

    __slots__ = ("_files", "total")

    def __init__(self, root: str) -> None:
        self._files: list[tuple[int, str]] = []
        try:
            names = memory_limit_files(root)
        except CgroupError:
            names = []
        for name in names:
            try:
                fd = os.open(os.path.join(root, name.lstrip("/")), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            self._files.append((fd, shown(name)))
        self.total = host_memory(root)

    def read(self) -> tuple[int | None, str] | None:
        """The tightest limit now, in bytes, and its file ((None, "") for no limit); None
        where no file could be read."""
        best: tuple[int | None, str] | None = None
        for fd, name in self._files:
            try:
                value = memory_bytes(name, os.pread(fd, READ, 0).decode("ascii", "replace"))
            except (OSError, CgroupError):
                continue
            if value is not None and self.total is not None and value >= self.total:
                value = None
            if best is None or best[0] is None:
                best = (value, name if value is not None else "")
            elif value is not None and value < best[0]:
                best = (value, name)
        return best

    def close(self) -> None:
        for fd, _name in self._files:
            os.close(fd)
        self._files = []
