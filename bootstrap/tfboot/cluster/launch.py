"""What PyTorch, JAX and Keras 3 get from the cluster: the values each reads to form a job.

- PyTorch: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and
  ``LOCAL_WORLD_SIZE``, what ``init_process_group()`` reads with ``env://`` (its default)
  and what scripts read for their device. A value a launcher already set is checked, never
  replaced. In ``torchrun`` itself (its agent, one per task), the options it reads from
  ``PET_*`` (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``,
  ``PET_NPROC_PER_NODE`` from ``DIST_REPLICAS_PER_WORKER``), as Kubeflow Trainer sets
  them: a plain ``torchrun --nproc-per-node=N train.py`` then joins the job. In its
  workers (``TORCHELASTIC_RUN_ID``), whose ranks its rendezvous placed, the counts are
  checked and nothing is set.
- PyTorch's start: ``DIST_STARTUP_TIMEOUT`` bounds ``init_process_group`` (``deadline``),
  never its ``timeout``, which bounds every collective too.
- JAX: the arguments ``jax.distributed.initialize()`` leaves unset (coordinator, process
  count and id, ``initialization_timeout`` from ``DIST_STARTUP_TIMEOUT``,
  ``heartbeat_timeout_seconds`` from ``DIST_TERM_GRACE``), filled by the executor's
  wrapper of that public function, which then checks ``DIST_REPLICAS_PER_WORKER`` against
  ``jax.local_device_count()``. JAX reads no process count or id from the
  environment; off Slurm, where JAX's own detection agrees, its detection is switched off
  (``cluster_detection_method="deactivate"``, JAX 0.4.36 on) so it looks for no
  ``kubernetes`` package and needs no RBAC. ``JAX_COORDINATOR_ADDRESS`` and Kubeflow
  Trainer's ``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID``, when set, must agree.
- Keras 3 (JAX backend): ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (rank 0's address, the one
  its JAX backend uses), ``_NUM_PROCESSES`` and ``_PROCESS_ID``, which
  ``keras.distribution.initialize()`` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, Problem
from ..provenance import user_value
from ..values import digits, quote
from . import TORCHRUN
from .engines import Engine, Identity
from .proxy import proxy_warning
from .variables import TERM_GRACE_S, ClusterSettings
from .world import RANKED, World

AGENT = "torchrun's agent"  # the launcher of a Launch made for torchrun itself
RDZV_CONF = "PET_RDZV_CONF"  # torchrun's --rdzv-conf
AGENT_MODULES = ("torch.distributed.run", "torch.distributed.launch")  # torchrun's, run by -m
# torchrun's options that take no value (torch.distributed.run's parser); the others take one
TORCHRUN_FLAGS = frozenset({"-h", "--help", "--standalone", "-m", "--module", "--no-python",
                            "--no_python", "--run-path", "--run_path", "--virtual-local-rank",
                            "--virtual_local_rank"})  # fmt: skip
STANDALONE = "torchrun --standalone"  # the launcher of a Launch for a standalone torchrun
VALUED = ("-X", "-W", "--check-hash-based-pycs")  # the interpreter's options that take a value
DEACTIVATE_FROM = (0, 4, 36)  # JAX's cluster_detection_method="deactivate"
HEARTBEAT_FROM = (0, 7, 0)  # jax.distributed.initialize's heartbeat_timeout_seconds
# What each framework cannot take from the contract, and why.
REFUSED = {
    "PyTorch": {
        "DIST_TERM_GRACE": "PyTorch ends on SIGTERM itself; the peer watcher and its grace "
        "are TensorFlow's, which ignores SIGTERM while it waits on its peers",
    },
}


@dataclass
class Launch:
    """What one framework gets: variables to set, arguments to fill, and the log line."""

    framework: str
    world: World | None  # the ranks (None: TensorFlow, whose tasks are named by type and index)
    environ: dict[str, str] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)  # jax.distributed.initialize's
    checked: list[str] = field(default_factory=list)  # a launcher's values that agree
    launcher: str = ""  # who formed the job when tfboot sets nothing ("torchrun")
    # DIST_REPLICAS_PER_WORKER, for JAX checked against its local devices once initialize ran
    replicas: tuple[str, int] | None = None
    # DIST_STARTUP_TIMEOUT for PyTorch's init_process_group: the seconds, and what is awaited
    deadline: tuple[int, str] | None = None
    warnings: list[str] = field(default_factory=list)
    local_replicas: int | None = None  # counted by the framework (TensorFlow's devices)
    text: str = ""  # the one log line, written by the writer

    def to_dict(self) -> dict[str, Any]:
        world = self.world
        return {
            "framework": self.framework,
            "rank": None if world is None else world.rank,
            "size": None if world is None else world.size,
            "local_rank": None if world is None else world.local_rank,
            "local_size": None if world is None else world.local_size,
            "coordinator": None if world is None else world.coordinator,
            "set": dict(self.environ),
            "arguments": dict(self.arguments),
            "checked": list(self.checked),
            "launcher": self.launcher or None,
        }


# A framework's writer, chosen by its adapter (``LAUNCH``): its values for a task of a
# cluster, their log line among them, from the identity, the DIST_* settings, the
# environment, the mode and the adapter's facts (PyTorch's: ``agent``; JAX's: ``visible``,
# ``version``; TensorFlow's: ``replicas``, ``cpu_split``).
Writer = Callable[[Identity, ClusterSettings, Mapping[str, str], str, Mapping[str, Any]], Launch]


def _given(identity: Identity, settings: ClusterSettings, mode: str) -> tuple[str, str]:
    """The variable that set the task types, and its value, for a refusal."""
    return (identity.source or Engine()).given(settings, mode)


def world_of(identity: Identity, framework: str, given: tuple[str, str]) -> World:
    """The ranks of ``identity``'s job (which has one) for ``framework``.

    ``given`` is the variable and value that set the task types, named by the refusal.
    """
    job = identity.cluster
    assert job is not None
    world = job.ranked()
    if world is not None:
        return world
    others = [kind for kind in job.cluster if kind not in RANKED]
    kinds = ", ".join(others or [str(job.task_type)])
    engine = identity.source
    raise ConfigError(
        Problem(
            given[0],
            given[1],
            f"{framework} numbers its processes 0 to N-1 and has no {kinds} tasks: "
            "parameter servers and evaluators are TensorFlow's",
            engine.fix_types if engine is not None else Engine.fix_types,
            verdict="cannot be met",
        )
    )


def _integer(text: str) -> object:
    number = digits(text)
    return text.strip() if number is None else number


def _host(text: str) -> object:
    return text.strip().strip("[]").lower()


def _first(text: str) -> object:
    return text.split(",")[0].strip().lower()


Meaning = Mapping[str, Callable[[str], object]]


def agree(
    env: Mapping[str, str], wanted: Mapping[str, str], why: str, meaning: Meaning
) -> tuple[dict[str, str], list[str]]:
    """The variables of ``wanted`` to set, and those a launcher set to the same meaning.

    A value set otherwise is a contradiction, which names both sides; ``why`` says where
    the contract's value came from.
    """
    environ: dict[str, str] = {}
    checked: list[str] = []
    problems: list[Problem] = []
    for name, value in wanted.items():
        theirs = user_value(env, name)
        read = meaning.get(name, str.strip)
        if theirs is None:
            environ[name] = value
        elif read(theirs) == read(value):
            checked.append(name)
        else:
            problems.append(
                Problem(
                    name,
                    theirs,
                    f"the cluster tfboot forms from DISTRIBUTED and DIST_* gives "
                    f"{quote(value)} for this task, {why}",
                    "fix the DIST_* variables, or unset DISTRIBUTED to leave the job to "
                    "the launcher that set it",
                    verdict="contradicts the cluster",
                )
            )
    if problems:
        raise ConfigError(problems)
    return environ, checked


def _why(identity: Identity, world: World) -> str:
    """``rank R of N (engine; type index, index from SOURCE)``."""
    job = identity.cluster
    assert job is not None
    index = identity.sources.get("index", "TF_CONFIG")
    return (
        f"rank {world.rank} of {world.size} ({identity.engine}; {job.task_type} "
        f"{job.task_index}, index from {index})"
    )


def torchrun_options(argv: Sequence[str]) -> tuple[str, ...] | None:
    """torchrun's own options when the interpreter's command line (``sys.orig_argv``) runs
    torchrun itself (those before the script it starts), else None."""
    words = iter(argv[1:])
    for word in words:  # the interpreter's options, then what it runs
        if word == "-m":
            found = next(words, "") in AGENT_MODULES
            return _own(list(words)) if found else None
        if word in VALUED:
            next(words, "")
        elif word == "-c" or not word.startswith("-"):
            return _own(list(words)) if word.rpartition("/")[2] == "torchrun" else None
    return None


def _own(words: list[str]) -> tuple[str, ...]:
    """torchrun's options, up to the script (its first word that is no option's value)."""
    own: list[str] = []
    words_left = iter(words)
    for word in words_left:
        if not word.startswith("-"):
            break
        own.append(word)
        if word not in TORCHRUN_FLAGS and "=" not in word:
            own.append(next(words_left, ""))
    return tuple(own)


def _option(options: Sequence[str], *names: str) -> bool:
    """Whether torchrun's ``options`` give one of ``names`` (``--name`` or ``--name=...``)."""
    return any(o in names or o.partition("=")[0] in names for o in options)


