"""Where a usage record goes: the ``used:`` line, the JSON file, Kubernetes's termination log.

Files are written atomically (a temporary file in the same directory, then a rename), so a
reader, or a job killed mid-write, never sees half a record. The termination log keeps a
message the program wrote there itself: tfboot's summary is added after it when both fit
in the kubelet's 4096 bytes, and otherwise the program's message is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from ..executor.governor import FILLERS
from .merge import job_record
from .suggest import MIN_CPU_WINDOW_S, summary

TERMINATION_BYTES = 4096  # the kubelet keeps at most this much of a termination message


def _gpu(gpu: dict[str, Any]) -> str:
    cap = f" of {gpu['cap_mib']} MiB cap" if gpu.get("cap_mib") is not None else " of no cap"
    process = f" (pid {gpu['pid']})" if gpu.get("pid") is not None else ""
    text = (f"GPU:{gpu.get('index')}{process} {gpu.get('framework')} peak "
            f"{_number(gpu.get('peak_mib'))} MiB{cap}")  # fmt: skip
    if gpu.get("ooms"):
        text += f", {gpu['ooms']} allocator OOMs"
    if gpu.get("peak_pool_mib") not in (None, gpu.get("peak_mib")):
        text += f", pool {gpu['peak_pool_mib']} MiB at most"
    if gpu.get("process_mib") is not None:
        outside = gpu.get("outside_pool_mib")
        text += f", process {gpu['process_mib']} MiB in NVML, " + (
            f"{outside} MiB of it outside the pool (CUDA context and libraries)"
            if outside is not None else "its pool unknown"
        )  # fmt: skip
    return text


def _of_limit(mib: Any) -> str:
    return f" of {mib} MiB limit" if mib else " of no limit"


def _memory_stretch(stretch: dict[str, Any]) -> str:
    return f"{_number(stretch.get('peak_mib'))} MiB{_of_limit(stretch.get('limit_mib'))}"


def _memory(memory: dict[str, Any]) -> str:
    """The peak against the limit it came under: after a resize, the peak since, and each
    earlier limit's own."""
    peak, limit = memory.get("peak_mib"), _of_limit(memory.get("limit_mib"))
    limit += " (shared: limit_shared)" if memory.get("limit_shared") else ""
    since = memory.get("since_resize")
    if memory.get("earlier_limits") and isinstance(since, dict):
        peak = since.get("peak_mib")
        limit += _before(memory["earlier_limits"], _memory_stretch)
    text = f"host memory peak {_number(peak)} MiB{limit}"
    counts = [f"{memory[k]} {label}" for k, label in
              (("oom_kills", "OOM kills"), ("high_events", "memory.high events"))
              if memory.get(k) is not None]  # fmt: skip
    release = memory.get("release")
    if isinstance(release, dict):
        trims = sum(n for n in (release.get("trims"), release.get("bounding_trims"))
                    if isinstance(n, int))  # fmt: skip
        if trims:
            counts.append(f"{trims} malloc trim(s) gave back "
                          f"{_number(release.get('given_back_mib'))} MiB")  # fmt: skip
        counts += _filled(release)
    return text + (", " + ", ".join(counts) if counts else "")


def _filled(release: dict[str, Any]) -> list[str]:
    """What filled the limit when the governor acted, where no trim could give it back."""
    filled = release.get("filled")
    if not isinstance(filled, dict) or filled.get("by") not in FILLERS:
        return []
    said = f"{filled['by']} filled the limit ({_number(filled.get(FILLERS[filled['by']]))} MiB)"
    if filled.get("shm"):
        said += f" ({filled['shm']})"
    if release.get("holds_declined"):
        said += ", no hold: a trim cannot give it back"
    return [said]


def _cpu(cpu: dict[str, Any]) -> str:
    """The CPU used over the window, against the quota; none from a run too short to say
    anything of its need (``suggest.MIN_CPU_WINDOW_S``), which is said once, without one."""
    wall, used = cpu.get("wall_seconds"), cpu.get("used_cpus")
    threads = f", {cpu['threads']} threads" if cpu.get("threads") is not None else ""
    if cpu.get("threads_kept"):
        threads += f" ({cpu['threads_kept']})"
    if isinstance(wall, int | float) and wall < MIN_CPU_WINDOW_S:
        budget = f"a {cpu['quota']:g}-CPU quota" if cpu.get("quota") else "no quota"
        budget += " (shared: quota_shared)" if cpu.get("quota_shared") else ""
        return f"CPU ({budget}{threads}) not judged in a run under {MIN_CPU_WINDOW_S} s"
    text = f"CPU {_cpus(used)}{_of_quota(cpu.get('quota'))}"
    text += " (shared: quota_shared)" if cpu.get("quota_shared") else ""
    throttled = cpu.get("throttled_fraction")
    since = cpu.get("since_resize")
    if cpu.get("earlier_quotas") and isinstance(since, dict):
        text = f"CPU {_cpus(since.get('used_cpus'))}{_of_quota(cpu.get('quota'))}"
        throttled = since.get("throttled_fraction")
        text += _before(cpu["earlier_quotas"], _cpu_stretch)
    return text + _throttled(throttled) + threads


