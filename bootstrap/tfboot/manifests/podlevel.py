"""A training container's memory limit that is the Pod's (pod-level resources, KEP-2837),
shared with the Pod's other containers: a note, as tfboot sizes its budgets from all of it."""

from __future__ import annotations

from typing import Any

from ..kube.framework import framework_of
from ..kube.report import Report
from ..kube.workloads import Container, pod_resources


def _others(container: Container) -> list[str]:
    """The Pod's other containers that run beside this one: its containers and its sidecars
    (init containers with ``restartPolicy: Always``)."""
    pod: dict[str, Any] = container.pod
    running = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    running += [c for c in pod.get("initContainers") or []
                if isinstance(c, dict) and c.get("restartPolicy") == "Always"]  # fmt: skip
    return [str(c.get("name", "?")) for c in running if c is not container.spec]


def check_pod_level(container: Container, report: Report) -> None:
    """A container that runs a framework, without a memory limit of its own, under a Pod's
    limit shared with other containers."""
    if not container.pod_level("limits", "memory"):
        return
    literal = {str(e.get("name")): str(e.get("value", "")) for e in container.spec.get("env") or []
               if isinstance(e, dict)}  # fmt: skip
    others = _others(container)
    if framework_of(container.spec, literal) is None or not others:
        return
    limit = pod_resources(container.pod, "limits")["memory"]
    report.add(
        container.where,
        "pod-level-shared",
        f"limits.memory is the Pod's ({limit}, spec.resources), shared with "
        f"{', '.join(others)}: tfboot sizes tf.data's buffers and keeps freed memory against "
        "all of it, and does not see what the others use",
        "give the training container a limits.memory of its own (the Pod's less what the "
        "others need); tfboot inject sets TFBOOT_POD_MEMORY_LIMIT_MB so the job says whose "
        "budget it is",
    )
