"""tfboot on simulated GPUs with TensorFlow 2.21: visibility, growth, REQUIRE_GPU, doctor.

Every scenario sets tfboot's variables only; the code run is ``import tensorflow``
plus assertions. What TF allocated is read from the plugin's allocation record.
TensorFlow 2.21 ignores logical-device configuration on pluggable devices, so caps
and splits are tested in ``test_nightly.py``.
"""

from __future__ import annotations

import pytest

from simgpu.scenarios import MIB, SimGpu

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]

PLACE_ON_GPU0 = """
import json
import tensorflow as tf
logical = tf.config.list_logical_devices("GPU")
assert len(logical) == 1, logical
with tf.device("/GPU:0"):
    x = tf.zeros([256, 1024])
assert x.device.endswith("/device:GPU:0"), x.device
assert float(tf.reduce_sum(x)) == 0.0
visible = [d.name for d in tf.config.get_visible_devices("GPU")]
print(json.dumps({"visible": visible, "logical": [d.name for d in logical]}))
"""

CPU_ONLY = """
import json
import tensorflow as tf
assert tf.config.list_logical_devices("GPU") == []
x = tf.ones([64, 64]) @ tf.ones([64, 64])
assert x.device.endswith("/device:CPU:0"), x.device
assert float(x[0, 0]) == 64.0
print(json.dumps({"device": x.device}))
"""


def test_visible_gpu_index_picks_that_physical_device(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run(PLACE_ON_GPU0, {"VISIBLE_GPU": "1"}, count=2).check()
    assert run.output["visible"] == ["/physical_device:GPU:1"]
    assert run.device(0)["allocations"] == 0
    assert run.device(1)["allocations"] >= 1
    lines = run.tfboot_lines()  # the info line, then the usage line: no warning
    assert len(lines) == 2 and lines[1].startswith("tfboot: used: GPU:0 TensorFlow"), run.stderr


def test_visible_gpu_index_out_of_range_fails_import(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run("import tensorflow", {"VISIBLE_GPU": "2"}, count=2)
    assert not run.ok
    assert "ConfigError" in run.stderr
    assert "VISIBLE_GPU" in run.stderr
    assert run.device(0)["allocations"] == run.device(1)["allocations"] == 0


def test_visible_gpu_none_computes_on_cpu(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run(CPU_ONLY, {"VISIBLE_GPU": "none"}, count=2).check()
    assert run.device(0)["allocations"] == run.device(1)["allocations"] == 0


def test_memory_growth_true_starts_small(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run(PLACE_ON_GPU0, {"MEMORY_GROWTH": "true"}).check()
    device = run.device(0)
    assert device["first_allocation_bytes"] == 2 * MIB
    assert device["peak_bytes"] < 64 * MIB


def test_memory_growth_false_takes_the_pool(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run(PLACE_ON_GPU0, {"MEMORY_GROWTH": "false"}).check()
    device = run.device(0)
    assert device["allocations"] == 1
    # The whole device minus TF's reserve for pluggable devices (not CUDA's reserve).
    assert 0.9 * device["total_bytes"] <= device["first_allocation_bytes"] < device["total_bytes"]


def test_require_gpu_true_without_gpu_fails(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run("import tensorflow", {"REQUIRE_GPU": "true"}, count=0)
    assert not run.ok
    assert "ConfigError" in run.stderr
    assert "REQUIRE_GPU" in run.stderr


def test_require_gpu_false_without_gpu_warns_once(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run(CPU_ONLY, {"REQUIRE_GPU": "false", "MEMORY_GROWTH": "true"}, count=0)
    run.check()
    assert len(run.tfboot_lines("warning")) == 1, run.stderr


def test_doctor_json_reports_simulated_devices(stable_gpu: SimGpu) -> None:
    run = stable_gpu.tfboot("doctor", "--json", count=2, memory_mb="1024,2048").check()
    report = run.output
    gpus = ["/physical_device:GPU:0", "/physical_device:GPU:1"]
    assert report["physical_devices"]["GPU"] == gpus
    assert report["logical_devices"]["GPU"] == ["/device:GPU:0", "/device:GPU:1"]
    for name in report["logical_devices"]["GPU"]:
        entry = report["memory"][name]
        assert entry["current_bytes"] >= 0
        assert entry["peak_bytes"] >= entry["current_bytes"]


def test_split_count_without_a_cap_fails_on_a_gpu_host(stable_gpu: SimGpu) -> None:
    run = stable_gpu.run("import tensorflow", {"VIRTUAL_SPLIT": "2"})
    assert not run.ok
    assert "VIRTUAL_SPLIT='2' cannot be applied on this host" in run.stderr
    assert "MEMORY_LIMIT_MB is not set" in run.stderr


USER_GROWTH_AFTER_CAP = """
import json
import tensorflow as tf
gpu = tf.config.list_physical_devices("GPU")[0]
try:
    tf.config.experimental.set_memory_growth(gpu, True)
    outcome = "accepted"
except ValueError as exc:
    outcome = str(exc)
print(json.dumps({"outcome": outcome}))
"""


def test_user_set_memory_growth_after_a_cap_is_refused_by_tensorflow(stable_gpu: SimGpu) -> None:
    # Documented: with a cap, TensorFlow refuses set_memory_growth; MEMORY_GROWTH=true is the way.
    run = stable_gpu.run(USER_GROWTH_AFTER_CAP, {"MEMORY_LIMIT_MB": "512"}).check()
    assert "virtual devices configured" in run.output["outcome"]
