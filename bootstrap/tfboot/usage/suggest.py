"""What to set next time, from one run's usage record or many (pure).

Each run's need is its peak plus a margin; a run that hit its budget (an OOM kill, a
``memory.high`` event, an allocator OOM, a peak at or near the limit, CPU throttling, or
no final report: killed) needs more than it got, so its need grows from the budget, never
shrinks. Over many runs the need is taken at a percentile (nearest rank). The margins come
from the anchors platform engineers already use (docs/usage.md):

- ``MARGIN`` 15%: the Vertical Pod Autoscaler's ``--recommendation-margin-fraction`` and
  krr's memory buffer;
- ``GROW`` x1.25 of the budget, at least ``GROW_MIB`` more: krr's rule for an OOM-killed
  container (its peak is cut off at the limit, so it says nothing of the need), and VPA's
  +100 MiB after an OOM;
- ``MIN_MEMORY_MIB`` 250 MiB: VPA's floor, for host and GPU memory; ``MIN_CPU`` 0.1 CPU;
- the GPU share (``gpu_share_mib``): the cap plus the memory outside the allocator's pool
  (the CUDA context and libraries) NVML measured, with the margin; where it measured none,
  the framework's headroom ``MEMORY_LIMIT_MB=auto`` keeps below a share (its adapter's
  ``HEADROOM``).
  Where the runs were under a GPU-sharing plugin, the share also in its terms (``shares``);
- CPU at the 95th percentile (krr's), memory at the maximum (VPA's and krr's: memory is not
  compressible);
- ``MIN_CPU_WINDOW_S`` 60 s: no CPU figure is suggested from a shorter run. VPA's
  recommender takes one CPU sample a minute (``--recommender-interval``, 1 min) and sizes
  from days of them; a few seconds of start-up say nothing of a job's steady need. Memory
  is still suggested: a peak is a peak, however short the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ..budget.caps import headroom
from ..budget.roles import NAMES
from ..frameworks import HEADROOMS
from ..node.shm import docker_flag, memory_volume, size_for
from ..settings import resolve
from .shares import in_terms, shown

MARGIN = 0.15
GROW = 1.25
GROW_MIB = 100
NEAR = 0.95  # a peak at this share of its budget or more counts as hitting it
THROTTLED = 0.05  # throttled in this share of CFS periods or more: the quota is too small
MIN_MEMORY_MIB = 250
MIN_CPU = 0.1
MIN_CPU_WINDOW_S = 60
ROUND_MIB = 16  # memory suggestions are whole multiples of this
CPU_PERCENTILE = 95
MEMORY_PERCENTILE = 100


def _up(value: float, step: int) -> int:
    return int(math.ceil(value / step) * step)


def _grown(peak: float, budget: float | None, hit: bool, step: float = GROW_MIB
           ) -> tuple[float, bool]:  # fmt: skip
    """The need for one figure: its peak plus the margin; from its budget, at least ``step``
    more, when it hit it."""
    need = peak * (1 + MARGIN)
    if hit and budget:
        return max(need, budget * GROW, budget + step), True
    return need, False


def run_needs(record: dict[str, Any], unfinished_killed: bool = True) -> dict[str, Any]:
    """One run's needs: GPU MiB per physical GPU, host memory MiB, CPUs; with the reasons.
    ``unfinished_killed``: a record with no final report is a run that was killed."""
    why: list[str] = []
    notes: list[str] = []
    waited = None if record.get("final", False) else record.get("waiting")
    killed = unfinished_killed and not record.get("final", False) and not waited
    if waited:
        notes.append(f"no final report: the run was waiting for its peers, which "
                     f"{waited['limit']}={waited['seconds']:g} s bounds; read as that end, "
                     "not as a kill")  # fmt: skip
    gpu = _gpu_need(record.get("gpus") or [], why)
    memory = record.get("host_memory") or {}
    memory_need = None
    if memory.get("peak_mib") is not None:
        memory_need = _memory_need(memory, killed, why, notes)
    cpu = record.get("cpu") or {}
    cpu_need = None
    wall = cpu.get("wall_seconds")
    short = isinstance(wall, int | float) and wall < MIN_CPU_WINDOW_S
    if short and cpu.get("used_cpus") is not None:
        notes.append(f"a run of {wall:g} s gives no CPU figure (under {MIN_CPU_WINDOW_S} s)")
    elif cpu.get("used_cpus") is not None:
        cpu_need = _cpu_need(cpu, why, notes)
    shm = record.get("shm") or {}
    shm_need = shm["peak_mib"] * (1 + MARGIN) if shm.get("peak_mib") else None
    return {"gpu_mib": gpu, "memory_mib": memory_need, "cpus": cpu_need, "why": why,
            "shm_mib": shm_need,
            "notes": notes, "outside_pool_mib": _outside(record.get("gpus") or []),
            "memory_covers": ((memory.get("scope") or {}).get("covers") or "cgroup")}  # fmt: skip


def _stretches(section: dict[str, Any], earlier: str, limit: str) -> list[dict[str, Any]]:
    """The run's stretches under one limit each, the last the limit at the end: a record
    with no resize, or one written before stretches were kept, is one stretch."""
    since = section.get("since_resize")
    listed = section.get(earlier) or []
    if not listed or not isinstance(since, dict):
        return [section]
    return [*listed, {**since, limit: section.get(limit)}]


def _resized_note(hit: dict[str, Any], stretches: list[dict[str, Any]], limit: str,
                  what: str, unit: str) -> str | None:  # fmt: skip
    """A note where only a stretch whose limit a resize lowered hit it: the resize, not the
    job, made that figure (the job had more before)."""
    before = stretches[: stretches.index(hit)]
    larger = [s for s in before if (s.get(limit) or 0) > (hit.get(limit) or 0)]
    if not larger:
        return None
    return (
        f"{what} hit its limit of {hit.get(limit)}{unit} only after a resize lowered it "
        f"from {larger[-1].get(limit)}{unit}: the resize, not the job, made that figure"
    )


def _memory_need(memory: dict[str, Any], killed: bool, why: list[str],
                 notes: list[str]) -> float:  # fmt: skip
    """The memory need: the run's peak plus the margin, grown from the limit of the last
    stretch that hit its own limit (each peak judged against the limit in force then)."""
    stretches = _stretches(memory, "earlier_limits", "limit_mib")
    hit, cause = None, ""
    for stretch in stretches:
        events = [f"{stretch.get(k)} {label}" for k, label in
                  (("oom_kills", "OOM kills"), ("high_events", "memory.high events"))
                  if stretch.get(k)]  # fmt: skip
        limit, peak = stretch.get("limit_mib"), stretch.get("peak_mib")
        near = bool(limit) and peak is not None and peak >= NEAR * limit
        if events or near:
            hit, cause = stretch, ", ".join(events) or "peak at the limit"
    if hit is None and killed:
        hit, cause = stretches[-1], "no final report (killed)"
    limit = None if hit is None else hit.get("limit_mib")
    need, grew = _grown(memory["peak_mib"], limit, hit is not None)
    if grew and hit is not None:
        why.append(f"host memory grows from its limit {limit} MiB ({cause})")
        note = _resized_note(hit, stretches, "limit_mib", "host memory", " MiB")
        notes += [note] if note else []
    return max(need, MIN_MEMORY_MIB)


def _cpu_need(cpu: dict[str, Any], why: list[str], notes: list[str]) -> float:
    """The CPU need: the CPUs used plus the margin (the most any stretch of a minute or more
    used, where a resize split the run), grown from the quota of the last stretch that was
    throttled."""
    stretches = _stretches(cpu, "earlier_quotas", "quota")
    used = max([cpu["used_cpus"], *(s["used_cpus"] for s in stretches if
                isinstance(s.get("used_cpus"), int | float) and
                (s.get("seconds") or 0) >= MIN_CPU_WINDOW_S)])  # fmt: skip
    hit = None
    for stretch in stretches:
        if (stretch.get("throttled_fraction") or 0.0) >= THROTTLED:
            hit = stretch
    need, grew = _grown(used, None if hit is None else hit.get("quota"), hit is not None, 0)
    if grew and hit is not None:
        why.append(f"CPU grows from its quota {hit.get('quota')} (throttled in "
                   f"{hit['throttled_fraction']:.1%} of periods)")  # fmt: skip
        note = _resized_note(hit, stretches, "quota", "CPU", " CPUs")
        notes += [note] if note else []
    return max(need, MIN_CPU)


def _gpu_need(gpus: list[dict[str, Any]], why: list[str]) -> float | None:
    """The cap each physical GPU needs (``MEMORY_LIMIT_MB`` is per GPU): a GPU split into
    logical devices needs as many times its largest logical need."""
    by_gpu: dict[tuple[Any, str, int], list[float]] = {}
    for gpu in gpus:
        if gpu.get("peak_mib") is None:
            continue
        cap = gpu.get("cap_mib")
        hit = bool(gpu.get("ooms")) or (bool(cap) and gpu["peak_mib"] >= NEAR * cap)
        need, grew = _grown(gpu["peak_mib"], cap, hit)
        if grew:
            why.append(
                f"{gpu['framework']} GPU {gpu['index']} grows from its cap {cap} MiB "
                f"(peak {gpu['peak_mib']} MiB, {gpu.get('ooms') or 0} allocator OOMs)"
            )
        key = (gpu.get("pid"), gpu["framework"], gpu["physical"])  # a cap is per process
        by_gpu.setdefault(key, []).append(need)
    if not by_gpu:
        return None
    return max(len(needs) * max(needs) for needs in by_gpu.values())


def _outside(gpus: list[dict[str, Any]]) -> float | None:
    """The most NVML measured outside an allocator's pool on one GPU, if any."""
    measured = [g["outside_pool_mib"] for g in gpus if g.get("outside_pool_mib") is not None]
    return max(measured) if measured else None


