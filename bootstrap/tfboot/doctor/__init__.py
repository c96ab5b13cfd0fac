"""``tfboot doctor``: import TensorFlow, apply, and report what TensorFlow now sees.

Unlike the import hook, the doctor does start TensorFlow's runtime: it lists logical
devices and reads memory info. It never calls ``device_lib.list_local_devices`` or
``tf.test.is_gpu_available``, which on GPU builds freeze TF's default allocators.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..adapters import Plan
from ..adapters.tensorflow import INTER_ENV, INTRA_ENV
from ..budget.hostmemory import DataDefaults
from ..errors import ConfigError
from ..executor import apply, last_result
from ..executor.governor import acted, current
from ..executor.result import Result
from ..node.cpu import cpu_budget
from ..node.hostmem import PINNED_ENV, memory_budget
from ..node.nccl import readiness, why_needed
from .startup import copy_line


def _logical_caps(
    plan: Plan | None, physical_count: int, logical_gpus: list[str]
) -> dict[str, int | None]:
    """Map each logical GPU name to its cap; logical ids follow the visible physical order."""
    caps: list[int | None] = []
    for index in plan.gpus_visible(physical_count) if plan is not None else range(physical_count):
        sizes = plan.logical_mb.get(index) if plan is not None else None
        caps.extend(sizes or [None])
    return dict(zip(logical_gpus, caps + [None] * (len(logical_gpus) - len(caps)), strict=False))


def _threads(tf: Any, getter: str, variable: str, schedulable: int) -> dict[str, Any]:
    configured = int(getattr(tf.config.threading, getter)())
    if configured:
        return {"threads": configured, "source": "tf.config.threading"}
    explicit = os.environ.get(variable, "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return {"threads": int(explicit), "source": variable}
    return {"threads": schedulable, "source": "TensorFlow default (schedulable CPUs)"}


def _governed() -> dict[str, Any] | None:
    """What this process's host-memory governor did so far (None: none runs)."""
    found = current()
    return None if found is None else found.stats()


def collect(verify: bool = False, frameworks: Sequence[str] = ("tensorflow",)) -> dict[str, Any]:
    """Everything the doctor reports, as one JSON-ready dict.

    ``frameworks``: what to import (JAX and PyTorch first, as Keras on them would); every
    JAX or PyTorch in the process then gets a section under ``frameworks``.
    """
    from .. import FRAMEWORKS
    from .._startup import uninstall, without_tensorflow_hook
    from . import frameworks as doctor
    from .startup import copy, not_started

    why = not_started()
    if why is not None:  # what a plain import gets here: nothing of tfboot's
        uninstall()
    errors = doctor.import_frameworks([f for f in frameworks if f != "tensorflow"])
    if "tensorflow" not in frameworks:
        return {"startup": {"ran": why is None, "why": why}, "copy": copy(),
                "frameworks": doctor.collect(errors)}  # fmt: skip
    if why is None:  # apply below, catching errors, instead of failing in the import
        without_tensorflow_hook(FRAMEWORKS)
    import tensorflow as tf

    error = None
    if why is None:
        try:
            apply(tf)
        except ConfigError as exc:
            error = str(exc)
    result = last_result() if why is None else None
    if result is None:  # refused under TFBOOT_ON_ERROR=raise: the same keys, nothing applied
        result = Result(error=error)
    report: dict[str, Any] = result.to_dict()
    report["startup"] = {"ran": why is None, "why": why}
    report["copy"] = copy()
    report["tensorflow_version"] = tf.__version__
    physical = {kind: tf.config.list_physical_devices(kind) for kind in ("CPU", "GPU")}
    report["physical_devices"] = {k: [d.name for d in v] for k, v in physical.items()}
    logical = {k: [d.name for d in tf.config.list_logical_devices(k)] for k in ("CPU", "GPU")}
    report["logical_devices"] = logical
    # After the runtime started: pluggable devices have no executor before it.
    report["gpu_details"] = {
        d.name: {k: str(v) for k, v in tf.config.experimental.get_device_details(d).items()}
        for d in physical["GPU"]
    }
    caps = _logical_caps(result.plan if result else None, len(physical["GPU"]), logical["GPU"])
    memory: dict[str, Any] = {}
    for name in logical["GPU"]:
        entry: dict[str, Any] = {"limit_mb": caps.get(name)}
        try:
            info = tf.config.experimental.get_memory_info(name)
            entry.update(current_bytes=int(info["current"]), peak_bytes=int(info["peak"]))
        except (ValueError, RuntimeError) as exc:
            entry["unavailable"] = str(exc)
        memory[name] = entry
    report["memory"] = memory
    budget = cpu_budget()
    report["cpu"] = {
        "schedulable": budget.affinity,
        "quota": budget.quota,
        "quota_source": budget.quota_source or None,
        "quota_shared": budget.shared or None,
        "problem": budget.problem or None,
    }
    plan = result.plan
    host = plan.host if plan else None
    memory = memory_budget()
    report["host_memory"] = {
        "limit_mib": host.limit_mib if host else None,
        "cgroup_limit_mib": memory.limit_mib,
        "cgroup_source": memory.source or None,
        "cgroup_shared": memory.shared or None,
        "tf_data": vars(host.data) if host and host.data else None,
        "pinned_mib": os.environ.get(PINNED_ENV),
        "malloc": (plan.malloc or None) if plan else None,
        "governor": _governed(),
        "problem": memory.problem or None,
    }
    gpus = len(physical["GPU"])
    visible = (
        len(plan.gpus_visible(gpus)) if plan else gpus
    )  # physical GPUs: NCCL runs between them
    cluster = result.cluster.identity.cluster if result.cluster is not None else None
    why = why_needed(visible, cluster.size if cluster else 0)
    report["nccl"] = {"needed": why, **readiness(why).to_dict()}
    intra = _threads(tf, "get_intra_op_parallelism_threads", INTRA_ENV, budget.affinity)
    inter = _threads(tf, "get_inter_op_parallelism_threads", INTER_ENV, budget.affinity)
    report["threads"] = {
        "intra_op": intra["threads"],
        "inter_op": inter["threads"],
        "intra_op_source": intra["source"],
        "inter_op_source": inter["source"],
    }
    report["environ"] = {
        k: os.environ[k]
        for k in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", INTRA_ENV, INTER_ENV)
        if k in os.environ
    }
    if verify:
        from ..verify import verify_gpus

        report["verify"] = verify_gpus(tf, caps)
    report["frameworks"] = doctor.collect(errors)
    return report


