"""What a PyTorch DataLoader needs of the container, and what to say: its workers against the
CPU quota, its batches against ``/dev/shm`` and the memory limit, and the size ``/dev/shm``
should get once it is full.

A loader holds up to ``num_workers x prefetch_factor`` batches in ``/dev/shm`` and one in
use; ``/dev/shm``'s pages count against the memory limit. Pure: ``executor.loader`` reads the
quota, ``/dev/shm`` and the memory limit as a loader starts, and words the fix for the
engine the job runs on (``cluster.engines.shm_fix``, else ``node.shm.give_more``) where a
verdict asks for one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..node.shm import MIB, PATH, ROUND_MIB, SharedMemory, size_for

PREFETCH = 2  # PyTorch's default prefetch_factor with workers
SMALLER = "; or fewer workers, a lower prefetch_factor or a smaller batch"


@dataclass(frozen=True)
class Verdict:
    """A warning, said once for ``key``; where ``/dev/shm`` must grow, ``give_mib`` is the size
    to give it, and the fix for the engine goes between ``text`` and ``rest``."""

    key: str
    text: str
    rest: str = ""
    give_mib: int | None = None

    def said(self, fix: str = "") -> str:
        """The warning, with ``fix``: how to give ``/dev/shm`` ``give_mib`` MiB."""
        return f"{self.text}{fix}{self.rest}"


@dataclass(frozen=True)
class Batches:
    """A loader's workers, its prefetch factor, and the bytes of a batch."""

    workers: int
    prefetch: int
    size: int

    @property
    def need(self) -> int:
        """The bytes it holds in ``/dev/shm``: each worker's prefetched batches and the one
        in use."""
        return (self.workers * self.prefetch + 1) * self.size

    def holds(self) -> str:
        return (f"DataLoader: its {self.workers} worker(s) hold up to {self.workers} x "
                f"prefetch_factor {self.prefetch} batches of {shown(self.size)} MiB in {PATH}, "
                f"{shown(self.need)} MiB with the one in use")  # fmt: skip


def over_quota(workers: int, quota: float | None, where: str) -> Verdict | None:
    """``workers`` and the main process against a CPU quota of ``quota`` CPUs (``where``: whence
    it came; None: no quota): more processes than the quota take turns on it."""
    if quota is None or workers + 1 <= quota:
        return None
    fits = max(1, math.floor(quota) - 1)
    return Verdict(f"cpu {quota:g}", f"DataLoader: num_workers={workers} and the main process "
                   f"are {workers + 1} processes on a CPU quota of {quota:g} ({where}): they "
                   f"take turns on it; num_workers={fits} fits it (kept as given)")  # fmt: skip


def judge(batches: Batches, shm: SharedMemory, limit_mib: int | None,
          working_mib: int | None) -> Verdict | None:  # fmt: skip
    """``batches`` against ``/dev/shm``'s size, and, as its pages count there, against a memory
    limit of ``limit_mib`` with ``working_mib`` in use (None: unread); None where they fit."""
    need = batches.need
    if shm.size_mib is not None and need > shm.size_mib * MIB:
        give = size_for(need / MIB)
        return Verdict(f"shm {shm.size_mib}", f"{batches.holds()}, but {shm.describe()}: ",
                       SMALLER, give)  # fmt: skip
    if limit_mib is None or working_mib is None or need // MIB + working_mib <= limit_mib:
        return None
    return Verdict(f"memory {limit_mib}",
                   f"{batches.holds()}, and its pages count against the memory limit of "
                   f"{limit_mib} MiB, of which {working_mib} MiB are in use: the OOM killer "
                   f"would end a worker; raise the memory limit by {size_for(need / MIB)} MiB "
                   f"with {PATH}'s size{SMALLER}")  # fmt: skip


def full_give(workers: int, prefetch: int, size: int | None, shm_mib: int | None) -> int:
    """The MiB to give ``/dev/shm`` once it was full: what the workers hold with the batch in
    use and the one that failed (``size`` bytes each); where the allocation is unknown (a
    worker died of SIGBUS), twice its size, to start."""
    if size:
        return size_for((workers * prefetch + 2) * size / MIB)
    return 2 * (shm_mib or ROUND_MIB)


def full_error(workers: int, prefetch: int, size: int | None, shm: SharedMemory, fix: str,
               sending: bool = False) -> str:  # fmt: skip
    """The error for a full ``/dev/shm``: what was needed, what it has, and ``fix`` (how to give
    it ``full_give`` MiB). ``size``: the allocation that failed (None: a worker died of
    SIGBUS); ``sending``: a batch of ``size`` bytes could not be moved there to be sent to
    the main process."""
    held = (f"a DataLoader's {workers} worker(s) hold up to {workers} x prefetch_factor "
            f"{prefetch} batches there")  # fmt: skip
    if sending:
        what = (f"a batch{f' of {shown(size)} MiB' if size else ''} could not be sent to the "
                "main process")  # fmt: skip
    elif size:
        what = f"{shown(size)} MiB more for a batch"
    else:
        what = "a worker died of SIGBUS writing a batch"
    mib = full_give(workers, prefetch, size, shm.size_mib)
    return (f"tfboot: {PATH} is full: {what}, but {shm.describe()}; {held}; give it at least "
            f"{mib} MiB: {fix}; or use fewer workers, a lower prefetch_factor or a "
            "smaller batch")  # fmt: skip


def shown(size: int) -> str:
    """``size`` bytes in MiB as a message gives them: whole from 10 MiB, else one decimal."""
    return f"{size / MIB:.0f}" if size >= 10 * MIB else f"{size / MIB:.1f}"
