"""NCCL's needs from the container: room in ``/dev/shm`` and a memlock limit.

NCCL moves data between the GPUs of one node through shared memory files in ``/dev/shm``
and pins host memory for its transfers. Docker gives a container a 64 MiB ``/dev/shm``
and Kubernetes the same unless a memory-backed ``emptyDir`` is mounted there; a low
memlock limit fails the pinning. Multi-GPU and multi-worker jobs then die at their first
all-reduce (NVIDIA/nccl#342, #290). NVIDIA's own containers run with ``--shm-size=1g
--ulimit memlock=-1``; tfboot warns below ``SHM_MIN_MIB`` and ``MEMLOCK_MIN_MIB``.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field

from .shm import MIB, docker_flag, memory_volume, size_mib
from .shm import PATH as SHM

SHM_MIN_MIB = 1024
MEMLOCK_MIN_MIB = 64


@dataclass(frozen=True)
class Readiness:
    """``/dev/shm``'s size and the memlock limit in MiB (None: unknown / unlimited)."""

    shm_mib: int | None
    memlock_mib: int | None  # None: unlimited
    warnings: list[str] = field(default_factory=list)
    memlock_kib: int | None = None  # the memlock limit in KiB, as the warning gives it
    path: str = SHM  # where the shared memory was measured

    def to_dict(self) -> dict[str, object]:
        return {
            "shm_mib": self.shm_mib,
            "memlock_mib": "unlimited" if self.memlock_mib is None else self.memlock_mib,
            "warnings": list(self.warnings),
        }

    def warn(self, why: str | None) -> list[str]:
        """The warnings when NCCL will run here (``why``: more GPUs, a cluster)."""
        warnings: list[str] = []
        if why is None:
            return warnings
        shm_mib, memlock = self.shm_mib, self.memlock_mib
        if shm_mib is None or shm_mib < SHM_MIN_MIB:
            size = "missing" if shm_mib is None else f"{shm_mib} MiB"
            warnings.append(
                f"NCCL: {why}, and {self.path} is {size}, below {SHM_MIN_MIB} MiB: NCCL's "
                f"all-reduce can fail on its shared memory; docker run {docker_flag(SHM_MIN_MIB)}, "
                f"or under Kubernetes mount {memory_volume()}"
            )
        if memlock is not None and memlock < MEMLOCK_MIN_MIB:
            warnings.append(
                f"NCCL: {why}, and the memlock limit is {self.memlock_kib} KiB, below "
                f"{MEMLOCK_MIN_MIB} MiB: NCCL cannot pin its buffers; docker run --ulimit "
                "memlock=-1, or raise the container runtime's LimitMEMLOCK"
            )
        return warnings


def measure(shm: str = SHM) -> Readiness:
    """``/dev/shm``'s size and the memlock limit, without warnings."""
    shm_mib = size_mib(shm)
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    memlock = None if soft == resource.RLIM_INFINITY else soft // MIB
    kib = None if memlock is None else soft // 1024
    return Readiness(shm_mib, memlock, memlock_kib=kib, path=shm)


def readiness(why: str | None, shm: str = SHM) -> Readiness:
    """Measure both; warn when NCCL will run here (``why``: more GPUs, a cluster)."""
    measured = measure(shm)
    measured.warnings.extend(measured.warn(why))
    return measured


def why_needed(visible_gpus: int, cluster_size: int) -> str | None:
    """Why NCCL will run here: more than one visible GPU, or GPUs in a multi-worker cluster
    (on CPUs, TensorFlow's collectives go over gRPC, not NCCL)."""
    if cluster_size > 1 and visible_gpus:
        return f"this task has {visible_gpus} GPU(s) and is one of {cluster_size} in a cluster"
    if visible_gpus > 1:
        return f"{visible_gpus} GPUs are visible"
    return None
