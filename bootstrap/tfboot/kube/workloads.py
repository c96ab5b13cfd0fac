"""The workloads in the inputs: Pod templates, their containers, and the GPUs limits grant.

Built-in kinds carry one Pod template; a JobSet carries one per replicatedJob and a Kubeflow
TFJob one per replica type, each named by that group (``worker/train``). A KServe
InferenceService component (``predictor``, ``transformer``, ``explainer``) is its own Pod
template: a PodSpec and the Pod's ``annotations`` inline. Any other kind (Kubeflow's other
``*Job`` kinds, Ray, LeaderWorkerSet, Knative, an operator's own) is searched for every
``template`` or ``...Template`` (``workerTemplate``, ``submitterPodTemplate``) with
``spec.containers``, each checked like the known ones and named by the key or list item that
holds it (``pytorchReplicaSpecs.Worker``). ``unreached`` names what runs containers but is
no Pod template tfboot can change (Argo's templates, a KServe model server, a TrainJob).

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
# What a Pod's own ``spec.resources`` may hold (pod-level resources, KEP-2837): a container
# without its own gets the Pod's, shared with the Pod's other containers.
POD_LEVEL = ("cpu", "memory")


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
        """The container's ``requests`` or ``limits``, with the Pod's own (``POD_LEVEL``)
        where the container gives none: what its cgroup gets."""
        return {**pod_resources(self.pod, kind), **own_resources(self.spec, kind)}

    def pod_level(self, kind: str, name: str) -> bool:
        """Whether ``name`` (cpu, memory) of ``kind`` is the Pod's, not the container's."""
        return name not in own_resources(self.spec, kind) and name in pod_resources(self.pod, kind)

    def security(self) -> dict[str, Any]:
        return self.spec.get("securityContext") or {}

    def effective(self, key: str) -> Any:
        """A securityContext field, the container's over the Pod's."""
        own = self.security()
        return own[key] if key in own else (self.pod.get("securityContext") or {}).get(key)


def own_resources(spec: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A container's own ``requests`` or ``limits``."""
    value = (spec.get("resources") or {}).get(kind) or {}
    return value if isinstance(value, dict) else {}


def pod_resources(pod: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A Pod's own ``requests`` or ``limits`` (``spec.resources``), cpu and memory only."""
    value = own_resources(pod, kind)
    return {name: value[name] for name in POD_LEVEL if name in value}


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


def mounted_at(spec: Mapping[str, Any], path: str) -> set[Any]:
    """The names of the volumes the container ``spec`` mounts at ``path``."""
    mounts = [m for m in spec.get("volumeMounts") or [] if isinstance(m, Mapping)]
    return {m.get("name") for m in mounts if str(m.get("mountPath", "")).rstrip("/") == path}


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
    elif kind == "InferenceService":
        yield from _kserve_components(doc)
    elif kind in TEMPLATE_PATHS and _built_in(doc):
        template = dig(doc, TEMPLATE_PATHS[kind])
        if isinstance(template, dict):
            yield "", template
    elif kind not in UNREACHED:
        yield from _templates_anywhere(doc.get("spec"), "")


def _built_in(doc: Mapping[str, Any]) -> bool:
    """Of a built-in API group (``v1``, ``batch/v1``; none given counts): a CRD's group has a
    dot, so Volcano's ``Job`` (``batch.volcano.sh``) or Knative's ``Service`` are not."""
    version = str(doc.get("apiVersion", ""))
    return "/" not in version or "." not in version.split("/")[0]


# KServe (serving.kserve.io/v1beta1; kserve pkg/apis/serving/v1beta1 predictor.go): each
# component inlines a PodSpec (containers, initContainers, volumes) and a
# ComponentExtensionSpec whose ``annotations`` KServe gives the component's Pods.
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
# A component's model server, whose container KServe builds from a ServingRuntime.
KSERVE_SERVERS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx",
                  "huggingface", "pmml", "lightgbm", "paddle", "art", "alibi", "aix")  # fmt: skip


