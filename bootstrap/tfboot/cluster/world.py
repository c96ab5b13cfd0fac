"""The job as every engine gives it and every framework reads it: the tasks by type
(``Cluster``: what ``TF_CONFIG`` is made of, by TensorFlow's writer) and the ranks
(``World``: processes 0 to N-1, one per task, chief first).

TensorFlow names each task by its type and index; PyTorch's ``init_process_group`` and
JAX's ``jax.distributed.initialize`` number processes instead. The rank is the task's place
when the chief (if any) comes first and the workers follow by index: under Slurm that is
``SLURM_PROCID``, as the ranks fill the types. Rank 0's address is the rendezvous (PyTorch's
``MASTER_ADDR``/``MASTER_PORT``, JAX's coordinator). The local rank counts the tasks at the
same host, in rank order (an engine checks its own launcher's local rank against it). Parameter
servers and evaluators are TensorFlow's alone: a cluster with one is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass

RANKED = ("chief", "worker")  # the task types that hold a rank, in rank order


@dataclass(frozen=True)
class Cluster:
    """The job an engine found, for every framework: each task type's addresses (``chief``,
    ``worker``, ``ps``, ``evaluator``: the contract's ``DIST_TASKS`` types), and this task's
    type and index."""

    cluster: dict[str, list[str]]
    task_type: str | None
    task_index: int

    @property
    def address(self) -> str | None:
        """This task's own address (None for an evaluator outside the cluster)."""
        addresses = self.cluster.get(self.task_type or "", [])
        return addresses[self.task_index] if self.task_index < len(addresses) else None

    @property
    def peers(self) -> list[str]:
        """The addresses this task waits for: every chief, worker and ps but its own.

        An evaluator starts no server the others can wait on, and waits for nobody.
        """
        if self.task_type == "evaluator":
            return []
        own = self.address
        servers = [a for kind, group in self.cluster.items() if kind != "evaluator" for a in group]
        return [a for a in servers if a != own]

    @property
    def names(self) -> dict[str, str]:
        """Each address -> the task it is, such as ``worker 2``."""
        return {
            a: f"{kind} {i}" for kind, group in self.cluster.items() for i, a in enumerate(group)
        }

    @property
    def size(self) -> int:
        return sum(len(a) for a in self.cluster.values())

    def ranked(self) -> World | None:
        """The ranks PyTorch and JAX count, or None: the job has a parameter server or an
        evaluator, which only TensorFlow has."""
        if self.task_type not in RANKED or any(k not in RANKED for k in self.cluster):
            return None
        addresses = tuple(a for kind in RANKED for a in self.cluster.get(kind, []))
        offset = len(self.cluster.get("chief", [])) if self.task_type == "worker" else 0
        return World(offset + self.task_index, addresses)


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
