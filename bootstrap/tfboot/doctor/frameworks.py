"""``tfboot doctor --framework jax|torch``: what JAX and PyTorch got, and the devices they see.

Each framework is imported through tfboot's hook (so it is configured as a program's
import would be), then asked for its devices, memory caps and threads. Unlike the hook,
this starts the framework's devices.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..budget.roles import NAMES
from ..errors import ConfigError
from ..executor import results
from ..frameworks import PLANNED

SHOWN_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "JAX_PLATFORMS",
    "JAX_CUDA_VISIBLE_DEVICES",
    "JAX_NUM_CPU_DEVICES",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "OMP_NUM_THREADS",
)


def import_frameworks(modules: Sequence[str]) -> dict[str, str]:
    """Import each of ``modules`` (jax, torch) through the hook; the errors, by module."""
    errors = {}
    for module in modules:
        try:
            importlib.import_module(module)
        except ConfigError as exc:
            errors[module] = str(exc)
    return errors


def collect(errors: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A section for every JAX or PyTorch (every framework a budget is planned for but
    TensorFlow, which has its own report) imported in this process, or refused."""
    found = results()
    sections = {}
    for module in (m for m in PLANNED if m != "tensorflow"):
        if module not in sys.modules and module not in errors:
            continue
        result = found.get(module)
        section: dict[str, Any] = {"framework": NAMES[module], "error": errors.get(module)}
        if result is not None:
            section |= result.section()
            section["error"] = section["error"] or errors.get(module)
        if module in sys.modules and module in DEVICES:
            section |= DEVICES[module](sys.modules[module])
        section["environ"] = {k: os.environ[k] for k in SHOWN_ENV if k in os.environ}
        sections[module] = section
    return sections


def _pool() -> int:
    """Threads in JAX's CPU client pool (named ``tf_XLAEigen``)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
                count += comm.read().startswith("tf_XLAEigen")
        except OSError:
            continue
    return count


def _jax(jax: Any) -> dict[str, Any]:
    devices = jax.devices()
    memory = {}
    for device in devices:
        stats = device.memory_stats() or {}
        memory[str(device)] = {"limit_bytes": stats.get("bytes_limit")}
    jax.numpy.zeros(1).block_until_ready()  # the CPU client's pool starts with its first use
    return {
        "version": jax.__version__,
        "devices": [f"{d.platform}:{d.id} ({d.device_kind})" for d in devices],
        "memory": memory,
        "threads": {"cpu_pool": _pool()},
    }


def _torch(torch: Any) -> dict[str, Any]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    memory = {}
    for ordinal in range(count):
        total = torch.cuda.get_device_properties(ordinal).total_memory
        read = getattr(torch.cuda, "get_per_process_memory_fraction", None)  # from PyTorch 2.6
        if read is None:
            memory[f"cuda:{ordinal}"] = {"fraction": None, "limit_bytes": None,
                                         "why": f"PyTorch {torch.__version__} cannot read the "
                                                "fraction back (from 2.6)"}  # fmt: skip
            continue
        fraction = read(ordinal)
        memory[f"cuda:{ordinal}"] = {"fraction": fraction, "limit_bytes": int(fraction * total)}
    return {
        "version": torch.__version__,
        "devices": [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(count)] or ["cpu"],
        "memory": memory,
        "threads": {
            "intra_op": torch.get_num_threads(),
            "inter_op": torch.get_num_interop_threads(),
        },
        "shm": _shm(),
    }


# What a framework's own calls say of its devices, memory and threads, by module.
DEVICES = {"jax": _jax, "torch": _torch}


def _shm() -> dict[str, Any]:
    """``/dev/shm``, where DataLoader workers pass their batches."""
    from ..node.shm import PLAUSIBLE_MIB, read_shm

    shm = read_shm()
    return {"size_mib": shm.size_mib, "free_mib": shm.free_mib, "fstype": shm.fstype,
            "small": shm.small, "plausible_mib": PLAUSIBLE_MIB, "line": shm.describe()}  # fmt: skip


def render(sections: dict[str, dict[str, Any]]) -> list[str]:
    """Each framework's section as text."""
    lines = []
    for section in sections.values():
        role = section.get("role")
        lines.append(
            f"{section['framework']} {section.get('version', '')}".rstrip()
            + (f" ({role})" if role and role != "runs the model" else "")
            + ":"
        )
        if section.get("error") and role and role != "runs the model":
            lines.append("  not configured: the settings are invalid (see above)")
        elif section.get("error"):
            lines.append(f"  ERROR: {section['error']}")
        lines += [f"  applied: {d}" for d in section.get("decisions") or ["nothing"]]
        if section.get("cluster"):
            lines.append("  " + section["cluster"]["line"])
        lines.append(f"  devices: {', '.join(section.get('devices', [])) or 'none'}")
        for name, entry in section.get("memory", {}).items():
            limit = entry.get("limit_bytes")
            shown = f"cap {limit >> 20} MiB" if limit else entry.get("why") or "no cap"
            lines.append(f"  {name}: {shown}")
        threads = ", ".join(f"{k} {v}" for k, v in section.get("threads", {}).items())
        lines.append(f"  threads: {threads or 'unknown'}")
        if section.get("shm"):
            shm = section["shm"]
            small = (f": smaller than a DataLoader with workers plausibly needs "
                     f"({shm['plausible_mib']} MiB)") if shm["small"] else ""  # fmt: skip
            lines.append(f"  {shm['line']}{small}")
        lines += [f"  env: {k}={v}" for k, v in section.get("environ", {}).items()]
        lines += [f"  warning: {w}" for w in section.get("warnings", [])]
    return lines
