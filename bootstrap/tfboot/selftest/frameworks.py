"""``tfboot selftest --framework jax|torch``: JAX's and PyTorch's GPU rows, each in a fresh process.

- ``visibility``: ``VISIBLE_GPU`` leaves one GPU (or none, on a one-GPU node) to the framework.
- ``cap``: under ``MEMORY_LIMIT_MB`` the framework fills its GPU up to the cap, then is
  refused (JAX's ``RESOURCE_EXHAUSTED``, PyTorch's ``OutOfMemoryError``).
- ``growth``: under ``MEMORY_GROWTH=true`` a first small allocation takes little memory;
  JAX's default would take 75% of the GPU at once.

The rows share the TensorFlow selftest's report, lines and exit status (3: no GPU).
"""

from __future__ import annotations

from typing import Any

from ..budget.roles import NAMES
from .rows import FAIL, PASS, SKIP, Verdict
from .runner import Options, Report, RowResult, run_child

CHILD = "tfboot.selftest.fwchild"
# A cap is filled when the refusal comes at most this far below it (allocator rounding).
FILL_SLACK = 0.10
# The most a first small allocation may take under growth: a CUDA context and one region.
GROWTH_MAX_MIB = 2048


def _visibility(framework: str, gpu: int, count: int, cap: int, timeout: float) -> RowResult:
    hide = count == 1
    env = {"VISIBLE_GPU": "none" if hide else str(gpu)}
    found, _log, seconds = run_child("count", [framework], env, timeout, CHILD)
    want = 0 if hide else 1
    if "error" in found:
        verdict = Verdict(FAIL, found["error"])
    elif len(found["gpus"]) == want:
        verdict = Verdict(PASS, f"VISIBLE_GPU={env['VISIBLE_GPU']}: {want} GPU(s) seen")
    else:
        verdict = Verdict(
            FAIL, f"VISIBLE_GPU={env['VISIBLE_GPU']}: {len(found['gpus'])} seen, {want} expected"
        )
    return RowResult(
        "visibility", gpu, "VISIBLE_GPU", verdict.status, verdict.detail, round(seconds, 1)
    )


def _cap(framework: str, gpu: int, count: int, cap: int, timeout: float) -> RowResult:
    env = {"VISIBLE_GPU": str(gpu), "MEMORY_LIMIT_MB": str(cap), "MEMORY_GROWTH": "true"}
    found, _log, seconds = run_child("fill", [framework, str(cap)], env, timeout, CHILD)
    numbers: dict[str, Any] = {}
    if "error" in found:
        verdict = Verdict(FAIL, found["error"])
    else:
        filled = found["filled_mib"]
        numbers = {"filled_mib": filled, "cap_mib": cap}
        held = found["refused"] and (1 - FILL_SLACK) * cap <= filled <= cap
        how = "refused" if found["refused"] else "never refused"
        verdict = Verdict(PASS if held else FAIL, f"filled {filled} of {cap} MiB, then {how}")
    return RowResult(
        "cap", gpu, "MEMORY_LIMIT_MB", verdict.status, verdict.detail, round(seconds, 1), numbers
    )


def _growth(framework: str, gpu: int, count: int, cap: int, timeout: float) -> RowResult:
    env = {"VISIBLE_GPU": str(gpu), "MEMORY_GROWTH": "true"}
    found, _log, seconds = run_child("growth", [framework], env, timeout, CHILD)
    if "error" in found:
        verdict = Verdict(FAIL, found["error"])
    else:
        grew = found["grew_mib"]
        small = grew <= GROWTH_MAX_MIB
        verdict = Verdict(PASS if small else FAIL, f"a 1 MiB allocation took {grew} MiB of the GPU")
    return RowResult(
        "growth", gpu, "MEMORY_GROWTH", verdict.status, verdict.detail, round(seconds, 1)
    )


ROWS = (
    ("visibility", "VISIBLE_GPU", _visibility),
    ("cap", "MEMORY_LIMIT_MB", _cap),
    ("growth", "MEMORY_GROWTH", _growth),
)


def run(framework: str, options: Options, on_start: Any = None, on_row: Any = None) -> Report:
    """Probe the framework's GPUs, then check each row on each GPU tested."""
    found, _log, _seconds = run_child("probe", [framework], {}, options.timeout, CHILD)
    name = NAMES[framework]
    if "error" in found:
        return Report(
            None, [], [], options.cap_mb, error=f"{name} could not start: {found['error']}"
        )
    listed = [{"name": f"GPU:{i}", "model": model} for i, model in enumerate(found["gpus"])]
    report = Report(found["version"], listed, [], options.cap_mb, framework=name)
    if not listed:  # every row skipped: exit status 3, as TensorFlow's selftest
        report.rows = [RowResult(n, None, c, SKIP, f"{name} lists no GPU", 0.0) for n, c, _ in ROWS]
        return report
    if not report.choose(options.gpus):
        return report
    if on_start is not None:
        on_start(report)
    for gpu in report.tested:
        for _name, _checks, row in ROWS:
            result = row(framework, gpu, len(listed), options.cap_mb, options.timeout)
            report.rows.append(result)
            if on_row is not None:
                on_row(result)
    return report
