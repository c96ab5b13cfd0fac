"""How much GPU memory TensorFlow holds under tfboot's settings, on a 16 GiB simulated GPU.

Each row runs the same small workload (tensors of 64, 16 and 1 MiB on GPU:0) in a
fresh process and reads what TensorFlow took from the device (the simulated GPU's
allocation record) next to what the tensors use (``get_memory_info``). The cap
rows need the pinned tf-nightly-cpu with the test-only shim (TensorFlow 2.21
ignores caps on pluggable devices); the others use TensorFlow 2.21. The simulated
GPU keeps TF's pluggable-device reserve, not CUDA's: compare rows, not absolutes.

Run: ``.venv/bin/python bench/simgpu_memory.py`` (needs tfboot installed in
``.venv`` and ``.venv-nightly``; ``scripts/install-wheel.sh``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simgpu.build import build_plugin
from simgpu.scenarios import MIB, NIGHTLY_PYTHON, STABLE_PYTHON, SimGpu, venvs_problem
from tables import print_table

DEVICE_MB = 16384
WORKLOAD = """
import json
import tensorflow as tf
with tf.device("/GPU:0"):
    held = [tf.zeros([mib << 18]) for mib in (64, 16, 1)]
info = tf.config.experimental.get_memory_info("GPU:0")
print(json.dumps({"tf": tf.__version__, "current": info["current"], "peak": info["peak"]}))
"""
ROWS: list[tuple[str, dict[str, str], bool]] = [
    ("no configuration", {}, False),
    ("MEMORY_LIMIT_MB=6144", {"MEMORY_LIMIT_MB": "6144"}, True),
    ("MEMORY_GROWTH=true", {"MEMORY_GROWTH": "true"}, False),
    (
        "MEMORY_LIMIT_MB=6144 MEMORY_GROWTH=true",
        {"MEMORY_LIMIT_MB": "6144", "MEMORY_GROWTH": "true"},
        True,
    ),
]
HEADER = ("setting", "TensorFlow", "held by TF (MiB)", "device allocations", "tensors (MiB)")


def measure(gpu: SimGpu, env: dict[str, str]) -> tuple[str, ...]:
    """One row: run the workload under ``env`` and read the allocation record."""
    run = gpu.run(WORKLOAD, env, memory_mb=str(DEVICE_MB)).check()
    device = run.device(0)
    shim = " + shim" if gpu.shim else ""
    return (
        f"{run.output['tf']}{shim}",
        f"{device['current_bytes'] / MIB:.0f}",
        str(device["allocations"]),
        f"{run.output['peak'] / MIB:.1f}",
    )


def main() -> int:
    problem = venvs_problem(STABLE_PYTHON, NIGHTLY_PYTHON)
    if problem is not None:
        print(f"simgpu_memory: {problem}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as workdir:
        stable = SimGpu(STABLE_PYTHON, build_plugin(STABLE_PYTHON), Path(workdir), shim=False)
        nightly = SimGpu(NIGHTLY_PYTHON, build_plugin(NIGHTLY_PYTHON), Path(workdir), shim=True)
        rows = [(name, *measure(nightly if cap else stable, env)) for name, env, cap in ROWS]
    print(f"simulated GPU: {DEVICE_MB} MiB; workload: tensors of 64 + 16 + 1 MiB on GPU:0\n")
    print_table(HEADER, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
