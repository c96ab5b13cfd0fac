"""``tfboot manifests``: check Kubernetes manifests for what schema validation misses.

Schema validation (``kubernetes-validate --strict``) cannot tell that ``MEMORY_LIMIT_MB`` is
larger than the GPU share the Pod asks for, or that a hardened container is not. This
checker reads each workload's Pod template (Pod, PodTemplate, Job, CronJob, Deployment,
StatefulSet, DaemonSet, ReplicaSet, ReplicationController), rebuilds every container's
environment the way the kubelet and the GPU device plugin would, and runs tfboot's own
parser and planner on it (``settings.resolve``, ``plan.make_plan``): one parser, no copy.

Input: files or ``-`` (stdin), multi-document YAML or JSON (a ``List`` too). JSON needs
nothing extra; YAML needs PyYAML (``pip install 'tfboot[manifests]'``), imported only here.

Output: one line per finding (file, object, container, severity, rule, message, fix), or
``--json``. Exit status: 1 on any error (or warning under ``--strict``), 2 when an input
cannot be read at all, else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from .cpu import CpuBudget
from .deviceplugin import GPUSHARE, HAMI_PREFIX
from .errors import ConfigError, Problem
from .plan import Plan, make_plan
from .settings import CONTRACT, CONTROL, DISABLE, ENV_FILE, Settings, disabled, resolve

ERROR, WARNING = "error", "warning"
# Below a hard share, TensorFlow's cap must leave this much for the CUDA context and libraries.
MIN_HEADROOM_MIB = 512

RULES: dict[str, tuple[str, str]] = {
    "unreadable": (ERROR, "the input is not valid YAML or JSON"),
    "malformed": (ERROR, "a field has a shape Kubernetes does not accept"),
    "no-workloads": (ERROR, "the input holds no workload with a Pod template"),
    "config-invalid": (ERROR, "a tfboot variable has an invalid value"),
    "env-not-string": (ERROR, "an env value is not a string"),
    "memory-auto-without-share": (ERROR, "MEMORY_LIMIT_MB=auto with no GPU-sharing resource"),
    "gpu-memory-over-share": (ERROR, "TensorFlow's GPU memory exceeds the GPU share granted"),
    "gpu-memory-no-headroom": (WARNING, f"under {MIN_HEADROOM_MIB} MiB left below a hard share"),
    "share-without-cap": (ERROR, "an advisory GPU share (gpushare) without MEMORY_LIMIT_MB"),
    "visible-gpu-out-of-range": (ERROR, "a VISIBLE_GPU index the GPU resources do not grant"),
    "split-needs-cap": (ERROR, "VIRTUAL_SPLIT on GPUs that cannot be divided as given"),
    "require-gpu-without-gpu": (ERROR, "REQUIRE_GPU=true with no GPU resource"),
    "gpu-setting-without-gpu": (WARNING, "GPU settings with no GPU resource (ignored at run)"),
    "plan-warning": (WARNING, "tfboot will warn at run time"),
    "tfboot-disabled": (WARNING, "TFBOOT_DISABLE is on: no tfboot variable is applied"),
    "cpu-threads-downward": (ERROR, "CPU_THREADS from the Downward API that is not a core count"),
    "cpu-threads-over-limit": (WARNING, "CPU_THREADS above limits.cpu"),
    "resource-field-extended": (ERROR, "a resourceFieldRef to an extended resource"),
    "resource-field-invalid": (ERROR, "a resourceFieldRef to a resource it cannot expose"),
    "resources-missing": (ERROR, "no cpu or memory request or limit"),
    "quantity-invalid": (ERROR, "a resource quantity that does not parse"),
    "requests-over-limits": (ERROR, "a request above its limit"),
    "extended-resource-requests": (ERROR, "an extended resource request unequal to its limit"),
    "run-as-non-root": (ERROR, "the container may run as root"),
    "read-only-root-fs": (ERROR, "readOnlyRootFilesystem is not true"),
    "privilege-escalation": (ERROR, "allowPrivilegeEscalation is not false"),
    "privileged": (ERROR, "the container is privileged"),
    "capabilities-drop-all": (ERROR, "capabilities do not drop ALL"),
    "seccomp-profile": (ERROR, "no RuntimeDefault or Localhost seccomp profile"),
    "image-not-pinned": (ERROR, "the image has no tag, or :latest"),
    "tmp-not-writable": (WARNING, "read-only root filesystem without a volume at /tmp"),
}

ACCEPTED = {variable.name: variable.accepted for variable in CONTRACT + CONTROL}
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Job": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
DOWNWARD_RESOURCES = re.compile(r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-.+)$")
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.(\d+)gb$")
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
           "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
           "P": Decimal("1e15"), "E": Decimal("1e18")}  # fmt: skip
_SUFFIX.update({f"{p}i": Decimal(1024**n) for n, p in enumerate("KMGTPE", start=1)})


class InputError(Exception):
    """An input that cannot be read at all (a missing file, PyYAML not installed)."""


class DocumentError(ValueError):
    """An input that is neither JSON nor YAML."""


@dataclass(frozen=True)
class Finding:
    """One problem: where, which rule, what is wrong and how to fix it."""

    file: str
    object: str
    container: str
    rule: str
    severity: str
    message: str
    hint: str = ""

    def line(self) -> str:
        fix = f" (fix: {self.hint})" if self.hint else ""
        return (
            f"{self.file}: {self.object}: {self.container}: "
            f"{self.severity} {self.rule}: {self.message}{fix}"
        )


@dataclass
class Report:
    """Findings collected for one container (``where``), then for the whole run."""

    findings: list[Finding] = field(default_factory=list)
    objects: int = 0
    containers: int = 0

    def add(self, where: tuple[str, str, str], rule: str, message: str, hint: str = "") -> None:
        self.findings.append(Finding(*where, rule, RULES[rule][0], message, hint))

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)


# ---------------------------------------------------------------- reading documents


def _yaml_module() -> Any:
    try:
        import yaml
    except ImportError:
        raise InputError(
            "reading YAML needs PyYAML: pip install 'tfboot[manifests]' "
            "(JSON input, such as kubectl's -o json, needs nothing)"
        ) from None
    return yaml


def _json_documents(text: str) -> list[Any] | None:
    """Concatenated JSON values, or None when ``text`` is not JSON."""
    decoder, docs, index = json.JSONDecoder(), [], 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return docs
        try:
            doc, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return None
        docs.append(doc)


def parse_documents(text: str) -> list[Any]:
    """Every document in ``text`` (JSON or multi-document YAML), ``List`` items expanded."""
    docs = _json_documents(text) if text.lstrip()[:1] in ("{", "[") else None
    if docs is None:
        yaml = _yaml_module()
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise DocumentError(" ".join(str(exc).split())) from None
    expanded: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            expanded += doc
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            expanded += doc.get("items") or []
        elif doc is not None:
            expanded.append(doc)
    return expanded


def read_source(path: str) -> tuple[str, str]:
    """``(display name, text)`` of a file, or of stdin for ``-``."""
    if path == "-":
        return "<stdin>", sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as fh:
            return path, fh.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- quantities and resources


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``2``) as a number, or None if invalid."""
    match = _QUANTITY.match(str(value).strip()) if value is not None else None
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class GpuGrant:
    """The GPUs a container's limits grant, and the env their device plugin would set."""

    count: int = 0
    share_mib: int | None = None  # GPU memory granted per GPU
    plugin: str = ""  # "hami", "gpushare", "mig", or "" for whole GPUs
    hard: bool = False  # the share is enforced (HAMi, MIG); gpushare's is advisory
    plugin_env: dict[str, str] = field(default_factory=dict)


