"""What the process has used against each budget so far: one usage record (schema ``SCHEMA``).

``Meter`` takes the baseline when tfboot first configures a framework (CPU counters and
``memory.events`` are counters: a run's figures are differences from it), samples
``memory.current`` where the kernel keeps no ``memory.peak``, and makes a record on demand:
each GPU's allocator peak from the framework's own adapter (``executor.peaks``), with NVML's
per-process total where NVML lists this process, the container's memory peak against the
limit in force, and CPU used against the quota. The suggestion is added by ``suggest``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..budget import Budget
from ..executor import peaks
from ..node import counters
from ..node.cuda import cuda_devices
from ..node.hostmem import memory_budget
from ..node.nvml import process_memory, read_inventory

SCHEMA = "tfboot.usage/v1"
MIB = 1 << 20
# Labels a record carries from the environment: (label, variables tried in order).
LABELS = (
    ("pod", ("POD_NAME", "HOSTNAME")),
    ("namespace", ("POD_NAMESPACE",)),
    ("node", ("NODE_NAME", "SLURMD_NODENAME")),
    ("slurm_job_id", ("SLURM_JOB_ID",)),
    ("task", ("JOB_COMPLETION_INDEX", "SLURM_PROCID")),
)


def mib(value: int | float | None) -> float | None:
    """Bytes as MiB, to a tenth."""
    return None if value is None else round(value / MIB, 1)


def labels(env: Mapping[str, str], job: str) -> dict[str, str]:
    """The job's label and those the environment gives (a Pod's name from the Downward API
    or its hostname, its namespace, the Slurm job)."""
    found = {"job": job}
    for label, names in LABELS:
        value = next((env[n].strip() for n in names if env.get(n, "").strip()), None)
        if value is not None:
            found[label] = value[:128]
    found.setdefault("pod", os.uname().nodename)
    return found


class Framework(tuple[Any, str]):
    """A framework tfboot configured: its adapter and the module name it was imported as
    (a tuple: a dataclass would cost a tenth of a millisecond at import)."""

    __slots__ = ()

    def __new__(cls, adapter: Any, name: str) -> Framework:
        return super().__new__(cls, (adapter, name))

    @property
    def adapter(self) -> Any:
        return self[0]

    @property
    def name(self) -> str:
        return self[1]


class Meter:
    """The baseline of a run, and its records."""

    def __init__(self, budget: Budget, threads: int | None, env: Mapping[str, str], job: str):
        self.env = dict(env)
        self.budget = budget
        self.threads = threads
        self.labels = labels(env, job)
        self.started = time.time()
        self.cpu = counters.cpu(env)
        start = counters.memory(env)
        self.events = dict(start.events)
        # The highest memory.current seen, where the kernel keeps no memory.peak; else None.
        self.sampled = start.current if start.peak is None else None
        self.pid = os.getpid()
        # The limit in force: HOST_MEMORY_LIMIT_MB's, else the container's.
        host = budget.host() if budget.settings.host_memory != "host" else None
        # The budget read the container's limit, except under HOST_MEMORY_LIMIT_MB=host.
        memory = budget.memory if host is not None else memory_budget(env)
        if host is not None and host.limit_mib is not None:
            self.limit: tuple[int | None, str] = (host.limit_mib, host.origin)
        else:
            self.limit = (memory.limit_mib, memory.source)

    def sample(self) -> counters.Memory:
        """Read the memory counters; keep the highest ``memory.current`` where the kernel
        keeps no peak."""
        now = counters.memory(self.env)
        if now.peak is None and now.current is not None:
            self.sampled = max(self.sampled or 0, now.current)
        return now

    def record(self, frameworks: Sequence[Framework], reason: str, final: bool) -> dict[str, Any]:
        """The usage so far, as the JSON record (without its suggestion)."""
        problems: list[str] = []
        gpus = self._gpus(frameworks, problems)
        return {
            "schema": SCHEMA,
            "tfboot": getattr(sys.modules.get("tfboot"), "__version__", None),
            "final": final,
            "reason": reason,
            "pid": self.pid,
            "started": _stamp(self.started),
            "at": _stamp(time.time()),
            "labels": self.labels,
            "frameworks": [f.adapter.NAME for f in frameworks],
            "gpus": gpus,
            "host_memory": self._memory(),
            "cpu": self._cpu(),
            "problems": problems,
        }

    def _gpus(self, frameworks: Sequence[Framework], problems: list[str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for framework in frameworks:
            listed, problem = peaks(framework.adapter, framework.name)
            problems += [problem] if problem else []
            for peak in listed:
                found.append(
                    {
                        "index": peak.index,
                        "physical": peak.physical,
                        "framework": framework.adapter.NAME,
                        "peak_mib": mib(peak.peak_bytes),
                        "cap_mib": peak.cap_mib,
                        "limit_mib": mib(peak.limit_bytes),
                        "source": peak.source,
                        "ooms": peak.ooms,
                    }
                )
        if found:
            self._process_totals(found)
        return found

    def _process_totals(self, gpus: list[dict[str, Any]]) -> None:
        """NVML's total for this process on each physical GPU (allocator, CUDA context and
        libraries), where NVML lists it: outside the allocator = the context's share."""
        totals = process_memory(self.pid, self.env)
        if not totals:
            return
        listed, _narrowed = cuda_devices(self.env, read_inventory(self.env).count)
        for gpu in gpus:
            entry = listed[gpu["physical"]] if gpu["physical"] < len(listed) else ""
            if entry.isdigit() and int(entry) in totals:
                total = mib(totals[int(entry)]) or 0.0
                peaks = sum(g["peak_mib"] for g in gpus if g["physical"] == gpu["physical"])
                gpu["process_mib"] = total
                gpu["context_mib"] = round(max(0.0, total - peaks), 1)
                gpu["process_source"] = "NVML nvmlDeviceGetComputeRunningProcesses"

    def _memory(self) -> dict[str, Any]:
        now = self.sample()
        peak, source = now.peak, now.peak_source
        if peak is None and now.current is not None:
            peak, source = self.sampled, f"{now.current_source} (sampled)"
        events = {k: v - self.events.get(k, 0) for k, v in now.events.items()}
        return {
            "peak_mib": mib(peak),
            "source": source,
            "limit_mib": self.limit[0],
            "limit_source": self.limit[1] or None,
            "oom_kills": events.get("oom_kill"),
            "high_events": events.get("high"),
            "max_events": events.get("max"),
            "events_source": now.events_source or None,
        }

    def _cpu(self) -> dict[str, Any]:
        now = counters.cpu(self.env)
        wall = max(now.wall - self.cpu.wall, 1e-9)
        used = max(0.0, now.seconds - self.cpu.seconds)
        throttled = None
        if now.periods is not None and self.cpu.periods is not None:
            periods = now.periods - self.cpu.periods
            count = (now.throttled or 0) - (self.cpu.throttled or 0)
            throttled = round(count / periods, 4) if periods > 0 else 0.0
        return {
            "quota": self.budget.cpu.quota,
            "quota_source": self.budget.cpu.quota_source or None,
            "schedulable": self.budget.cpu.affinity,
            "threads": self.threads,
            "used_cpus": round(used / wall, 3),
            "cpu_seconds": round(used, 3),
            "wall_seconds": round(wall, 3),
            "source": now.source,
            "throttled_fraction": throttled,
            "throttled_source": now.periods_source or None,
        }


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
