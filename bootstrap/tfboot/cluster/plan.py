"""The cluster plan, one for every framework: this task's identity under its engine (who it
is, the job as every framework reads it), the framework's values from the writer its
adapter chose (``Launch``: variables to set, arguments to fill, the world as ranks count it),
the warnings, the log line. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..values import rows
from .engines import TASK, Identity, identify
from .launch import AGENT, Launch, Writer
from .tfconfig import VARIABLE
from .variables import ClusterSettings


@dataclass
class ClusterPlan:
    """What tfboot does for the cluster in ``framework``'s process, and why."""

    identity: Identity
    settings: ClusterSettings
    framework: str
    launch: Launch | None = None  # the framework's values, for a task of a cluster
    warnings: list[str] = field(default_factory=list)
    pid: int | None = None  # this process, recorded in TASK where it takes a place

    @property
    def peers(self) -> list[str]:
        return self.identity.cluster.peers if self.identity.cluster is not None else []

    @property
    def environ(self) -> dict[str, str]:
        """The variables set in this process: the framework's, and ``TASK`` where it takes a
        place in a cluster (torchrun's agent takes none: its workers are the ranks)."""
        found = {} if self.launch is None else dict(self.launch.environ)
        config = self.identity.cluster
        agent = self.launch is not None and self.launch.launcher == AGENT
        if self.pid is not None and config is not None and config.cluster and not agent:
            found[TASK] = str(self.pid)  # its children are no tasks (engines.task_of)
        return found

    def line(self) -> str:
        """The one log line: no cluster and why, else the framework's values with sources."""
        identity, config = self.identity, self.identity.cluster
        if identity.engine == "child":
            return f"cluster: none here: {identity.sources['single']}; nothing set or checked"
        if config is None:
            why = identity.sources.get("single", "DISTRIBUTED=auto found no engine")
            return f"cluster: single node ({why}); nothing set"
        if not config.cluster or self.launch is None:
            return f"cluster: single node ({VARIABLE} names no cluster); nothing set"
        return self.launch.text

    def to_dict(self) -> dict[str, Any]:
        config, launch = self.identity.cluster, self.launch
        return {
            "engine": self.identity.engine,
            "tf_config": None if launch is None else launch.environ.get(VARIABLE),
            "tf_config_found": config is not None and not self.identity.build,
            "task": None
            if config is None
            else {"type": config.task_type, "index": config.task_index},
            "size": 0 if config is None else config.size,
            "address": None if config is None else config.address,
            "peers": self.peers,
            "replicas_per_worker": None if launch is None else launch.local_replicas,
            "expected_replicas_per_worker": self.settings.replicas_per_worker,
            "startup_timeout": self.settings.startup_timeout,
            "sources": dict(self.identity.sources),
            "given": rows(self.settings.given),
            "line": self.line(),
            "framework": self.framework,
            "launch": None if launch is None else launch.to_dict(),
        }


def plan_cluster(
    writer: Writer,
    framework: str,
    mode: str,
    settings: ClusterSettings,
    env: Mapping[str, str],
    facts: Mapping[str, Any],
    pid: int | None = None,
) -> ClusterPlan:
    """``framework``'s cluster plan for ``DISTRIBUTED=mode`` (not off): the engine's identity
    of this task (``pid``: this process, None: not known), then, for a task of a cluster, the
    framework's values from the ``writer`` its adapter chose, given the adapter's ``facts``."""
    cluster = ClusterPlan(identify(mode, settings, env, pid), settings, framework, pid=pid)
    config = cluster.identity.cluster
    if config is None or not config.cluster:
        return cluster
    cluster.launch = writer(cluster.identity, settings, env, mode, facts)
    cluster.warnings += cluster.launch.warnings
    return cluster
