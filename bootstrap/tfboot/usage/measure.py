"""What the process has used against each budget so far: one usage record (schema ``SCHEMA``).

Every figure covers one window: the process's life from its start (the kernel's start time
of the process, ``/proc/self/stat``'s ``starttime`` against ``CLOCK_BOOTTIME``); the import
of the framework is part of the job. ``Meter`` takes the baseline when tfboot first
configures a framework: a cgroup's counters (CPU, ``memory.events``) are the cgroup's, so a
run's figures are differences from it, and the CPU the process used before it (its own and
its children's CPU time) is added back. It samples ``memory.current`` where the kernel keeps
no ``memory.peak``, and makes a record on demand:
each GPU's allocator peak from the framework's own adapter (``executor.peaks``), with NVML's
per-process total where NVML lists this process, the container's memory peak against the
limit in force, and CPU used against the quota. The suggestion is added by ``suggest``.
"""

from __future__ import annotations

import calendar
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..budget import Budget
from ..executor import peaks
from ..executor.follow import current as follower
from ..executor.governor import current as governor
from ..node import counters
from ..node.cpu import CpuBudget, cpu_budget
from ..node.cuda import cuda_devices
from ..node.hostmem import memory_budget
from ..node.nvml import process_memory, read_inventory
from ..node.proctree import Tree
from .schema import SCHEMA
from .scope import TREE, covers
from .shares import recorded
from .stretches import CpuStretch, MemoryStretch, kept

