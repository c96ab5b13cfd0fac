"""The budget: the framework-neutral decisions every framework's plan is made from.

A ``Budget`` holds the validated settings, what the node gives (the CPU quota, the
memory limit) and the framework's role in the process; from them it decides the thread
count, the host-memory budget, the GPUs and caps for a framework's device list, and the
cluster, each with its reason. Pure apart from reading the node's cgroup files once, the
process's pid (a task's child takes no place in the cluster), and the process's allocator
when its setting is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..node.allocator import read_allocator
from ..node.cpu import CpuBudget, cpu_budget
from ..node.hostmem import MemoryBudget, memory_budget
from ..settings import Settings
from .gpus import Gpus, gpu_budget
from .hostmemory import HostMemory, host_memory
from .malloc import Release, release
from .roles import RUNS_MODEL, Role
from .threads import Threads, thread_budget

if TYPE_CHECKING:
    from ..cluster.launch import Writer
    from ..cluster.plan import ClusterPlan

NO_LIMIT = MemoryBudget(None, "")
# What the frameworks beside TensorFlow (JAX, PyTorch) read: the device budget, and what
# they must refuse by name, and the host-memory budget their allocator gets. MIXED_PRECISION
# is Keras's, LOADER_GPU TensorFlow's.
FRAMEWORK_READS = frozenset(
    {
        "VISIBLE_GPU",
        "MEMORY_LIMIT_MB",
        "VIRTUAL_SPLIT",
        "MEMORY_GROWTH",
        "MEMORY_HEADROOM_MB",
        "CPU_THREADS",
        "HOST_MEMORY_LIMIT_MB",
        "HOST_MEMORY_RELEASE",
        "REQUIRE_GPU",
        "SOFT_PLACEMENT",
        "LOG_DEVICE_PLACEMENT",
        "XLA_JIT",
        "DISTRIBUTED",
    }
)


@dataclass(frozen=True)
class Budget:
    """The settings and the node's limits, for one framework in its role."""

    settings: Settings
    env: Mapping[str, str]
    cpu: CpuBudget
    memory: MemoryBudget = NO_LIMIT  # not read under HOST_MEMORY_LIMIT_MB=host
    role: Role = RUNS_MODEL
    pid: int | None = None  # this process (None: not known, no task's child)

    def threads(self, framework: str) -> Threads:
        """Threads per pool (``framework`` names whose default is kept, in a warning)."""
        return thread_budget(self.settings, self.cpu, framework)

    def host(self) -> HostMemory:
        """The host-memory limit in force and tf.data's defaults."""
        return host_memory(self.settings, self.cpu, self.memory)

    def release(self) -> Release | None:
        """The allocator setting that returns freed memory under the host-memory limit."""
        return release(self.settings, self.host(), read_allocator(self.env), self.memory.source)

    def gpus(self, count: int, lists: str) -> Gpus:
        """The visible GPUs of ``count`` listed, and their caps (``lists``: who lists them)."""
        return gpu_budget(self.settings, count, lists)

    def launch(self, framework: str, writer: Writer, **facts: Any) -> ClusterPlan:
        """``framework``'s place in the cluster (``DISTRIBUTED`` must not be off), its values
        from the ``writer`` its adapter chose, given the adapter's ``facts``."""
        from ..cluster.plan import plan_cluster

        assert self.settings.cluster is not None
        return plan_cluster(writer, framework, self.settings.distributed, self.settings.cluster,
                            self.env, facts, self.pid)  # fmt: skip


def make_budget(
    settings: Settings,
    env: Mapping[str, str],
    role: Role = RUNS_MODEL,
    cpu: CpuBudget | None = None,
    memory: MemoryBudget | None = None,
) -> Budget:
    """The budget; ``cpu`` and ``memory`` are read from the node unless given."""
    if memory is None:
        memory = memory_budget(env, working=True) if settings.host_memory != "host" else NO_LIMIT
    cpu = cpu_budget(env) if cpu is None else cpu
    return Budget(settings, env, cpu, memory, role, os.getpid())
