"""Who this task is and who its peers are, per engine: an existing ``TF_CONFIG``, Kubernetes
(Indexed Job, JobSet) or Slurm. ``auto`` picks the engine from the environment.

Kubernetes: the cluster's shape is ``DIST_TASKS``, the addresses ``DIST_HOSTS`` (port
``DIST_PORT``, default 2222 as TFJob), the task ``DIST_TASK_TYPE`` (default ``worker``;
under a JobSet, the Downward-API label ``jobset.sigs.k8s.io/replicatedjob-name``) and
``DIST_TASK_INDEX`` (default ``JOB_COMPLETION_INDEX``).

Slurm: the hosts are ``SLURM_STEP_NODELIST`` in Slurm's order and the ranks follow the
step's distribution over ``SLURM_STEP_TASKS_PER_NODE``: block (the default), or cyclic and
plane as ``SLURM_DISTRIBUTION`` says (every rank sees it, so every rank builds the same
cluster, or refuses it alike). Ranks fill the types of ``DIST_TASKS`` (default: every
rank a worker) in the order chief, worker, ps, evaluator. A task's port is ``DIST_PORT``
plus its rank on its node, so tasks sharing a node differ. Without ``DIST_PORT`` the base
is drawn from the job and the step (``slurm_port``), as JAX's own Slurm detection draws
its port from the job id: two jobs, or two steps, whose tasks share a node take different
ports, and every rank of a step computes the same. The batch script
or allocation shell of a job (no ``SLURM_STEP_NODELIST``) is no task: single node.

A child of a task is no task either. The process that takes a place in the cluster
records its pid in ``TFBOOT_TASK`` (``TASK``), which every process it starts inherits:
``torch.multiprocessing.spawn``'s ranks, ``multiprocessing`` children (fork, spawn,
forkserver), DataLoader workers, subprocesses. A process that finds another pid there is
a child: it gets the node's budget and no place of its own (nothing set, nothing checked,
nothing refused), and the task's values stay in its environment as inherited. ``exec``
keeps the pid, so a task that execs is still the task. torchrun's agent records none: its
workers are the ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError, Problem
from ..provenance import TFBOOT, writer
from ..values import digits, nonblank
from . import TASK_TYPES
from .hostlist import DISTRIBUTIONS, Distribution, expand_counts, expand_hosts
from .tfconfig import VARIABLE, TfConfig, check
from .variables import ClusterSettings

K8S_PORT = 2222
# Slurm's default ports: a block of SLURM_BLOCK per job step, below Linux's ephemeral ports
# (32768 on), where outgoing connections would take them
SLURM_PORTS, SLURM_BLOCK = (10000, 32768), 16
SLURM_SLOTS = 1423  # (32768 - 10000) // 16, a prime: jobs apart by less share no block
TASK = "TFBOOT_TASK"  # the pid of the process holding this task's place in the cluster


@dataclass(frozen=True)
class Identity:
    """The checked cluster, whether tfboot builds ``TF_CONFIG`` or found it, and why."""

    engine: str  # k8s, slurm, tf_config, single (no cluster: nothing set), or child (of a task)
    config: TfConfig | None = None
    build: bool = False  # True: tfboot sets TF_CONFIG
    # what -> where it came from: "type", "index", "tasks", "hosts", "port"
    sources: dict[str, str] = field(default_factory=dict)


class Engine:
    """One engine: whether it is ``present`` in a process's environment (``DISTRIBUTED=auto``
    tries each in ``ENGINES``' order) and who this task is under it (``identify``). An
    engine that builds ``TF_CONFIG`` from its own variables (``build``) is also a mode of
    ``DISTRIBUTED``; adding one is a class here and its row in ``ENGINES``."""

    name = ""

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def identify(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _built(self, cluster, env)

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        """The identity from the engine's own variables, ``TF_CONFIG`` built from it."""
        raise NotImplementedError


