"""The host-memory budget behind ``HOST_MEMORY_LIMIT_MB``: the container's memory limit.

The Pod's third budget. TensorFlow sizes its host-side appetite from the host, not the
container: tf.data's autotuner takes half of the host's free memory as its RAM budget,
and the GPU's pinned host memory may grow to tens of GiB. tfboot sizes both from the
container's limit instead (``budget.hostmemory``): tf.data's buffers from the room between
the working set, read here and again as each pipeline starts, and the limit; a share of
the limit for pinned memory (``budget.hostpolicy``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..values import positive
from .cgroup import CgroupError, host_memory, memory_limit
from .cpu import cgroup_root
from .workingset import working_set_now

MIB = 1 << 20
# The Pod's memory limit, where a container without one of its own shares it (Kubernetes's
# pod-level resources): ``tfboot inject`` sets it from the Downward API's ``limits.memory``,
# which falls back to the Pod's limit. Parsed and refused with the others in ``settings``;
# read here only as the digits it must be.
POD_MEMORY_VARIABLE = "TFBOOT_POD_MEMORY_LIMIT_MB"
POD_SHARED = "the Pod's, shared with its other containers"
MAX_POD_MIB = 1 << 24  # 16 TiB, as HOST_MEMORY_LIMIT_MB
PINNED_ENV = "TF_GPU_HOST_MEM_LIMIT_IN_MB"


@dataclass(frozen=True)
class MemoryBudget:
    """The container's memory limit in MiB (None: none found) and where it came from."""

    limit_mib: int | None
    source: str
    problem: str = ""
    shared: str = ""  # whose budget it is where not this container's alone
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
    mib = None if limit is None else max(1, limit.bytes // MIB)
    shared = "" if limit is None else limit.shared
    pod = positive(os.environ.get(POD_MEMORY_VARIABLE, "") if env is None else
                   env.get(POD_MEMORY_VARIABLE, ""))  # fmt: skip
    if pod is not None and pod <= MAX_POD_MIB:
        if mib is None:  # the parents hidden, the container's own file unlimited
            mib, source = pod, f"{POD_MEMORY_VARIABLE}={pod}"
            now = working_set_now(root, source) if working else None
            shared = POD_SHARED
        elif not shared and mib >= pod:  # the container's file holds the Pod's limit
            shared = f"{POD_SHARED} ({POD_MEMORY_VARIABLE}={pod})"
    return MemoryBudget(mib, source, host_mib=host, shared=shared,
                        working_mib=None if now is None else now // MIB)  # fmt: skip
