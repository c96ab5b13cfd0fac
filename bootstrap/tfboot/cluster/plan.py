"""The cluster plan: the ``TF_CONFIG`` to set, the local-replica check, warnings, the log line.

Pure apart from reading package metadata (to find Keras 3 without importing it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, Problem
from ..values import rows
from .engines import TASK, Identity, identify
from .launch import AGENT, Launch, Writer
from .launch import line as launch_line
from .proxy import proxy_warning
from .variables import ClusterSettings

REPLICA_TYPES = ("chief", "worker")  # the tasks that hold MultiWorkerMirroredStrategy replicas
# Linux's limit for one environment string (MAX_ARG_STRLEN), "TF_CONFIG=" and its NUL
# included: a longer TF_CONFIG makes every later exec of the process fail with E2BIG.
MAX_TF_CONFIG_BYTES = 128 * 1024 - len("TF_CONFIG=") - 1


@dataclass
class ClusterPlan:
    """What tfboot does for the cluster, and why."""

    identity: Identity
    settings: ClusterSettings
    replicas: int | None = None  # local replicas; None before TensorFlow lists devices
    warnings: list[str] = field(default_factory=list)
    launch: Launch | None = None  # PyTorch's or JAX's values, for a task of a cluster
    framework: str = "TensorFlow"
    pid: int | None = None  # this process, recorded in TASK where it takes a place

    @property
    def tf_config(self) -> str | None:
        """The ``TF_CONFIG`` tfboot sets, or None when it sets none."""
        config = self.identity.config
        if config is None or not self.identity.build or self.framework != "TensorFlow":
            return None
        return config.to_json()

    @property
    def peers(self) -> list[str]:
        return self.identity.config.peers if self.identity.config is not None else []

    @property
    def environ(self) -> dict[str, str]:
        if self.launch is not None:
            found = dict(self.launch.environ)
        else:
            tf_config = self.tf_config
            found = {} if tf_config is None else {"TF_CONFIG": tf_config}
        config = self.identity.config
        agent = self.launch is not None and self.launch.launcher == AGENT
        if self.pid is not None and config is not None and config.cluster and not agent:
            found[TASK] = str(self.pid)  # its children are no tasks (engines.task_of)
        return found

    def line(self) -> str:
        """The one log line: task of N, peers, port, replicas per worker, with sources."""
        identity, config = self.identity, self.identity.config
        if identity.engine == "child":
            return f"cluster: none here: {identity.sources['single']}; nothing set or checked"
        if config is None:
            why = identity.sources.get("single", "DISTRIBUTED=auto found no engine")
            unset = "TF_CONFIG not set" if self.framework == "TensorFlow" else "nothing set"
            return f"cluster: single node ({why}); {unset}"
        if not config.cluster:
            return "cluster: single node (TF_CONFIG names no cluster); nothing set"
        if self.launch is not None:
            return launch_line(self.launch, identity)
        src = identity.sources
        action = "TF_CONFIG built" if identity.build else "TF_CONFIG found, checked"
        if src.get("tf_config") == "inherited":
            action = "TF_CONFIG inherited, the one tfboot builds here, checked"
        own = config.address
        port = own.rpartition(":")[2] if own else "none (evaluator outside the cluster)"
        parts = [
            f"cluster: {config.task_type} {config.task_index} of {config.size} "
            f"({identity.engine}; {action}; type from {src['type']}, index from {src['index']})",
            f"peers {', '.join(config.peers) or 'none'} (from {src['hosts']})",
            f"port {port}" + (f" ({src['port']})" if "port" in src else ""),
        ]
        if "tasks" in src:
            parts.append(f"tasks from {src['tasks']}")
        if src.get("distribution", "block") != "block":
            parts.append(f"ranks placed by {src['distribution']} distribution (SLURM_DISTRIBUTION)")
        parts.append(self._replicas_text())
        if self.settings.startup_timeout is not None:
            parts.append(f"startup timeout {self.settings.startup_timeout:g} s")
        return "; ".join(parts)

    def _replicas_text(self) -> str:
        expected = self.settings.replicas_per_worker
        local = "checked at import" if self.replicas is None else str(self.replicas)
        if expected is None:
            return f"replicas per worker {local} (DIST_REPLICAS_PER_WORKER not set)"
        return f"replicas per worker {local} ({self.settings.source('DIST_REPLICAS_PER_WORKER')})"

    def to_dict(self) -> dict[str, Any]:
        config = self.identity.config
        return {
            "engine": self.identity.engine,
            "tf_config": self.tf_config,
            "tf_config_found": config is not None and not self.identity.build,
            "task": None
            if config is None
            else {"type": config.task_type, "index": config.task_index},
            "size": 0 if config is None else config.size,
            "address": None if config is None else config.address,
            "peers": self.peers,
            "replicas_per_worker": self.replicas,
            "expected_replicas_per_worker": self.settings.replicas_per_worker,
            "startup_timeout": self.settings.startup_timeout,
            "sources": dict(self.identity.sources),
            "given": rows(self.settings.given),
            "line": self.line(),
            "framework": self.framework,
            "launch": None if self.launch is None else self.launch.to_dict(),
        }


def plan_cluster(
    mode: str,
    settings: ClusterSettings,
    env: Mapping[str, str],
    replicas: int | None = None,
    cpu_split: int | None = None,
    pid: int | None = None,
) -> ClusterPlan:
    """The cluster plan for ``DISTRIBUTED=mode`` (not off).

    ``replicas`` is this task's local replica count once TensorFlow listed its devices
    (None: not checked yet), ``cpu_split`` the logical CPUs of ``VIRTUAL_SPLIT`` on CPU,
    ``pid`` this process (None: not known, no task's child).
    """
    cluster = ClusterPlan(identify(mode, settings, env, pid), settings, pid=pid)
    config = cluster.identity.config
    if config is None:
        return cluster
    _check_size(cluster, mode)
    if replicas is not None:
        cluster.replicas = replicas
        _check_replicas(cluster, config.task_type)
        if cpu_split and cpu_split > 1:
            cluster.warnings.append(
                f"VIRTUAL_SPLIT splits CPU:0 into {cpu_split}, but "
                "MultiWorkerMirroredStrategy uses one CPU replica per worker: the split adds "
                "nothing here"
            )
    proxy = proxy_warning(env, config.peers, "gRPC")
    cluster.warnings += [w for w in (_keras_warning(env), proxy) if w]
    return cluster


def plan_launch(
    writer: Writer,
    framework: str,
    mode: str,
    settings: ClusterSettings,
    env: Mapping[str, str],
    facts: Mapping[str, Any],
    pid: int | None = None,
) -> ClusterPlan:
    """``framework``'s cluster plan for ``DISTRIBUTED=mode`` (not off), its values from the
    ``writer`` its adapter chose (``cluster.launch``), given the adapter's ``facts``;
    ``pid``: this process (None: not known)."""
    identity = identify(mode, settings, env, pid)
    cluster = ClusterPlan(identity, settings, framework=framework, pid=pid)
    config = cluster.identity.config
    if config is None or not config.cluster:
        return cluster
    cluster.launch = writer(cluster.identity, settings, env, mode, facts)
    cluster.warnings += cluster.launch.warnings
    return cluster


def _check_size(cluster: ClusterPlan, mode: str) -> None:
    """A built ``TF_CONFIG`` must fit in one environment string, or no child could start."""
    size = len((cluster.tf_config or "").encode())
    config = cluster.identity.config
    if size <= MAX_TF_CONFIG_BYTES or config is None:
        return
    given = cluster.settings.given.get("DIST_TASKS")
    name, value = ("DIST_TASKS", given[0]) if given else ("DISTRIBUTED", mode)
    raise ConfigError(
        Problem(
            name,
            value,
            f"the TF_CONFIG built for {config.size} tasks has {size} bytes, more than the "
            f"{MAX_TF_CONFIG_BYTES} one environment variable may hold on Linux: no "
            "subprocess (the peer watcher, a data loader, a shell) could start after it is set",
            "use shorter host names (such as w-{i}.svc in DIST_HOSTS), or split the job into "
            "smaller clusters",
            verdict="cannot be met",
        )
    )


def _check_replicas(cluster: ClusterPlan, task_type: str | None) -> None:
    expected = cluster.settings.replicas_per_worker
    if expected is None or task_type not in REPLICA_TYPES or cluster.replicas == expected:
        return
    raise ConfigError(
        Problem(
            "DIST_REPLICAS_PER_WORKER",
            str(expected),
            f"this {task_type} has {cluster.replicas} local replica(s) (visible logical GPUs, "
            f"else 1 for the CPU), but every worker must have {expected}",
            "give every worker the same GPUs and VIRTUAL_SPLIT, or fix DIST_REPLICAS_PER_WORKER",
            verdict="cannot be met on this host",
        )
    )


def _installed(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _keras_warning(env: Mapping[str, str]) -> str | None:
    """Keras 3's model.fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585)."""
    version = _installed("keras")
    if version is None or not version.startswith("3"):
        return None
    legacy = env.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1")  # TensorFlow's own test
    has_tf_keras = _installed("tf_keras") is not None
    if legacy and has_tf_keras:
        return None
    why = (
        "TF_USE_LEGACY_KERAS=1 is set but tf_keras is not installed"
        if legacy
        else f"Keras {version} is installed"
    )
    return (
        f"{why}: Keras 3 model.fit fails under MultiWorkerMirroredStrategy "
        "(keras-team/keras#20585); a custom training loop with strategy.run works, and so does "
        "tf_keras with TF_USE_LEGACY_KERAS=1"
    )
