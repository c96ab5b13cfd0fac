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
from ..errors import AUTO_WITHOUT_SHARE, SHARE_BELOW_ROOM, ConfigError, Problem
from ..frameworks import resolve
from ..kube.documents import quantity
from ..kube.dracaps import container_mps_cap
from ..kube.environment import container_env
from ..kube.framework import framework_of
from ..kube.headroom import Advice, advice
from ..kube.report import Report
from ..kube.shm import MEMORY, NODE, OTHER, RUNTIME, DevShm, dev_shm
from ..kube.workloads import Container, GpuGrant, container_grant
from ..node.cpu import CpuBudget
from ..node.deviceplugin import PLUGINS
from ..node.nccl import SHM
from ..node.shm import DOCKER_DEFAULT_MIB, memory_volume, size_under
from ..settings import (
    CONTRACT,
    CONTROL,
    DISABLE,
    HEADROOM,
    MAX_CPU_THREADS,
    Settings,
    disabled,
)
from .kaishares import check_kai, kai_plan_env, report_kai_elsewhere

ACCEPTED = {variable.name: variable.accepted for variable in CONTRACT + CONTROL}


def _without_hint(problem: Problem) -> str:
    """The problem's text; its hint goes to the finding's fix."""
    return str(replace(problem, hint=""))


def _share_resources() -> str:
    """The resources that grant a GPU memory share, as a fix names them."""
    return " or ".join(f"{p.resource} ({p.name})" for p in PLUGINS if p.resource)


def _other_rooms(room: Advice) -> str:
    """How the share was judged, and what the other frameworks keep, after a message on the
    headroom."""
    others = [f"{names} keep {mib} MiB" for names, mib in room.rooms[1:]]
    return "" if room.given else f" ({'; '.join([room.judged, *others])})"


def _report_auto(container: Container, env: Mapping[str, str], report: Report) -> None:
    """``MEMORY_LIMIT_MB=auto`` that finds nothing: under a DRA MPS claim, the cap to write."""
    dra = container.dra
    room = advice(env, container_grant(container).count, container.spec)
    if dra.limit is not None:
        cap = container_mps_cap(container, env)
        report.add(
            container.where,
            "dra-mps-memory-auto",
            f"MEMORY_LIMIT_MB=auto finds no limit in this container: NVIDIA's DRA driver sets "
            f"the MPS limit of {dra.limit.where} ({dra.limit.mib} MiB) on the MPS control "
            "daemon and hands the container only CUDA_MPS_PIPE_DIRECTORY",
            f"set MEMORY_LIMIT_MB to {cap} (the limit minus {room.shown()})"
            if cap
            else f"raise the limit above {room.shown()}, and set MEMORY_LIMIT_MB to the "
            f"limit minus {room.room.mib}",
        )
    elif dra.gpus or dra.missing:
        report.add(
            container.where,
            "memory-auto-without-share",
            "MEMORY_LIMIT_MB=auto takes the share a GPU-sharing device plugin sets in the "
            "container, and NVIDIA's DRA driver sets none there (an MPS limit stays on the "
            "MPS control daemon)",
            "give MEMORY_LIMIT_MB in MiB; under MPS, the claim's defaultPinnedDeviceMemoryLimit "
            f"minus {room.shown()}",
        )
    elif container.kai is not None:
        report_kai_elsewhere(container, report)
    else:
        report.add(
            container.where,
            "memory-auto-without-share",
            "MEMORY_LIMIT_MB=auto takes the share a GPU-sharing device plugin grants, "
            "and no such resource is requested",
            f"request {_share_resources()}, or give MEMORY_LIMIT_MB in MiB",
        )


