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
  and its trim threshold to ``KEEP`` of the limit (from ``LOOSE_TRIM`` to ``KEEP_MAX``):
  freed memory stays for the next step instead of being faulted in again. Nothing else is
  paid: a watcher (``executor.governor``) reads the working set against the limit, paced by
  the distance to it;
- from ``TRIM_AT`` of the limit, the trim threshold goes back to glibc's own
  (``LOOSE_TRIM``), and ``malloc_trim(0)`` gives the free pages of every arena back, paced
  so that a process that lives there does not pay it on every block;
- from ``HOLD_AT``, glibc's mmap threshold is fixed at ``MMAP_THRESHOLD`` as well (freed
  large blocks unmapped at once), and trims follow the working set closely; once the
  working set has stayed under ``TRIM_AT`` for ``CALM_S``, memory is kept again.

The user's own allocator settings, another allocator and another libc are left alone, each
said; ``HOST_MEMORY_RELEASE=false`` turns it off. Pure: the allocator facts are given.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..node.allocator import Allocator
from ..node.workingset import cgroup_version
from ..settings import Settings
from .hostmemory import HostMemory

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_THRESHOLD = -3  # malloc.h
MMAP_THRESHOLD = 1 << 20  # 1 MiB while held: docs/host-memory.md measures it
# Where glibc's dynamic adjustment ends on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, also the
# largest mallopt accepts), and the trim threshold it sets with it (twice the mmap threshold).
KEEP_MMAP = 32 << 20
LOOSE_TRIM = 64 << 20
KEEP = 0.2  # of the limit: free memory glibc keeps at the top of a heap while plentiful
KEEP_MAX = 1 << 30  # and at most this (mallopt takes an int)
TRIM_AT = 0.65  # of the limit: free pages trimmed from here
HOLD_AT = 0.75  # of the limit: the mmap threshold fixed from here
CALM_S = 30.0  # seconds under TRIM_AT before a hold is let go
OFF = "HOST_MEMORY_RELEASE=false"


@dataclass(frozen=True)
class Watch:
    """What the governor watches and where it acts: the limit and the working set's levels
    in bytes, and the limit file of the cgroup to read ("": this process's resident set,
    where no cgroup holds the limit)."""

    limit: int
    trim_at: int
    hold_at: int
    limit_file: str

    @property
    def keep(self) -> int:
        """glibc's trim threshold while memory is plentiful, in bytes."""
        return min(KEEP_MAX, max(LOOSE_TRIM, int(self.limit * KEEP)))


@dataclass(frozen=True)
class Release:
    """What the governor watches (None: the allocator is left alone, for the reason the
    line gives), and the line saying why."""

    watch: Watch | None
    why: str


def release(settings: Settings, host: HostMemory, allocator: Allocator,
            limit_file: str = "") -> Release | None:  # fmt: skip
    """The governor under ``host``'s limit; None where there is no limit. ``limit_file``: the
    container's memory limit file, whose cgroup's working set is watched ("": none)."""
    if host.limit_mib is None:
        return None
    if not settings.host_memory_release:
        shown = settings.shown("HOST_MEMORY_RELEASE")
        return Release(None, f"malloc left alone ({shown})")
    if allocator.chosen:
        return Release(None, f"malloc left to the user's {', '.join(allocator.chosen)}")
    if allocator.other:
        return Release(None, f"malloc left to {allocator.other}, which has its own settings")
    if allocator.glibc is None:
        return Release(
            None,
            "malloc left alone: this libc is not glibc (musl's malloc unmaps large blocks "
            "itself, and has no mallopt)",
        )
    limit = host.limit_mib << 20
    version = cgroup_version(limit_file)
    watch = Watch(limit, int(limit * TRIM_AT), int(limit * HOLD_AT), limit_file if version else "")
    read = "the cgroup's working set" if version else "this process's resident set"
    return Release(
        watch,
        f"freed host memory kept while plentiful, returned to the kernel when short: {read} "
        f"watched against {host.limit_mib} MiB ({host.origin}); below {TRIM_AT:.0%} glibc "
        f"{allocator.glibc} keeps freed memory for reuse (trim threshold {watch.keep >> 20} MiB, "
        f"mmap threshold {KEEP_MMAP >> 20} MiB: fewer page faults than its default, the working "
        f"set staying near its peak); from {TRIM_AT:.0%} malloc_trim gives free pages back, "
        f"from {HOLD_AT:.0%} blocks of {MMAP_THRESHOLD >> 20} MiB and more are unmapped when "
        f"freed, each then page-faulted afresh, while memory stays short ({OFF} leaves malloc "
        "alone)",
    )
