"""The thread budget behind ``CPU_THREADS``: threads per pool, for every framework."""

from __future__ import annotations

from dataclasses import dataclass

from ..node.cpu import CpuBudget
from ..settings import Settings


@dataclass(frozen=True)
class Threads:
    """The pool size ``CPU_THREADS`` gives, and why; ``count`` None: the framework's default."""

    count: int | None
    why: str = ""
    warnings: tuple[str, ...] = ()


def thread_budget(settings: Settings, cpu: CpuBudget, framework: str) -> Threads:
    """Threads per pool from ``CPU_THREADS``: a count, the quota rounded up, or none."""
    choice = settings.cpu_threads
    if cpu.problem and choice == "auto":
        return Threads(None, warnings=(f"{cpu.problem}; {framework}'s default threads are used",))
    if isinstance(choice, int):
        why = settings.shown("CPU_THREADS")
        over = (
            (f"{why} is more threads per pool than the {cpu.affinity} CPUs this process may "
             "run on",)
            if choice > cpu.affinity
            else ()
        )  # fmt: skip
        return Threads(choice, why, over)
    if choice == "host" or cpu.threads is None:
        return Threads(None)
    why = f"CPU_THREADS=auto: quota {cpu.quota:g} CPUs from {cpu.quota_source}{_whose(cpu)}, " \
        "rounded up"  # fmt: skip
    if cpu.threads < (cpu.quota or 0):
        why += f", within {cpu.affinity} schedulable CPUs"
    return Threads(cpu.threads, why)


def _whose(cpu: CpuBudget) -> str:
    return f" ({cpu.shared})" if cpu.shared else ""
