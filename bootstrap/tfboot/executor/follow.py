"""Thread counts that follow the CPU quota while the job runs: PyTorch's intra-op pool.

A resize (Kubernetes's in-place resize, ``docker update --cpus``) rewrites the container's
quota and tells the process nothing (``node.livelimits``). Under ``CPU_THREADS=auto``, where
the user gave no count of their own, the quota is read again every ``FOLLOW_S``: by the
memory governor's thread where one runs (it reads the cgroup already), else by one daemon
thread, ``tfboot-cpu``, started with PyTorch. A new quota's count (rounded up, within the
schedulable CPUs, as at the import; no quota: PyTorch's own default) is applied by the
thread that runs PyTorch's work, at its next optimizer step or ``no_grad`` /
``inference_mode`` block: ``torch.set_num_threads`` sets the calling thread's OpenMP count,
and a count set from another thread reaches no thread that already ran a parallel op
(measured on PyTorch 2.13: a main thread that had run with 2 kept 2).

A count the program set itself stays: where ``torch.get_num_threads()`` in the applying
thread is no longer the count tfboot set, the program (or a library) chose its own, and
following stops, said in the record. What cannot follow (TensorFlow's and XLA's pools,
PyTorch's inter-op pool once used) is said by the usage report, which reads the quota too.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from types import ModuleType
from typing import Any

from ..frames import hidden
from ..node.cpu import CpuBudget, schedulable_cpus
from ..node.livelimits import QuotaFiles
from . import governor
from .wrapping import replace

FOLLOW_S = 2.0  # the quota is read again at most this often
HISTORY = 32  # the changes the record keeps: the first and the latest


class Follower:
    """PyTorch's intra-op count against the quota in force."""

    def __init__(self, torch: ModuleType, threads: int, quota: float | None, root: str) -> None:
        self.torch = torch
        self.files = QuotaFiles(root)
        self.quota = quota
        self.set = threads  # the count tfboot set last
        self.pending: int | None = None  # a count to apply at the next hook
        self.read_at = float("-inf")
        self.history: list[dict[str, Any]] = [
            {"quota": quota, "threads": threads, "at": governor.stamp()}
        ]
        self.stopped: str | None = None  # why it no longer follows

    def tick(self, now: float) -> None:
        """Read the quota (at most every ``FOLLOW_S``); a change earns a count to apply."""
        if self.stopped is not None or now - self.read_at < FOLLOW_S:
            return
        self.read_at = now
        found = self.files.read()
        if found is None or found[0] == self.quota:
            return
        self.quota = found[0]
        cpus = schedulable_cpus()
        count = CpuBudget(cpus, self.quota, found[1]).threads or cpus
        self.pending = None if count == self.set else count

    def apply(self) -> None:
        """In the thread that runs PyTorch's work: the pending count, unless the program set
        its own."""
        count = self.pending
        if count is None or self.stopped is not None:
            return
        self.pending = None
        now = self.torch.get_num_threads()
        if now != self.set:
            self.stopped = (f"the program set {now} intra-op thread(s) itself: its count "
                            "stays")  # fmt: skip
            return
        self.torch.set_num_threads(count)
        self.set = count
        if len(self.history) >= HISTORY:
            del self.history[1]
        self.history.append({"quota": self.quota, "threads": count, "at": governor.stamp()})

    def stats(self) -> dict[str, Any]:
        return {"threads": self.set, "followed": list(self.history), "stopped": self.stopped}


_follower: Follower | None = None


def current() -> Follower | None:
    """This process's follower, if one runs."""
    return _follower


def start(torch: ModuleType, threads: int, quota: float | None, root: str) -> str | None:
    """Follow the quota with PyTorch's intra-op count, once per process; how the log names it."""
    global _follower
    if _follower is not None:
        return None
    follower = _follower = Follower(torch, threads, quota, root)
    _hooks(torch, follower)
    reader = governor.current()
    if reader is not None:
        reader.also.append(follower.tick)
        by = "the memory governor's thread"
    else:
        threading.Thread(target=_run, args=(follower,), name="tfboot-cpu", daemon=True).start()
        by = "a thread of its own"
    return (f"intra-op threads follow the CPU quota while the job runs (read every "
            f"{FOLLOW_S:g} s by {by}; applied at the next optimizer step or no_grad "
            "block)")  # fmt: skip


def _run(follower: Follower) -> None:
    while follower.stopped is None:
        try:
            follower.tick(time.monotonic())
        except Exception:  # a guest never ends the job: it stops following
            return
        time.sleep(FOLLOW_S)


def _hooks(torch: ModuleType, follower: Follower) -> None:
    """Where the thread that runs PyTorch's work passes often: each optimizer step (a global
    pre-hook) and each ``no_grad`` or ``inference_mode`` block (evaluation, inference)."""

    def applied(*_args: Any) -> None:
        with contextlib.suppress(Exception):  # a guest never fails a step
            follower.apply()

    # torch.optim's namespace hides its ``optimizer`` module, which holds the global hook
    optim = sys.modules.get(f"{torch.__name__}.optim.optimizer")
    register = getattr(optim, "register_optimizer_step_pre_hook", None)
    if register is not None:
        register(applied)
    for name in ("no_grad", "inference_mode"):
        owner = getattr(torch, name, None)
        if isinstance(owner, type) and "__enter__" in vars(owner):
            replace(owner, "__enter__", lambda f: _entering(f, applied))


def _entering(original: Any, applied: Any) -> Any:
    @functools.wraps(original)
    def enter(self: Any) -> Any:
        if _follower is not None and _follower.pending is not None:
            applied()
        with hidden:
            return original(self)

    return enter