def plan_torch(identity: Identity, settings: ClusterSettings, env: Mapping[str, str],
               mode: str, facts: Mapping[str, Any]) -> Launch:  # fmt: skip
    """PyTorch's variables for ``identity`` (a task of a cluster); ``facts["agent"]``: this
    process is torchrun itself, with these options of its own (``torchrun_options``)."""
    agent: Sequence[str] | None = facts.get("agent")
    world = world_of(identity, "PyTorch", _given(identity, settings, mode))
    launch = Launch("PyTorch", world)
    if settings.startup_timeout is not None and agent is None:
        if world.rank:
            waits = f"rank {world.rank} of {world.size} waited for rank 0 at {world.coordinator}"
        else:
            waits = f"rank 0 waited at {world.coordinator} for the other {world.size - 1} rank(s)"
        torchrun = user_value(env, TORCHRUN) is not None
        waits = f"a worker of torchrun waited for its group ({waits})" if torchrun else waits
        launch.deadline = (settings.startup_timeout, waits)
    if user_value(env, TORCHRUN) is not None:
        _torchrun(launch, settings, env)
        return _said(launch, identity)
    if agent is not None:
        _agent(launch, identity, settings, env, agent)
        return _said(launch, identity)
    expected = settings.replicas_per_worker
    if expected is not None and expected != 1:
        raise ConfigError(
            Problem(
                "DIST_REPLICAS_PER_WORKER",
                settings.given["DIST_REPLICAS_PER_WORKER"][0],
                "this task is one PyTorch process, so one replica",
                f"start {expected} processes per task with torchrun --nproc-per-node="
                f"{expected}, or set DIST_REPLICAS_PER_WORKER=1",
                verdict="cannot be met",
            )
        )
    host, port = world.master
    wanted = {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(world.size),
        "RANK": str(world.rank),
        "LOCAL_RANK": str(world.local_rank),
        "LOCAL_WORLD_SIZE": str(world.local_size),
    }
    meaning = {n: _integer for n in wanted} | {"MASTER_ADDR": _host}
    launch.environ, launch.checked = agree(env, wanted, _why(identity, world), meaning)
    return _said(launch, identity)


