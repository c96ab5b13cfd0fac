"""What was applied and why: the result of one framework's configuration, and its lines.

Every line tfboot writes goes through ``emit``; ``log`` writes a framework's: its
warnings, its calls (under debug), what it got and why, and the cluster's line.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ..adapters import Plan
from ..budget.roles import ALONG, NAMES, Role
from ..settings import Settings
from ..values import line, rows


@dataclass
class Result:
    """The outcome of configuring one framework."""

    framework: str = NAMES["tensorflow"]
    disabled: bool = False
    settings: Settings | None = None
    plan: Plan | None = None
    calls: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    role: Role | None = None
    qualified: bool = False  # its lines and errors name the framework

    @property
    def applied(self) -> bool:
        return bool(self.calls) and self.error is None

    @property
    def cluster(self) -> Any:
        """The cluster plan (``cluster.plan.ClusterPlan``) when ``DISTRIBUTED`` is not off."""
        return self.plan.cluster if self.plan is not None else None

    def to_dict(self) -> dict[str, Any]:
        """TensorFlow's report, as ``doctor --json`` prints it."""
        settings = self.settings
        return {
            "disabled": self.disabled,
            "applied": self.applied,
            "error": self.error,
            "settings": rows(settings.given) if settings else {},
            "decisions": list(self.plan.decisions) if self.plan else [],
            "calls": list(self.calls),
            "warnings": list(self.warnings),
            "cluster": self.cluster.to_dict() if self.cluster is not None else None,
        }

    def section(self) -> dict[str, Any]:
        """Another framework's report, as ``doctor --framework`` prints it."""
        role = self.plan.role if self.plan is not None else self.role
        return {
            "framework": self.framework,
            "role": "runs the model" if role is None or role.runs_model else role.why,
            "error": self.error,
            "decisions": list(self.plan.decisions) if self.plan else [],
            "calls": list(self.calls),
            "warnings": list(self.warnings),
            "cluster": self.cluster.to_dict() if self.cluster is not None else None,
        }


WRITE_DEADLINE_S = 2.0  # the longest a line may wait on a stalled pipe or socket
_CHUNK = 512  # at most this much per write to a pipe found writable (PIPE_BUF is 4096)


def emit(kind: str, text: str) -> None:
    """One line on stderr, prefixed so it can be grepped. Never raises, whatever stderr is:
    closed (Python's ``sys.stderr`` is None: the line is dropped, never sent to stdout), a
    broken pipe (dropped, and nothing left in Python's buffer to fail the exit status), a
    pipe nobody reads (given up after ``WRITE_DEADLINE_S``), or an object that is not a file."""
    data = line(kind, text) + "\n"
    stream = sys.stderr
    if stream is None:
        return
    try:
        fd = stream.fileno()
    except Exception:  # a program's or a test runner's stream without a descriptor
        fd = None
    try:
        if fd is None:
            stream.write(data)
            stream.flush()
            return
        with contextlib.suppress(Exception):
            stream.flush()  # the program's own buffered text first, in order
        _write(fd, data.encode("utf-8", "backslashreplace"))
    except Exception:
        pass


def _write(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd``; to a pipe or socket only while it takes it in time."""
    kind = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind)):
        while data:
            data = data[os.write(fd, data) :]
        return
    deadline = time.monotonic() + WRITE_DEADLINE_S
    while data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            return
        data = data[os.write(fd, data[:_CHUNK]) :]


def spawned_worker() -> bool:
    """This interpreter was started by ``multiprocessing``'s spawn or forkserver (its
    command line is theirs: ``--multiprocessing-fork``, or the fork server's ``main``)."""
    argv = " ".join(getattr(sys, "orig_argv", ()))
    return "--multiprocessing-fork" in argv or "multiprocessing.forkserver" in argv


def log(result: Result, level: str) -> None:
    """The framework's warnings, its calls (debug), and what it got and why (info); a
    framework that came along with another, and one in a worker ``multiprocessing`` started
    as a fresh interpreter (a DataLoader's, a pool's: spawn, forkserver), logged under debug
    only, so that N workers do not repeat the line of the process that started them."""
    plan = result.plan
    quieter = plan is not None and (plan.role.kind == ALONG or spawned_worker())
    if level == "quiet" or plan is None or (level == "info" and quieter):
        return
    name = result.framework + plan.role.label
    for warning in result.warnings:
        emit("warning", f"{name}: {warning}" if result.qualified else warning)
    if level == "debug":
        for call in result.calls:
            emit("debug", call)
    if not plan.empty:  # one line a decision, to fit a terminal; how it works: doctor
        first, *more = plan.decisions
        emit("info", f"configured {name}: {first}")
        for decision in more:
            emit("info", f"  {decision}")
    if plan.cluster is not None:
        emit("info", plan.cluster.line())