def _report_problems(
    container: Container, problems: Sequence[Problem], env: Mapping[str, str], report: Report
) -> None:
    for problem in problems:
        if problem.kind == AUTO_WITHOUT_SHARE:
            _report_auto(container, env, report)
        elif problem.kind == SHARE_BELOW_ROOM:
            report.add(
                container.where,
                "share-below-headroom",
                _without_hint(problem)
                + _other_rooms(advice(env, container_grant(container).count, container.spec)),
                problem.hint or f"ask for a larger share, or set {HEADROOM} lower",
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
    found = framework_of(container.spec, env)
    module = found[0] if found is not None else "tensorflow"
    try:
        return resolve(env, module), env  # as its import reads them
    except ConfigError as exc:
        _report_problems(container, exc.problems, env, report)
        invalid = {p.variable for p in exc.problems}
    rest = {k: v for k, v in env.items() if k not in invalid}
    try:
        return resolve(rest, module), rest
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


def _share_text(grant: GpuGrant) -> str:
    """The share as messages name it: "8192 MiB per GPU (nvidia.com/gpumem)"."""
    resource = grant.source or next(
        (p.resource for p in PLUGINS if p.key == grant.plugin), "the MIG profile"
    )
    return f"{grant.share_mib} MiB per GPU ({resource})"


def _raise_it(grant: GpuGrant) -> str:
    return {"dra-mps": "the claim's MPS limit", "kai": "KAI's gpu-memory"}.get(
        grant.plugin, "the share"
    )


def _check_uncapped(
    container: Container, grant: GpuGrant, env: Mapping[str, str], report: Report
) -> None:
    """No cap at all under a share nothing may enforce (gpushare's; KAI's under gpusharing)."""
    if env.get("MEMORY_LIMIT_MB", "").strip():
        return  # given, but invalid or too large for the share: reported as such
    if grant.plugin == "kai" and container.kai is not None:
        report.add(
            container.where,
            "share-without-cap",
            f"KAI Scheduler shares a GPU ({container.kai.asked()}), and TensorFlow has no cap: "
            "under KAI's gpusharing mode nothing enforces the share and TensorFlow takes the "
            "whole GPU; under nvfractions the container is killed past its share",
            "set MEMORY_LIMIT_MB=auto (the share minus the headroom) or a number of MiB within it",
        )
    elif grant.share_mib is not None and not grant.hard:
        report.add(
            container.where,
            "share-without-cap",
            f"a gpushare share of {_share_text(grant)} is not enforced, and TensorFlow has no "
            "cap: it will take the whole GPU",
            "set MEMORY_LIMIT_MB=auto (the share minus the headroom) or a number of MiB within it",
        )


def _check_share(
    container: Container,
    plan: Plan,
    grant: GpuGrant,
    env: Mapping[str, str],
    room: Advice,
    report: Report,
) -> None:
    """TensorFlow's GPU memory against the share the resources grant: within it, and below
    it by the headroom (``room``: an advised cap keeps ``room.room``; less than
    ``room.least`` left is a warning)."""
    if not grant.count:
        return
    used = [sum(sizes) for sizes in plan.logical_mb.values()]
    if not used:
        _check_uncapped(container, grant, env, report)
        return
    if grant.share_mib is None:
        return
    top, share = max(used), grant.share_mib
    cap = room.cap(share)
    if top > share:
        report.add(
            container.where,
            "gpu-memory-over-share",
            f"TensorFlow gets {top} MiB per GPU (MEMORY_LIMIT_MB/VIRTUAL_SPLIT), "
            f"more than the share of {_share_text(grant)}",
            f"lower MEMORY_LIMIT_MB to at most {cap} (the share minus {room.shown()}), or "
            f"raise {_raise_it(grant)}"
            if cap
            else f"raise {_raise_it(grant)} above {room.shown()}",
        )
    elif grant.hard and share - top < room.least:
        report.add(
            container.where,
            "gpu-memory-no-headroom",
            f"TensorFlow gets {top} MiB per GPU under a hard share of {_share_text(grant)}: "
            f"{share - top} MiB left for the CUDA context, cuDNN, cuBLAS and NCCL, which live "
            f"outside the cap, less than the {room.least} MiB any framework needs",
            f"set MEMORY_LIMIT_MB to {cap} or less (the share minus {room.shown()})"
            if cap
            else f"raise {_raise_it(grant)} above {room.shown()}",
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


def _sized(limit: float | None, given: object, verb: str) -> str:
    """How a fix sizes a memory-backed /dev/shm under ``limit`` (limits.memory, ``given`` as
    written), as ``tfboot inject --shm`` does: ``verb`` and a quarter of the limit."""
    size = size_under(limit) if limit else None
    if size is not None:
        return f"{verb} {size}Mi, a quarter of limits.memory"
    if limit:
        return (f"drop the volume (a quarter of limits.memory, {given}, is not more than the "
                f"runtime's {DOCKER_DEFAULT_MIB} MiB), or raise limits.memory")  # fmt: skip
    return f"{verb} a size within limits.memory, and give the container one"


def _own(limit: float | None) -> str:
    """A memory-backed /dev/shm of the container's own, as a fix names it."""
    size = size_under(limit) if limit else None
    if size is None:
        return f"{memory_volume()}, its sizeLimit within limits.memory"
    return f"{memory_volume(f'{size}Mi')}, a quarter of limits.memory"


def _check_memory_shm(container: Container, shm: DevShm, report: Report) -> None:
    """A memory-backed /dev/shm: bounded, and within limits.memory."""
    given = container.resources("limits").get("memory")
    limit = quantity(given)
    if shm.size is None:
        report.add(container.where, "shm-size-limit",
                   f"{SHM} is {shm.what}: it may fill up to the Pod's memory limit (the "
                   "node's allocatable without one), and its pages count against "
                   "limits.memory",
                   _sized(limit, given, "set its sizeLimit to"))  # fmt: skip
    elif quantity(shm.size) is None:
        report.add(container.where, "quantity-invalid",
                   f"{SHM} is {shm.what}, and its sizeLimit is not a quantity",
                   "write it as a quantity such as 1Gi")  # fmt: skip
    elif limit and (quantity(shm.size) or 0) >= limit:
        report.add(container.where, "shm-over-limit",
                   f"{SHM} is {shm.what}, not less than limits.memory ({given}): its pages "
                   "count against that limit, so a full /dev/shm leaves the job nothing and "
                   "the container is OOMKilled",
                   _sized(limit, given, "lower its sizeLimit to"))  # fmt: skip


def _check_shm(container: Container, settings: Settings, grant: GpuGrant,
               env: Mapping[str, str], report: Report) -> None:  # fmt: skip
    """/dev/shm read as what it is (``kube.shm``): a memory-backed one sized within
    limits.memory; the node's, or one not in memory, said; where the runtime's 64 MiB is what
    the container gets, NCCL's shared memory where NCCL will run, and DataLoader workers'
    batches in a PyTorch GPU container whose limits.memory allows more."""
    shm = dev_shm(container.spec, container.pod)
    given = container.resources("limits").get("memory")
    limit = quantity(given)
    size = size_under(limit) if limit else None
    if shm.kind == MEMORY:
        _check_memory_shm(container, shm, report)
        return
    if shm.kind != RUNTIME and container.spec in (container.pod.get("initContainers") or []):
        return  # an init container's /dev/shm, the node's or on disk, is used briefly
    if shm.kind == NODE:
        report.add(container.where, "shm-host",
                   f"{SHM} is {shm.what}: its size is the node's (by default half its RAM), "
                   "outside limits.memory, though the pages this container writes there "
                   "count against it; every Pod on the node that mounts it shares it, and "
                   "files left there outlive the Pod",
                   "keep it if the job shares memory with the node's processes; else mount "
                   f"{_own(limit)} in its place")  # fmt: skip
        return
    if shm.kind == OTHER:
        report.add(container.where, "shm-not-memory",
                   f"{SHM} is {shm.what}, not memory: what DataLoader workers and NCCL put "
                   "there goes through the page cache to the volume's storage, and its size "
                   "is the volume's",
                   f"mount {_own(limit)} in its place")  # fmt: skip
        return
    distributed = settings.distributed != "off"
    if grant.count > 1 or (distributed and grant.count):
        why = (
            f"{grant.count} GPUs"
            if grant.count > 1
            else f"a GPU under DISTRIBUTED={settings.distributed}"
        )
        report.add(
            container.where,
            "nccl-shm",
            f"{why}: NCCL will run, and {SHM} is {shm.what}: the first all-reduce can "
            "fail on its shared memory",
            f"mount {memory_volume('1Gi')}, within limits.memory, which its pages count against",
        )
    elif grant.count and size and (found := framework_of(container.spec, env)) and \
            found[0] == "torch":  # fmt: skip
        report.add(container.where, "loader-shm",
                   f"a PyTorch GPU container ({found[1]}) with limits.memory ({given}) and "
                   f"{SHM} {shm.what}: DataLoader workers pass their batches through it",
                   f"mount {_own(limit)}, which its pages count against (tfboot inject --shm "
                   "adds one)")  # fmt: skip


def _check_claims(
    container: Container, env: Mapping[str, str], room: Advice, report: Report
) -> None:
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
            f"{room.shown()}",
        )


def check_tfboot(container: Container, report: Report) -> None:
    """The tfboot variables against the resources the container gets (limits, DRA claims,
    a KAI Scheduler share)."""
    grant = container_grant(container)
    env = container_env(container, grant, report)
    room = advice(env, grant.count, container.spec)
    _check_claims(container, env, room, report)
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
    check_kai(container, env, room, report)
    resolved = _resolve(container, kai_plan_env(container, env, room), report)
    if resolved is None:
        return
    settings, planned = resolved
    _check_threads(container, settings, report)
    _check_host_memory(container, settings, report)
    _check_shm(container, settings, grant, env, report)
    plan = _plan(container, settings, grant, planned, report)
    if plan is not None:
        _check_share(container, plan, grant, env, room, report)