def _agent(launch: Launch, identity: Identity, settings: ClusterSettings,
           env: Mapping[str, str], options: Sequence[str]) -> None:  # fmt: skip
    """torchrun's options for its static rendezvous: one node per task, task 0 its host;
    ``DIST_STARTUP_TIMEOUT`` bounds its rendezvous (``timeout``, ``join_timeout``) unless
    ``--rdzv-conf`` is the user's. Under ``--standalone`` a job of this node alone: nothing."""
    world = launch.world
    if _option(options, "--standalone") or user_value(env, "PET_STANDALONE") is not None:
        launch.launcher = STANDALONE
        if world.size > 1:
            launch.warnings.append(
                f"torchrun --standalone forms a job of this task's node alone: the "
                f"{world.size} tasks of the cluster are not joined (each trains on its own, as "
                "without tfboot); drop --standalone to form one job of them"
            )
        return
    host, port = world.master
    wanted = {
        "PET_NNODES": str(world.size),
        "PET_NODE_RANK": str(world.rank),
        "PET_MASTER_ADDR": host,
        "PET_MASTER_PORT": port,
    }
    if settings.replicas_per_worker is not None:
        wanted["PET_NPROC_PER_NODE"] = str(settings.replicas_per_worker)
    meaning = {n: _integer for n in wanted} | {"PET_MASTER_ADDR": _host}
    launch.environ, launch.checked = agree(env, wanted, _why(identity, world), meaning)
    launch.launcher = AGENT
    seconds = settings.startup_timeout
    if seconds is None:
        return
    if _option(options, "--rdzv-conf", "--rdzv_conf") or user_value(env, RDZV_CONF):
        launch.warnings.append(
            f"DIST_STARTUP_TIMEOUT={seconds} is not given to torchrun's rendezvous: "
            "--rdzv-conf is yours; add timeout and join_timeout to it"
        )
        return
    launch.environ[RDZV_CONF] = f"timeout={seconds},join_timeout={seconds}"


