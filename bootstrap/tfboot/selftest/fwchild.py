"""One JAX or PyTorch selftest row in a fresh process.

``python -m tfboot.selftest.fwchild KIND FRAMEWORK [CAP_MB]``: importing the framework
applies the row's variables through tfboot's hook; then one measurement runs and prints one
JSON line. ``probe``: the GPUs the framework lists; ``count``: how many it sees now;
``fill``: allocate 16 MiB blocks on the first GPU it sees until one is refused;
``growth``: the GPU memory the node's driver counts as used before and after a first
small allocation. Any error is reported as ``{"error": ...}``, never as a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

BLOCK_MIB = 16


def _gpus(framework: str, module: Any) -> list[str]:
    if framework == "jax":
        try:
            return [d.device_kind for d in module.devices("gpu")]
        except RuntimeError:  # no GPU backend
            return []
    count = module.cuda.device_count() if module.cuda.is_available() else 0
    return [module.cuda.get_device_name(i) for i in range(count)]


def _allocate(framework: str, module: Any, mib: int) -> Any:
    if framework == "jax":
        numpy, gpu = module.numpy, module.devices("gpu")[0]
        return numpy.zeros((mib << 20,), dtype=numpy.uint8, device=gpu).block_until_ready()
    return module.empty((mib << 20,), dtype=module.uint8, device="cuda:0")


def _refused(framework: str, exc: Exception) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return "RESOURCE_EXHAUSTED" in text or "OutOfMemory" in text or "out of memory" in text


def _fill(framework: str, module: Any, cap_mib: int) -> dict[str, Any]:
    blocks = []
    for _ in range(2 * cap_mib // BLOCK_MIB + 2):
        try:
            blocks.append(_allocate(framework, module, BLOCK_MIB))
        except Exception as exc:  # the refusal the row looks for, or another error
            if not _refused(framework, exc):
                return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            return {"filled_mib": len(blocks) * BLOCK_MIB, "refused": True}
    return {"filled_mib": len(blocks) * BLOCK_MIB, "refused": False}


def _used() -> int:
    from ..node.nvml import read_inventory

    return sum(read_inventory().used)


def measure(framework: str, kind: str, args: Sequence[str]) -> dict[str, Any]:
    before = _used() if kind == "growth" else 0
    module = __import__(framework)
    if kind in ("probe", "count"):
        return {"version": module.__version__, "gpus": _gpus(framework, module)}
    if kind == "fill":
        return _fill(framework, module, int(args[0]))
    _allocate(framework, module, 1)
    return {"grew_mib": (_used() - before) >> 20}


def main(argv: Sequence[str]) -> int:
    try:
        result = measure(argv[1], argv[0], argv[2:])
    except Exception as exc:  # reported for the parent to judge
        result = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