def render(report: dict[str, Any]) -> str:
    """The report as text for a person."""
    from .frameworks import render as render_frameworks

    copy = [f"  {copy_line(report['copy'])}"] if report.get("copy") else []
    if "tensorflow_version" not in report:
        return "\n".join(["tfboot doctor", *copy, *render_frameworks(report["frameworks"])])
    lines = [f"tfboot doctor (TensorFlow {report['tensorflow_version']})", *copy]
    if not (report.get("startup") or {}).get("ran", True):
        lines.append("  NOT STARTED: tfboot's start-up hook did not run in this interpreter; "
                     "what follows is what a plain import got")  # fmt: skip
    if report.get("disabled"):
        lines.append("  TFBOOT_DISABLE is on: nothing was applied")
    if report.get("error"):
        lines.append(f"  ERROR: {report['error']}")
    settings = report.get("settings") or {}
    lines.append("settings:" if settings else "settings: none given")
    lines += [f"  {k}={v['value']}  ({v['source']})" for k, v in settings.items()]
    lines.append("applied:")
    lines += [f"  {d}" for d in report.get("decisions") or ["nothing"]]
    for kind in ("GPU", "CPU"):
        lines.append(
            f"{kind}: physical {report['physical_devices'][kind] or 'none'}, "
            f"logical {report['logical_devices'][kind] or 'none'}"
        )
    for name, entry in report["memory"].items():
        cap = f"cap {entry['limit_mb']} MiB" if entry.get("limit_mb") else "no cap"
        used = entry.get("unavailable", "")
        if "current_bytes" in entry:
            mib = {k: entry[k] / 2**20 for k in ("current_bytes", "peak_bytes")}
            used = f"current {mib['current_bytes']:.1f} MiB, peak {mib['peak_bytes']:.1f} MiB"
        lines.append(f"  {name}: {cap}; {used}")
    cpu, threads = report["cpu"], report["threads"]
    quota = f"{cpu['quota']:g} CPUs ({cpu['quota_source']})" if cpu["quota"] else "none"
    quota += f", {cpu['quota_shared']}" if cpu.get("quota_shared") else ""
    lines.append(f"CPU: {cpu['schedulable']} schedulable, quota {quota}")
    if cpu.get("problem"):
        lines.append(f"  {cpu['problem']}")
    host = report["host_memory"]
    limit = f"{host['cgroup_limit_mib']} MiB ({host['cgroup_source']})"
    limit += f", {host['cgroup_shared']}" if host.get("cgroup_shared") else ""
    lines.append(f"host memory: container limit {limit if host['cgroup_limit_mib'] else 'none'}")
    if host["tf_data"]:
        lines.append(f"  tf.data defaults: {DataDefaults(**host['tf_data']).describe()}")
    if host["pinned_mib"]:
        lines.append(f"  pinned host memory: {host['pinned_mib']} MiB ({PINNED_ENV})")
    if host.get("malloc"):
        lines.append(f"  allocator: {host['malloc']}")
        if host.get("governor"):
            lines.append(f"  in this process so far: {acted(host['governor'])}")
    if host["problem"]:
        lines.append(f"  {host['problem']}")
    nccl = report["nccl"]
    if nccl["needed"]:  # NCCL runs between GPUs only: nothing to say with one, or none
        lines.append(
            f"NCCL: /dev/shm {nccl['shm_mib']} MiB, memlock {nccl['memlock_mib']}"
            + (" MiB" if isinstance(nccl["memlock_mib"], int) else "")
            + f" ({nccl['needed']})"
        )
    lines.append(
        f"threads: intra-op {threads['intra_op']} ({threads['intra_op_source']}), "
        f"inter-op {threads['inter_op']} ({threads['inter_op_source']})"
    )
    for name, value in report["environ"].items():
        lines.append(f"env: {name}={value}")
    for check in report.get("verify", []):
        lines.append(
            f"verify {check['device']}: {'ok' if check['ok'] else 'FAILED'} - {check['detail']}"
        )
    cluster = report.get("cluster")
    if cluster:
        lines += [cluster["line"], f"TF_CONFIG: {cluster['tf_config'] or 'not set by tfboot'}"]
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    lines += render_frameworks(report.get("frameworks", {}))
    return "\n".join(lines)
