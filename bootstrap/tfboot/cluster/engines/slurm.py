"""Slurm: a task of a step that ``srun`` started.

The hosts are ``SLURM_STEP_NODELIST`` in Slurm's order and the ranks follow the step's
distribution over ``SLURM_STEP_TASKS_PER_NODE``: block (the default), or cyclic and plane
as ``SLURM_DISTRIBUTION`` says (every rank sees it, so every rank builds the same cluster,
or refuses it alike). Ranks fill the types of ``DIST_TASKS`` (default: every rank a
worker) in the order chief, worker, ps, evaluator. A task's port is ``DIST_PORT`` plus its
rank on its node, so tasks sharing a node differ. Without ``DIST_PORT`` the base is drawn
from the job and the step (``slurm_port``), as JAX's own Slurm detection draws its port
from the job id: two jobs, or two steps, whose tasks share a node take different ports,
and every rank of a step computes the same. The batch script or allocation shell of a job
(no ``SLURM_STEP_NODELIST``) is no task: single node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ConfigError, Problem
from ...node.shm import PATH, docker_flag
from ...values import digits, nonblank
from .. import SLURM_RUN
from ..hostlist import DISTRIBUTIONS, Distribution, expand_counts, expand_hosts
from ..variables import ClusterSettings
from . import PORT_BLOCK, Engine, Identity, by_rank, check_ports, count_tasks, drawn_port


class Slurm(Engine):
    """A task of a Slurm step (``srun``): the step's hosts and distribution, its rank."""

    name = "slurm"
    order = 20
    run = SLURM_RUN  # a Slurm step's tasks (task 0 leads)
    jax_detects = True  # JAX's SlurmCluster reads the same step

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        return bool(nonblank(env, "SLURM_PROCID") and nonblank(env, "SLURM_STEP_NODELIST"))

    def outside(self, env: Mapping[str, str]) -> str | None:
        """A Slurm job's batch script or ``salloc`` shell: a job, but no step (no srun)."""
        if nonblank(env, "SLURM_JOB_ID") is None or nonblank(env, "SLURM_STEP_NODELIST"):
            return None
        return f"the batch script or allocation of Slurm job {env['SLURM_JOB_ID']}, outside srun"

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _slurm(cluster, env)

    def shm_fix(self, mib: int, env: Mapping[str, str]) -> str | None:
        if not env.get("SLURM_JOB_ID"):
            return None
        return (f"{PATH} is the node's on Slurm, shared by every job there: ask for a node "
                f"whose {PATH} has {mib} MiB free, or run the step in a container with "
                f"{docker_flag(mib)}")  # fmt: skip

    def at_run_time(self, cluster: ClusterSettings,
                    env: Mapping[str, str]) -> tuple[list[dict[str, str]], str]:  # fmt: skip
        """srun's variables exist only in a running task: a step of one node with every task."""
        if nonblank(env, "SLURM_PROCID") is not None:
            return [dict(env)], ""
        size = str(sum(dict(cluster.tasks or ()).values()) or 1)
        step = {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                "SLURM_NTASKS": size, "SLURM_STEP_NODELIST": "node0",
                "SLURM_STEP_TASKS_PER_NODE": size, "SLURMD_NODENAME": "node0"}  # fmt: skip
        return [{**env, **step}], (f"srun's variables come at run time: checked as a step of "
                                   f"{size} task(s) on one node")  # fmt: skip


def _slurm_int(env: Mapping[str, str], name: str, problems: list[Problem]) -> int | None:
    raw = nonblank(env, name)
    number = None if raw is None else digits(raw)
    if raw is None:
        problems.append(Problem(name, None, "is required under DISTRIBUTED=slurm (set by srun)"))
    elif number is None:
        problems.append(Problem(name, raw, "expected an integer from 0"))
    return number


