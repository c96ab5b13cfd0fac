"""The process's C allocator: which one serves ``malloc``, and whether the user tuned it.

What the kernel's memory cgroup counts is what the allocator keeps, not what a framework
frees. glibc's ``malloc`` serves a block of up to its mmap threshold from its heaps and
arenas, and the threshold rises after the first free of an mmapped block, up to 32 MiB on
64-bit: freed tensors and tf.data elements of a few MiB then stay in the process.
``mallopt(M_MMAP_THRESHOLD, n)`` fixes the threshold and stops the rise, at any time.
musl's malloc unmaps large blocks by itself and has no ``mallopt``; jemalloc, tcmalloc and
mimalloc, preloaded or linked in, have their own knobs. The user's choice wins: any
``MALLOC_*`` variable or a ``glibc.malloc.*`` tunable in ``GLIBC_TUNABLES``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

MAPS = "/proc/self/maps"
# Allocators that replace glibc's malloc, as their libraries are named.
OTHERS = ("jemalloc", "tcmalloc", "mimalloc", "snmalloc", "hoard")
TUNABLES = "GLIBC_TUNABLES"


@dataclass(frozen=True)
class Allocator:
    """What serves ``malloc`` here and what the user set for it."""

    glibc: str | None  # glibc's version ("2.36"), None: another libc (musl)
    other: str = ""  # another allocator in the process ("jemalloc (LD_PRELOAD)"), "": none
    chosen: tuple[str, ...] = ()  # the user's allocator variables, as NAME=value


def _glibc() -> str | None:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None
    name, _, version = (found or "").partition(" ")
    return version if name == "glibc" and version else None


def _other(env: Mapping[str, str], maps: str) -> str:
    preload = env.get("LD_PRELOAD", "")
    for name in OTHERS:
        if name in preload:
            return f"{name} (LD_PRELOAD)"
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            mapped = {line.rpartition("/")[2].strip() for line in lines if "/" in line}
    except OSError:
        return ""
    for name in OTHERS:
        if any(f"lib{name}" in library for library in mapped):
            return f"{name} (loaded in the process)"
    return ""


def _chosen(env: Mapping[str, str]) -> tuple[str, ...]:
    named = [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MALLOC_") and v.strip()]
    tunables = [t for t in env.get(TUNABLES, "").split(":") if t.startswith("glibc.malloc.")]
    return (*named, *(f"{TUNABLES}={t}" for t in tunables))


def read_allocator(env: Mapping[str, str] | None = None, maps: str = MAPS) -> Allocator:
    """The allocator facts of this process (``maps``: its memory map, for tests)."""
    env = os.environ if env is None else env
    return Allocator(_glibc(), _other(env, maps), _chosen(env))
