"""The tfboot variables of a container against the resources it is granted.

Runs tfboot's own parser and TensorFlow's planner (``settings.resolve``,
``adapters.tensorflow.make_plan``) on the
rebuilt environment, for a node that gives exactly what the limits grant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..adapters import Plan
from ..adapters.tensorflow import make_plan
from ..budget import NO_LIMIT, make_budget
from ..errors import ConfigError, Problem
from ..node.cpu import CpuBudget
from ..node.deviceplugin import HARD_HEADROOM_MB, PLUGINS
from ..node.nccl import SHM
from ..settings import CONTRACT, CONTROL, DISABLE, MAX_CPU_THREADS, Settings, disabled, resolve
from .documents import quantity
from .environment import container_env
from .report import Report
from .rules import MIN_HEADROOM_MIB
from .workloads import Container, GpuGrant, container_grant

ACCEPTED = {variable.name: variable.accepted for variable in CONTRACT + CONTROL}


def _without_hint(problem: Problem) -> str:
    """The problem's text; its hint goes to the finding's fix."""
    return str(replace(problem, hint=""))


def _share_resources() -> str:
    """The resources that grant a GPU memory share, as a fix names them."""
    return " or ".join(f"{p.resource} ({p.name})" for p in PLUGINS if p.resource)


def _is_auto_without_plugin(problem: Problem) -> bool:
    return problem.variable == "MEMORY_LIMIT_MB" and str(problem.value).strip().lower() == "auto"


def _report_auto(container: Container, report: Report) -> None:
    """``MEMORY_LIMIT_MB=auto`` that finds nothing: under a DRA MPS claim, the cap to write."""
    dra = container.dra
    if dra.limit is not None:
        cap = dra.cap_mib
        report.add(
            container.where,
            "dra-mps-memory-auto",
            f"MEMORY_LIMIT_MB=auto finds no limit in this container: NVIDIA's DRA driver sets "
            f"the MPS limit of {dra.limit.where} ({dra.limit.mib} MiB) on the MPS control "
            "daemon and hands the container only CUDA_MPS_PIPE_DIRECTORY",
            f"set MEMORY_LIMIT_MB to {cap} (the limit minus {HARD_HEADROOM_MB} MiB of headroom "
            "for the CUDA context)"
            if cap
            else f"raise the limit above {HARD_HEADROOM_MB} MiB, and set MEMORY_LIMIT_MB to "
            f"the limit minus {HARD_HEADROOM_MB}",
        )
    elif dra.gpus or dra.missing:
        report.add(
            container.where,
            "memory-auto-without-share",
            "MEMORY_LIMIT_MB=auto takes the share a GPU-sharing device plugin sets in the "
            "container, and NVIDIA's DRA driver sets none there (an MPS limit stays on the "
            "MPS control daemon)",
            "give MEMORY_LIMIT_MB in MiB; under MPS, the claim's defaultPinnedDeviceMemoryLimit "
            f"minus {HARD_HEADROOM_MB}",
        )
    else:
        report.add(
            container.where,
            "memory-auto-without-share",
            "MEMORY_LIMIT_MB=auto takes the share a GPU-sharing device plugin grants, "
            "and no such resource is requested",
            f"request {_share_resources()}, or give MEMORY_LIMIT_MB in MiB",
        )


def _report_problems(container: Container, problems: Sequence[Problem], report: Report) -> None:
    for problem in problems:
        if _is_auto_without_plugin(problem):
            _report_auto(container, report)
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
    # The node's CPU count is unknown here; cpu-threads-over-limit compares with the limit.
    budget = CpuBudget(MAX_CPU_THREADS, quota, "limits.cpu")
    try:
        plan = make_plan(make_budget(settings, env, cpu=budget, memory=NO_LIMIT), grant.count)
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
    used = [sum(sizes) for sizes in plan.logical_mb.values()]
    resource = grant.source or next(
        (p.resource for p in PLUGINS if p.key == grant.plugin), "the MIG profile"
    )
    share = f"{grant.share_mib} MiB per GPU ({resource})"
    cap = grant.share_mib - MIN_HEADROOM_MIB
    raise_it = "the claim's MPS limit" if grant.plugin == "dra-mps" else "the share"
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
            f"lower MEMORY_LIMIT_MB to at most {cap}, or raise {raise_it}"
            if cap > 0
            else f"raise {raise_it} above {MIN_HEADROOM_MIB} MiB",
        )
    elif grant.hard and grant.share_mib - top < MIN_HEADROOM_MIB:
        report.add(
            container.where,
            "gpu-memory-no-headroom",
            f"TensorFlow gets {top} MiB per GPU under a hard share of {share}: "
            f"{grant.share_mib - top} MiB left for the CUDA context, cuDNN and cuBLAS, "
            "which live outside the cap",
            f"set MEMORY_LIMIT_MB to {cap} or less (1 GiB of headroom is safer)"
            if cap > 0
            else f"raise {raise_it} above {MIN_HEADROOM_MIB} MiB",
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


def _check_host_memory(container: Container, settings: Settings, report: Report) -> None:
    """``HOST_MEMORY_LIMIT_MB`` within limits.memory: the budgets are shares of it."""
    limit = quantity(container.resources("limits").get("memory"))
    given = settings.host_memory
    if not isinstance(given, int) or not limit:
        return
    limit_mib = math.floor(limit / (1 << 20))
    if given > limit_mib:
        report.add(
            container.where,
            "host-memory-over-limit",
            f"HOST_MEMORY_LIMIT_MB={given} is more than the {limit_mib} MiB of limits.memory: "
            "tf.data's buffers and pinned memory, sized from it, can get the Pod OOMKilled",
            "set it from limits.memory (resourceFieldRef, divisor 1Mi), or leave it unset "
            "(auto reads the container's limit)",
        )


def _check_shm(container: Container, settings: Settings, grant: GpuGrant, report: Report) -> None:
    """NCCL's shared memory: a memory-backed emptyDir at /dev/shm where NCCL will run."""
    distributed = settings.distributed != "off"
    if grant.count < 2 and not (distributed and grant.count):
        return
    at_shm = {
        m.get("name")
        for m in container.spec.get("volumeMounts") or []
        if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == SHM
    }
    in_memory = {
        v.get("name")
        for v in container.pod.get("volumes") or []
        if isinstance(v, dict) and (v.get("emptyDir") or {}).get("medium") == "Memory"
    }
    if at_shm & in_memory:
        return
    why = (
        f"{grant.count} GPUs"
        if grant.count > 1
        else f"a GPU under DISTRIBUTED={settings.distributed}"
    )
    report.add(
        container.where,
        "nccl-shm",
        f"{why}: NCCL will run, and {SHM} is the runtime's 64 MiB: the first all-reduce can "
        "fail on its shared memory",
        f"mount an emptyDir with medium: Memory (sizeLimit: 1Gi) at {SHM}",
    )