MIB = 1 << 20
STAMP = "%Y-%m-%dT%H:%M:%SZ"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
EXEC_S = 1.0  # an interpreter starting this long after its process: an exec (fork + exec: ms)
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
    """The baseline of a run, and its records. Host memory and CPU cover the cgroup where
    it is the job's, else the job's own process tree (``scope``); the limits are read again
    at each sample, so a limit changed while the job runs (an in-place Pod resize, ``docker
    update``) is the one the record judges against, the earlier ones named."""

    def __init__(self, budget: Budget, threads: int | None, env: Mapping[str, str], job: str,
                 framework: str = "") -> None:  # fmt: skip
        self.env = dict(env)
        self.budget = budget
        self.threads = threads
        self.framework = framework
        self.labels = labels(env, job)
        self.pid = os.getpid()
        # The window's start: the process's, on CLOCK_BOOTTIME; this moment where unknown.
        self.began, self.window_source, self.cpu_before_exec = process_start()
        self.started = time.time() - (_boot_now() - self.began)
        self.memory_cover = covers(env, "memory", self.pid)
        self.cpu_cover = covers(env, "cpu", self.pid)
        self.cpu = self._cpu_counters()
        # The CPU the process tree used before the baseline, which a cgroup's difference
        # misses; the tree's own counters start with the process.
        self.cpu_before = _tree_cpu(self.pid) if self.cpu_cover.cgroup else 0.0
        self.cpu_before = max(0.0, self.cpu_before - self.cpu_before_exec)
        start = counters.memory(env) if self.memory_cover.cgroup else None
        self.events = dict(start.events) if start else {}
        # The highest figure sampled: the cgroup's memory.current where the kernel keeps no
        # memory.peak, or the process tree's resident memory; None where the kernel keeps it.
        self.sampled: int | None = None
        if start is None:
            self.sampled = Tree(self.pid).resident_bytes
        elif start.peak is None:
            self.sampled = start.current
        # HOST_MEMORY_LIMIT_MB's limit when given; else the container's, read at each sample.
        host = budget.host() if budget.settings.host_memory != "host" else None
        self.fixed = isinstance(budget.settings.host_memory, int)  # HOST_MEMORY_LIMIT_MB=N
        memory = budget.memory if host is not None else memory_budget(env)
        if host is not None and host.limit_mib is not None:
            self.limit: tuple[int | None, str] = (host.limit_mib, host.origin)
        else:
            self.limit = (memory.limit_mib, memory.source)
        # Whose each budget is, where not this container's alone (a parent's, the Pod's).
        self.shared = {"limit": "" if self.fixed else memory.shared, "quota": budget.cpu.shared}
        self.quota = (budget.cpu.quota, budget.cpu.quota_source)
        self.earlier_limits: list[dict[str, Any]] = []
        self.earlier_quotas: list[dict[str, Any]] = []
        # What the job used under the limit and the quota in force now (``stretches``).
        self.memory_stretch = MemoryStretch(start, self.sampled)
        self.cpu_stretch = CpuStretch(self.cpu)
        self.shm_peak = 0  # /dev/shm's highest, in bytes, where a DataLoader ran
        self.lock = threading.Lock()  # held for no I/O: a fork never inherits it taken

    def _cpu_counters(self) -> counters.Cpu:
        if self.cpu_cover.cgroup:
            return counters.cpu(self.env)
        return counters.Cpu(_tree_cpu(self.pid), f"{TREE} (/proc/PID/stat, os.times)")

    def _limits(self, used: counters.Memory | None) -> None:
        """Read the container's limits again; a change keeps the one before, with when it
        ended and what the job used under it (``stretches``). The files are read outside
        the lock, which guards only the comparison (the publisher and the end may both
        sample)."""
        now = _stamp(time.time())
        memory = None if self.fixed else memory_budget(self.env)
        quota = cpu_budget(self.env)
        moved = not quota.problem and quota.quota != self.quota[0]
        cpu = self._cpu_counters() if moved else None  # the end of a stretch: read unlocked
        with self.lock:
            if memory is not None and not memory.problem and memory.limit_mib != self.limit[0]:
                ended = {"limit_mib": self.limit[0], "until": now,
                         **self.memory_stretch.figures(used)}  # fmt: skip
                kept(self.earlier_limits, ended)
                self.limit = (memory.limit_mib, memory.source)
                self.shared["limit"] = memory.shared
                self.memory_stretch = MemoryStretch(used)
            if cpu is not None and quota.quota != self.quota[0]:
                kept(
                    self.earlier_quotas,
                    {"quota": self.quota[0], "until": now, **self.cpu_stretch.figures(cpu)},
                )
                self.quota = (quota.quota, quota.quota_source)
                self.shared["quota"] = quota.shared
                self.cpu_stretch = CpuStretch(cpu)

    def sample(self) -> counters.Memory | None:
        """Read the memory counters and the limits; keep the highest sampled figure (the
        cgroup's without a kernel peak, the process tree's), over the run and under the
        limit in force. None: the tree is the scope."""
        if not self.memory_cover.cgroup:
            resident = Tree(self.pid).resident_bytes
            self.sampled = max(self.sampled or 0, resident)
            self.memory_stretch.see(resident)
            self._limits(None)
            return None
        now = counters.memory(self.env)
        if now.peak is None and now.current is not None:
            self.sampled = max(self.sampled or 0, now.current)
        self.memory_stretch.see(now.current)
        self._limits(now)
        return now

    def record(self, frameworks: Sequence[Framework], reason: str, final: bool,
               members: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
        """The usage so far, as the JSON record (without its suggestion); ``members``, the
        records of the job's processes that ended, count in the process tree's peak."""
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
            "gpu_share": recorded(self.env),
            "host_memory": self._memory(members),
            "shm": self._shm(),
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
                        "pool_mib": mib(peak.pool_bytes),
                        "peak_pool_mib": mib(peak.peak_pool_bytes),
                        "pool_source": peak.pool_source or None,
                    }
                )
        if found:
            self._process_totals(found)
        return found

    def _process_totals(self, gpus: list[dict[str, Any]]) -> None:
        """NVML's total for this process on each physical GPU, where NVML lists it: what the
        driver counts, the allocators' pools and the CUDA context and libraries outside them."""
        totals = process_memory(self.pid, self.env)
        if not totals:
            return
        listed, _narrowed = cuda_devices(self.env, read_inventory(self.env).count)
        for gpu in gpus:
            entry = listed[gpu["physical"]] if gpu["physical"] < len(listed) else ""
            if entry.isdigit() and int(entry) in totals:
                total = mib(totals[int(entry)]) or 0.0
                gpu["process_mib"] = total
                gpu["process_source"] = "NVML nvmlDeviceGetComputeRunningProcesses"
                sharing = [g for g in gpus if g["physical"] == gpu["physical"]]
                gpu["outside_pool_mib"], gpu["outside_pool_source"] = outside_pool(total, sharing)

    def _shm(self) -> dict[str, Any] | None:
        """``/dev/shm``'s peak (what DataLoader workers pass their batches through), where a
        DataLoader ran in this process: sampled as each batch arrived and at each sample."""
        loader = sys.modules.get("tfboot.executor.loader")
        if loader is None or not loader.shm_peak():
            return None
        from ..node.shm import read_shm, used_bytes

        self.shm_peak = max(self.shm_peak, loader.shm_peak(), used_bytes() or 0)
        return {"peak_mib": mib(self.shm_peak), "size_mib": read_shm().size_mib,
                "source": "statvfs /dev/shm, as each batch arrived and at each record"}  # fmt: skip

    def _memory(self, members: Sequence[dict[str, Any]]) -> dict[str, Any]:
        now = self.sample()
        found: dict[str, Any] = {"scope": self.memory_cover.to_dict()}
        if now is None:  # the process tree: sampled, never below what ran together
            found["peak_mib"] = mib(max(self.sampled or 0, tree_floor(members)))
            found["source"] = (f"{TREE} (/proc/PID/statm summed, sampled; at least getrusage "
                               "ru_maxrss of this process plus its largest waited-for child "
                               "or the members that ran together)")  # fmt: skip
            events: dict[str, int] = {}
            events_source = ""
        else:
            peak, source = now.peak, now.peak_source
            if peak is None and now.current is not None:
                peak, source = self.sampled, f"{now.current_source} (sampled)"
            found["peak_mib"], found["source"] = mib(peak), source
            events = {k: v - self.events.get(k, 0) for k, v in now.events.items()}
            events_source = now.events_source
        found.update({
            "limit_mib": self.limit[0],
            "limit_source": self.limit[1] or None,
            "limit_shared": self.shared["limit"] or None,
            "earlier_limits": self.earlier_limits,
            "since_resize": self.memory_stretch.figures(now) if self.earlier_limits else None,
            "oom_kills": events.get("oom_kill"),
            "high_events": events.get("high"),
            "max_events": events.get("max"),
            "events_source": events_source or None,
        })  # fmt: skip
        running = governor()
        if running is not None:
            found["release"] = running.stats()
        return found

    def _cpu(self) -> dict[str, Any]:
        now = self._cpu_counters()
        wall = max(_boot_now() - self.began, 1e-9)
        if self.cpu_cover.cgroup:  # the cgroup's since the baseline, the tree's before it
            used = max(0.0, now.seconds - self.cpu.seconds) + self.cpu_before
            source = (f"{now.source} since tfboot configured the framework, plus the CPU time "
                      f"of the {TREE} before it (/proc/PID/stat, os.times)")  # fmt: skip
        else:  # the tree's counters start with the process (an exec's, before it, taken off)
            used, source = max(0.0, now.seconds - self.cpu_before_exec), now.source
        throttled = None
        if now.periods is not None and self.cpu.periods is not None:
            periods = now.periods - self.cpu.periods
            count = (now.throttled or 0) - (self.cpu.throttled or 0)
            throttled = round(count / periods, 4) if periods > 0 else 0.0
        return {
            "scope": self.cpu_cover.to_dict(),
            "quota": self.quota[0],
            "quota_source": self.quota[1] or None,
            "quota_shared": self.shared["quota"] or None,
            "earlier_quotas": self.earlier_quotas,
            "since_resize": self.cpu_stretch.figures(now) if self.earlier_quotas else None,
            "schedulable": self.budget.cpu.affinity,
            **self._threads(),
            "used_cpus": round(used / wall, 3),
            "cpu_seconds": round(used, 3),
            "wall_seconds": round(wall, 3),
            "wall_source": self.window_source,
            "source": source,
            "throttled_fraction": throttled,
            "throttled_source": (
                f"{now.periods_source} since tfboot configured the framework"
                if now.periods_source
                else None
            ),
        }

    def _threads(self) -> dict[str, Any]:
        """The threads now: what followed the quota (``executor.follow``), and what kept the
        count sized at the import where the quota moved since (a restart applies it)."""
        running = follower()
        stats = running.stats() if running is not None else {}
        found = {"threads": stats.get("threads", self.threads),
                 "threads_followed": stats.get("followed"), "threads_kept": None}  # fmt: skip
        if not self.earlier_quotas or self.threads is None:
            return found
        affinity = self.budget.cpu.affinity
        wanted = CpuBudget(affinity, self.quota[0], "").threads or affinity
        if wanted == self.threads:
            return found
        kept = []
        if running is not None and running.set != wanted:  # intra-op: to follow, or the program's
            why = running.stopped or "no optimizer step or no_grad block since"
            kept.append(f"PyTorch's intra-op pool ({why})")
        kept.append("PyTorch's inter-op pool" if running else f"{self.framework}'s thread pools")
        first, now = self.earlier_quotas[0], self.quota[0]
        found["threads_kept"] = (
            f"the CPU quota moved from {first['quota']:g} to "
            f"{'none' if now is None else f'{now:g}'} at {first['until']}: "
            f"{' and '.join(kept)} kept {self.threads} thread(s), sized for the quota at the "
            "import; a restart applies the new one"
        )
        return found


