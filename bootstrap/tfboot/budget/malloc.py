"""Whether the memory governor runs under the host-memory budget, what it watches, and what
its line says. Its levels, paces and decisions are ``budget.hostpolicy``'s; its mechanism
(the thread, glibc's calls) is ``executor.governor``'s.

What is watched: the container's cgroup (its limit, read again at each reading, and its
working set) under ``HOST_MEMORY_LIMIT_MB=auto``; this process and its descendants under a
figure, in a container or not, as the figure is the budget of what runs here.

The user's own allocator settings, another allocator and another libc are left alone, each
said; ``HOST_MEMORY_RELEASE=false`` turns it off. Pure: the allocator facts are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..node.allocator import Allocator
from ..node.workingset import cgroup_version
from ..settings import Settings
from .hostpolicy import HOLD_AT, KEEP, MMAP_THRESHOLD, TRIM_AT, Levels

OFF = "HOST_MEMORY_RELEASE=false"


@dataclass(frozen=True)
class Watch:
    """What the governor watches: the levels at the start, and the limit file of the cgroup
    whose limit is followed and whose working set is read ("": a figure, compared with this
    process and its descendants)."""

    levels: Levels
    limit_file: str

    @property
    def follows(self) -> bool:
        """Whether the limit is the cgroup's, read again at each reading."""
        return bool(self.limit_file)


@dataclass(frozen=True)
class Release:
    """What the governor watches (None: the allocator is left alone, for the reason the
    line gives), the line saying so (the host-memory budget's line at the import: the limit,
    whence, what is kept), and how it works (``detail``: ``tfboot doctor`` says it)."""

    watch: Watch | None
    why: str
    detail: str = ""


class Limited(Protocol):
    """The host-memory budget as the governor needs it (``budget.hostmemory.HostMemory``)."""

    limit_mib: int | None
    origin: str


def release(settings: Settings, host: Limited, allocator: Allocator,
            limit_file: str = "") -> Release | None:  # fmt: skip
    """The governor under ``host``'s limit; None where there is no limit. ``limit_file``: the
    container's memory limit file, whose cgroup's working set is watched ("": none)."""
    if host.limit_mib is None:
        return None
    budget = f"host memory limit {host.limit_mib} MiB ({host.origin})"
    if not settings.host_memory_release:
        shown = settings.shown("HOST_MEMORY_RELEASE")
        return Release(None, f"{budget}: malloc left alone ({shown})")
    if allocator.chosen:
        return Release(None, f"{budget}: malloc left to the user's {', '.join(allocator.chosen)}")
    if allocator.other:
        return Release(None, f"{budget}: malloc left to {allocator.other}, which has its own "
                       "settings")  # fmt: skip
    if allocator.glibc is None:
        return Release(None, f"{budget}: malloc left alone: this libc is not glibc (musl's "
                       "malloc unmaps large blocks itself, and has no mallopt)")  # fmt: skip
    limit = host.limit_mib << 20
    explicit = isinstance(settings.host_memory, int)
    follows = "" if explicit or not cgroup_version(limit_file) else limit_file
    watch = Watch(Levels.of(limit), follows)
    if follows:
        read = (f"the cgroup's working set, page cache and /dev/shm apart, watched against "
                f"its limit, {host.limit_mib} MiB now ({host.origin}), read again as it "
                "runs")  # fmt: skip
    else:
        read = (f"the resident sets of this process and its descendants watched against "
                f"{host.limit_mib} MiB ({host.origin}; the figure is this process tree's, "
                "in a container or not)")  # fmt: skip
    followed = ", read again as it runs" if follows else " (this process and its descendants)"
    return Release(
        watch,
        f"{budget}{followed}: freed memory kept up to {watch.levels.keep >> 20} MiB "
        f"({KEEP:.0%}), given back from {TRIM_AT:.0%} ({OFF} leaves malloc alone)",
        f"freed host memory kept while plentiful, returned to the kernel when short: {read}; "
        f"glibc {allocator.glibc} keeps at most {KEEP:.0%} of the limit free for reuse "
        f"({watch.levels.keep >> 20} MiB now), malloc_trim from {TRIM_AT:.0%}, blocks of "
        f"{MMAP_THRESHOLD >> 20} MiB and more unmapped when freed from {HOLD_AT:.0%} of heap "
        f"memory ({OFF} leaves malloc alone)",
    )
