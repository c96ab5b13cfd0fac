"""The contract's simulated-GPU rows at every TensorFlow of the version matrix (the
environments scripts/test.sh builds; the plugin is compiled against each one's C API
headers): visibility, memory growth, REQUIRE_GPU. Caps and splits need the pinned nightly
(older TensorFlows ignore logical-device configuration on pluggable devices, as 2.21 does),
so they are ``test_nightly.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import matrix_python

from simgpu.scenarios import MIB, SimGpu, ready_plugin
from simgpu.test_stable import CPU_ONLY, PLACE_ON_GPU0

# TensorFlow 2.17 computes nothing on this pluggable device (two GPU kernels for Fill, then
# a crash copying a tensor to it), whatever tfboot does: its rows are read back from
# tf.config instead of from where memory went.
COMPUTES = ["2.12", "2.15-py3.10", "2.16-keras-3.0"]
READ_BACK = """
import json
import tensorflow as tf
visible = tf.config.get_visible_devices("GPU")
print(json.dumps({"visible": [d.name for d in visible],
                  "growth": [tf.config.experimental.get_memory_growth(d) for d in visible],
                  "logical": len(tf.config.list_logical_devices("GPU"))}))
"""

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]
VERSIONS = ["2.12", "2.15-py3.10", "2.16-keras-3.0", "2.17-tf-keras"]


def simulated(version: str, tmp_path: Path) -> Iterator[SimGpu]:
    python = Path(matrix_python("tf", version))
    found = SimGpu(python, ready_plugin(python), tmp_path, shim=False)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(params=COMPUTES)
def gpu(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SimGpu]:
    yield from simulated(request.param, tmp_path)


@pytest.fixture(params=VERSIONS)
def any_gpu(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SimGpu]:
    yield from simulated(request.param, tmp_path)


def test_tf_config_reads_back_visibility_and_growth(any_gpu: SimGpu) -> None:
    run = any_gpu.run(READ_BACK, {"VISIBLE_GPU": "1", "MEMORY_GROWTH": "true"}, count=2).check()
    assert run.output == {"visible": ["/physical_device:GPU:1"], "growth": [True], "logical": 1}


def test_visible_gpu_picks_that_device(gpu: SimGpu) -> None:
    run = gpu.run(PLACE_ON_GPU0, {"VISIBLE_GPU": "1"}, count=2).check()
    assert run.output["visible"] == ["/physical_device:GPU:1"]
    assert run.device(0)["allocations"] == 0 and run.device(1)["allocations"] >= 1
    none = gpu.run(CPU_ONLY, {"VISIBLE_GPU": "none"}, count=2).check()
    assert none.device(0)["allocations"] == none.device(1)["allocations"] == 0


def test_memory_growth_both_ways(gpu: SimGpu) -> None:
    grows = gpu.run(PLACE_ON_GPU0, {"MEMORY_GROWTH": "true"}).check().device(0)
    assert grows["first_allocation_bytes"] == 2 * MIB and grows["peak_bytes"] < 64 * MIB
    pool = gpu.run(PLACE_ON_GPU0, {"MEMORY_GROWTH": "false"}).check().device(0)
    assert pool["allocations"] == 1
    assert 0.9 * pool["total_bytes"] <= pool["first_allocation_bytes"] < pool["total_bytes"]


def test_require_gpu_without_one_stops_the_import(any_gpu: SimGpu) -> None:
    run = any_gpu.run("import tensorflow", {"REQUIRE_GPU": "true"}, count=0)
    assert not run.ok and "REQUIRE_GPU" in run.stderr and "ConfigError" in run.stderr