def _torchrun(launch: Launch, settings: ClusterSettings, env: Mapping[str, str]) -> None:
    """Under torchrun its rendezvous places the ranks: the counts must be the contract's."""
    launch.launcher = "torchrun"
    problems = []
    nodes = user_value(env, "GROUP_WORLD_SIZE")
    if nodes is not None and digits(nodes) != launch.world.size:
        problems.append(
            Problem(
                "GROUP_WORLD_SIZE",
                nodes,
                f"torchrun counts {nodes.strip()} node(s), the cluster tfboot forms from "
                f"DISTRIBUTED and DIST_* has {launch.world.size} task(s)",
                "give torchrun --nnodes the number of tasks",
                verdict="contradicts the cluster",
            )
        )
    per_node = user_value(env, "LOCAL_WORLD_SIZE")
    expected = settings.replicas_per_worker
    if expected is not None and per_node is not None and digits(per_node) != expected:
        problems.append(
            Problem(
                "LOCAL_WORLD_SIZE",
                per_node,
                f"torchrun starts {per_node.strip()} process(es) per node, "
                f"DIST_REPLICAS_PER_WORKER={expected} expects {expected}",
                "make torchrun --nproc-per-node and DIST_REPLICAS_PER_WORKER the same",
                verdict="contradicts the cluster",
            )
        )
    if problems:
        raise ConfigError(problems)
    launch.checked = [n for n in ("GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE") if user_value(env, n)]


