"""The GPU rows of the contract that ``tfboot selftest`` checks, and how each is judged.

Each row names the variables its child process gets, the measurement the child runs
(``child.py``) and a judge that turns the child's result and TensorFlow's own log
(``tflog.py``) into PASS, FAIL or SKIP with the numbers seen. Allocation sizes are
fixed and small (the cap, 1 MiB blocks), so a large GPU is checked as fast as a small one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .tflog import TfLog

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
SPLIT = 2
# Memory growth's first device region is 2 MiB in TensorFlow's BFC allocator; a
# preallocating allocator takes (almost) the whole GPU at once.
SMALL_REGION_MB = 64
JIT_EXPECTED = 3072.0  # sum(ones(1024) * 2 + 1), what the jitted function must return


@dataclass(frozen=True)
class Context:
    """What a row is checked against: the GPU under test (None: the node) and the cap."""

    gpu: int | None
    gpu_count: int
    cap_mb: int
    cuda: bool = True  # TensorFlow is a CUDA build (not a PluggableDevice's)


@dataclass
class Verdict:
    status: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    name: str
    checks: str
    per_gpu: bool
    measurement: str
    env: Callable[[Context], dict[str, str]]
    judge: Callable[[Context, dict[str, Any], TfLog], Verdict]
    skip: Callable[[Context], str | None] = lambda ctx: None

    def args(self, ctx: Context) -> list[str]:
        """The child's command-line arguments after the measurement."""
        return [str(ctx.cap_mb)] if self.measurement == "fill" else []


def _devices(log: TfLog) -> list[dict[str, Any]]:
    return [
        {"logical": f"GPU:{d.logical}", "physical": d.physical, "memory_mb": d.memory_mb}
        for d in log.devices
    ]


def _created(log: TfLog) -> str:
    return (
        ", ".join(f"GPU:{d.logical} {d.memory_mb} MB on GPU {d.physical}" for d in log.devices)
        or "no GPU device in TensorFlow's log"
    )


def _placed_everywhere(result: dict[str, Any]) -> bool:
    placed = result.get("placed") or {}
    return bool(placed) and all(
        entry["landed_on"].endswith(name.replace("/device:", "device:"))
        for name, entry in placed.items()
    )


def _fill_verdict(result: dict[str, Any]) -> tuple[bool, str]:
    checks = result.get("fill") or []
    details = "; ".join(f"{c['device'].rpartition('/')[2]}: {c['detail']}" for c in checks)
    return bool(checks) and all(c["ok"] for c in checks), details or "nothing filled"


