"""Which job a process's report belongs to, and whether the process speaks for it.

A job is one run of a launcher and everything it starts: ``torchrun`` and its ranks, a
program and its ``multiprocessing`` spawn or forkserver workers (DataLoader workers among
them), the tasks of one Slurm step. Its first reporting process, the *lead*, names the run
in ``RUN`` (inherited by every child it starts) and opens a drop directory where the other
processes, its *members*, leave their final records; at its end it reads them, so its one
``used:`` line and its suggestion cover every process of the job (the ranks hold the
GPUs). Members log their line at debug only.

Processes that share no parent still form one job when a launcher says so
(``cluster.RUNS``): the tasks of a Slurm step (task 0 leads) and the ranks of a
``torchrun`` whose launcher reported nothing (rank 0 leads).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from ..cluster import RUNS
from ..provenance import TFBOOT, writer
from .schema import Unusable, read

RUN = "TFBOOT_USAGE_RUN"
MAX_MEMBERS = 1024  # records read back from the drop directory, at most
MAX_RECORD_BYTES = 1 << 20


class Job:
    """This process's place in its job: the run's id; whether it leads (speaks for the job
    at info level and writes the file sinks' own paths); ``parent``, the pid of the process
    that collects its record (None: it collects, it started this branch of the run); and
    the drop directory where its record goes (a member) or where it collects (otherwise)."""

    __slots__ = ("drop", "id", "lead", "parent")

    def __init__(self, run: str, lead: bool, parent: int | None, drop: str | None) -> None:
        self.id, self.lead, self.parent, self.drop = run, lead, parent, drop

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "lead": self.lead, "parent": self.parent}


def _inherited(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The run a parent process named, when tfboot wrote it and it parses."""
    if writer(env, RUN) != TFBOOT:
        return None
    try:
        found = json.loads(env[RUN])
    except (KeyError, ValueError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        return None
    if not isinstance(found.get("pid"), int) or found["pid"] == os.getpid():
        return None
    drop = found.get("drop")
    return {"id": found["id"][:200], "pid": found["pid"],
            "drop": drop if isinstance(drop, str) else None}  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def _launcher(env: Mapping[str, str]) -> tuple[str, bool] | None:
    """A run a launcher names for processes that share no parent: (id, whether this one leads)."""
    return next((found for run in RUNS if (found := run.of(env)) is not None), None)


def identify(env: Mapping[str, str]) -> Job:
    """This process's job. A member of a live lead's run joins it; otherwise the process
    starts a run (named by its launcher where there is one) and, in ``os.environ``, names
    it for its children."""
    parent = _inherited(env)
    if parent is not None and _alive(parent["pid"]):
        return Job(parent["id"], False, parent["pid"], parent["drop"])
    named = _launcher(env)
    pid = os.getpid()
    run, lead = named or (f"{os.uname().nodename}-{pid}-{int(time.time())}", True)
    drop = None
    if env is os.environ:
        from ..executor.environ import setenv

        with contextlib.suppress(OSError):
            drop = tempfile.mkdtemp(prefix="tfboot-run-")
        setenv(RUN, json.dumps({"id": run, "pid": pid, "drop": drop}))
    return Job(run, lead, None, drop)


def member_path(path: str, job: Job) -> str:
    """A file sink's path for this process: the lead's as given, a member's with its pid
    before the extension (``usage.json`` -> ``usage.4242.json``), so none writes over
    another."""
    if job.lead or "{pid}" in path:
        return path
    stem, dot, extension = path.rpartition(".")
    if not dot or "/" in extension:
        return f"{path}.{os.getpid()}"
    return f"{stem}.{os.getpid()}.{extension}"


def leave(job: Job, record: dict[str, Any]) -> bool:
    """A member's final record into the lead's drop directory; False where there is none."""
    if job.parent is None or job.drop is None:
        return False
    from .sinks import write_json

    try:
        write_json(os.path.join(job.drop, f"{os.getpid()}.json"), record)
    except OSError:
        return False
    return True


def _collecting(job: Job) -> str | None:
    """The drop directory this process collects from; None for a member."""
    return job.drop if job.parent is None else None


def gather(job: Job) -> list[dict[str, Any]]:
    """The final records members have left so far, their files removed: at each of the
    lead's snapshots, so a long-lived process keeps no file per exited child. A record half
    written is a temporary file (``.tfboot-*``), left for the next time."""
    drop = _collecting(job)
    if drop is None:
        return []
    try:
        names = sorted(n for n in os.listdir(drop) if n.endswith(".json") and n[0] != ".")
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for name in names[:MAX_MEMBERS]:
        path = os.path.join(drop, name)
        with contextlib.suppress(OSError, Unusable):
            found.append(read(path, MAX_RECORD_BYTES))
        with contextlib.suppress(OSError):
            os.unlink(path)
    return found


def collect(job: Job) -> list[dict[str, Any]]:
    """The end of a process that started a branch of the run: the records its members left
    since the last ``gather``, then the drop directory removed."""
    found = gather(job)
    drop = _collecting(job)
    if drop is not None:
        with contextlib.suppress(OSError):
            for name in os.listdir(drop):
                os.unlink(os.path.join(drop, name))
            os.rmdir(drop)
    return found