def _listed(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


ACCEPTED = _listed(
    [d.name + (" (the default)" if not i else "") for i, d in enumerate(DISTRIBUTIONS)]
)
FIX = _listed([d.srun + (" (the default)" if not i else "") for i, d in enumerate(DISTRIBUTIONS)])


def _distribution(env: Mapping[str, str], problems: list[Problem]) -> tuple[Distribution, int]:
    """The step's node distribution from ``SLURM_DISTRIBUTION``, with its plane size.

    Only the first level counts (``cyclic:block`` places tasks on nodes cyclically); a
    ``,Pack`` or ``,NoPack`` option changes nothing once the counts per node are known.
    """
    default = DISTRIBUTIONS[0]
    raw = nonblank(env, "SLURM_DISTRIBUTION")
    if raw is None:
        return default, 0
    level = raw.split(":")[0].split(",")[0].strip().lower()
    found = next((d for d in DISTRIBUTIONS if d.names(level)), None)
    if found is not None and not found.needs_plane:
        return found, 0
    if found is not None:
        given = nonblank(env, "SLURM_DIST_PLANESIZE")
        size = digits(given or "")
        if size:
            return found, size
        if given is not None:
            problems.append(
                Problem("SLURM_DIST_PLANESIZE", given, "expected a plane size of at least 1")
            )
            return default, 0
        why = f"{found.name} without SLURM_DIST_PLANESIZE"
    elif level == "arbitrary":
        why = "arbitrary places ranks from a host file tfboot does not see"
    else:
        why = "an unknown distribution"
    problems.append(
        Problem(
            "SLURM_DISTRIBUTION",
            raw,
            f"expected {ACCEPTED}: {why}",
            f"run srun with --distribution={FIX}",
        )
    )
    return default, 0


def _slurm_layout(
    env: Mapping[str, str], problems: list[Problem], distribution: tuple[Distribution, int]
) -> list[tuple[str, int]]:
    layout: list[tuple[str, int]] = []
    names = ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
    raw = {n: nonblank(env, n) for n in names}
    missing = [
        Problem(n, None, "is required under DISTRIBUTED=slurm") for n, v in raw.items() if v is None
    ]
    if missing:
        problems += missing
        return layout
    try:
        hosts = expand_hosts(raw["SLURM_STEP_NODELIST"] or "")
        counts = expand_counts(raw["SLURM_STEP_TASKS_PER_NODE"] or "")
    except ConfigError as exc:
        problems += exc.problems
        return layout
    if len(hosts) != len(counts):
        problems.append(
            Problem(
                "SLURM_STEP_TASKS_PER_NODE",
                raw["SLURM_STEP_TASKS_PER_NODE"],
                f"it counts {len(counts)} node(s), SLURM_STEP_NODELIST names {len(hosts)}",
            )
        )
        return layout
    placed, plane = distribution
    return placed.layout(hosts, counts, plane)


def _slurm(cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    problems: list[Problem] = []
    if "DIST_HOSTS" in cluster.given:
        problems.append(
            Problem(
                "DIST_HOSTS",
                cluster.given["DIST_HOSTS"][0],
                "is not used under DISTRIBUTED=slurm: the hosts come from SLURM_STEP_NODELIST",
                "unset DIST_HOSTS",
            )
        )
    rank = _slurm_int(env, "SLURM_PROCID", problems)
    placed = _distribution(env, problems)
    layout = _slurm_layout(env, problems, placed)
    distribution = placed[0].name
    if problems or rank is None:
        raise ConfigError(problems)
    total = len(layout)
    count_tasks(cluster, total, f"the Slurm step has {total} "
                f"(SLURM_STEP_TASKS_PER_NODE={env['SLURM_STEP_TASKS_PER_NODE']})")  # fmt: skip
    if rank >= total:
        raise ConfigError(
            Problem(
                "SLURM_PROCID",
                env["SLURM_PROCID"],
                f"the step has {total} task(s), ranks 0 to {total - 1}",
            )
        )
    _check_node(env, layout, rank, distribution)
    base, drawn = (cluster.port, "") if cluster.port else slurm_port(env)
    check_ports(cluster, base, max(local for _, local in layout) + 1)
    job = by_rank(cluster, [f"{host}:{base + local}" for host, local in layout], rank,
                  "the Slurm rank")  # fmt: skip
    port_source = cluster.source("DIST_PORT") if cluster.port else drawn
    sources = {
        "type": f"SLURM_PROCID={rank}",
        "index": f"SLURM_PROCID={rank}",
        "tasks": cluster.source("DIST_TASKS") if cluster.tasks else "SLURM_STEP_TASKS_PER_NODE",
        "hosts": "SLURM_STEP_NODELIST",
        "port": f"{port_source} + rank on node {layout[rank][1]}",
        "distribution": distribution,
    }
    return Identity("slurm", job, build=True, sources=sources)


def slurm_port(env: Mapping[str, str]) -> tuple[int, str]:
    """The default base port of a Slurm step, and how it was drawn: block ``(job x 16 +
    step) mod 1423`` of ``PORTS``, so consecutive jobs are 256 ports apart and the
    steps of one job 16; a node with more tasks of one step than ``PORT_BLOCK`` reaches
    into the next block (set ``DIST_PORT`` there)."""
    job = digits(env.get("SLURM_JOB_ID", "")) or 0
    step = digits(env.get("SLURM_STEP_ID", "")) or 0
    base = drawn_port(job * PORT_BLOCK + step)
    return base, f"{base}, drawn from Slurm job {job} step {step} (DIST_PORT not set)"


def _check_node(
    env: Mapping[str, str], layout: list[tuple[str, int]], rank: int, distribution: str
) -> None:
    """The node and local rank Slurm gave this task must be the ones the layout says."""
    host, local = layout[rank]
    how = (
        f"SLURM_DISTRIBUTION={env['SLURM_DISTRIBUTION']}"
        if distribution != "block"
        else ("no SLURM_DISTRIBUTION")
    )
    hint = "the node names differ from SLURM_STEP_NODELIST's, or srun placed the ranks " + (
        f"otherwise than {distribution} distribution ({how})"
    )
    node = nonblank(env, "SLURMD_NODENAME")
    if node is not None and node.strip() != host:
        raise ConfigError(
            Problem(
                "SLURMD_NODENAME",
                node,
                f"rank {rank} runs here, but {distribution} distribution over "
                f"SLURM_STEP_NODELIST puts it on {host}",
                hint,
            )
        )
    local_id = nonblank(env, "SLURM_LOCALID")
    if local_id is not None and local_id.strip() != str(local):
        raise ConfigError(
            Problem(
                "SLURM_LOCALID",
                local_id,
                f"{distribution} distribution gives rank {rank} local rank {local} on {host}",
                hint,
            )
        )