def _int_limit(limits: Mapping[str, Any], name: str) -> int:
    amount = quantity(limits.get(name))
    return int(amount) if amount is not None and amount == int(amount) and amount > 0 else 0


def gpu_grant(limits: Mapping[str, Any]) -> GpuGrant:
    """What ``limits`` grant: HAMi, gpushare, MIG slices or whole GPUs."""
    gpus = _int_limit(limits, "nvidia.com/gpu") + _int_limit(limits, "amd.com/gpu")
    hami = _int_limit(limits, "nvidia.com/gpumem")
    if hami:
        count = gpus or 1
        env = {f"{HAMI_PREFIX}{i}": f"{hami}m" for i in range(count)}
        return GpuGrant(count, hami, "hami", True, env)
    gpushare = _int_limit(limits, "aliyun.com/gpu-mem")
    if gpushare:
        return GpuGrant(1, gpushare * 1024, "gpushare", False, {GPUSHARE: str(gpushare)})
    mig = [(n, int(m.group(1))) for n, m in _mig_resources(limits)]
    if mig:
        count = sum(n for n, _ in mig)
        return GpuGrant(count, min(gb for _, gb in mig) * 1024, "mig", True)
    return GpuGrant(gpus)


def _mig_resources(limits: Mapping[str, Any]) -> Iterator[tuple[int, re.Match[str]]]:
    for name in limits:
        match = MIG_RESOURCE.match(str(name))
        if match and _int_limit(limits, name):
            yield _int_limit(limits, name), match


