"""The workloads in the inputs: Pod templates, their containers, and the GPUs limits grant.

Built-in kinds carry one Pod template; a JobSet carries one per replicatedJob and a Kubeflow
TFJob one per replica type, each named by that group (``worker/train``). Any other kind
(Kubeflow's other ``*Job`` kinds, Ray, Trainer's TrainJob, an operator's own) is searched
for every ``template.spec.containers`` it holds, each checked like the known ones and
named by the key or list item that holds it (``pytorchReplicaSpecs.Worker``).

A container's GPUs come from its limits (device plugins), from the DRA claims it takes
(``claims``), and from a KAI Scheduler share its Pod asks for (``kai``):
``container_grant`` joins them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..node.deviceplugin import PLUGINS
from .claims import ClaimGrant, ClaimIndex, claim_grant
from .documents import quantity
from .kai import KaiShare

# Where each built-in kind holds its Pod template (metadata and spec); a Pod is its own.
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Job": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.(\d+)gb$")
# More devices than any node has: such a count is reported (hardening) and grants nothing.
MAX_DEVICES = 1024
DEVICE_COUNTS = ("nvidia.com/gpu", "amd.com/gpu")


@dataclass(frozen=True)
class GpuGrant:
    """The GPUs a container's limits grant, and the env their device plugin would set."""

    count: int = 0
    share_mib: int | None = None  # GPU memory granted per GPU
    # a device plugin's key (node.deviceplugin.PLUGINS), "mig", "dra-mps", "kai", or ""
    plugin: str = ""
    hard: bool = False  # the share is enforced (HAMi, MIG, MPS); gpushare's is advisory
    plugin_env: dict[str, str] = field(default_factory=dict)
    source: str = ""  # where the share is set, when not a resource of the limits


def _int_limit(limits: Mapping[str, Any], name: str) -> int:
    amount = quantity(limits.get(name))
    return int(amount) if amount is not None and amount == int(amount) and amount > 0 else 0


def device_count(limits: Mapping[str, Any], name: str) -> int:
    """A device count limit; 0 when invalid or above ``MAX_DEVICES``."""
    count = _int_limit(limits, name)
    return count if count <= MAX_DEVICES else 0


def gpu_grant(limits: Mapping[str, Any]) -> GpuGrant:
    """What ``limits`` grant: HAMi, gpushare, MIG slices or whole GPUs."""
    gpus = sum(device_count(limits, name) for name in DEVICE_COUNTS)
    for plugin in PLUGINS:
        amount = _int_limit(limits, plugin.resource) if plugin.resource else 0
        if amount and plugin.grant_env is not None:
            count = (gpus or 1) if plugin.hard else 1
            env = plugin.grant_env(count, amount)
            return GpuGrant(count, amount * plugin.unit_mib, plugin.key, plugin.hard, env)
    mig = [(n, int(m.group(1))) for n, m in _mig_resources(limits)]
    if mig:
        count = sum(n for n, _ in mig)
        return GpuGrant(count, min(gb for _, gb in mig) * 1024, "mig", True)
    return GpuGrant(gpus)


def _mig_resources(limits: Mapping[str, Any]) -> Iterator[tuple[int, re.Match[str]]]:
    for name in limits:
        match = MIG_RESOURCE.match(str(name))
        if match and device_count(limits, name):
            yield device_count(limits, name), match


@dataclass
class Container:
    """One container with the Pod around it and where to report its findings."""

    spec: dict[str, Any]
    pod: dict[str, Any]
    where: tuple[str, str, str]
    configmaps: Mapping[str, Mapping[str, str]]
    dra: ClaimGrant = field(default_factory=ClaimGrant)
    kai: KaiShare | None = None  # the Pod's KAI share (for this container or another)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", "?"))

    def kai_share(self) -> KaiShare | None:
        """The KAI share this container gets; None when it gets none, or the Pod's
        annotations are invalid."""
        kai = self.kai
        return kai if kai is not None and kai.container == self.name and kai.devices else None

    def resources(self, kind: str) -> dict[str, Any]:
        value = (self.spec.get("resources") or {}).get(kind) or {}
        return value if isinstance(value, dict) else {}

    def security(self) -> dict[str, Any]:
        return self.spec.get("securityContext") or {}

    def effective(self, key: str) -> Any:
        """A securityContext field, the container's over the Pod's."""
        own = self.security()
        return own[key] if key in own else (self.pod.get("securityContext") or {}).get(key)


def container_grant(container: Container) -> GpuGrant:
    """What the limits grant, with the GPUs, the MPS limit and the env of the DRA claims.

    A claim the inputs do not hold may bring a GPU: with no other GPU, the container is
    planned with one, so its GPU settings are not taken for settings without a GPU.
    """
    grant = _with_kai(gpu_grant(container.resources("limits")), container.kai_share())
    dra = container.dra
    gpus = dra.gpus or (1 if dra.missing and not grant.count else 0)
    if not gpus:
        return grant
    env = {**grant.plugin_env, **dra.env()}
    if dra.limit is None or grant.share_mib is not None:
        return replace(grant, count=grant.count + gpus, plugin_env=env)
    source = f"the MPS limit of {dra.limit.where}"
    return GpuGrant(grant.count + gpus, dra.limit.mib, "dra-mps", True, env, source)


