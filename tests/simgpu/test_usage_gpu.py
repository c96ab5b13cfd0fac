"""The usage report's GPU figures through TensorFlow's real device code on a simulated GPU:
each logical GPU's allocator peak (``get_memory_info``) against the cap tfboot gave it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from simgpu.scenarios import SimGpu

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]

# 300 MiB on the first logical GPU, 100 MiB on the last (float32: 4 bytes each).
PLACE = """
import tensorflow as tf
names = [d.name for d in tf.config.list_logical_devices("GPU")]
with tf.device(names[0]):
    a = tf.zeros([300 << 18])
with tf.device(names[-1]):
    b = tf.zeros([100 << 18])
print(len(names))
"""


@pytest.mark.nightly
def test_each_logical_gpu_s_peak_against_its_cap(nightly_gpu: SimGpu, tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    env = {"MEMORY_LIMIT_MB": "2048", "VIRTUAL_SPLIT": "2", "TFBOOT_USAGE_FILE": str(usage)}
    run = nightly_gpu.run(PLACE, env).check()
    assert run.proc.stdout.strip() == "2"
    found = json.loads(usage.read_text())
    gpus = found["gpus"]
    assert [(g["index"], g["physical"], g["cap_mib"]) for g in gpus] == [(0, 0, 1024), (1, 0, 1024)]
    assert 300 <= gpus[0]["peak_mib"] < 400 and 100 <= gpus[1]["peak_mib"] < 200
    assert gpus[0]["source"] == "tf.config.experimental.get_memory_info"
    # Two logical GPUs on one physical: MEMORY_LIMIT_MB is twice the larger need, + 15%.
    need = 2 * gpus[0]["peak_mib"] * 1.15
    assert int(found["suggest"]["env"]["MEMORY_LIMIT_MB"]) == -(-need // 16) * 16
    [line] = [x for x in run.stderr.splitlines() if x.startswith("tfboot: used:")]
    assert line.startswith("tfboot: used: GPU:0 TensorFlow peak ") and "of 1024 MiB cap" in line


def test_an_uncapped_gpu_reports_its_peak_and_no_cap(stable_gpu: SimGpu, tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    run = stable_gpu.run(PLACE, {"MEMORY_GROWTH": "true", "TFBOOT_USAGE_FILE": str(usage)})
    run.check()
    [gpu] = json.loads(usage.read_text())["gpus"]
    assert gpu["cap_mib"] is None and 400 <= gpu["peak_mib"] < 500  # both tensors on GPU:0


def test_a_process_that_never_starts_the_runtime_is_not_started_at_exit(
    stable_gpu: SimGpu, tmp_path: Path
) -> None:
    usage = tmp_path / "usage.json"
    code = "import tensorflow as tf\nprint('imported')"
    run = stable_gpu.run(code, {"MEMORY_GROWTH": "true", "TFBOOT_USAGE_FILE": str(usage)})
    run.check()
    assert json.loads(usage.read_text())["gpus"] == []
    assert run.device(0)["sizes"] == []  # nothing was allocated on the device


def test_a_growing_pool_gives_nvml_s_total_but_no_outside_figure(
    stable_gpu: SimGpu, tmp_path: Path, fake_nvml: str
) -> None:
    """NVML (the stand-in library, a fake: no driver here) lists this process with 1500 MiB
    on GPU 0. TensorFlow's pool grows and TensorFlow does not say how large it is, so no
    figure outside it is claimed (NVML minus the bytes in use would count pool regions
    reserved but unused)."""
    usage = tmp_path / "usage.json"
    env = {"MEMORY_GROWTH": "true", "TFBOOT_USAGE_FILE": str(usage),
           "TFBOOT_NVML_LIBRARY": fake_nvml, "FAKE_NVML_MIB": "16384:0",
           "FAKE_NVML_PROCS": "0:0:1500"}  # fmt: skip
    run = stable_gpu.run(PLACE, env).check()
    [gpu] = json.loads(usage.read_text())["gpus"]
    assert gpu["process_mib"] == 1500.0
    assert gpu["pool_mib"] is None and gpu["outside_pool_mib"] is None
    assert "the pool grows (set_memory_growth)" in gpu["pool_source"]
    assert gpu["outside_pool_source"].startswith("not measured (TensorFlow's pool: unknown")
    assert "process 1500.0 MiB in NVML, its pool unknown" in run.stderr


@pytest.mark.nightly
def test_a_preallocated_pool_is_its_cap_and_the_rest_is_outside_it(
    nightly_gpu: SimGpu, tmp_path: Path, fake_nvml: str
) -> None:
    """Two logical GPUs of 1024 MiB, preallocated: BFC takes each cap whole (the simulated
    device's allocations say so), so NVML's 2648 MiB (the stand-in's) leaves 600 outside;
    HAMi's variable, set as HAMi would, is recorded and the share given in its terms."""
    usage = tmp_path / "usage.json"
    env = {"MEMORY_LIMIT_MB": "2048", "VIRTUAL_SPLIT": "2", "TFBOOT_USAGE_FILE": str(usage),
           "TFBOOT_NVML_LIBRARY": fake_nvml, "FAKE_NVML_MIB": "16384:0",
           "FAKE_NVML_PROCS": "0:0:2648", "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m"}  # fmt: skip
    run = nightly_gpu.run(PLACE, env).check()
    assert [size >> 20 for size in run.device(0)["sizes"]] == [1024, 1024]
    found = json.loads(usage.read_text())
    assert [g["pool_mib"] for g in found["gpus"]] == [1024.0, 1024.0]
    assert "the memory_limit 1024 MiB, preallocated" in found["gpus"][0]["pool_source"]
    assert [g["outside_pool_mib"] for g in found["gpus"]] == [600.0, 600.0]
    assert found["gpu_share"]["plugins"] == ["HAMi"]
    share = found["suggest"]["gpu_share_mib"]  # the cap + 600 MiB + 15%, up to 16 MiB
    assert share == int(found["suggest"]["env"]["MEMORY_LIMIT_MB"]) + 704
    assert found["suggest"]["gpu_share"]["HAMi"]["resources"]["limits"] == {
        "nvidia.com/gpumem": str(share)
    }


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> str:
    source = Path(__file__).resolve().parents[1] / "frameworks" / "fake_nvml" / "nvml.c"
    built = tmp_path_factory.mktemp("nvml") / "libnvidia-ml-fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    return str(built)