def plan_jax(identity: Identity, settings: ClusterSettings, env: Mapping[str, str], mode: str,
             facts: Mapping[str, Any]) -> Launch:  # fmt: skip
    """JAX's ``initialize`` arguments and Keras 3's variables for ``identity``.

    ``facts["visible"]``: the GPUs tfboot made visible to JAX (kept by ``local_device_ids``,
    which JAX would otherwise narrow on Slurm); ``facts["version"]``: its version (None:
    the newest). A proxy that gRPC obeys is said (its coordination service talks gRPC).
    A lost task ends the others once JAX's coordinator misses its heartbeats for
    ``DIST_TERM_GRACE`` seconds (default 5; JAX's own is 100).
    """
    visible: tuple[int, ...] | None = facts.get("visible")
    jax: tuple[int, ...] | None = facts.get("version")
    world = world_of(identity, "JAX", _given(identity, settings, mode))
    launch = Launch("JAX", world)
    if identity.cluster is not None:
        proxy = proxy_warning(env, identity.cluster.peers, "JAX's coordination service (gRPC)")
        launch.warnings += [proxy] if proxy else []
    why = _why(identity, world)
    checks = {
        "JAX_COORDINATOR_ADDRESS": world.coordinator,
        "JAX_NUM_PROCESSES": str(world.size),
        "JAX_PROCESS_ID": str(world.rank),
    }
    keras = {
        # rank 0's address alone, all JAX's backend reads of it: the list of every task's
        # would outgrow one environment string (128 KiB) with a few thousand tasks
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": world.coordinator,
        "KERAS_DISTRIBUTION_NUM_PROCESSES": str(world.size),
        "KERAS_DISTRIBUTION_PROCESS_ID": str(world.rank),
    }
    meaning = {
        "JAX_COORDINATOR_ADDRESS": _first,
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": _first,
    } | {n: _integer for n in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID")}
    meaning |= {n: _integer for n in keras if n not in meaning}
    _, launch.checked = agree(env, {n: v for n, v in checks.items() if user_value(env, n)},
                              why, meaning)  # fmt: skip
    launch.environ, kept = agree(env, keras, why, meaning)
    launch.checked += kept
    launch.arguments = {
        "coordinator_address": world.coordinator,
        "num_processes": world.size,
        "process_id": world.rank,
    }
    if settings.startup_timeout is not None:
        launch.arguments["initialization_timeout"] = settings.startup_timeout
    if settings.replicas_per_worker is not None:
        raw = settings.given["DIST_REPLICAS_PER_WORKER"][0]
        launch.replicas = (raw, settings.replicas_per_worker)
    grace = settings.term_grace
    if jax is None or jax >= HEARTBEAT_FROM:
        launch.arguments["heartbeat_timeout_seconds"] = grace or TERM_GRACE_S
    elif grace is not None:
        raise ConfigError(
            Problem(
                "DIST_TERM_GRACE",
                settings.given["DIST_TERM_GRACE"][0],
                f"JAX {'.'.join(map(str, jax))}'s jax.distributed.initialize takes no "
                f"heartbeat_timeout_seconds (JAX {'.'.join(map(str, HEARTBEAT_FROM))} and "
                "later do): a lost task ends the others after JAX's own 100 s",
                "unset DIST_TERM_GRACE, or upgrade JAX",
                verdict="cannot be applied",
            )
        )
    if visible is not None:
        launch.arguments["local_device_ids"] = list(visible)
    elif not _detects(identity) and (jax is None or jax >= DEACTIVATE_FROM):
        launch.arguments["cluster_detection_method"] = "deactivate"
    return _said(launch, identity)


def _detects(identity: Identity) -> bool:
    """JAX's own cluster detection finds the same job as the engine (Slurm's): left on."""
    engine = identity.source
    return engine is not None and engine.jax_detects


def refusals(framework: str, settings: ClusterSettings) -> list[tuple[str, str]]:
    """The ``DIST_*`` variables given that ``framework`` cannot take, with why."""
    return [(n, why) for n, why in REFUSED.get(framework, {}).items() if n in settings.given]


def _said(launch: Launch, identity: Identity) -> Launch:
    launch.text = _line(launch, identity)
    return launch


def _line(launch: Launch, identity: Identity) -> str:
    """The one log line: rank of N, rendezvous, what was set or checked, with sources."""
    world = launch.world
    assert world is not None
    what = _why(identity, world)
    src = identity.sources
    port = f" (port: {src['port']})" if "port" in src else ""
    if launch.launcher == STANDALONE:
        return (
            f"cluster: PyTorch under {STANDALONE}, a job of this node alone ({identity.engine} "
            f"task {world.rank} of {world.size} not joined); nothing set"
        )
    if launch.launcher and not launch.environ:
        checked = ", ".join(launch.checked) or "nothing to compare"
        return (
            f"cluster: {launch.framework} under {launch.launcher}, {identity.engine} task "
            f"{world.rank} of {world.size}; {launch.launcher}'s variables kept ({checked} "
            "checked against DIST_*); nothing set"
        )
    who = f"{launch.framework} ({launch.launcher})" if launch.launcher else launch.framework
    parts = [f"cluster: {who} {what}", f"rank 0 at {world.coordinator}{port}"]
    if launch.environ:
        parts.append("set " + " ".join(f"{n}={v}" for n, v in launch.environ.items()))
    if launch.arguments:
        filled = ", ".join(f"{n}={v!r}" for n, v in launch.arguments.items())
        parts.append(f"jax.distributed.initialize() fills unset {filled}")
    if launch.checked:
        parts.append(f"{', '.join(launch.checked)} given, checked")
    return "; ".join(parts)
