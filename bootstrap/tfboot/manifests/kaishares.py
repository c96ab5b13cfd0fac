"""The findings on a KAI Scheduler share (``kai``): its annotations, and auto's cap under it.

The container sees KAI's share only once bound (``NVIDIA_GPU_MEMORY_LIMITS`` under the
``nvfractions`` mode, ``GPU_PORTION`` under ``gpusharing``), so the checker does not rebuild
that env: it plans ``MEMORY_LIMIT_MB=auto`` with the cap auto will take, and says what
that cap is. A ``gpu-fraction`` share depends on the GPU's memory, unknown offline: it is
planned, and shown, on an 80 GiB GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..budget.roles import NAMES
from ..kube.headroom import Advice
from ..kube.kai import CONTAINER, MEMORY, KaiShare
from ..kube.report import Report
from ..kube.workloads import Container
from ..settings import HEADROOM

# The GPU a gpu-fraction share is shown on: 80 GiB (an A100's or H100's), in MiB.
EXAMPLE_GIB = 80
EXAMPLE_MIB = EXAMPLE_GIB * 1024
MODES = (
    "The share is enforced under KAI's nvfractions mode (the container gets "
    "NVIDIA_GPU_MEMORY_LIMITS) and advisory under gpusharing (it gets GPU_PORTION, the "
    "share of the GPU to two decimals)"
)


def _is_auto(env: Mapping[str, str]) -> bool:
    return env.get("MEMORY_LIMIT_MB", "").strip().lower() == "auto"


def _share_mib(kai: KaiShare) -> int:
    """The MiB of each GPU the share holds: ``gpu-memory``, or the fraction of the example GPU."""
    if kai.memory_mib is not None:
        return kai.memory_mib
    return math.floor((kai.fraction or 0) * EXAMPLE_MIB)


def kai_plan_env(container: Container, env: Mapping[str, str], room: Advice) -> Mapping[str, str]:
    """``env`` to plan with: ``MEMORY_LIMIT_MB=auto`` of the container KAI gives its share
    to becomes the cap auto will take (left out when the share leaves none)."""
    kai = container.kai_share()
    if kai is None or not _is_auto(env):
        return env
    rest = {k: v for k, v in env.items() if k != "MEMORY_LIMIT_MB"}
    cap = room.cap(_share_mib(kai))
    return rest if cap is None else {**rest, "MEMORY_LIMIT_MB": str(cap)}


def check_kai(container: Container, env: Mapping[str, str], room: Advice, report: Report) -> None:
    """The Pod's KAI annotations, on the container KAI gives the share to; under ``auto``,
    the cap it takes, or the share too small for one."""
    kai = container.kai
    if kai is None or kai.container != container.name:
        return
    if kai.invalid:
        report.add(
            container.where,
            "kai-annotation-invalid",
            f"KAI Scheduler's binder refuses this Pod's GPU share: {'; '.join(kai.invalid)}",
            "fix the Pod's annotations as said: the Pod is never bound otherwise",
        )
    elif _is_auto(env) and kai.memory_mib is not None:
        _report_memory(container, kai, room, report)
    elif _is_auto(env):
        _report_fraction(container, kai, room, report)


def _report_memory(container: Container, kai: KaiShare, room: Advice, report: Report) -> None:
    share = kai.memory_mib or 0
    cap = room.cap(share)
    if cap is None:
        report.add(
            container.where,
            "share-below-headroom",
            f"MEMORY_LIMIT_MB=auto under KAI's {kai.asked()}: the share of {share} MiB per GPU "
            f"is at or below {room.shown()}: nothing would be left for the framework's pool"
            + ("" if room.given else f" ({room.judged})"),
            f"ask for more {MEMORY} (above {room.room.mib} MiB), set {HEADROOM} lower, or set "
            "MEMORY_LIMIT_MB to a number below the share",
        )
        return
    report.add(
        container.where,
        "kai-share-cap",
        f"MEMORY_LIMIT_MB=auto takes KAI's share of {share} MiB per GPU ({kai.asked()}) minus "
        f"{room.shown()}: {room.caps(share)}. {MODES}, so under gpusharing the cap can move by up "
        "to 0.5% of the GPU's memory",
        f"nothing to change; MEMORY_LIMIT_MB={cap} pins {NAMES[room.framework]}'s cap in either "
        "mode",
    )


def _report_fraction(container: Container, kai: KaiShare, room: Advice, report: Report) -> None:
    fraction = f"{kai.fraction:g}"
    example = _share_mib(kai)
    on_example = f"on an {EXAMPLE_GIB} GiB GPU ({EXAMPLE_MIB} MiB) the share is {example} MiB: " + (
        room.caps(example) if room.cap(example) else "no cap fits, an error at start"
    )
    report.add(
        container.where,
        "kai-share-cap",
        f"MEMORY_LIMIT_MB=auto takes KAI's share ({kai.asked()}) of each GPU's memory minus "
        f"{room.shown()}: {fraction} x the GPU's MiB - {room.room.mib}. The GPU's memory is "
        f"unknown offline; {on_example}, and a GPU of "
        f"{math.ceil(room.room.mib / (kai.fraction or 1))} MiB or less leaves no cap. {MODES}",
        f"nothing to change; to pin {NAMES[room.framework]}'s cap, set MEMORY_LIMIT_MB to "
        f"{fraction} x your GPU's MiB - {room.room.mib}",
    )


def report_kai_elsewhere(container: Container, report: Report) -> None:
    """``MEMORY_LIMIT_MB=auto`` in a container of a KAI Pod that gets no share: KAI gives
    it to another container (invalid annotations are reported as such)."""
    kai = container.kai
    if kai is None or kai.container == container.name:
        return
    report.add(
        container.where,
        "memory-auto-without-share",
        f"MEMORY_LIMIT_MB=auto takes a GPU share, and KAI Scheduler gives this Pod's to "
        f"container {kai.container} ({CONTAINER}, else the first container), not to this one",
        f"set the Pod annotation {CONTAINER}: {container.name}, or give MEMORY_LIMIT_MB in "
        "MiB here",
    )
