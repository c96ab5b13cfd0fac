"""What TensorFlow gets from the cluster: the ``TF_CONFIG`` to set (none where it was found),
its size checked against one environment string, the local-replica check once TensorFlow
listed its devices, Keras 3's and a proxy's warnings, and its log line.

TensorFlow names each task by its type and index (``TF_CONFIG``), parameter servers and
evaluators included, so its values carry no ``World``: ``TF_CONFIG`` is the identity's
``Cluster`` as TensorFlow reads it. Pure apart from reading package metadata (to find
Keras 3 without importing it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, Problem
from .engines import Identity
from .launch import Launch
from .proxy import proxy_warning
from .tfconfig import VARIABLE, to_json
from .variables import ClusterSettings
from .world import Cluster

FRAMEWORK = "TensorFlow"
REPLICA_TYPES = ("chief", "worker")  # the tasks that hold MultiWorkerMirroredStrategy replicas
# Linux's limit for one environment string (MAX_ARG_STRLEN), "TF_CONFIG=" and its NUL
# included: a longer TF_CONFIG makes every later exec of the process fail with E2BIG.
MAX_TF_CONFIG_BYTES = 128 * 1024 - len("TF_CONFIG=") - 1


def plan_tensorflow(identity: Identity, settings: ClusterSettings, env: Mapping[str, str],
                    mode: str, facts: Mapping[str, Any]) -> Launch:  # fmt: skip
    """TensorFlow's values for ``identity`` (a task of a cluster). ``facts["replicas"]``: its
    local replicas once TensorFlow listed its devices (absent: not checked yet);
    ``facts["cpu_split"]``: the logical CPUs of ``VIRTUAL_SPLIT`` on CPU."""
    config = identity.cluster
    assert config is not None
    launch = Launch(FRAMEWORK, None)
    if identity.build:
        launch.environ[VARIABLE] = to_json(config)
    _check_size(launch, config, settings, mode)
    replicas: int | None = facts.get("replicas")
    if replicas is not None:
        launch.local_replicas = replicas
        _check_replicas(settings, replicas, config.task_type)
        split = facts.get("cpu_split")
        if split and split > 1:
            launch.warnings.append(
                f"VIRTUAL_SPLIT splits CPU:0 into {split}, but MultiWorkerMirroredStrategy "
                "uses one CPU replica per worker: the split adds nothing here"
            )
    proxy = proxy_warning(env, config.peers, "gRPC")
    launch.warnings += [w for w in (_keras_warning(env), proxy) if w]
    launch.text = _line(launch, identity, settings)
    return launch


def _line(launch: Launch, identity: Identity, settings: ClusterSettings) -> str:
    """Task of N, peers, port, replicas per worker, with sources."""
    config, src = identity.cluster, identity.sources
    assert config is not None
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
    expected = settings.replicas_per_worker
    local = "checked at import" if launch.local_replicas is None else str(launch.local_replicas)
    if expected is None:
        parts.append(f"replicas per worker {local} (DIST_REPLICAS_PER_WORKER not set)")
    else:
        given = settings.source("DIST_REPLICAS_PER_WORKER")
        parts.append(f"replicas per worker {local} ({given})")
    if settings.startup_timeout is not None:
        parts.append(f"startup timeout {settings.startup_timeout:g} s")
    return "; ".join(parts)


def _check_size(launch: Launch, config: Cluster, settings: ClusterSettings, mode: str) -> None:
    """A built ``TF_CONFIG`` must fit in one environment string, or no child could start."""
    size = len(launch.environ.get(VARIABLE, "").encode())
    if size <= MAX_TF_CONFIG_BYTES:
        return
    given = settings.given.get("DIST_TASKS")
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


def _check_replicas(settings: ClusterSettings, replicas: int, task_type: str | None) -> None:
    expected = settings.replicas_per_worker
    if expected is None or task_type not in REPLICA_TYPES or replicas == expected:
        return
    raise ConfigError(
        Problem(
            "DIST_REPLICAS_PER_WORKER",
            str(expected),
            f"this {task_type} has {replicas} local replica(s) (visible logical GPUs, "
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