class FoundTfConfig(Engine):
    """A ``TF_CONFIG`` someone else set (TFJob, a launcher): checked, never rebuilt."""

    name = "tf_config"

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        return nonblank(env, VARIABLE) is not None

    def identify(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        config = check(env[VARIABLE])
        return Identity(self.name, config, sources=dict.fromkeys(("type", "index", "hosts"),
                                                                  VARIABLE))  # fmt: skip


class Slurm(Engine):
    """A task of a Slurm step (``srun``): the step's hosts and distribution, its rank."""

    name = "slurm"

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        return bool(nonblank(env, "SLURM_PROCID") and nonblank(env, "SLURM_STEP_NODELIST"))

    def identify(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        if outside_step(env):
            why = f"the batch script or allocation of Slurm job {env['SLURM_JOB_ID']}, outside srun"
            return Identity("single", sources={"single": why})
        return _built(self, cluster, env)

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _slurm(cluster, env)


class Kubernetes(Engine):
    """A Pod of an Indexed Job or a JobSet: ``DIST_*`` and its completion index."""

    name = "k8s"

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        index = nonblank(env, "JOB_COMPLETION_INDEX") or "DIST_TASK_INDEX" in cluster.given
        return bool(index and "DIST_HOSTS" in cluster.given)

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _k8s(cluster, env)


# The order DISTRIBUTED=auto tries them: a TF_CONFIG given wins, then srun's, then a Pod's.
ENGINES: tuple[Engine, ...] = (FoundTfConfig(), Slurm(), Kubernetes())
BY_NAME = {engine.name: engine for engine in ENGINES}


def detect(mode: str, cluster: ClusterSettings, env: Mapping[str, str]) -> str:
    """The engine for ``DISTRIBUTED=mode``: the one it names, else the first present under
    ``auto``, else single (no cluster)."""
    if mode in BY_NAME:
        return mode
    return next((e.name for e in ENGINES if e.present(cluster, env)), "single")


def task_of(env: Mapping[str, str], pid: int) -> str | None:
    """The pid of the task whose child process ``pid`` is (``TASK``), or None: no child."""
    found = env.get(TASK) if writer(env, TASK) == TFBOOT else None
    return found if found is not None and found != str(pid) else None


def identify(mode: str, cluster: ClusterSettings, env: Mapping[str, str],
             pid: int | None = None) -> Identity:  # fmt: skip
    """The engine's view of this task (``pid``: this process, which may be a task's child);
    every problem in one ``ConfigError``."""
    task = None if pid is None else task_of(env, pid)
    if task is not None:
        why = f"a child (pid {pid}) of the task's process (pid {task}), which holds its place"
        return Identity("child", sources={"single": why})
    engine = BY_NAME.get(detect(mode, cluster, env))
    return Identity("single") if engine is None else engine.identify(cluster, env)


def outside_step(env: Mapping[str, str]) -> bool:
    """A Slurm job's batch script or ``salloc`` shell: a job, but no step (no srun)."""
    return (
        nonblank(env, "SLURM_JOB_ID") is not None and nonblank(env, "SLURM_STEP_NODELIST") is None
    )


def _built(engine: Engine, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    """The ``TF_CONFIG`` ``engine`` builds; one already set is accepted only if it is the same.

    A child process (a subprocess, a multiprocessing worker) inherits the parent's
    ``DISTRIBUTED`` and the ``TF_CONFIG`` tfboot set there: the same, so nothing is overridden.
    """
    mode = engine.name
    found = nonblank(env, VARIABLE)
    try:
        identity = engine.build(cluster, env)
        if found is None:
            return identity
        same = check(found) == identity.config
    except ConfigError:
        if found is None:
            raise
        same = False
    if not same:
        raise ConfigError(
            Problem(
                "DISTRIBUTED",
                mode,
                f"{VARIABLE} is already set, to another cluster than the one DISTRIBUTED={mode} "
                "builds here, and tfboot never overrides it silently",
                f"unset {VARIABLE} to let tfboot build it, or use DISTRIBUTED=auto to only "
                "check the one given",
            )
        )
    sources = {**identity.sources, "tf_config": "inherited"}
    return Identity(mode, identity.config, build=False, sources=sources)


def _require(cluster: ClusterSettings, name: str, why: str) -> Problem | None:
    return None if name in cluster.given else Problem(name, None, f"is required {why}")


def _k8s(cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    why = "under DISTRIBUTED=k8s: the same value in every Pod"
    problems = [p for p in (_require(cluster, n, why) for n in ("DIST_TASKS", "DIST_HOSTS")) if p]
    sources = {
        "type": cluster.source("DIST_TASK_TYPE") if cluster.task_type else "default",
        "port": cluster.source("DIST_PORT") if cluster.port else f"default {K8S_PORT} (k8s)",
    }
    index = cluster.task_index
    if index is not None:
        sources["index"] = cluster.source("DIST_TASK_INDEX")
    else:
        raw = nonblank(env, "JOB_COMPLETION_INDEX")
        index = None if raw is None else digits(raw)
        if raw is None:
            problems.append(
                Problem(
                    "DIST_TASK_INDEX",
                    None,
                    "is required under DISTRIBUTED=k8s when JOB_COMPLETION_INDEX is not set",
                    "run an Indexed Job (completionMode: Indexed), or set DIST_TASK_INDEX",
                )
            )
        elif index is None:
            problems.append(Problem("JOB_COMPLETION_INDEX", raw, "expected an integer from 0"))
        else:
            sources["index"] = f"JOB_COMPLETION_INDEX={raw.strip()}"
    if problems:
        raise ConfigError(problems)
    assert cluster.tasks is not None and cluster.hosts is not None and index is not None
    addresses = _k8s_addresses(cluster, cluster.port or K8S_PORT)
    sources["tasks"] = cluster.source("DIST_TASKS")
    sources["hosts"] = cluster.source("DIST_HOSTS")
    kind = cluster.task_type or "worker"
    count = dict(cluster.tasks).get(kind)
    if count is not None and index >= count:
        name = "DIST_TASK_INDEX" if cluster.task_index is not None else "JOB_COMPLETION_INDEX"
        raw = cluster.given[name][0] if name in cluster.given else nonblank(env, name)
        raise ConfigError(
            Problem(
                name,
                raw,
                f"expected a {kind} index from 0 to {count - 1}: "
                f"DIST_TASKS has {count} {kind} task(s)",
                f"DIST_TASKS must count every {kind} task (under an Indexed Job: its completions)",
            )
        )
    config = _checked(addresses, kind, index)
    if config.address and not config.address.endswith(f":{cluster.port or K8S_PORT}"):
        sources["port"] = "explicit in DIST_HOSTS"
    return Identity("k8s", config, build=True, sources=sources)


def _k8s_addresses(cluster: ClusterSettings, port: int) -> dict[str, list[str]]:
    assert cluster.tasks is not None and cluster.hosts is not None
    tasks, hosts = dict(cluster.tasks), cluster.hosts
    problems = []
    for kind in TASK_TYPES:
        if kind in tasks and kind not in hosts:
            problems.append(f"DIST_TASKS has {kind}={tasks[kind]} but DIST_HOSTS names no {kind}")
        elif kind in hosts and kind not in tasks:
            problems.append(f"DIST_HOSTS names {kind} hosts but DIST_TASKS has no {kind}")
        elif kind in hosts and hosts[kind].template is None:
            listed = len(hosts[kind].explicit)
            if listed != tasks[kind]:
                problems.append(
                    f"DIST_HOSTS lists {listed} {kind} host(s), DIST_TASKS counts {tasks[kind]}"
                )
    if problems:
        raise ConfigError(
            [Problem("DIST_HOSTS", cluster.given["DIST_HOSTS"][0], p) for p in problems]
        )
    return {kind: hosts[kind].addresses(tasks[kind], port) for kind in TASK_TYPES if kind in tasks}


def _checked(addresses: dict[str, list[str]], kind: str, index: int) -> TfConfig:
    """Check what tfboot built with the same rules as a ``TF_CONFIG`` it finds."""
    built = TfConfig(addresses, kind, index)
    return check(built.to_json(), "TF_CONFIG built from DIST_*")


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
    tasks = cluster.tasks or (("worker", total),)
    counted = sum(c for _, c in tasks)
    if counted != total:
        raise ConfigError(
            Problem(
                "DIST_TASKS",
                cluster.given["DIST_TASKS"][0],
                f"it counts {counted} task(s), but the Slurm step has {total} "
                f"(SLURM_STEP_TASKS_PER_NODE={env['SLURM_STEP_TASKS_PER_NODE']})",
            )
        )
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
    _check_ports(cluster, base, max(local for _, local in layout) + 1)
    counts = dict(tasks)
    order = [kind for kind in TASK_TYPES if kind in counts]
    roles = [(kind, i) for kind in order for i in range(counts[kind])]
    addresses: dict[str, list[str]] = {kind: [] for kind in order}
    for (kind, _), (host, local) in zip(roles, layout, strict=False):
        addresses[kind].append(f"{host}:{base + local}")
    kind, index = roles[rank]
    _check_given(cluster, kind, index)
    port_source = cluster.source("DIST_PORT") if cluster.port else drawn
    sources = {
        "type": f"SLURM_PROCID={rank}",
        "index": f"SLURM_PROCID={rank}",
        "tasks": cluster.source("DIST_TASKS") if cluster.tasks else "SLURM_STEP_TASKS_PER_NODE",
        "hosts": "SLURM_STEP_NODELIST",
        "port": f"{port_source} + rank on node {layout[rank][1]}",
        "distribution": distribution,
    }
    return Identity("slurm", _checked(addresses, kind, index), build=True, sources=sources)


def slurm_port(env: Mapping[str, str]) -> tuple[int, str]:
    """The default base port of a Slurm step, and how it was drawn: block ``(job x 16 +
    step) mod 1423`` of ``SLURM_PORTS``, so consecutive jobs are 256 ports apart and the
    steps of one job 16; a node with more tasks of one step than ``SLURM_BLOCK`` reaches
    into the next block (set ``DIST_PORT`` there)."""
    job = digits(env.get("SLURM_JOB_ID", "")) or 0
    step = digits(env.get("SLURM_STEP_ID", "")) or 0
    base = SLURM_PORTS[0] + (job * SLURM_BLOCK + step) % SLURM_SLOTS * SLURM_BLOCK
    return base, f"{base}, drawn from Slurm job {job} step {step} (DIST_PORT not set)"


def _check_ports(cluster: ClusterSettings, base: int, per_node: int) -> None:
    """Tasks sharing a node take ports ``base`` to ``base + per_node - 1``: all must exist."""
    if base + per_node - 1 <= 65535:
        return
    raise ConfigError(
        Problem(
            "DIST_PORT",
            cluster.given["DIST_PORT"][0] if "DIST_PORT" in cluster.given else str(base),
            f"a node runs {per_node} tasks of this step, which take ports {base} to "
            f"{base + per_node - 1}: expected a port from 1 to {65536 - per_node}",
            verdict="cannot be met on this step",
        )
    )


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


def _check_given(cluster: ClusterSettings, kind: str, index: int) -> None:
    """DIST_TASK_TYPE/DIST_TASK_INDEX, if given under Slurm, must match the rank's."""
    problems = [
        Problem(name, cluster.given[name][0], f"the Slurm rank makes this task {kind}:{index}")
        for name, value, derived in (
            ("DIST_TASK_TYPE", cluster.task_type, kind),
            ("DIST_TASK_INDEX", cluster.task_index, index),
        )
        if value is not None and value != derived
    ]
    if problems:
        raise ConfigError(problems)
