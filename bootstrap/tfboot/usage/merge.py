"""One job's records as one: a launcher and its workers, the tasks of a Slurm step (pure).

Every process of a job writes its own record (``job``): the lead's carries the records its
members left (``members``), and members with a file sink write their own files too. A job
record keeps every process's GPUs, each named by its pid (``MEMORY_LIMIT_MB`` is per
process, so the need is the largest process's, never a sum); host memory and CPU are the
largest figure among them: the lead's cgroup or process tree holds its members', and tasks
of one Slurm step share the step's cgroup. A process appears once, however many files
carry it (a member's own file and the copy in its lead's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# What a lead keeps of each member's record.
KEPT = (
    "pid",
    "started",
    "at",
    "final",
    "reason",
    "frameworks",
    "gpus",
    "host_memory",
    "shm",
    "cpu",
    "run",
)


def trimmed(record: dict[str, Any]) -> dict[str, Any]:
    """A member's record as its lead keeps it."""
    return {key: record[key] for key in KEPT if key in record}


def _run(record: dict[str, Any]) -> str | None:
    run = record.get("run")
    return run.get("id") if isinstance(run, dict) and isinstance(run.get("id"), str) else None


def _lead(record: dict[str, Any]) -> bool:
    run = record.get("run")
    return isinstance(run, dict) and run.get("lead") is True


def _peak(section: dict[str, Any] | None, key: str) -> float:
    value = (section or {}).get(key)
    return value if isinstance(value, int | float) else -1.0


def job_record(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The records of one job (and the members they carry) as one record."""
    processes: dict[Any, dict[str, Any]] = {}
    for record in records:
        for entry in [record, *(record.get("members") or [])]:
            if isinstance(entry, dict):
                key = entry.get("pid", id(entry))
                if key not in processes or (entry.get("final") and not processes[key].get("final")):
                    processes[key] = entry
    listed = list(processes.values())
    base = next((r for r in records if _lead(r)), records[0])
    merged = {key: value for key, value in base.items() if key != "members"}
    if len(listed) > 1:
        merged["gpus"] = [{**gpu, "pid": entry.get("pid")} for entry in listed
                          for gpu in entry.get("gpus") or []]  # fmt: skip
        merged["host_memory"] = max((r.get("host_memory") or {} for r in listed),
                                    key=lambda m: _peak(m, "peak_mib"))  # fmt: skip
        merged["cpu"] = max((r.get("cpu") or {} for r in listed),
                            key=lambda c: _peak(c, "cpu_seconds"))  # fmt: skip
        shms = [r["shm"] for r in listed if isinstance(r.get("shm"), dict)]
        if shms:  # one /dev/shm, which every member's loader passed its batches through
            merged["shm"] = max(shms, key=lambda m: _peak(m, "peak_mib"))
        merged["processes"] = len(listed)
    return merged


def by_job(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records grouped by their run, each group one job record; a record without a run
    (an older tfboot's) is a job of its own."""
    groups: dict[str, list[dict[str, Any]]] = {}
    alone: list[dict[str, Any]] = []
    for record in records:
        run = _run(record)
        if run is None:
            alone.append(record)
        else:
            groups.setdefault(run, []).append(record)
    return [job_record(group) for group in groups.values()] + alone
