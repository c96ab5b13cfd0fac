"""Run the selftest: probe the node, then each row in its own fresh Python process.

The parent never imports TensorFlow, so no GPU memory is held here while a row runs.
Each child gets this process's environment minus every tfboot and allocator variable,
plus the row's variables and the log settings ``tflog`` reads; anything else (a
``CUDA_VISIBLE_DEVICES``, a plugin path, ``PYTHONPATH``) reaches it unchanged.
Rows run one after another: two TensorFlow processes on one GPU would measure each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..adapters.tensorflow import GROWTH_ENV
from ..budget.roles import NAMES
from ..node.nccl import readiness, why_needed
from ..node.visible import mig_instances
from ..settings import ALL_NAMES
from . import tflog
from .rows import FAIL, PASS, ROWS, SKIP, Context, Row, Verdict

NO_GPU = 3  # exit status: TensorFlow lists no GPU on this node
ALLOCATOR_ENV = "TF_GPU_ALLOCATOR"


@dataclass
class RowResult:
    row: str
    gpu: int | None
    checks: str
    status: str
    detail: str
    seconds: float
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Everything one selftest run found; ``exit_status`` follows the documented codes."""

    tensorflow: str | None
    gpus: list[dict[str, Any]]
    tested: list[int]
    cap_mb: int
    rows: list[RowResult] = field(default_factory=list)
    error: str | None = None
    error_status: int = 1  # 2 when the options did not fit this node
    nccl: dict[str, Any] = field(default_factory=dict)  # /dev/shm and memlock, measured
    mig: list[str] = field(default_factory=list)  # MIG instances the environment names
    # whose rows (``tensorflow`` holds that framework's version)
    framework: str = NAMES["tensorflow"]

    @property
    def exit_status(self) -> int:
        if self.error is not None:
            return self.error_status
        if not self.gpus:
            return NO_GPU
        return 1 if any(r.status == FAIL for r in self.rows) else 0

    def choose(self, gpus: tuple[int, ...] | None) -> bool:
        """Test ``gpus`` (None: all listed); False, with the error set, when one is missing."""
        count = len(self.gpus)
        tested = list(range(count)) if gpus is None else list(gpus)
        missing = [i for i in tested if i >= count]
        if missing:
            self.error = (
                f"--gpu {missing[0]}: {self.framework} lists {count} GPU(s), 0 to {count - 1}"
            )
            self.error_status = 2
            return False
        self.tested = tested
        return True

    def to_dict(self) -> dict[str, Any]:
        counts = {s.lower(): sum(r.status == s for r in self.rows) for s in (PASS, FAIL, SKIP)}
        return {
            "tensorflow": self.tensorflow if self.framework == NAMES["tensorflow"] else None,
            "framework": self.framework,
            "version": self.tensorflow,
            "gpus": self.gpus,
            "tested_gpus": self.tested,
            "cap_mb": self.cap_mb,
            "rows": [vars(r) for r in self.rows],
            "summary": counts,
            "error": self.error,
            "exit_status": self.exit_status,
            "nccl": self.nccl,
            "mig": self.mig,
        }


def child_env(row_env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) without tfboot's variables, plus ``row_env``."""
    base = os.environ if base is None else base
    dropped = ALL_NAMES | {GROWTH_ENV, ALLOCATOR_ENV}
    env = {k: v for k, v in base.items() if k not in dropped}
    env.update(tflog.LOG_ENV)
    env["TFBOOT_LOG"] = "info"
    env.update(row_env)
    return env


def run_child(
    measurement: str,
    args: Sequence[str],
    row_env: Mapping[str, str],
    timeout: float,
    child: str = "tfboot.selftest.child",
) -> tuple[dict[str, Any], tflog.TfLog, float]:
    """Run one measurement in a fresh interpreter; its JSON result, its log, seconds taken."""
    cmd = [sys.executable, "-m", child, measurement, *args]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, env=child_env(row_env), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or b""
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        error = f"no result within --timeout {timeout:g} s"
        return {"error": error}, tflog.parse(stderr), time.monotonic() - start
    seconds = time.monotonic() - start
    result = _last_json(proc.stdout)
    if result is None:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        result = {"error": f"the row's process exited {proc.returncode}: {tail[0]}"}
    return result, tflog.parse(proc.stderr), seconds


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return dict(json.loads(line))
            except ValueError:
                return None
    return None


def _check(row: Row, ctx: Context, timeout: float) -> RowResult:
    gpu = ctx.gpu if row.per_gpu else None  # a node row runs on the first GPU tested
    reason = row.skip(ctx)
    if reason is not None:
        return RowResult(row.name, gpu, row.checks, SKIP, reason, 0.0)
    result, log, seconds = run_child(row.measurement, row.args(ctx), row.env(ctx), timeout)
    failed = Verdict(FAIL, result["error"]) if "error" in result else None
    verdict = failed or row.judge(ctx, result, log)
    return RowResult(
        row.name, gpu, row.checks, verdict.status, verdict.detail, round(seconds, 1),
        verdict.numbers,
    )  # fmt: skip


def probe(timeout: float) -> dict[str, Any]:
    """TensorFlow's version and physical GPUs, from a child with no tfboot variables."""
    result, _log, _seconds = run_child("probe", [], {}, timeout)
    return result


@dataclass(frozen=True)
class Options:
    """What to check: the GPUs (None: all), the cap, the time a row may take, which rows."""

    gpus: tuple[int, ...] | None = None
    cap_mb: int = 1024
    timeout: float = 180
    rows: tuple[str, ...] = tuple(row.name for row in ROWS)


def run(
    options: Options,
    on_start: Callable[[Report], None] | None = None,
    on_row: Callable[[RowResult], None] | None = None,
) -> Report:
    """Probe, then check the chosen rows on the chosen GPUs.

    ``on_start(report)`` is called once the GPUs to test are known, ``on_row(result)`` as
    each row finishes.
    """
    cap_mb, timeout = options.cap_mb, options.timeout
    found = probe(timeout)
    if "error" in found:
        return Report(None, [], [], cap_mb, error=f"TensorFlow could not start: {found['error']}")
    listed = found["gpus"]
    report = Report(found["tensorflow"], listed, [], cap_mb)
    distributed = os.environ.get("DISTRIBUTED", "").strip().lower() not in ("", "off")
    why = why_needed(len(listed), 0) or ("DISTRIBUTED is set" if distributed and listed else None)
    report.nccl = {"needed": why, **readiness(why).to_dict()}
    report.mig = mig_instances(os.environ)
    if not listed:
        return report
    if not report.choose(options.gpus):
        return report
    tested = report.tested
    if on_start is not None:
        on_start(report)
    for row in (row for row in ROWS if row.name in options.rows):
        for gpu in tested if row.per_gpu else tested[:1]:
            context = Context(gpu, len(listed), cap_mb, bool(found.get("cuda", True)))
            result = _check(row, context, timeout)
            report.rows.append(result)
            if on_row is not None:
                on_row(result)
    return report
