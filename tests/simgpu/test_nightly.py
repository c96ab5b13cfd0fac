"""tfboot's caps and splits on a simulated GPU, with the pinned tf-nightly-cpu and the shim.

The nightly's runtime splits and caps pluggable devices; the test-only shim
(``pluggable_shim``) carries tf.config's logical-device configuration to it. Every
scenario sets tfboot's variables only; the code run is ``import tensorflow`` plus
assertions. Out-of-memory cases are few on purpose: each costs about 10 s of BFC
allocator retries.
"""

from __future__ import annotations

import pytest

from simgpu.scenarios import MIB, SimGpu

pytestmark = [pytest.mark.simgpu, pytest.mark.nightly, pytest.mark.tf]

PLACE_ON_EACH_GPU = """
import json
import tensorflow as tf
names = [d.name for d in tf.config.list_logical_devices("GPU")]
for name in names:
    with tf.device(name):
        x = tf.zeros([256, 1024])
    assert x.device.endswith(name.replace("/device:", "device:")), (x.device, name)
print(json.dumps({"logical": names}))
"""

# Fill GPU:0 in 128 MiB blocks until the allocator refuses (at most 12 blocks).
FILL_GPU0 = """
import json, os
import tensorflow as tf
names = [d.name for d in tf.config.list_logical_devices("GPU")]
assert names == ["/device:GPU:0"], names
held, refused = [], False
with tf.device("/GPU:0"):
    for _ in range(12):
        try:
            held.append(tf.zeros([128 << 18]))
        except tf.errors.ResourceExhaustedError:
            refused = True
            break
info = tf.config.experimental.get_memory_info("GPU:0")
print(json.dumps({
    "refused": refused,
    "held_mb": 128 * len(held),
    "peak": info["peak"],
    "growth_env": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
}))
"""


def mib_sizes(device: dict) -> list[int]:
    """The device's allocation sizes in MiB, in order."""
    return [size // MIB for size in device["sizes"]]


def test_memory_limit_caps_the_gpu(nightly_gpu: SimGpu) -> None:
    run = nightly_gpu.run(FILL_GPU0, {"MEMORY_LIMIT_MB": "1024"}).check()
    out = run.output
    assert out["refused"]
    assert out["held_mb"] <= 1024
    assert out["peak"] <= 1024 * MIB
    assert out["growth_env"] is None
    assert mib_sizes(run.device(0)) == [1024]  # the BFC pool is exactly the cap


def test_memory_limit_with_split_gives_equal_logical_gpus(nightly_gpu: SimGpu) -> None:
    env = {"MEMORY_LIMIT_MB": "1024", "VIRTUAL_SPLIT": "2"}
    run = nightly_gpu.run(PLACE_ON_EACH_GPU, env).check()
    assert run.output["logical"] == ["/device:GPU:0", "/device:GPU:1"]
    assert mib_sizes(run.device(0)) == [512, 512]


def test_split_sizes_give_those_sizes(nightly_gpu: SimGpu) -> None:
    run = nightly_gpu.run(PLACE_ON_EACH_GPU, {"VIRTUAL_SPLIT": "256,768"}).check()
    assert run.output["logical"] == ["/device:GPU:0", "/device:GPU:1"]
    assert mib_sizes(run.device(0)) == [256, 768]


def test_growth_with_cap_starts_small_and_stops_at_cap(nightly_gpu: SimGpu) -> None:
    run = nightly_gpu.run(FILL_GPU0, {"MEMORY_LIMIT_MB": "1024", "MEMORY_GROWTH": "true"})
    out = run.check().output
    device = run.device(0)
    assert out["growth_env"] == "true"
    assert out["refused"]
    assert device["first_allocation_bytes"] == 2 * MIB
    assert device["allocations"] > 2
    assert device["peak_bytes"] <= 1024 * MIB
    assert out["peak"] <= 1024 * MIB


def test_visible_gpu_with_cap_and_split_touch_only_that_device(nightly_gpu: SimGpu) -> None:
    env = {"VISIBLE_GPU": "1", "MEMORY_LIMIT_MB": "1024", "VIRTUAL_SPLIT": "2"}
    run = nightly_gpu.run(PLACE_ON_EACH_GPU, env, count=2).check()
    assert run.output["logical"] == ["/device:GPU:0", "/device:GPU:1"]
    assert run.device(0)["allocations"] == 0
    assert mib_sizes(run.device(1)) == [512, 512]


def test_split_larger_than_cap_fails_before_tensorflow_runs(nightly_gpu: SimGpu) -> None:
    env = {"MEMORY_LIMIT_MB": "1024", "VIRTUAL_SPLIT": "768,768"}
    run = nightly_gpu.run("import tensorflow", env)
    assert not run.ok
    assert "ConfigError" in run.stderr
    assert "VIRTUAL_SPLIT" in run.stderr
    # The plugin writes its record when TensorFlow loads it: it never got that far.
    assert not run.record_path.exists()


def test_doctor_verify_proves_the_cap(nightly_gpu: SimGpu) -> None:
    env = {"MEMORY_LIMIT_MB": "512"}
    run = nightly_gpu.tfboot("doctor", "--verify", "--json", env=env, memory_mb="2048").check()
    (check,) = run.output["verify"]
    assert check["device"] == "/device:GPU:0"
    assert check["limit_mb"] == 512
    assert check["next_allocation_failed"] is True
    assert check["ok"] is True, check
    assert 0.9 * 512 <= check["allocated_mb"] <= 512


def test_doctor_verify_catches_an_ignored_cap(nightly_gpu_without_shim: SimGpu) -> None:
    """Without the shim the nightly drops the cap silently; --verify must say so."""
    env = {"MEMORY_LIMIT_MB": "512"}
    run = nightly_gpu_without_shim.tfboot("doctor", "--verify", "--json", env=env, memory_mb="2048")
    assert run.proc.returncode == 1, run.stderr
    (check,) = run.output["verify"]
    assert check["next_allocation_failed"] is False
    assert check["ok"] is False
    assert "not enforced" in check["detail"]