def _visible_gpu(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    numbers = {"devices": _devices(log), "placed": result.get("placed")}
    only_there = [(d.logical, d.physical) for d in log.devices] == [(0, ctx.gpu)]
    ok = only_there and _placed_everywhere(result) and set(log.regions) <= {0}
    detail = f"TensorFlow created {_created(log)}"
    if ok:
        detail += "; a 1 MiB block landed on GPU:0 and no other GPU took memory"
    return Verdict(PASS if ok else FAIL, detail, numbers)


def _memory_limit(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    filled, fill_detail = _fill_verdict(result)
    sizes = [d.memory_mb for d in log.devices]
    ok = filled and sizes == [ctx.cap_mb]
    detail = f"TensorFlow created {_created(log)}; {fill_detail}"
    return Verdict(
        PASS if ok else FAIL, detail, {"devices": _devices(log), "fill": result.get("fill")}
    )


def _virtual_split(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    want = [(i, ctx.gpu, ctx.cap_mb // SPLIT) for i in range(SPLIT)]
    got = [(d.logical, d.physical, d.memory_mb) for d in log.devices]
    ok = got == want and _placed_everywhere(result) and len(result["placed"]) == SPLIT
    detail = f"TensorFlow created {_created(log)}"
    if not ok:
        detail += f"; expected {SPLIT} logical GPUs of {ctx.cap_mb // SPLIT} MB on GPU {ctx.gpu}"
    return Verdict(PASS if ok else FAIL, detail, {"devices": _devices(log)})


def _growth(log: TfLog) -> tuple[bool, list[float], str]:
    regions = log.region_mib(0)
    small = bool(regions) and regions[0] <= SMALL_REGION_MB
    text = (
        f"first region {regions[0]:g} MiB, {len(regions)} region(s), {sum(regions):g} MiB in all"
        if regions
        else "no allocator region in TensorFlow's log"
    )
    return small, regions, text


def _memory_growth(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    small, regions, text = _growth(log)
    ok = small and _placed_everywhere(result)
    pool = f" of a {log.devices[0].memory_mb} MB pool" if log.devices else ""
    return Verdict(PASS if ok else FAIL, text + pool, {"regions_mib": regions})


def _growth_under_cap(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    small, regions, text = _growth(log)
    filled, fill_detail = _fill_verdict(result)
    # Region sizes are logged with two decimals: allow that rounding, nothing more.
    within = sum(regions) <= ctx.cap_mb + 0.01 * len(regions)
    ok = small and within and filled and [d.memory_mb for d in log.devices] == [ctx.cap_mb]
    detail = f"{text} under a {ctx.cap_mb} MiB cap; {fill_detail}"
    numbers = {"regions_mib": regions, "fill": result.get("fill"), "devices": _devices(log)}
    return Verdict(PASS if ok else FAIL, detail, numbers)


def _async_warning(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    found = [w for w in log.tfboot_warnings if "cuda_malloc_async" in w]
    detail = (
        f"tfboot warned: {found[0]}" if found else "tfboot printed no cuda_malloc_async warning"
    )
    return Verdict(PASS if found else FAIL, detail, {"warnings": log.tfboot_warnings})


def _require_gpu(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    listed = len(result.get("gpus") or [])
    ok = listed == ctx.gpu_count >= 1
    detail = f"import tensorflow succeeded with REQUIRE_GPU=true; {listed} GPU(s) listed"
    return Verdict(PASS if ok else FAIL, detail, {"gpus": listed})


def _xla_jit(ctx: Context, result: dict[str, Any], log: TfLog) -> Verdict:
    value = result.get("jit_value")
    flags = result.get("xla_flags") or "unset"
    if value == JIT_EXPECTED:
        return Verdict(PASS, f"a jitted function compiled and ran on the GPU; XLA_FLAGS {flags}")
    return Verdict(FAIL, f"the jitted function gave {value!r}; XLA_FLAGS {flags}", result)


def _not_cuda(ctx: Context) -> str | None:
    if not ctx.cuda:
        return "not a CUDA build of TensorFlow: XLA compiles GPU code for CUDA GPUs only"
    return None


def _one_gpu(ctx: Context) -> str | None:
    if ctx.gpu_count < 2:
        return "one GPU on this node: there is no other GPU for VISIBLE_GPU to hide"
    return None


def _on(ctx: Context, **extra: str) -> dict[str, str]:
    return {"VISIBLE_GPU": str(ctx.gpu), **extra}


ROWS: tuple[Row, ...] = (
    Row("visible_gpu", "VISIBLE_GPU selects that physical GPU, and memory lands only there",
        True, "place", lambda c: _on(c), _visible_gpu, _one_gpu),
    Row("memory_limit", "MEMORY_LIMIT_MB: filling to the cap works, the next allocation fails",
        True, "fill", lambda c: _on(c, MEMORY_LIMIT_MB=str(c.cap_mb)), _memory_limit),
    Row("virtual_split", f"VIRTUAL_SPLIT={SPLIT} gives {SPLIT} logical GPUs of cap/{SPLIT} each",
        True, "place",
        lambda c: _on(c, MEMORY_LIMIT_MB=str(c.cap_mb), VIRTUAL_SPLIT=str(SPLIT)),
        _virtual_split),
    Row("memory_growth", "MEMORY_GROWTH=true starts small", True, "place",
        lambda c: _on(c, MEMORY_GROWTH="true"), _memory_growth),
    Row("growth_under_cap", "MEMORY_GROWTH=true under a cap grows, never past the cap",
        True, "fill", lambda c: _on(c, MEMORY_LIMIT_MB=str(c.cap_mb), MEMORY_GROWTH="true"),
        _growth_under_cap),
    Row("cuda_malloc_async", "TF_GPU_ALLOCATOR=cuda_malloc_async with a cap gets tfboot's warning",
        False, "probe",
        lambda c: _on(c, MEMORY_LIMIT_MB=str(c.cap_mb), TF_GPU_ALLOCATOR="cuda_malloc_async"),
        _async_warning),
    Row("require_gpu", "REQUIRE_GPU=true accepts this node's device list", False, "probe",
        lambda c: {"REQUIRE_GPU": "true"}, _require_gpu),
    Row("xla_jit", "XLA_JIT=true: a jitted function compiles (ptxas, libdevice) and runs",
        False, "jit", lambda c: _on(c, XLA_JIT="true"), _xla_jit, _not_cuda),
)  # fmt: skip
