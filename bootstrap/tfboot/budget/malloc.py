"""Freed host memory back to the kernel, wherever tfboot sets a host-memory budget.

A budget that bounds what a framework keeps (tf.data's RAM budget, a model's tensors)
bounds nothing the kernel sees while glibc's ``malloc`` keeps what the framework frees
(``node.allocator``). Under a host-memory limit, tfboot fixes glibc's mmap threshold at
``MMAP_THRESHOLD``: every block that large is mmapped, so freeing it unmaps it, and the
threshold no longer rises (which also keeps the trim threshold at glibc's 128 KiB). The
user's own allocator settings, another allocator and another libc are left alone, each
said; ``HOST_MEMORY_RELEASE=false`` turns it off. Pure: the allocator facts are given.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..node.allocator import Allocator
from ..settings import Settings
from .hostmemory import HostMemory

M_MMAP_THRESHOLD = -3  # malloc.h
MMAP_THRESHOLD = 1 << 20  # 1 MiB: docs/host-memory.md measures it against glibc's default
OFF = "HOST_MEMORY_RELEASE=false"


@dataclass(frozen=True)
class Release:
    """What ``mallopt`` gets (``options``: (parameter, value, name)), and the line saying why;
    no options: the allocator is left alone, for the reason the line gives."""

    options: tuple[tuple[int, int, str], ...]
    why: str


def release(settings: Settings, host: HostMemory, allocator: Allocator) -> Release | None:
    """The allocator setting under ``host``'s limit; None where there is no limit."""
    if host.limit_mib is None:
        return None
    if not settings.host_memory_release:
        shown = settings.shown("HOST_MEMORY_RELEASE")
        return Release((), f"malloc left alone ({shown})")
    if allocator.chosen:
        return Release((), f"malloc left to the user's {', '.join(allocator.chosen)}")
    if allocator.other:
        return Release((), f"malloc left to {allocator.other}, which has its own settings")
    if allocator.glibc is None:
        return Release(
            (),
            "malloc left alone: this libc is not glibc (musl's malloc unmaps large blocks "
            "itself, and has no mallopt)",
        )
    return Release(
        ((M_MMAP_THRESHOLD, MMAP_THRESHOLD, "M_MMAP_THRESHOLD"),),
        f"freed host memory returned to the kernel: glibc {allocator.glibc} mallopt "
        f"M_MMAP_THRESHOLD={MMAP_THRESHOLD >> 20} MiB, so freed blocks of 1 MiB and more are "
        f"unmapped, not kept (under {host.origin}; {OFF} leaves malloc alone)",
    )