# ---------------------------------------------------------------- workloads


@dataclass
class Container:
    """One container with the Pod around it and where to report its findings."""

    spec: dict[str, Any]
    pod: dict[str, Any]
    where: tuple[str, str, str]
    configmaps: Mapping[str, Mapping[str, str]]

    def resources(self, kind: str) -> dict[str, Any]:
        value = (self.spec.get("resources") or {}).get(kind) or {}
        return value if isinstance(value, dict) else {}

    def security(self) -> dict[str, Any]:
        return self.spec.get("securityContext") or {}

    def effective(self, key: str) -> Any:
        """A securityContext field, the container's over the Pod's."""
        own = self.security()
        return own[key] if key in own else (self.pod.get("securityContext") or {}).get(key)


def _dig(doc: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = doc
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def workloads(docs: Sequence[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(kind/name, pod spec)`` for each document that carries a Pod template."""
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind = str(doc.get("kind", ""))
        pod = _dig(doc, POD_SPEC_PATHS.get(kind, ("-",)))
        if isinstance(pod, dict):
            yield f"{kind}/{_dig(doc, ('metadata', 'name')) or '?'}", pod


def configmaps(docs: Sequence[Any]) -> dict[str, dict[str, str]]:
    """ConfigMaps in the same input, by name, for ``configMapKeyRef`` and ``envFrom``."""
    return {
        str(_dig(doc, ("metadata", "name"))): {
            k: str(v) for k, v in (doc.get("data") or {}).items()
        }
        for doc in docs
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    }


def containers(
    file: str, obj: str, pod: dict[str, Any], maps: Mapping[str, Mapping[str, str]]
) -> Iterator[Container]:
    for key in ("initContainers", "containers"):
        for spec in pod.get(key) or []:
            if isinstance(spec, dict):
                yield Container(spec, pod, (file, obj, str(spec.get("name", "?"))), maps)


# ---------------------------------------------------------------- the environment


def _downward_value(container: Container, ref: Mapping[str, Any]) -> str | None:
    """What the kubelet writes for a ``resourceFieldRef``: the amount / divisor, rounded up."""
    kind, _, name = str(ref.get("resource", "")).partition(".")
    target = ref.get("containerName") or container.spec.get("name")
    for spec in container.pod.get("containers") or []:
        if isinstance(spec, dict) and spec.get("name") == target:
            amount = quantity(((spec.get("resources") or {}).get(kind) or {}).get(name))
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


# ---------------------------------------------------------------- tfboot settings


def _without_hint(problem: Problem) -> str:
    """The problem's text; its hint goes to the finding's fix."""
    return str(replace(problem, hint=""))


def _is_auto_without_plugin(problem: Problem) -> bool:
    return problem.variable == "MEMORY_LIMIT_MB" and str(problem.value).strip().lower() == "auto"


def _report_problems(container: Container, problems: Sequence[Problem], report: Report) -> None:
    for problem in problems:
        if _is_auto_without_plugin(problem):
            report.add(
                container.where,
                "memory-auto-without-share",
                "MEMORY_LIMIT_MB=auto takes the share a GPU-sharing device plugin grants, "
                "and no such resource is requested",
                "request nvidia.com/gpumem (HAMi) or aliyun.com/gpu-mem (gpushare), "
                "or give MEMORY_LIMIT_MB in MiB",
            )
        else:
            accepted = ACCEPTED.get(problem.variable, "")
            hint = problem.hint or (f"accepted: {accepted}" if accepted else "")
            report.add(container.where, "config-invalid", _without_hint(problem), hint)


def _resolve(
    container: Container, env: Mapping[str, str], report: Report
) -> tuple[Settings, Mapping[str, str]] | None:
    """Settings from ``env``; when some values are invalid, the settings without them.

    The second attempt lets the checks against the resources run on the valid values.
    """
    try:
        return resolve(env), env
    except ConfigError as exc:
        _report_problems(container, exc.problems, report)
        invalid = {p.variable for p in exc.problems}
    rest = {k: v for k, v in env.items() if k not in invalid}
    try:
        return resolve(rest), rest
    except ConfigError:
        return None


PLAN_RULES = {
    "VISIBLE_GPU": "visible-gpu-out-of-range",
    "VIRTUAL_SPLIT": "split-needs-cap",
    "REQUIRE_GPU": "require-gpu-without-gpu",
}


def _plan(
    container: Container,
    settings: Settings,
    grant: GpuGrant,
    env: Mapping[str, str],
    report: Report,
) -> Plan | None:
    """tfboot's own plan for a node that gives exactly what the limits grant."""
    cpus = quantity(container.resources("limits").get("cpu"))
    quota = float(cpus) if cpus else None
    budget = CpuBudget(max(1, math.ceil(quota or 1)), quota, "limits.cpu")
    try:
        plan = make_plan(settings, grant.count, budget, env)
    except ConfigError as exc:
        for problem in exc.problems:
            rule = PLAN_RULES.get(problem.variable, "config-invalid")
            hint = _plan_hint(rule, grant) or problem.hint
            report.add(container.where, rule, _on_node(_without_hint(problem), grant), hint)
        return None
    rule = "plan-warning" if grant.count else "gpu-setting-without-gpu"
    for warning in plan.warnings:
        report.add(container.where, rule, _on_node(warning, grant), _plan_hint(rule, grant))
    return plan


def _on_node(text: str, grant: GpuGrant) -> str:
    granted = f"{grant.count} GPU(s)" if grant.count else "no GPU"
    return f"{text} [the limits grant {granted}]"


def _plan_hint(rule: str, grant: GpuGrant) -> str:
    return {
        "require-gpu-without-gpu": "request a GPU (nvidia.com/gpu) or drop REQUIRE_GPU",
        "gpu-setting-without-gpu": "request a GPU, or drop the GPU settings from this container",
        "visible-gpu-out-of-range": f"use indexes below {grant.count}, or request more GPUs",
        "plan-warning": "change the setting the message names, or accept what it says",
    }.get(rule, "")


def _check_share(container: Container, plan: Plan, grant: GpuGrant, report: Report) -> None:
    """TensorFlow's GPU memory against the share the resources grant."""
    if grant.share_mib is None or not grant.count:
        return
    used = [sum(sizes) for sizes in plan.gpu_logical_mb.values()]
    resource = {"hami": "nvidia.com/gpumem", "gpushare": "aliyun.com/gpu-mem"}.get(
        grant.plugin, "the MIG profile"
    )
    share = f"{grant.share_mib} MiB per GPU ({resource})"
    if not used:
        if not grant.hard:
            report.add(
                container.where,
                "share-without-cap",
                f"a gpushare share of {share} is not enforced, and TensorFlow has no cap: "
                "it will take the whole GPU",
                "set MEMORY_LIMIT_MB=auto (the share) or a number of MiB within it",
            )
        return
    top = max(used)
    if top > grant.share_mib:
        report.add(
            container.where,
            "gpu-memory-over-share",
            f"TensorFlow gets {top} MiB per GPU (MEMORY_LIMIT_MB/VIRTUAL_SPLIT), "
            f"more than the share of {share}",
            f"lower MEMORY_LIMIT_MB to at most {grant.share_mib - MIN_HEADROOM_MIB}, "
            "or raise the share",
        )
    elif grant.hard and grant.share_mib - top < MIN_HEADROOM_MIB:
        report.add(
            container.where,
            "gpu-memory-no-headroom",
            f"TensorFlow gets {top} MiB per GPU under a hard share of {share}: "
            f"{grant.share_mib - top} MiB left for the CUDA context, cuDNN and cuBLAS, "
            "which live outside the cap",
            f"set MEMORY_LIMIT_MB to {grant.share_mib - MIN_HEADROOM_MIB} or less "
            "(1 GiB of headroom is safer)",
        )


def _check_threads(container: Container, settings: Settings, report: Report) -> None:
    threads = settings.cpu_threads
    cpus = quantity(container.resources("limits").get("cpu"))
    if isinstance(threads, int) and cpus and threads > math.ceil(cpus):
        report.add(
            container.where,
            "cpu-threads-over-limit",
            f"CPU_THREADS={threads} is more than the {cpus} CPU(s) of limits.cpu: "
            "the threads will be throttled",
            "use CPU_THREADS=auto (limits.cpu, rounded up)",
        )


def check_tfboot(container: Container, report: Report) -> None:
    """The tfboot variables against the resources the container gets."""
    grant = gpu_grant(container.resources("limits"))
    env = container_env(container, grant, report)
    try:
        if disabled(env):
            report.add(
                container.where,
                "tfboot-disabled",
                f"{DISABLE} is on: no tfboot variable of this container is applied",
                f"unset {DISABLE}",
            )
            return
    except ConfigError:
        pass  # reported by resolve below
    resolved = _resolve(container, env, report)
    if resolved is None:
        return
    settings, env = resolved
    _check_threads(container, settings, report)
    plan = _plan(container, settings, grant, env, report)
    if plan is not None:
        _check_share(container, plan, grant, report)


# ---------------------------------------------------------------- resources


def check_resources(container: Container, report: Report) -> None:
    """cpu and memory requests and limits present, quantities valid, requests within limits."""
    requests, limits = container.resources("requests"), container.resources("limits")
    for kind, values in (("requests", requests), ("limits", limits)):
        missing = [r for r in ("cpu", "memory") if r not in values]
        if missing:
            report.add(
                container.where,
                "resources-missing",
                f"no {' or '.join(missing)} {kind}",
                f"set resources.{kind}.{missing[0]}" + (" and memory" if len(missing) > 1 else ""),
            )
        for name, value in values.items():
            if quantity(value) is None:
                report.add(
                    container.where,
                    "quantity-invalid",
                    f"resources.{kind}.{name}: {value!r} is not a quantity",
                    "write a quantity such as 500m, 2, 4Gi",
                )
    _check_request_pairs(container, requests, limits, report)


def _check_request_pairs(
    container: Container, requests: Mapping[str, Any], limits: Mapping[str, Any], report: Report
) -> None:
    for name, value in requests.items():
        asked, cap = quantity(value), quantity(limits.get(name))
        if asked is None or cap is None:
            continue
        if "/" in str(name) and asked != cap:
            report.add(
                container.where,
                "extended-resource-requests",
                f"{name}: request {value} differs from limit {limits[name]}",
                "give extended resources in limits only (requests default to them)",
            )
        elif asked > cap:
            report.add(
                container.where,
                "requests-over-limits",
                f"{name}: request {value} is above the limit {limits[name]}",
                "make the request at most the limit",
            )


# ---------------------------------------------------------------- security context


SecurityRule = tuple[str, Callable[[Container], bool], str, str]
SECURITY_RULES: tuple[SecurityRule, ...] = (
    (
        "run-as-non-root",
        lambda c: c.effective("runAsNonRoot") is True and c.effective("runAsUser") != 0,
        "runAsNonRoot is not true, or runAsUser is 0",
        "set securityContext.runAsNonRoot: true and a non-zero runAsUser",
    ),
    (
        "read-only-root-fs",
        lambda c: c.security().get("readOnlyRootFilesystem") is True,
        "readOnlyRootFilesystem is not true",
        "set it, with emptyDir volumes for /tmp and HOME",
    ),
    (
        "privilege-escalation",
        lambda c: c.security().get("allowPrivilegeEscalation") is False,
        "allowPrivilegeEscalation is not false",
        "set securityContext.allowPrivilegeEscalation: false",
    ),
    (
        "privileged",
        lambda c: c.security().get("privileged") is not True,
        "the container is privileged",
        "remove privileged: true",
    ),
    (
        "capabilities-drop-all",
        lambda c: "ALL" in ((c.security().get("capabilities") or {}).get("drop") or []),
        "capabilities.drop does not list ALL",
        'set securityContext.capabilities.drop: ["ALL"]',
    ),
    (
        "seccomp-profile",
        lambda c: (
            (c.effective("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
        ),
        "seccompProfile is not RuntimeDefault or Localhost (on the container or the Pod)",
        "set securityContext.seccompProfile.type: RuntimeDefault",
    ),
    (
        "tmp-not-writable",
        lambda c: c.security().get("readOnlyRootFilesystem") is not True or _mounted(c, "/tmp"),
        "the root filesystem is read-only and /tmp is not a volume",
        "mount an emptyDir at /tmp",
    ),
)


def check_security(container: Container, report: Report) -> None:
    """The hardened security context, one rule per setting."""
    for rule, holds, message, hint in SECURITY_RULES:
        if not holds(container):
            report.add(container.where, rule, message, hint)


def _mounted(container: Container, path: str) -> bool:
    mounts = container.spec.get("volumeMounts") or []
    return any(str((m or {}).get("mountPath", "")).rstrip("/") == path for m in mounts)


def check_image(container: Container, report: Report) -> None:
    """The image is pinned by a tag other than ``latest``, or by digest."""
    image = str(container.spec.get("image", ""))
    if "@" in image:
        return
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or tag == "latest":
        report.add(
            container.where,
            "image-not-pinned",
            f"image {image or '(none)'} is not pinned by tag",
            "give a version tag such as :1.0.0 (kustomize images: newTag), or a digest",
        )


CONTAINER_CHECKS = (check_resources, check_security, check_image, check_tfboot)


# ---------------------------------------------------------------- running


def check_text(file: str, text: str, report: Report) -> None:
    """Check every workload in one input."""
    try:
        docs = parse_documents(text)
    except DocumentError as exc:
        report.add((file, "-", "-"), "unreadable", str(exc))
        return
    maps = configmaps(docs)
    for obj, pod in workloads(docs):
        report.objects += 1
        for container in containers(file, obj, pod, maps):
            report.containers += 1
            for check in CONTAINER_CHECKS:
                _run_check(check, container, report)


def _run_check(
    check: Callable[[Container, Report], None], container: Container, report: Report
) -> None:
    """One check; a field of an unexpected type is a finding, not a crash."""
    try:
        check(container, report)
    except (AttributeError, TypeError, KeyError) as exc:
        report.add(
            container.where,
            "malformed",
            f"{check.__name__} could not read this container: {type(exc).__name__}: {exc}",
            "run kubernetes-validate --strict on it to see which field has the wrong shape",
        )


def check_paths(paths: Sequence[str]) -> Report:
    """Check files (``-`` for stdin); raises ``InputError`` when one cannot be read."""
    report = Report()
    for path in paths:
        check_text(*read_source(path), report)
    if not report.objects and not any(f.rule == "unreadable" for f in report.findings):
        report.add(
            (", ".join(paths), "-", "-"),
            "no-workloads",
            "no Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet found",
            "check that the input is the rendered manifests (kubectl kustomize DIR)",
        )
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, for a parser made elsewhere."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="YAML or JSON files; - for stdin")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--strict", action="store_true", help="fail on warnings too")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")


def run(args: argparse.Namespace) -> int:
    """Run the checks as ``args`` say; the exit status."""
    if args.list_rules:
        for rule, (severity, summary) in RULES.items():
            print(f"{rule:<28} {severity:<8} {summary}")
        return 0
    if not args.paths:
        print("tfboot manifests: give files, or - for stdin", file=sys.stderr)
        return 2
    try:
        report = check_paths(args.paths)
    except InputError as exc:
        print(f"tfboot manifests: {exc}", file=sys.stderr)
        return 2
    errors, warnings = report.count(ERROR), report.count(WARNING)
    if args.json:
        summary = {"errors": errors, "warnings": warnings, "objects": report.objects,
                   "containers": report.containers}  # fmt: skip
        print(json.dumps({"findings": [asdict(f) for f in report.findings], "summary": summary}))
    else:
        for finding in report.findings:
            print(finding.line())
        print(
            f"tfboot manifests: {errors} error(s), {warnings} warning(s) in "
            f"{report.containers} container(s) of {report.objects} object(s)",
            file=sys.stderr,
        )
    return 1 if errors or (args.strict and warnings) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``tfboot manifests PATH...|-``: the exit status."""
    parser = argparse.ArgumentParser(
        prog="tfboot manifests",
        description="Check Kubernetes manifests: tfboot variables against the resources "
        "granted (GPU shares, GPU counts, CPU limits), valid values, the hardened security "
        "context, pinned images. Schema validation does not catch these.",
        epilog="example: kubectl kustomize k8s/overlays/shared-gpu-hami | tfboot manifests -",
    )
    add_arguments(parser)
    return run(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))
