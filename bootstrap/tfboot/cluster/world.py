"""The cluster as PyTorch and JAX count it: processes 0 to N-1, one per task, chief first.

TensorFlow names each task by its type and index; PyTorch's ``init_process_group`` and
JAX's ``jax.distributed.initialize`` number processes instead. The rank is the task's place
when the chief (if any) comes first and the workers follow by index: under Slurm that is
``SLURM_PROCID``, as the ranks fill the types. Rank 0's address is the rendezvous (PyTorch's
``MASTER_ADDR``/``MASTER_PORT``, JAX's coordinator). The local rank counts the tasks at the
same host, in rank order (Slurm's ``SLURM_LOCALID``, checked by ``engines``). Parameter
servers and evaluators are TensorFlow's alone: a cluster with one is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, Problem
from .engines import Identity
from .tfconfig import VARIABLE

RANKED = ("chief", "worker")  # the task types that hold a rank, in rank order


@dataclass(frozen=True)
class World:
    """This task's rank among ``addresses`` (every task's ``host:port``, by rank)."""

    rank: int
    addresses: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.addresses)

    @property
    def coordinator(self) -> str:
        """Rank 0's ``host:port``: PyTorch's rendezvous, JAX's coordinator."""
        return self.addresses[0]

    @property
    def master(self) -> tuple[str, str]:
        """Rank 0's host (IPv6 without brackets, as PyTorch's store takes it) and port."""
        host, _, port = self.coordinator.rpartition(":")
        return host.strip("[]"), port

    def _host(self, rank: int) -> str:
        return self.addresses[rank].rpartition(":")[0].lower()

    @property
    def local(self) -> list[int]:
        """The ranks at this task's host, in rank order."""
        own = self._host(self.rank)
        return [r for r in range(self.size) if self._host(r) == own]

    @property
    def local_rank(self) -> int:
        return self.local.index(self.rank)

    @property
    def local_size(self) -> int:
        return len(self.local)


def world_of(identity: Identity, framework: str, given: tuple[str, str]) -> World:
    """The ranked cluster of ``identity`` (which has one) for ``framework``.

    ``given`` is the variable and value that set the task types, named by the refusal.
    """
    config = identity.config
    assert config is not None
    others = [kind for kind in config.cluster if kind not in RANKED]
    if others or config.task_type not in RANKED:
        kinds = ", ".join(others or [str(config.task_type)])
        fix = (
            "give DIST_TASKS only chief and worker tasks (such as worker=4)"
            if identity.engine != "tf_config"
            else f"give {VARIABLE} only chief and worker tasks"
        )
        raise ConfigError(
            Problem(
                given[0],
                given[1],
                f"{framework} numbers its processes 0 to N-1 and has no {kinds} tasks: "
                "parameter servers and evaluators are TensorFlow's",
                fix,
                verdict="cannot be met",
            )
        )
    addresses = tuple(a for kind in RANKED for a in config.cluster.get(kind, []))
    offset = len(config.cluster.get("chief", [])) if config.task_type == "worker" else 0
    return World(offset + config.task_index, addresses)