def _kserve_components(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each component with containers of its own, as a Pod template that is its own metadata
    (its ``annotations``) and its own spec."""
    for name in KSERVE_COMPONENTS:
        component = dig(doc, ("spec", name))
        if isinstance(component, dict) and isinstance(component.get("containers"), list):
            yield name, {"metadata": component, "spec": component}


def pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(group, pod spec)`` for each Pod template of one object; group "" for built-ins."""
    for group, template in templates(doc):
        if isinstance(template.get("spec"), dict):
            yield group, template["spec"]


# An unknown kind's Pod templates are looked for this deep, among at most this many values.
# So are found, each a ``template`` (or ``...Template``) with ``spec.containers``: Kubeflow's
# PyTorchJob, MPIJob, XGBoostJob, PaddleJob (kubeflow.org/v1, v2beta1:
# spec.<x>ReplicaSpecs.<type>.template); KubeRay's RayCluster, RayJob, RayService (ray.io/v1:
# headGroupSpec.template, workerGroupSpecs[].template, under rayClusterSpec or
# rayClusterConfig; RayJob's submitterPodTemplate); LeaderWorkerSet
# (leaderworkerset.x-k8s.io/v1: leaderWorkerTemplate.leaderTemplate and .workerTemplate);
# Trainer's TrainingRuntime (its JobSet's templates); Knative's Service (spec.template).
MAX_DEPTH, MAX_VALUES = 12, 100_000


def _is_template(key: Any, value: Any) -> bool:
    """A Pod template: under ``template`` or a ``...Template`` key, with ``spec.containers``."""
    named = key == "template" or str(key).endswith("Template")
    return named and isinstance(dig(value, ("spec", "containers")), list)


def _label(item: Any, index: int) -> str:
    """A list item's name in a place: its ``name`` or ``groupName``, else its index."""
    found = item.get("name") or item.get("groupName") if isinstance(item, Mapping) else None
    return str(found or index)


def _key_place(place: str, key: Any) -> str:
    """A template's place: that of the mapping holding ``template``, or its own key's."""
    return place if key == "template" else f"{place}.{key}".lstrip(".")


def _templates_anywhere(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Pod template (``_is_template``) under ``node``, with its place: the place that
    holds a ``template``, or the ``...Template`` key's own."""
    stack, seen = [(node, where, 0, False)], 0
    while stack and seen < MAX_VALUES:
        value, place, depth, found = stack.pop()
        seen += 1
        if found:
            yield place or "spec", value
        elif isinstance(value, Mapping):
            items = [(v, _key_place(place, k), depth + 1, _is_template(k, v))
                     for k, v in value.items()]  # fmt: skip
            stack += reversed([item for item in items if item[3] or depth < MAX_DEPTH])
        elif isinstance(value, list) and depth < MAX_DEPTH:
            stack += [(item, f"{place}[{_label(item, index)}]", depth + 1, False)
                      for index, item in reversed(list(enumerate(value)))]  # fmt: skip


# Kinds that run Pods tfboot inject cannot change, each for a reason ``unreached`` gives.
ARGO = ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow")
ARGO_STEPS = ("container", "script", "containerSet")  # an Argo template's that run a Pod
SERVING_RUNTIMES = ("ServingRuntime", "ClusterServingRuntime")
UNREACHED = (*ARGO, *SERVING_RUNTIMES, "TrainJob")
ADMISSION = (
    'label its Pods tfboot.dev/inject: "true" for an admission policy (docs/inject.md, '
    "Workload kinds)"
)
KSERVE_SERVER = "KServe builds this model server's container from a ServingRuntime"
KSERVE_WORKERS = "KServe's multi-node workers take no annotations, where inject keeps its record"
# Kinds unreached as a whole, and why.
WHOLE = {
    **dict.fromkeys(SERVING_RUNTIMES, "KServe merges a ServingRuntime into the Pods of each "
                    "InferenceService that uses it, and its Pod spec takes no initContainers"),
    "TrainJob": "Kubeflow Trainer builds its Pods from the runtime it names (spec.runtimeRef) "
                "and spec.trainer",
}  # fmt: skip


def unreached(doc: Mapping[str, Any]) -> Iterator[str]:
    """Why each part of one object that runs containers is no Pod template tfboot inject can
    change (``templates`` does not give it), naming the part; nothing when there is none."""
    kind = str(doc.get("kind", ""))
    if kind in ARGO:
        yield from _argo(doc)
    elif kind == "InferenceService":
        yield from _kserve_unreached(doc)
    elif kind in WHOLE:
        yield f"{WHOLE[kind]}: not injected; {ADMISSION}"
    else:
        places = list(_containers_elsewhere(doc))
        if places:
            yield (
                f"containers at {', '.join(places)} are in no Pod template tfboot inject knows "
                f"(a template with spec.containers): not injected; {ADMISSION}"
            )


def _argo(doc: Mapping[str, Any]) -> Iterator[str]:
    """Argo (argoproj.io/v1alpha1; argo-workflows pkg/apis/workflow/v1alpha1
    workflow_types.go): a template's ``container``, ``script`` or ``containerSet`` is no Pod
    template; Argo builds the Pod itself around its own executor."""
    spec = dig(doc, ("spec", "workflowSpec") if doc.get("kind") == "CronWorkflow" else ("spec",))
    entries = dig(spec, ("templates",))
    runs = []
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        step = next((k for k in ARGO_STEPS if isinstance(dig(entry, (k,)), Mapping)), None)
        if step:
            runs.append(f"{_label(entry, index)} ({step})")
    if runs:
        yield (f"Argo runs templates {', '.join(runs)} in Pods it builds itself, around its own "
               f"executor; tfboot inject does not edit Argo templates: {ADMISSION}")  # fmt: skip


def _kserve_unreached(doc: Mapping[str, Any]) -> Iterator[str]:
    """A component's model server and its multi-node workers."""
    for name in KSERVE_COMPONENTS:
        component = dig(doc, ("spec", name))
        if not isinstance(component, Mapping):
            continue
        server = next((k for k in KSERVE_SERVERS if isinstance(component.get(k), Mapping)), "")
        if server:
            yield f"spec.{name}.{server}: {KSERVE_SERVER}: not injected; {ADMISSION}"
        if isinstance(component.get("workerSpec"), Mapping):
            yield f"spec.{name}.workerSpec: {KSERVE_WORKERS}: not injected; {ADMISSION}"


# Where a spec holds containers: lists of them, and Argo's (or a like kind's) one.
CONTAINER_LISTS = ("containers", "initContainers")


def _containers_elsewhere(doc: Mapping[str, Any]) -> Iterator[str]:
    """The places under ``spec`` that hold containers (an item or a ``container`` with an
    ``image``) outside every Pod template ``templates`` gives."""
    found = {id(template.get("spec")) for _, template in templates(doc)}
    stack, seen = [(doc.get("spec"), "spec", 0)], 0
    while stack and seen < MAX_VALUES:
        value, place, depth = stack.pop()
        seen += 1
        if isinstance(value, Mapping) and id(value) not in found:
            yield from (f"{place}.{k}" for k, v in value.items() if _holds_containers(k, v))
            if depth < MAX_DEPTH:
                stack += [(v, f"{place}.{k}", depth + 1)
                          for k, v in reversed(list(value.items()))
                          if not _holds_containers(k, v)]  # fmt: skip
        elif isinstance(value, list) and depth < MAX_DEPTH:
            stack += [(item, f"{place}[{_label(item, index)}]", depth + 1)
                      for index, item in reversed(list(enumerate(value)))]  # fmt: skip


def _has_image(value: Any) -> bool:
    return isinstance(value, Mapping) and "image" in value


def _holds_containers(key: Any, value: Any) -> bool:
    """``containers`` or ``initContainers`` with a container, or one ``container``."""
    if key in CONTAINER_LISTS and isinstance(value, list):
        return any(_has_image(item) for item in value)
    return key == "container" and _has_image(value)


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
