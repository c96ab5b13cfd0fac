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


def test_nvml_s_process_total_names_the_context(
    stable_gpu: SimGpu, tmp_path: Path, fake_nvml: str
) -> None:
    """NVML (the stand-in library, a fake: no driver here) lists this process with 1500 MiB
    on GPU 0: what the allocator did not hold is the CUDA context and libraries."""
    usage = tmp_path / "usage.json"
    env = {"MEMORY_GROWTH": "true", "TFBOOT_USAGE_FILE": str(usage),
           "TFBOOT_NVML_LIBRARY": fake_nvml, "FAKE_NVML_MIB": "16384:0",
           "FAKE_NVML_PROCS": "0:0:1500"}  # fmt: skip
    run = stable_gpu.run(PLACE, env).check()
    [gpu] = json.loads(usage.read_text())["gpus"]
    assert gpu["process_mib"] == 1500.0
    assert gpu["context_mib"] == round(1500.0 - gpu["peak_mib"], 1)
    assert "incl. CUDA context and libraries" in run.stderr


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> str:
    source = Path(__file__).resolve().parents[1] / "frameworks" / "fake_nvml" / "nvml.c"
    built = tmp_path_factory.mktemp("nvml") / "libnvidia-ml-fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    return str(built)
