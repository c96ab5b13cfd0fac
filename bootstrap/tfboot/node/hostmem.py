"""The host-memory budget behind ``HOST_MEMORY_LIMIT_MB``: the container's memory limit.

The Pod's third budget. TensorFlow sizes its host-side appetite from the host, not the
container: tf.data's autotuner takes half of the host's free memory as its RAM budget,
and the GPU's pinned host memory may grow to tens of GiB. tfboot gives both a share of the
container's limit instead (see ``plan``): ``RAM_SHARE`` of it for tf.data's buffers and
``PINNED_SHARE`` for pinned memory, leaving the rest to the model, TensorFlow's runtime
(about 500 MiB after ``import tensorflow``) and the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .cgroup import CgroupError, host_memory, memory_limit
from .cpu import cgroup_root

MIB = 1 << 20
RAM_SHARE = 4  # tf.data's autotune RAM budget: a quarter of the limit
PINNED_SHARE = 4  # TF_GPU_HOST_MEM_LIMIT_IN_MB: a quarter of the limit
PINNED_ENV = "TF_GPU_HOST_MEM_LIMIT_IN_MB"


@dataclass(frozen=True)
class MemoryBudget:
    """The container's memory limit in MiB (None: none found) and where it came from."""

    limit_mib: int | None
    source: str
    problem: str = ""
    host_mib: int | None = None  # the host's memory (MemTotal), when read


def memory_budget(env: Mapping[str, str] | None = None) -> MemoryBudget:
    """Read the limit; a malformed cgroup file is reported, not raised."""
    root = cgroup_root(env)
    total = host_memory(root)
    host = None if total is None else total // MIB
    try:
        limit = memory_limit(root)
    except CgroupError as exc:
        return MemoryBudget(None, "", f"could not read the memory limit: {exc}", host)
    if limit is None:
        return MemoryBudget(None, "", host_mib=host)
    return MemoryBudget(max(1, limit.bytes // MIB), limit.source, host_mib=host)
