"""A container's environment as the kubelet and the GPU device plugin would set it.

``env``, ``envFrom``, ConfigMap keys and Downward API values, then the plugin's variables;
an env entry that Kubernetes would reject or that cannot work is a finding.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..settings import ENV_FILE
from .documents import quantity
from .report import Report
from .workloads import Container, GpuGrant, own_resources, pod_resources

DOWNWARD_RESOURCES = re.compile(r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-.+)$")


def _downward_value(container: Container, ref: Mapping[str, Any]) -> str | None:
    """What the kubelet writes for a ``resourceFieldRef``: the amount / divisor, rounded up."""
    kind, _, name = str(ref.get("resource", "")).partition(".")
    target = ref.get("containerName") or container.spec.get("name")
    for spec in container.pod.get("containers") or []:
        if isinstance(spec, dict) and spec.get("name") == target:
            # A container without its own limit is given the Pod's (pod-level resources).
            given = {**pod_resources(container.pod, kind), **own_resources(spec, kind)}
            amount = quantity(given.get(name))
            divisor = quantity(ref.get("divisor", "1"))
            if amount is None or not divisor:
                return None  # no limit: the kubelet exposes node allocatable, unknown here
            return str(math.ceil(amount / divisor))
    return None


def _check_resource_ref(
    container: Container, name: str, ref: Mapping[str, Any], report: Report
) -> bool:
    resource = str(ref.get("resource", ""))
    if "/" in resource.partition(".")[2]:
        report.add(
            container.where,
            "resource-field-extended",
            f"{name} reads {resource} through resourceFieldRef; the API server rejects "
            "extended resources there",
            "write the number as a literal env value, kept equal to the limit by one "
            "kustomize literal and replacements",
        )
        return False
    if not DOWNWARD_RESOURCES.match(resource):
        report.add(
            container.where,
            "resource-field-invalid",
            f"{name} reads {resource or '(nothing)'} through resourceFieldRef",
            "the Downward API exposes limits.cpu, requests.cpu, limits.memory, "
            "requests.memory, ephemeral-storage and hugepages",
        )
        return False
    if name == "CPU_THREADS":
        return _check_cpu_threads_ref(container, resource, ref, report)
    return True


def _check_cpu_threads_ref(
    container: Container, resource: str, ref: Mapping[str, Any], report: Report
) -> bool:
    divisor = quantity(ref.get("divisor", "1"))
    if resource.endswith(".cpu") and divisor == 1:
        return True
    what = (
        f"divisor {ref.get('divisor')} gives {_downward_value(container, ref) or 'a count of'} "
        "millicores, not a core count"
        if resource.endswith(".cpu")
        else f"{resource} is not a CPU amount"
    )
    report.add(
        container.where,
        "cpu-threads-downward",
        f"CPU_THREADS from resourceFieldRef {resource}: {what}",
        'use resource limits.cpu with divisor "1" (rounds up), or CPU_THREADS=auto',
    )
    return False


def _env_from(container: Container) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.spec.get("envFrom") or []:
        ref = (source or {}).get("configMapRef") or {}
        data = container.configmaps.get(str(ref.get("name")), {})
        env.update({f"{source.get('prefix', '')}{k}": v for k, v in data.items()})
    return env


def _env_value(container: Container, item: Mapping[str, Any], report: Report) -> str | None:
    name = str(item.get("name", ""))
    if "value" in item:
        value = item["value"]
        if value is None or isinstance(value, str):
            return value or ""
        text = json.dumps(value)
        report.add(
            container.where,
            "env-not-string",
            f"env {name} has the {type(value).__name__} value {text}; env values are strings",
            f'quote it: value: "{text}"',
        )
        return text
    source = item.get("valueFrom") or {}
    if "resourceFieldRef" in source:
        ref = source["resourceFieldRef"] or {}
        ok = _check_resource_ref(container, name, ref, report)
        return _downward_value(container, ref) if ok else None
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"] or {}
        return container.configmaps.get(str(ref.get("name")), {}).get(str(ref.get("key")))
    return None  # a Secret or a field: unknown here


def container_env(container: Container, grant: GpuGrant, report: Report) -> dict[str, str]:
    """The environment the process would see; values unknown here are left out."""
    env = _env_from(container)
    for item in container.spec.get("env") or []:
        if isinstance(item, dict) and item.get("name"):
            value = _env_value(container, item, report)
            if value is None:
                env.pop(str(item["name"]), None)
            else:
                env[str(item["name"])] = value
    env.update(grant.plugin_env)  # the device plugin's variables reach the process last
    env.pop(ENV_FILE, None)  # a path inside the image: its values cannot be checked here
    return env