def _with_kai(grant: GpuGrant, kai: KaiShare | None) -> GpuGrant:
    """A KAI share: its GPUs, and the MiB of each under ``gpu-memory`` (``gpu-fraction``'s
    depends on the GPU). It counts as hard: enforced under KAI's nvfractions mode."""
    if kai is None:
        return grant
    source = f"KAI's {kai.asked()}" if kai.memory_mib is not None else ""
    return GpuGrant(grant.count + kai.devices, kai.memory_mib, "kai", True, grant.plugin_env,
                    source)  # fmt: skip


def dig(doc: Any, path: Sequence[str]) -> Any:
    """The value at ``path`` in nested mappings, or None."""
    node: Any = doc
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(group, Pod template)`` for each Pod template of one object (the mapping that holds
    its ``metadata`` and ``spec``; a Pod is its own); group "" for built-ins."""
    kind = str(doc.get("kind", ""))
    if kind == "JobSet":
        rjobs = dig(doc, ("spec", "replicatedJobs"))
        for rjob in rjobs if isinstance(rjobs, list) else []:
            template = dig(rjob, ("template", "spec", "template"))
            if isinstance(template, dict):
                yield str(rjob.get("name", "?")), template
    elif kind == "TFJob":
        replicas = dig(doc, ("spec", "tfReplicaSpecs"))
        for rtype, spec in (replicas if isinstance(replicas, Mapping) else {}).items():
            template = dig(spec, ("template",))
            if isinstance(template, dict):
                yield str(rtype), template
    elif kind in TEMPLATE_PATHS:
        template = dig(doc, TEMPLATE_PATHS[kind])
        if isinstance(template, dict):
            yield "", template
    else:
        yield from _templates_anywhere(doc.get("spec"), "")


def pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(group, pod spec)`` for each Pod template of one object; group "" for built-ins."""
    for group, template in templates(doc):
        if isinstance(template.get("spec"), dict):
            yield group, template["spec"]


# An unknown kind's Pod templates are looked for this deep, among at most this many values.
MAX_DEPTH, MAX_VALUES = 12, 100_000


def _templates_anywhere(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``template`` whose ``spec`` has a ``containers`` list under ``node``, with its
    place."""
    stack, seen = [(node, where, 0)], 0
    while stack and seen < MAX_VALUES:
        value, place, depth = stack.pop()
        seen += 1
        if isinstance(value, Mapping):
            template = value.get("template")
            if isinstance(dig(template, ("spec", "containers")), list):
                yield place or "spec", template
                continue
            if depth < MAX_DEPTH:
                stack += [(v, f"{place}.{k}".lstrip("."), depth + 1)
                          for k, v in reversed(list(value.items()))]  # fmt: skip
        elif isinstance(value, list) and depth < MAX_DEPTH:
            for index, item in reversed(list(enumerate(value))):
                label = (
                    item.get("name") or item.get("groupName") if isinstance(item, Mapping) else None
                )
                stack.append((item, f"{place}[{label or index}]", depth + 1))


def workload_templates(docs: Sequence[Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(kind/name, group, Pod template)`` for each Pod template with a spec in the documents."""
    for doc in docs:
        if isinstance(doc, dict):
            obj = f"{doc.get('kind')}/{dig(doc, ('metadata', 'name')) or '?'}"
            for group, template in templates(doc):
                if isinstance(template.get("spec"), dict):
                    yield obj, group, template


def workloads(docs: Sequence[Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(kind/name, group, pod spec)`` for each Pod template in the documents."""
    for obj, group, template in workload_templates(docs):
        yield obj, group, template["spec"]


def configmaps(docs: Sequence[Any]) -> dict[str, dict[str, str]]:
    """ConfigMaps in the same input, by name, for ``configMapKeyRef`` and ``envFrom``."""
    return {
        str(dig(doc, ("metadata", "name"))): {k: str(v) for k, v in (doc.get("data") or {}).items()}
        for doc in docs
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    }


def containers(
    file: str,
    obj: str,
    pod: dict[str, Any],
    maps: Mapping[str, Mapping[str, str]],
    group: str = "",
    claims: ClaimIndex | None = None,
    kai: KaiShare | None = None,
) -> Iterator[Container]:
    """The Pod's containers, init containers first; named ``group/name`` within a group.

    With ``claims`` (``claims.read_claims``), each carries what its DRA claims give it;
    with ``kai`` (``kai.kai_share``), the share its Pod asks KAI Scheduler for.
    """
    for key in ("initContainers", "containers"):
        for spec in pod.get(key) or []:
            if isinstance(spec, dict):
                name = str(spec.get("name", "?"))
                where = (file, obj, f"{group}/{name}" if group else name)
                dra = claim_grant(pod, spec, claims) if claims is not None else ClaimGrant()
                yield Container(spec, pod, where, maps, dra, kai)