def _boot_now() -> float:
    """Now, in seconds since boot (``CLOCK_BOOTTIME``, the clock of ``/proc/PID/stat``'s
    start times); ``time.monotonic`` where the system has no such clock."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def process_start() -> tuple[float, str, float]:
    """When this process's job started, on ``_boot_now``'s clock, where that came from, and
    the CPU seconds the process had used before it: the kernel's start time, in clock ticks
    since boot; the interpreter's start where a program ``exec``ed Python later (``exec``
    keeps the process's start and CPU time: a shell's wait before it is not the job's); now,
    where neither can be read."""
    unknown = "from tfboot's configuration of the framework (no process start time)"
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return _boot_now(), unknown, 0.0
    try:
        with open("/proc/self/stat", "rb") as source:
            text = source.read(4096).decode("ascii", "replace")
        ticks = int(text[text.rindex(")") + 2 :].split()[19])  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return _boot_now(), unknown, 0.0
    began = ticks / _TICKS
    interpreter = getattr(sys.modules.get("tfboot"), "INTERPRETER", None)
    if interpreter is not None and interpreter[0] - began > EXEC_S:
        later = interpreter[0] - began
        why = (f"the interpreter's start (CLOCK_BOOTTIME), {later:.1f} s after the process's: "
               "an exec, whose time before is not the job's; to the record")  # fmt: skip
        return interpreter[0], why, interpreter[1]
    own = "the process's start (/proc/self/stat starttime, CLOCK_BOOTTIME) to the record"
    return began, own, 0.0


def _tree_cpu(pid: int) -> float:
    """CPU seconds of the process tree since the process started: its own and its waited-for
    children's (``os.times``) and its live descendants' (``/proc/PID/stat``)."""
    times = os.times()
    spent = times.user + times.system + times.children_user + times.children_system
    return spent + Tree(pid).cpu_seconds


def tree_floor(members: Sequence[dict[str, Any]]) -> int:
    """Bytes the process tree held at least at one moment: this process's own peak plus the
    largest child it waited for (``getrusage`` says how much, not when: counted as if at
    this process's peak) or, if more, the peaks of the job's ended members that ran
    together. A child shorter than the sampling interval is counted all the same."""
    import resource  # only where no cgroup counts memory

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return own + max(children, int(together_mib(members) * MIB))


def together_mib(members: Sequence[dict[str, Any]]) -> float:
    """The most MiB the members' own process-tree peaks add up to among those whose runs
    (``started`` to ``at``, to the second) overlap; ends at the same second as a start
    count as overlapping."""
    events: list[tuple[float, int, float]] = []
    for member in members:
        memory = member.get("host_memory") or {}
        span = _span(member)
        peak = memory.get("peak_mib")
        if span is None or not isinstance(peak, int | float) or not _tree(memory):
            continue
        events += [(span[0], 0, peak), (span[1], 1, -peak)]
    most = running = 0.0
    for _, _, change in sorted(events):
        running += change
        most = max(most, running)
    return most


def _tree(memory: dict[str, Any]) -> bool:
    scope = memory.get("scope")
    return isinstance(scope, dict) and scope.get("covers") == TREE


def _span(record: dict[str, Any]) -> tuple[float, float] | None:
    """A record's run, ``started`` to ``at``, in seconds since the epoch."""
    try:
        started, at = (calendar.timegm(time.strptime(record[k], STAMP)) for k in ("started", "at"))
    except (KeyError, TypeError, ValueError):
        return None
    return started, at


def outside_pool(total: float, gpus: Sequence[dict[str, Any]]) -> tuple[float | None, str]:
    """The MiB outside the allocators' pools on one physical GPU (its CUDA context and
    libraries): NVML's ``total`` for the process minus every pool on it now (``gpus``, each
    framework's devices there), and where that came from; None where a pool is unknown
    (NVML minus the bytes in use would count pool regions reserved but unused)."""
    unknown = [g for g in gpus if g.get("pool_mib") is None]
    if unknown:
        why = unknown[0].get("pool_source") or "unknown"
        return None, f"not measured ({unknown[0]['framework']}'s pool: {why})"
    pools = sum(g["pool_mib"] for g in gpus)
    sources = "; ".join(sorted({f"{g['framework']}: {g['pool_source']}" for g in gpus}))
    return round(max(0.0, total - pools), 1), f"NVML's process total minus the pool ({sources})"


def _stamp(seconds: float) -> str:
    return time.strftime(STAMP, time.gmtime(seconds))
