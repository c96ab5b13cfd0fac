"""Open MPI's ``mpirun``: a rank it started, from ``OMPI_COMM_WORLD_*``.

``mpirun -np N python train.py`` gives each process its rank and the job's size
(``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``) and its place on its node
(``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``), but no rank the others'
hosts. Where every rank runs on one node (the local size is the size), they all are on
this host, at ``127.0.0.1``. Across nodes, ``DIST_HOSTS`` lists each rank's host in rank
order, as ``mpirun``'s host file places them (``worker=node0,node0,node1,node1``); tfboot
does not guess, where JAX's own Open MPI detection takes ``mpirun``'s own host
(``OMPI_MCA_orte_hnp_uri``) for rank 0's, true only where rank 0 runs beside ``mpirun``.
The local rank ``mpirun`` gave must be the one the hosts give. A rank's port is
``DIST_PORT`` plus its local rank; without ``DIST_PORT`` the base is drawn from the job
(``PMIX_NAMESPACE``, the same in every rank), so two jobs on one node take different
ports. Ranks fill the types of ``DIST_TASKS`` as under Slurm. The job's run, for the usage
report, is its PMIx namespace: rank 0 leads.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from ...errors import ConfigError, Problem
from ...values import digits, nonblank
from .. import MPIRUN_RUN, TASK_TYPES
from ..tfconfig import check_address
from ..variables import ClusterSettings
from ..world import World
from . import Engine, Identity, by_rank, check_ports, count_tasks, drawn_port

RANK, SIZE = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
LOCAL_RANK, LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"
NAMESPACE = "PMIX_NAMESPACE"  # the job's PMIx namespace, in every rank of Open MPI 4 and 5
LOOPBACK = "127.0.0.1"


class Mpirun(Engine):
    """A rank of an Open MPI job (``mpirun``/``mpiexec``, Open MPI 4 and 5)."""

    name = "mpirun"
    order = 10  # before Slurm: mpirun in a Slurm job starts its ranks through Slurm
    run = MPIRUN_RUN  # its ranks, by PMIX_NAMESPACE and the size (rank 0 leads)
    jax_detects = True  # JAX's OmpiCluster reads the same ranks

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        return bool(nonblank(env, RANK) and nonblank(env, SIZE))

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _mpirun(cluster, env)

    def at_run_time(self, cluster: ClusterSettings,
                    env: Mapping[str, str]) -> tuple[list[dict[str, str]], str]:  # fmt: skip
        """mpirun's variables exist only in a running rank: a job of every task on one node."""
        if nonblank(env, RANK) is not None:
            return [dict(env)], ""
        size = str(sum(dict(cluster.tasks or ()).values()) or 1)
        ranks = {RANK: "0", SIZE: size, LOCAL_RANK: "0", LOCAL_SIZE: size, NAMESPACE: "1"}
        return [{**env, **ranks}], (f"mpirun's variables come at run time: checked as a job "
                                    f"of {size} rank(s) on one node")  # fmt: skip


def _number(env: Mapping[str, str], name: str, problems: list[Problem], least: int) -> int:
    raw = nonblank(env, name)
    number = None if raw is None else digits(raw)
    if raw is None:
        problems.append(Problem(name, None, "is required under DISTRIBUTED=mpirun (set by mpirun)"))
    elif number is None or number < least:
        problems.append(Problem(name, raw, f"expected an integer from {least}"))
    return least if number is None else number


