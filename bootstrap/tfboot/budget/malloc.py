"""Freed host memory kept for reuse while memory is plentiful, and given back to the kernel
when it is short, wherever tfboot sets a host-memory budget.

A budget that bounds what a framework keeps (tf.data's RAM budget, a model's tensors)
bounds nothing the kernel sees while glibc's ``malloc`` keeps what the framework frees
(``node.allocator``). Fixing glibc's mmap threshold low returns it, but at a price paid on
every large block for the whole run (a fresh mapping, page-faulted and zeroed by the
kernel): 1.3 to 2.5 times the CPU of ordinary NumPy, PyTorch and Keras work. glibc's own
default pays part of that price too: the top of its heap is trimmed as soon as more than
twice its mmap threshold (at most 64 MiB) lies free there, so a step that frees more than
that faults it all in again on the next, a lottery on where blocks land (PyTorch's MLP
step: 50,000 to 830,000 faults in 30 steps from one run to the next, tfboot off). So, as Go's
runtime keeps freed spans until its scavenger returns them against ``GOMEMLIMIT``:

- while memory is plentiful, glibc's mmap threshold is set where its own adjustment ends
  (``KEEP_MMAP``, 32 MiB: larger blocks are mapped and unmapped as glibc's default does)
  and its trim threshold to ``KEEP`` of the limit: freed memory stays for the next step
  instead of being faulted in again. ``KEEP`` is under the 5% of the limit a job that lives
  without tfboot has to spare, and glibc applies it in ``free`` itself: what is kept at a
  heap's top never needs a thread to come back, so a burst inside one call that holds the
  interpreter lock (``json.loads``, ``bytes * n``), when the governor cannot run, finds no
  more kept than that. What the top cannot give back (free blocks below a live one) is
  counted (``mallinfo2``) at the governor's readings and trimmed once past ``KEEP``;
- the levels follow the limit in force (``Levels.of``): a resize moves them all at the
  next reading, and what is kept over the new ``KEEP`` is given back then;
- from ``TRIM_AT`` of the limit, the trim threshold goes back to glibc's own
  (``LOOSE_TRIM``, or ``KEEP`` where lower), and ``malloc_trim(0)`` gives the free pages of
  every arena back, paced so that a process that lives there does not pay it on every block;
- from ``HOLD_AT``, glibc's mmap threshold is fixed at ``MMAP_THRESHOLD`` as well (freed
  large blocks unmapped at once), and trims follow the working set closely; once the
  working set has stayed under ``TRIM_AT`` for ``CALM_S``, memory is kept again. Only where a
  heap fills the limit: page cache (the kernel reclaims it itself) and shared memory
  (``/dev/shm``: only deleting its files frees it) are read apart (``node.workingset``) and
  never start a hold, as no trim can give them back.

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

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_THRESHOLD = -3  # malloc.h
MMAP_THRESHOLD = 1 << 20  # 1 MiB while held: docs/host-memory.md measures it
# Where glibc's dynamic adjustment ends on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, also the
# largest mallopt accepts), and the trim threshold it sets with it (twice the mmap threshold).
KEEP_MMAP = 32 << 20
LOOSE_TRIM = 64 << 20
# The one policy of host memory under a limit, lowest first (the test asserts the order):
LIVE_AT = 0.60  # of the limit: what tf.data's buffers and transients may fill up to
KEEP = 0.04  # of the limit: the most freed memory kept, under the 5% a job has to spare
KEEP_MAX = 1 << 30  # and at most this (mallopt takes an int)
TRIM_AT = 0.65  # of the limit: free pages trimmed from here
HOLD_AT = 0.75  # of the limit: the mmap threshold fixed from here
CALM_S = 30.0  # seconds under TRIM_AT before a hold is let go
NONE = 1 << 62  # a level no working set reaches: no limit in force
# The governor's pace (``executor.governor`` is its mechanism): readings paced by the distance
# to ``HOLD_AT``, the working set assumed able to grow at ``RATE`` between two of them.
FAST_S = 0.01  # the shortest interval between two readings
SLOW_S = 1.0  # the longest
RATE = 4 << 30  # bytes a second the working set is assumed able to grow at, for the pacing
STEP = 0.02  # of the limit: growth that earns another trim while not held
HELD_STEP = 0.005  # the same while held
KEPT_EVERY_S = 1.0  # what glibc holds free is counted at most this often
# What glibc counts free includes pages a trim already gave back, which a later block may
# touch again unseen: while the count stays over the bound, a trim again at most this often.
RETRIM_S = 30.0
OFF = "HOST_MEMORY_RELEASE=false"


@dataclass(frozen=True)
class Levels:
    """The governor's levels under one limit, in bytes (``limit`` 0: no limit in force)."""

    limit: int
    trim_at: int
    hold_at: int
    keep: int  # glibc's trim threshold while plentiful, and the most kept before a trim

    @classmethod
    def of(cls, limit: int | None) -> Levels:
        """The levels under ``limit`` bytes (None: none, where nothing is kept past glibc's
        own default and nothing is trimmed)."""
        if not limit:
            return cls(0, NONE, NONE, LOOSE_TRIM)
        keep = min(KEEP_MAX, max(1 << 20, int(limit * KEEP)))
        return cls(limit, int(limit * TRIM_AT), int(limit * HOLD_AT), keep)


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
