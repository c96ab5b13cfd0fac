"""The host-memory budget behind ``HOST_MEMORY_LIMIT_MB``: the container's memory limit.

The Pod's third budget. TensorFlow sizes its host-side appetite from the host, not the
container: tf.data's autotuner takes half of the host's free memory as its RAM budget,
and the GPU's pinned host memory may grow to tens of GiB. tfboot sizes both from the
container's limit instead (``budget.hostmemory``): tf.data's buffers from the room between
the working set, read here and again as each pipeline starts, and the limit;
``PINNED_SHARE`` of the limit for pinned memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .cgroup import CgroupError, host_memory, memory_limit
from .cpu import cgroup_root
from .workingset import working_set_now

MIB = 1 << 20
PINNED_SHARE = 4  # TF_GPU_HOST_MEM_LIMIT_IN_MB: a quarter of the limit
PINNED_ENV = "TF_GPU_HOST_MEM_LIMIT_IN_MB"


@dataclass(frozen=True)
class MemoryBudget:
    """The container's memory limit in MiB (None: none found) and where it came from."""

    limit_mib: int | None
    source: str
    problem: str = ""
    host_mib: int | None = None  # the host's memory (MemTotal), when read
    working_mib: int | None = None  # the working set when read (None: not read)


def memory_budget(env: Mapping[str, str] | None = None, working: bool = False) -> MemoryBudget:
    """Read the limit (and the working set now, with ``working``); a malformed cgroup file
    is reported, not raised."""
    root = cgroup_root(env)
    total = host_memory(root)
    host = None if total is None else total // MIB
    try:
        limit = memory_limit(root)
    except CgroupError as exc:
        return MemoryBudget(None, "", f"could not read the memory limit: {exc}", host)
    source = limit.source if limit is not None else ""
    now = working_set_now(root, source) if working else None
    return MemoryBudget(
        None if limit is None else max(1, limit.bytes // MIB), source, host_mib=host,
        working_mib=None if now is None else now // MIB,
    )  # fmt: skip