def _mpirun(cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    problems: list[Problem] = []
    rank, size = _number(env, RANK, problems, 0), _number(env, SIZE, problems, 1)
    local, on_node = _number(env, LOCAL_RANK, problems, 0), _number(env, LOCAL_SIZE, problems, 1)
    if not problems and rank >= size:
        problems.append(Problem(RANK, env[RANK], f"the job has {size} rank(s), 0 to {size - 1}"))
    if problems:
        raise ConfigError(problems)
    count_tasks(cluster, size, f"mpirun started {size} ({SIZE}={size})")
    base, drawn = (cluster.port, "") if cluster.port else _drawn(env)
    if "DIST_HOSTS" in cluster.given:
        placed = _placed(_listed(cluster, size, base), base)
        where = cluster.source("DIST_HOSTS")
    elif on_node == size:
        placed = [f"{LOOPBACK}:{base + r}" for r in range(size)]
        where = f"every rank on this node ({LOCAL_SIZE}={on_node} of {SIZE}={size})"
    else:
        raise ConfigError(
            Problem(
                "DIST_HOSTS",
                None,
                f"is required where mpirun's {size} ranks span nodes ({LOCAL_SIZE}={on_node}): "
                "mpirun tells no rank where the others run",
                "set DIST_HOSTS to each rank's host in rank order, as mpirun's host file "
                "places them, such as worker=node0,node0,node1,node1",
            )
        )
    check_ports(cluster, base, on_node)
    _check_local(World(rank, tuple(placed)), local, on_node, where)
    job = by_rank(cluster, placed, rank, f"mpirun's rank ({RANK}={rank})")
    port = cluster.source("DIST_PORT") if cluster.port else drawn
    sources = {
        "type": f"{RANK}={rank}",
        "index": f"{RANK}={rank}",
        "tasks": cluster.source("DIST_TASKS") if cluster.tasks else SIZE,
        "hosts": where,
        "port": f"{port} + local rank {local}",
    }
    return Identity("mpirun", job, build=True, sources=sources)


def _drawn(env: Mapping[str, str]) -> tuple[int, str]:
    """The base port drawn from the job's PMIx namespace (no namespace: the first block)."""
    namespace = env.get(NAMESPACE, "").strip()
    base = drawn_port(zlib.crc32(namespace.encode()))
    return base, f"{base}, drawn from the job ({NAMESPACE}={namespace or 'unset'})"


def _listed(cluster: ClusterSettings, size: int, base: int) -> list[str]:
    """Every rank's host (or ``host:port``) from ``DIST_HOSTS``, types in rank order; a
    template's hosts, one rank each, at the base port."""
    hosts = cluster.hosts or {}
    counts = dict(cluster.tasks or (("worker", size),))
    problems = [f"DIST_HOSTS names {kind} hosts but no {kind} task runs" for kind in hosts
                if kind not in counts]  # fmt: skip
    listed: list[str] = []
    for kind in (k for k in TASK_TYPES if k in counts):
        entry = hosts.get(kind)
        if entry is None:
            problems.append(f"DIST_HOSTS names no {kind} hosts, for {counts[kind]} {kind} rank(s)")
            continue
        names = entry.addresses(counts[kind], base) if entry.template else list(entry.explicit)
        if len(names) != counts[kind]:
            problems.append(f"DIST_HOSTS lists {len(names)} {kind} host(s), for "
                            f"{counts[kind]} {kind} rank(s)")  # fmt: skip
        listed += names
    if problems:
        raise ConfigError([Problem("DIST_HOSTS", cluster.given["DIST_HOSTS"][0], p)
                           for p in problems])  # fmt: skip
    return listed


def _placed(hosts: list[str], base: int) -> list[str]:
    """Each rank's address: its own ``host:port``, else its host at the base port plus its
    place among the ranks on that host."""
    seen: dict[str, int] = {}
    placed = []
    for host in hosts:
        if check_address(host) is None:  # a host:port of its own
            placed.append(host)
            continue
        local = seen[host.lower()] = seen.get(host.lower(), -1) + 1
        placed.append(f"{host}:{base + local}")
    return placed


def _check_local(world: World, local: int, on_node: int, where: str) -> None:
    """The local rank and size mpirun gave must be the ones the hosts give."""
    found = (world.local_rank, world.local_size)
    if found == (local, on_node):
        return
    raise ConfigError(
        Problem(
            LOCAL_RANK,
            str(local),
            f"rank {world.rank} is local rank {found[0]} of {found[1]} on its host by {where}, "
            f"and mpirun gave local rank {local} of {on_node} ({LOCAL_SIZE}={on_node})",
            "list the hosts in DIST_HOSTS as mpirun places the ranks (its --map-by), "
            "one entry per rank",
        )
    )
