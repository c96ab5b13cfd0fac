"""Who this task is and who its peers are: one engine per launcher, each a file here.

An engine (a subclass of ``Engine`` in its own module of this package, found by listing
the package: adding a launcher is adding its file) says whether its job is ``present`` in
a process's environment and ``build``s this task's job from its launcher's variables: a
framework-neutral ``Cluster`` (every task's address by type, this task's type and index),
which each framework's writer turns into its own values (``TF_CONFIG``, ``MASTER_ADDR``
and ``RANK``, JAX's coordinator). Each engine's file is a mode of ``DISTRIBUTED``;
``auto`` tries a ``TF_CONFIG`` someone else set first (``FoundTfConfig``, here), then the
engines by their ``order``. An engine also answers what the rest of tfboot would otherwise
ask by its name: its launcher's run for the usage report (a row of ``cluster.RUNS``, which
the report reads without loading the engines), whether JAX's own detection finds the same
job, where a process of its job is no task, and what ``tfboot check`` puts in
place of the variables its launcher sets only at run time.

A child of a task is no task. The process that takes a place in the cluster records its
pid in ``TFBOOT_TASK`` (``TASK``), which every process it starts inherits:
``torch.multiprocessing.spawn``'s ranks, ``multiprocessing`` children (fork, spawn,
forkserver), DataLoader workers, subprocesses. A process that finds another pid there is
a child: it gets the node's budget and no place of its own (nothing set, nothing checked,
nothing refused), and the task's values stay in its environment as inherited. ``exec``
keeps the pid, so a task that execs is still the task. torchrun's agent records none: its
workers are the ranks.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import ConfigError, Problem
from ...provenance import TFBOOT, writer
from ...values import nonblank
from .. import TASK_TYPES, Run
from ..tfconfig import VARIABLE, check, to_json, validate
from ..variables import ClusterSettings
from ..world import Cluster

TASK = "TFBOOT_TASK"  # the pid of the process holding this task's place in the cluster
# Ports an engine draws for a job when DIST_PORT is not set: a block of PORT_BLOCK per job,
# below Linux's ephemeral ports (32768 on), where outgoing connections would take them.
PORTS, PORT_BLOCK = (10000, 32768), 16
PORT_SLOTS = 1423  # (32768 - 10000) // 16, a prime: jobs apart by less share no block


@dataclass(frozen=True)
class Identity:
    """The checked job, whether tfboot builds it or found it, and why."""

    engine: str  # an engine's name, tf_config, single (no cluster: nothing set), or child
    cluster: Cluster | None = None
    build: bool = False  # True: tfboot builds the job (TensorFlow's writer sets TF_CONFIG)
    # what -> where it came from: "type", "index", "tasks", "hosts", "port"
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> Engine | None:
        """The engine that found this task's job (None: no job, or a child)."""
        return BY_NAME.get(self.engine)