def _headroom(records: Sequence[dict[str, Any]]) -> tuple[int, str]:
    """The largest headroom ``MEMORY_LIMIT_MB=auto`` keeps for the runs' frameworks, by the
    one rule (``budget.caps.headroom``) under the settings of an empty environment."""
    used = {gpu.get("framework") for record in records for gpu in record.get("gpus") or []}
    seen = [module for module in HEADROOMS if NAMES[module] in used] or ["tensorflow"]
    settings = resolve({})
    rooms = {m: headroom(settings, {}, HEADROOMS[m], NAMES[m]) for m in seen}
    module = max(seen, key=lambda m: rooms[m].mib)
    return rooms[module].mib, f"{NAMES[module]}'s headroom below a share ({rooms[module].why})"


def _share(found: dict[str, Any], cap: int, outside: float | None,
           records: Sequence[dict[str, Any]], runs: str) -> None:  # fmt: skip
    """The GPU share a device plugin should grant: the cap and what lies outside the pool."""
    if outside is not None:
        extra = _up(outside * (1 + MARGIN), ROUND_MIB)
        how = f"the most NVML measured outside the pool, {outside} MiB over {runs}, +{MARGIN:.0%}"
    else:
        extra, why = _headroom(records)
        how = f"{extra} MiB: nothing measured outside the pool, so {why}"
    found["gpu_share_mib"] = cap + extra
    found["sources"]["gpu_share_mib"] = f"MEMORY_LIMIT_MB + {how}"
    shares = [r["gpu_share"] for r in records if isinstance(r.get("gpu_share"), dict)]
    terms = in_terms(cap + extra, shares)
    if terms:
        found["gpu_share"] = terms
        found["sources"]["gpu_share"] = (
            "gpu_share_mib in the terms of each plugin the runs were under (its variables, "
            "recorded from the process environment)"
        )


