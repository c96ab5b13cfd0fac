"""Kubernetes: a Pod of an Indexed Job or a JobSet, from ``DIST_*`` and its completion index.

The cluster's shape is ``DIST_TASKS``, the addresses ``DIST_HOSTS`` (port ``DIST_PORT``,
default 2222 as TFJob), the task ``DIST_TASK_TYPE`` (default ``worker``; under a JobSet,
the Downward-API label ``jobset.sigs.k8s.io/replicatedjob-name``) and ``DIST_TASK_INDEX``
(default ``JOB_COMPLETION_INDEX``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ConfigError, Problem
from ...node.shm import memory_volume
from ...values import digits, nonblank
from .. import TASK_TYPES
from ..variables import ClusterSettings
from . import Engine, Identity, checked, require

K8S_PORT = 2222


class Kubernetes(Engine):
    """A Pod of an Indexed Job or a JobSet: ``DIST_*`` and its completion index."""

    name = "k8s"
    order = 30

    def present(self, cluster: ClusterSettings, env: Mapping[str, str]) -> bool:
        index = nonblank(env, "JOB_COMPLETION_INDEX") or "DIST_TASK_INDEX" in cluster.given
        return bool(index and "DIST_HOSTS" in cluster.given)

    def build(self, cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
        return _k8s(cluster, env)

    def shm_fix(self, mib: int, env: Mapping[str, str]) -> str | None:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            return None
        return (f"mount {memory_volume(f'{mib}Mi')} (it counts against the container's "
                "memory limit: raise limits.memory by as much)")  # fmt: skip

    def at_run_time(self, cluster: ClusterSettings,
                    env: Mapping[str, str]) -> tuple[list[dict[str, str]], str]:  # fmt: skip
        """An Indexed Job's ``JOB_COMPLETION_INDEX`` exists only in the running Pod: the first
        and the last index of the task's type are checked (each differs only in its address)."""
        counts = dict(cluster.tasks or ())
        kind = cluster.task_type or "worker"
        if (cluster.task_index is not None or nonblank(env, "JOB_COMPLETION_INDEX") is not None
                or kind not in counts):  # fmt: skip
            return [dict(env)], ""
        last = counts[kind] - 1
        found = [{**env, "JOB_COMPLETION_INDEX": str(index)} for index in sorted({0, last})]
        return found, f"{kind} indexes 0 to {last} checked (JOB_COMPLETION_INDEX comes at run time)"


def _k8s(cluster: ClusterSettings, env: Mapping[str, str]) -> Identity:
    why = "under DISTRIBUTED=k8s: the same value in every Pod"
    problems = [p for p in (require(cluster, n, why) for n in ("DIST_TASKS", "DIST_HOSTS")) if p]
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
    config = checked(addresses, kind, index)
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