class Engine:
    """One launcher's view of a task: ``present``, ``build``, and what is asked of it."""

    name = ""
    order = 50  # DISTRIBUTED=auto tries the engines present in this order, lowest first
    run: Run | None = None  # its launcher's run for the usage report, a row of cluster.RUNS
    jax_detects = False  # JAX's own cluster detection finds the same job: left on
    fix_types = "give DIST_TASKS only chief and worker tasks (such as worker=4)"

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def identify(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        """This task under the engine: no task where ``outside`` says why, else ``build``."""
        why = self.outside(env)
        return Identity("single", sources={"single": why}) if why else built(self, cluster, env)

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        """The identity from the engine's own variables, the job built from them."""
        raise NotImplementedError

    def outside(self, env: Mapping[str, str]) -> str | None:
        """Why a process of this engine's job is no task of it (None: it is one)."""
        return None

    def shm_fix(self, mib: int, env: Mapping[str, str]) -> str | None:
        """How to give ``/dev/shm`` ``mib`` MiB where this process runs under the engine's
        launcher, whatever ``DISTRIBUTED`` says (None: not under it, or nothing of its own)."""
        return None

    def given(self, cluster: ClusterSettings, mode: str) -> tuple[str, str]:
        """The variable and value that set the task types, for a refusal."""
        if "DIST_TASKS" in cluster.given:
            return "DIST_TASKS", cluster.given["DIST_TASKS"][0]
        return "DISTRIBUTED", mode

    def at_run_time(self, cluster: ClusterSettings,
                    env: Mapping[str, str]) -> tuple[list[dict[str, str]], str]:  # fmt: skip
        """The environments ``tfboot check`` judges in place of a running task's, where the
        launcher sets its variables only at run time, and what was left to run time."""
        return [dict(env)], ""


class FoundTfConfig(Engine):
    """A ``TF_CONFIG`` someone else set (TFJob, a launcher): checked, never rebuilt."""

    name = "tf_config"
    order = 0
    fix_types = f"give {VARIABLE} only chief and worker tasks"

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        return nonblank(env, VARIABLE) is not None

    def identify(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        found = check(env[VARIABLE])
        return Identity(self.name, found, sources=dict.fromkeys(("type", "index", "hosts"),
                                                                 VARIABLE))  # fmt: skip

    def given(self, cluster: ClusterSettings, mode: str) -> tuple[str, str]:
        if "DIST_TASKS" in cluster.given:
            return super().given(cluster, mode)
        return VARIABLE, "(set)"


def built(engine: Engine, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    """The job ``engine`` builds; a ``TF_CONFIG`` already set is accepted only if it is the same.

    A child process (a subprocess, a multiprocessing worker) inherits the parent's
    ``DISTRIBUTED`` and the ``TF_CONFIG`` tfboot set there: the same, so nothing is overridden.
    """
    mode = engine.name
    found = nonblank(env, VARIABLE)
    try:
        identity = engine.build(cluster, env)
        if found is None:
            return identity
        same = check(found) == identity.cluster
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
    return Identity(mode, identity.cluster, build=False, sources=sources)


def checked(addresses: dict[str, list[str]], kind: str, index: int) -> Cluster:
    """Check the job an engine built with the same rules as a ``TF_CONFIG`` tfboot finds."""
    job = Cluster(addresses, kind, index)
    validate(job, to_json(job), "TF_CONFIG built from DIST_*")
    return job


def require(cluster: ClusterSettings, name: str, why: str) -> Problem | None:
    return None if name in cluster.given else Problem(name, None, f"is required {why}")


def count_tasks(cluster: ClusterSettings, total: int, has: str) -> None:
    """``DIST_TASKS``, where given, must count the ``total`` tasks the launcher started
    (``has``: what the launcher says, for the message)."""
    counted = sum(c for _, c in cluster.tasks or ())
    if cluster.tasks and counted != total:
        raise ConfigError(
            Problem(
                "DIST_TASKS",
                cluster.given["DIST_TASKS"][0],
                f"it counts {counted} task(s), but {has}",
            )
        )


def by_rank(cluster: ClusterSettings, placed: list[str], rank: int, who: str) -> Cluster:
    """The job of a launcher that numbers its tasks: ``placed`` holds every rank's address,
    and the ranks fill the types of ``DIST_TASKS`` (default: every rank a worker) in the
    order chief, worker, ps, evaluator. ``DIST_TASK_TYPE`` and ``DIST_TASK_INDEX``, where
    given, must be what the rank makes this task (``who``: the launcher's rank, named)."""
    counts = dict(cluster.tasks or (("worker", len(placed)),))
    order = [kind for kind in TASK_TYPES if kind in counts]
    roles = [(kind, i) for kind in order for i in range(counts[kind])]
    addresses: dict[str, list[str]] = {kind: [] for kind in order}
    for (kind, _), address in zip(roles, placed, strict=False):
        addresses[kind].append(address)
    kind, index = roles[rank]
    problems = [
        Problem(name, cluster.given[name][0], f"{who} makes this task {kind}:{index}")
        for name, value, derived in (
            ("DIST_TASK_TYPE", cluster.task_type, kind),
            ("DIST_TASK_INDEX", cluster.task_index, index),
        )
        if value is not None and value != derived
    ]
    if problems:
        raise ConfigError(problems)
    return checked(addresses, kind, index)


def check_ports(cluster: ClusterSettings, base: int, per_node: int) -> None:
    """Tasks sharing a node take ports ``base`` to ``base + per_node - 1``: all must exist."""
    if base + per_node - 1 <= 65535:
        return
    raise ConfigError(
        Problem(
            "DIST_PORT",
            cluster.given["DIST_PORT"][0] if "DIST_PORT" in cluster.given else str(base),
            f"a node runs {per_node} tasks of this job, which take ports {base} to "
            f"{base + per_node - 1}: expected a port from 1 to {65536 - per_node}",
            verdict="cannot be met on this step",
        )
    )


def drawn_port(number: int) -> int:
    """The base port of the job numbered ``number``: block ``number mod 1423`` of ``PORTS``,
    so that jobs whose tasks share a node take different ports."""
    return PORTS[0] + number % PORT_SLOTS * PORT_BLOCK


def task_of(env: Mapping[str, str], pid: int) -> str | None:
    """The pid of the task whose child process ``pid`` is (``TASK``), or None: no child."""
    found = env.get(TASK) if writer(env, TASK) == TFBOOT else None
    return found if found is not None and found != str(pid) else None


def detect(mode: str, cluster: ClusterSettings, env: Mapping[str, str]) -> str:
    """The engine for ``DISTRIBUTED=mode``: the one it names, else the first present under
    ``auto``, else single (no cluster)."""
    if mode in BY_NAME:
        return mode
    return next((e.name for e in ENGINES if e.present(cluster, env)), "single")


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


def shm_fix(mib: int, env: Mapping[str, str]) -> str | None:
    """How to give ``/dev/shm`` ``mib`` MiB under the launcher this process runs under, the
    outermost first (a Pod may hold a Slurm node, not the reverse); None: under none."""
    return next((f for e in reversed(ENGINES) if (f := e.shm_fix(mib, env))), None)


def _discovered() -> tuple[Engine, ...]:
    """``FoundTfConfig``, then one instance of each engine module's ``Engine`` subclasses."""
    found: list[Engine] = [FoundTfConfig()]
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [kind() for kind in vars(module).values()
                  if isinstance(kind, type) and issubclass(kind, Engine)
                  and kind.__module__ == module.__name__]  # fmt: skip
    return tuple(sorted(found, key=lambda engine: engine.order))


ENGINES: tuple[Engine, ...] = _discovered()
BY_NAME = {engine.name: engine for engine in ENGINES}
