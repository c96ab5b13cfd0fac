"""The CPU budget behind ``CPU_THREADS``: the cgroup quota, rounded up, within the affinity mask."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .cgroup import CgroupError, cpu_quota

# Where cgroup files are read from; tests point it at a fake tree.
CGROUP_ROOT = "TFBOOT_CGROUP_ROOT"


def cgroup_root(env: Mapping[str, str] | None = None) -> str:
    """The directory cgroup and proc files are read below: ``/`` unless ``CGROUP_ROOT``."""
    env = os.environ if env is None else env
    return env.get(CGROUP_ROOT) or "/"


@dataclass(frozen=True)
class CpuBudget:
    """What the container may use: schedulable CPUs and the quota, if any."""

    affinity: int
    quota: float | None
    quota_source: str
    problem: str = ""
    shared: str = ""  # whose quota it is where not this container's alone (``node.cgroup``)

    @property
    def threads(self) -> int | None:
        """The quota rounded up, never above the affinity mask; None without a quota."""
        if self.quota is None:
            return None
        return max(1, min(math.ceil(self.quota), self.affinity))


def schedulable_cpus() -> int:
    """CPUs this process may run on (what TensorFlow sizes its pools from)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_budget(env: Mapping[str, str] | None = None) -> CpuBudget:
    """Read the quota; a malformed cgroup file is reported, not raised."""
    root = cgroup_root(env)
    affinity = schedulable_cpus()
    try:
        quota = cpu_quota(root)
    except CgroupError as exc:
        return CpuBudget(affinity, None, "", f"could not read the CPU quota: {exc}")
    if quota is None:
        return CpuBudget(affinity, None, "")
    return CpuBudget(affinity, quota.cpus, quota.source, shared=quota.shared)