def _check_claims(container: Container, env: Mapping[str, str], report: Report) -> None:
    """The DRA claims' MPS limits that cannot be read, or are not in the inputs."""
    dra = container.dra
    for text in dra.invalid:
        report.add(
            container.where,
            "quantity-invalid",
            f"the MPS limit {text}",
            "write the limit as a quantity such as 10Gi",
        )
    if dra.missing and env.get("MEMORY_LIMIT_MB", "").strip():
        claims = ", ".join(dra.missing)
        report.add(
            container.where,
            "dra-claim-not-found",
            f"the container takes {claims}, which the inputs do not hold: an MPS limit there "
            "is not checked against MEMORY_LIMIT_MB",
            "check the claim with the workload (render both into one input), or keep "
            "MEMORY_LIMIT_MB at most its defaultPinnedDeviceMemoryLimit minus "
            f"{HARD_HEADROOM_MB} MiB",
        )


def check_tfboot(container: Container, report: Report) -> None:
    """The tfboot variables against the resources the container gets (limits, DRA claims)."""
    grant = container_grant(container)
    env = container_env(container, grant, report)
    _check_claims(container, env, report)
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
    _check_host_memory(container, settings, report)
    _check_shm(container, settings, grant, report)
    plan = _plan(container, settings, grant, env, report)
    if plan is not None:
        _check_share(container, plan, grant, report)
