"""The host-memory budget behind ``HOST_MEMORY_LIMIT_MB``: the limit in force, tf.data's
autotune defaults and the pinned host memory, each with its reason.

tf.data's RAM budget is measured, not a fixed share (``budget.hostpolicy.ram_budget``, beside
the governor's levels: one policy). The working set is read when the framework is
imported, and again as each pipeline starts (``executor.tfdata``), so a pipeline made
after the model was built, or beside another pipeline, gets the room left then.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..node.cpu import CpuBudget
from ..node.hostmem import MemoryBudget
from ..node.versions import shown
from ..settings import Settings
from .hostpolicy import LIVE_AT, pinned_mib, ram_budget

TF_INITIAL_PARALLELISM = 16  # tf.data's initial parallelism per autotuned transformation
# tf.data's AutotuneOptions.initial_parallelism exists from TensorFlow 2.17
# (tensorflow/python/data/ops/options.py); before, there is no such option to set.
INITIAL_PARALLELISM_FROM = (2, 17)


@dataclass(frozen=True)
class DataDefaults:
    """tf.data autotune options every pipeline gets; a pipeline's own options win.

    None where tfboot leaves TensorFlow's default.
    """

    ram_budget_mib: int | None = None  # as measured when the plan was made
    cpu_budget: int | None = None
    initial_parallelism: int | None = None
    limit_mib: int | None = None  # the limit each pipeline's RAM budget is measured against
    limit_file: str = ""  # the container's limit file, whose working set is read ("": none)

    def describe(self) -> str:
        parts = [
            f"{label} {value}{unit}"
            for label, value, unit in (
                (
                    "RAM budget",
                    self.ram_budget_mib,
                    " MiB" + (" now, measured per pipeline" if self.limit_mib else ""),
                ),
                ("CPU budget", self.cpu_budget, ""),
                ("initial parallelism", self.initial_parallelism, ""),
            )
            if value is not None
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class HostMemory:
    """What ``HOST_MEMORY_LIMIT_MB`` and the CPU budget give: the limit and tf.data's defaults."""

    limit_mib: int | None
    origin: str  # where the limit came from, for the log line
    data: DataDefaults | None  # None: TensorFlow's defaults
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def pinned_mib(self) -> int | None:
        """The pinned host memory a GPU may take: a share of the limit (None: no limit)."""
        return None if self.limit_mib is None else pinned_mib(self.limit_mib)


def host_memory(settings: Settings, cpu: CpuBudget, memory: MemoryBudget) -> HostMemory:
    """The limit in force and the tf.data defaults derived from it and the CPU budget."""
    choice = settings.host_memory
    if choice == "host":
        return HostMemory(None, settings.shown("HOST_MEMORY_LIMIT_MB"), None)
    warnings: tuple[str, ...] = ()
    if isinstance(choice, int):
        limit, origin = choice, settings.shown("HOST_MEMORY_LIMIT_MB")
        warnings = _over(origin, choice, memory)
    else:
        limit = memory.limit_mib
        whose = f" ({memory.shared})" if memory.shared else ""
        found = f"{limit} MiB from {memory.source}{whose}" if limit else "no container memory limit"
        origin = f"HOST_MEMORY_LIMIT_MB=auto: {found}"
    cpus = _data_cpus(settings, cpu)
    # A figure is this process tree's budget, in a container or not: its working set is the
    # tree's, read as each pipeline starts (limit_file ""), not the container's.
    working = None if isinstance(choice, int) else memory.working_mib
    ram = ram_budget(limit, working) if limit is not None else None
    initial = cpus if cpus is not None and cpus < TF_INITIAL_PARALLELISM else None
    if ram is None and cpus is None:
        return HostMemory(None, "no memory limit or CPU quota found", None)
    reasons = []
    if ram is not None:
        now = "unread" if working is None else f"{working} MiB now"
        reasons.append(
            f"RAM a third of the room under {LIVE_AT:.0%} of the limit beside the working set, "
            f"{now}, read as each pipeline starts"
        )
    if cpus is not None:
        reasons.append(
            f"CPUs {settings.shown('CPU_THREADS')}"
            if isinstance(settings.cpu_threads, int)
            else f"CPUs the quota's, {cpu.quota:g} from {cpu.quota_source}, rounded up"
        )
    defaults = DataDefaults(ram, cpus, initial, limit,
                            "" if isinstance(choice, int) else memory.source)  # fmt: skip
    return HostMemory(limit, origin, defaults, tuple(reasons), warnings)


def for_tensorflow(found: HostMemory, version: tuple[int, ...] | None) -> HostMemory:
    """``found`` as the installed TensorFlow can take it: no initial parallelism before
    ``INITIAL_PARALLELISM_FROM`` (None: the version is unknown, taken as the newest)."""
    data = found.data
    if data is None or data.initial_parallelism is None or version is None or \
            version >= INITIAL_PARALLELISM_FROM:  # fmt: skip
        return found
    reason = (f"no initial parallelism: TensorFlow {shown(version[:2])} has no such option "
              f"(from {shown(INITIAL_PARALLELISM_FROM)})")  # fmt: skip
    return replace(found, data=replace(data, initial_parallelism=None),
                   reasons=(*found.reasons, reason))  # fmt: skip


def share_of(limit: int | None, share: int, origin: str) -> str:
    """How a share of ``limit`` is named: "a quarter of ORIGIN", or 1 MiB, the least, when
    the quarter is under 1 MiB."""
    if limit is not None and limit < share:
        return f"1 MiB, the least (a quarter of {origin} is less)"
    return f"a quarter of {origin}"


def _over(origin: str, limit: int, memory: MemoryBudget) -> tuple[str, ...]:
    """An explicit limit above what the container or the host has: one warning, as
    ``CPU_THREADS`` above the CPUs gives (never clamped)."""
    if memory.limit_mib is not None and limit > memory.limit_mib:
        return (
            f"{origin} is more than the container's memory limit of {memory.limit_mib} MiB "
            f"({memory.source}): the budgets derived from it can exceed the limit",
        )
    if memory.host_mib is not None and limit > memory.host_mib:
        return (f"{origin} is more than the {memory.host_mib} MiB of memory this host has",)
    return ()


def _data_cpus(settings: Settings, cpu: CpuBudget) -> int | None:
    """tf.data's CPU budget: the threads CPU_THREADS gives (a count, or the quota's CPUs)."""
    if isinstance(settings.cpu_threads, int):
        return settings.cpu_threads
    return cpu.threads if settings.cpu_threads == "auto" else None