def _cpu_stretch(stretch: dict[str, Any]) -> str:
    return (f"{_cpus(stretch.get('used_cpus'))}{_of_quota(stretch.get('quota'))}"
            f"{_throttled(stretch.get('throttled_fraction'))}")  # fmt: skip


def _cpus(used: Any) -> str:
    return "unknown" if not isinstance(used, int | float) else f"{used:.2f}"


def _of_quota(quota: Any) -> str:
    return f" of a {quota:g}-CPU quota" if isinstance(quota, int | float) and quota else \
        " of no quota"  # fmt: skip


def _throttled(fraction: Any) -> str:
    return "" if fraction is None else f", throttled in {fraction:.1%} of periods"


SAID_STRETCHES = 3  # earlier limits the line names (the record keeps them all)


def _before(earlier: list[dict[str, Any]], said: Callable[[dict[str, Any]], str]) -> str:
    """What each limit before the last resize saw, the latest first, as the line says it."""
    latest = earlier[-1]
    parts = [said(e) for e in reversed(earlier[-SAID_STRETCHES:])]
    more = f" and {len(earlier) - SAID_STRETCHES} more" if len(earlier) > SAID_STRETCHES else ""
    return f" since a resize at {latest.get('until')} (before: {'; '.join(parts)}{more})"


def _number(value: Any) -> str:
    return "unknown" if value is None else f"{value}"


def duration(seconds: float) -> str:
    """Seconds as a person reads them: ``5.1 s``, ``12.5 min``, ``3.2 h``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def used_line(record: dict[str, Any]) -> str:
    """The ``used:`` line's text: each budget's figure against it, over one window said once
    (the process's life from its start; the job's, for a job), and the suggestion; for the
    whole job, where the record carries its members'. Where each figure came from is in the
    record, not here. A figure missing from a record read back is said to be unknown."""
    record = job_record([record])
    parts = [f"job of {record['processes']} processes"] if record.get("processes") else []
    parts += [_gpu(g) for g in record.get("gpus") or []]
    parts.append(_memory(record.get("host_memory") or {}))
    shm = record.get("shm") or {}
    if shm.get("peak_mib") is not None:
        parts.append(f"/dev/shm peak {_number(shm['peak_mib'])} MiB of "
                     f"{_number(shm.get('size_mib'))} MiB (in the memory peak)")  # fmt: skip
    cpu = record.get("cpu") or {}
    parts.append(_cpu(cpu))
    if isinstance(cpu.get("wall_seconds"), int | float):
        whose = "job" if record.get("processes") else "process"
        parts.append(f"over the {duration(cpu['wall_seconds'])} since the {whose} started")
    suggestion = record.get("suggest")
    if suggestion is not None:
        parts.append("next time: " + summary(suggestion))
    return "used: " + "; ".join(parts)


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".tfboot-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_json(path: str, record: dict[str, Any]) -> None:
    """The record as a JSON file, atomically."""
    write_atomically(path, json.dumps(record, indent=2) + "\n")


def termination_text(record: dict[str, Any]) -> bytes:
    """The summary for the termination log, cut to fit the kubelet's limit."""
    data = ("tfboot " + used_line(record) + "\n").encode()
    if len(data) <= TERMINATION_BYTES:
        return data
    return data[: TERMINATION_BYTES - 4].decode("utf-8", "ignore").encode() + b"...\n"


class TerminationLog:
    """Kubernetes's termination message file: tfboot's summary, beside the program's own,
    whose bytes are kept as they are (any encoding)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.written: bytes | None = None  # what tfboot last wrote there
        self.theirs = b""  # the program's own message, kept before tfboot's summary

    def write(self, record: dict[str, Any]) -> bool:
        """Write the summary; False when the program's own message leaves no room."""
        summary_text = termination_text(record)
        try:
            with open(self.path, "rb") as current:
                there = current.read(TERMINATION_BYTES + 1)
        except OSError:
            there = b""
        theirs = self.theirs if there == self.written else there
        text = (theirs.rstrip(b"\n") + b"\n" + summary_text) if theirs else summary_text
        if len(text) > TERMINATION_BYTES:
            return False
        # Written in place: the file is the kubelet's bind mount, which a rename cannot replace.
        with open(self.path, "wb") as out:
            out.write(text)
        self.written, self.theirs = text, theirs
        return True