def percentile(values: Sequence[float], rank: float) -> float:
    """The nearest-rank percentile (``rank`` 1 to 100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(rank / 100 * len(ordered)) - 1)]


def suggest(
    records: Sequence[dict[str, Any]],
    cpu_percentile: float = CPU_PERCENTILE,
    memory_percentile: float = MEMORY_PERCENTILE,
    unfinished_killed: bool = True,
) -> dict[str, Any]:
    """The suggestion from ``records``: ``env``, Pod ``resources``, Slurm options, each
    figure with its source, and why any figure grew (``unfinished_killed``: see
    ``run_needs``; a running process's own snapshots are not). The records of one job (a
    launcher and its workers) count as one run."""
    from .merge import by_job

    records = by_job(records)
    needs = [run_needs(r, unfinished_killed) for r in records]
    why = [w for n in needs for w in n["why"]]
    notes = [w for n in needs for w in n["notes"]]

    def at(key: str, rank: float) -> float | None:
        values = [n[key] for n in needs if n[key] is not None]
        return percentile(values, rank) if values else None

    gpu, memory, cpus = at("gpu_mib", memory_percentile), at("memory_mib", memory_percentile), \
        at("cpus", cpu_percentile)  # fmt: skip
    outside = at("outside_pool_mib", 100)
    shm = at("shm_mib", 100)
    runs = f"{len(records)} run{'s' if len(records) != 1 else ''}"
    found: dict[str, Any] = {"env": {}, "resources": {}, "slurm": {}, "sources": {}, "why": why,
                             "notes": notes}  # fmt: skip
    covered = sorted({n["memory_covers"] for n in needs if n["memory_mib"] is not None})
    if gpu is not None:
        cap = _up(max(gpu, MIN_MEMORY_MIB), ROUND_MIB)
        found["env"]["MEMORY_LIMIT_MB"] = str(cap)
        found["sources"]["MEMORY_LIMIT_MB"] = (
            f"allocator peak per GPU, p{memory_percentile:g} of {runs}, +{MARGIN:.0%}"
        )
        _share(found, cap, outside, records, runs)
    if memory is not None:
        value = f"{_up(memory, ROUND_MIB)}Mi"
        found["resources"]["requests"] = {"memory": value}
        found["resources"]["limits"] = {"memory": value}
        found["slurm"]["--mem"] = f"{_up(memory, ROUND_MIB)}M"
        found["sources"]["memory"] = (
            f"memory peak ({' and '.join(covered)}), p{memory_percentile:g} of {runs}, "
            f"+{MARGIN:.0%}; request = limit"
        )
    if shm is not None:
        size = size_for(shm)
        found["shm"] = {"size_mib": size, "docker": docker_flag(size),
                        "kubernetes": memory_volume(f"{size}Mi")}  # fmt: skip
        found["sources"]["shm"] = (
            f"/dev/shm's peak as DataLoader batches arrived, max of {runs}, +{MARGIN:.0%}; its "
            "pages count in the memory peak, so the memory limit above holds it"
        )
    if cpus is not None:
        request = math.ceil(cpus * 10) / 10
        whole = max(1, math.ceil(request))
        found["resources"].setdefault("requests", {})["cpu"] = f"{round(request * 1000)}m"
        found["resources"].setdefault("limits", {})["cpu"] = str(whole)
        found["slurm"]["--cpus-per-task"] = whole
        found["sources"]["cpu"] = (
            f"CPU time over wall time, p{cpu_percentile:g} of {runs}, +{MARGIN:.0%}; the "
            "limit in whole CPUs (CPU_THREADS=auto sizes the pools from it)"
        )
    return found


def env_lines(suggestion: dict[str, Any]) -> list[str]:
    """The suggestion as ``KEY=value`` lines (a ``.env`` file, ``docker run -e``)."""
    return [f"{k}={v}" for k, v in suggestion["env"].items()]


def summary(suggestion: dict[str, Any]) -> str:
    """The suggestion in one line: env, resources and Slurm options (its notes, such as why
    it holds no CPU figure, are in the record; the ``used:`` line says that itself)."""
    parts = [*env_lines(suggestion)]
    parts += [f"GPU share {p}" for p in shown(suggestion.get("gpu_share") or {})]
    for kind in ("requests", "limits"):
        for name, value in suggestion["resources"].get(kind, {}).items():
            parts.append(f"{kind}.{name}={value}")
    if suggestion.get("shm"):
        parts.append(f"/dev/shm {suggestion['shm']['size_mib']}Mi (within limits.memory)")
    slurm = " ".join(f"{k}={v}" for k, v in suggestion["slurm"].items())
    if slurm:
        parts.append(f"Slurm {slurm}")
    return ", ".join(parts) if parts else "nothing measured"


# Where each kind keeps its Pod template's spec, and its apiVersion.
KINDS = {
    "Pod": ("v1", ("spec",)),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec")),
}


def patch(suggestion: dict[str, Any], kind: str, name: str, container: str) -> str:
    """A kustomize patch (strategic merge) setting the suggestion on ``container`` of the
    workload ``kind``/``name``. Strings are written as JSON strings, which YAML reads alike."""
    api, path = KINDS[kind]
    q = json.dumps
    lines = [f"apiVersion: {api}", f"kind: {kind}", "metadata:", f"  name: {q(name)}"]
    depth = 0
    for key in path:
        lines.append("  " * depth + f"{key}:")
        depth += 1
    pad = "  " * depth
    lines += [f"{pad}containers:", f"{pad}  - name: {q(container)}"]
    if suggestion["env"]:
        lines.append(f"{pad}    env:")
        for key, value in suggestion["env"].items():
            lines += [f"{pad}      - name: {key}", f"{pad}        value: {q(value)}"]
    resources = suggestion["resources"]
    if resources:
        lines.append(f"{pad}    resources:")
        for group in ("requests", "limits"):
            if resources.get(group):
                lines.append(f"{pad}      {group}:")
                lines += [f"{pad}        {k}: {q(v)}" for k, v in resources[group].items()]
    return "\n".join(lines) + "\n"
