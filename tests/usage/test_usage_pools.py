"""What the driver counts against what the job needed: each framework's allocator pool, the
memory NVML counts outside it, and the GPU share a device plugin should grant, in that
plugin's own terms.

No GPU JAX or PyTorch runs here and no driver exists: JAX's ``Device.memory_stats()`` and
PyTorch's ``torch.cuda`` calls are stand-ins (dicts and a reader, named as such) holding the
figures a real H200 gave (/work/shared/notes/real-gpu.md sections 7 and 7.1), and NVML is
the stand-in library (tests/frameworks/fake_nvml). TensorFlow's pool is checked through its
real device code on the simulated GPU (tests/simgpu/test_usage_gpu.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tfboot.adapters import Peak, Plan
from tfboot.adapters import jax as jax_adapter
from tfboot.adapters import tensorflow as tf_adapter
from tfboot.adapters import torch as torch_adapter
from tfboot.node.nvml import LIBRARY_ENV
from tfboot.suggestcmd import read_record
from tfboot.usage import measure, sinks
from tfboot.usage.schema import MAX_MIB, SCHEMA, problem
from tfboot.usage.shares import recorded
from tfboot.usage.suggest import suggest, summary

MIB = 1 << 20
# A stand-in for jax Device.memory_stats() with a real H200's figures in growth mode
# (real-gpu.md 7.1): in use at most 3905 MiB, the pool 6146 MiB, NVML 6772 MiB.
H200_GROWTH = {"bytes_in_use": 1024 * MIB, "peak_bytes_in_use": 3905 * MIB,
               "pool_bytes": 6146 * MIB, "peak_pool_bytes": 6146 * MIB,
               "bytes_limit": 107368 * MIB}  # fmt: skip


class StandInDevice:
    """A stand-in for a jax Device: its platform and ``memory_stats``."""

    platform = "gpu"

    def __init__(self, stats: dict[str, int]) -> None:
        self.stats = stats

    def memory_stats(self) -> dict[str, int]:
        return self.stats


class StandInRead:
    """A stand-in for the executor's reader of a framework module: fixed answers."""

    def __init__(self, calls: dict[str, Any], attrs: dict[str, Any] | None = None) -> None:
        self.calls, self.attrs = calls, attrs or {}

    def attr(self, target: str, default: Any = None) -> Any:
        return self.attrs.get(target, default)

    def call(self, target: str, *args: Any) -> Any:
        return self.calls[target]

    def loaded(self, module: str) -> Any:
        return None


def jax_peaks(stats: dict[str, int]) -> list[Peak]:
    read = StandInRead({"local_devices": [StandInDevice(stats)]}, {"_src.xla_bridge._backends": 1})
    return jax_adapter.peaks(read, Plan("JAX", gpu_count=1))


def entries(found: list[Peak], framework: Any, nvml_mib: int, library: str,
            monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:  # fmt: skip
    """The record's GPU entries for ``found``, NVML (the stand-in) listing this process with
    ``nvml_mib`` on GPU 0."""
    monkeypatch.setenv("FAKE_NVML_MIB", "143771:0")
    monkeypatch.setenv("FAKE_NVML_PROCS", f"0:0:{nvml_mib}")
    monkeypatch.setattr(measure, "peaks", lambda adapter, name: (found, ""))
    meter = object.__new__(measure.Meter)  # only what the GPU figures read
    meter.pid, meter.env = os.getpid(), {LIBRARY_ENV: library}
    return meter._gpus([measure.Framework(framework, framework.MODULE)], [])


def test_jax_outside_the_pool_is_nvml_minus_pool_bytes(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    [gpu] = entries(jax_peaks(H200_GROWTH), jax_adapter, 6772, nvml_library, monkeypatch)
    assert (gpu["peak_mib"], gpu["pool_mib"], gpu["peak_pool_mib"]) == (3905.0, 6146.0, 6146.0)
    assert gpu["pool_source"] == "jax Device.memory_stats pool_bytes"
    assert gpu["process_mib"] == 6772.0
    assert gpu["outside_pool_mib"] == 626.0  # NVML minus the bytes in use would say 2867
    assert gpu["outside_pool_source"].startswith("NVML's process total minus the pool")


def test_a_preallocated_jax_without_pool_bytes_takes_bytes_limit(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JAX capped at 8192 MiB, preallocated (real-gpu.md 7): bytes_limit 8158, NVML 8708."""
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    stats = {"peak_bytes_in_use": 3072 * MIB, "bytes_limit": 8158 * MIB}
    [gpu] = entries(jax_peaks(stats), jax_adapter, 8708, nvml_library, monkeypatch)
    assert gpu["pool_mib"] == 8158.0 and gpu["outside_pool_mib"] == 550.0
    assert "bytes_limit: preallocated (XLA_PYTHON_CLIENT_PREALLOCATE unset)" in gpu["pool_source"]


def test_a_growing_jax_without_pool_bytes_claims_no_outside_figure(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    stats = {"peak_bytes_in_use": 3905 * MIB, "bytes_limit": 107368 * MIB}
    gpus = entries(jax_peaks(stats), jax_adapter, 6772, nvml_library, monkeypatch)
    [gpu] = gpus
    assert gpu["pool_mib"] is None and gpu["outside_pool_mib"] is None
    assert gpu["outside_pool_source"].startswith("not measured (JAX's pool: unknown: JAX grows")
    entry = record(gpus)
    assert "its pool unknown" in sinks.used_line(entry)
    found = suggest([entry])  # JAX's headroom below a share, as MEMORY_LIMIT_MB=auto keeps
    assert found["gpu_share_mib"] == int(found["env"]["MEMORY_LIMIT_MB"]) + 1024
    assert "JAX's headroom" in found["sources"]["gpu_share_mib"]


def test_pytorch_outside_the_pool_is_nvml_minus_memory_reserved(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch after a convolution and a matmul (real-gpu.md 7.1): reserved 1212 MiB now,
    3118 at most, NVML 1906; a stand-in for torch.cuda."""
    read = StandInRead({"cuda.is_initialized": True, "cuda.device_count": 1,
                        "cuda.memory_stats": {"num_ooms": 0},
                        "cuda.max_memory_reserved": 3118 * MIB,
                        "cuda.memory_reserved": 1212 * MIB})  # fmt: skip
    found = torch_adapter.peaks(read, Plan("PyTorch", gpu_count=1))
    [gpu] = entries(found, torch_adapter, 1906, nvml_library, monkeypatch)
    assert (gpu["peak_mib"], gpu["pool_mib"], gpu["peak_pool_mib"]) == (3118.0, 1212.0, 3118.0)
    assert gpu["outside_pool_mib"] == 694.0


def test_tensorflow_s_pool_is_its_cap_only_when_taken_whole() -> None:
    taken, source = tf_adapter.bfc_pool(300 * MIB, 1024, "")
    assert taken == 1024 * MIB and "memory_limit 1024 MiB, preallocated" in source
    assert tf_adapter.bfc_pool(0, 1024, "")[0] == 0  # nothing allocated: no region yet
    grows, source = tf_adapter.bfc_pool(300 * MIB, 1024, "TF_FORCE_GPU_ALLOW_GROWTH=true")
    assert grows is None and "grows (TF_FORCE_GPU_ALLOW_GROWTH=true)" in source
    own, source = tf_adapter.bfc_pool(300 * MIB, None, "")
    assert own is None and "sized the pool itself" in source


def record(gpus: list[dict[str, Any]], share: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"schema": SCHEMA, "final": True, "gpus": gpus, "gpu_share": share,
            "host_memory": {}, "cpu": {}}  # fmt: skip


def gpu(peak: float = 3000.0, outside: float | None = 600.0, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "physical": 0, "framework": "JAX", "peak_mib": peak, "cap_mib": None,
            "pool_mib": 4096.0, "outside_pool_mib": outside} | extra  # fmt: skip


def from_file(tmp_path: Path, env: dict[str, str], name: str = "usage.json") -> dict[str, Any]:
    """A record run under ``env``'s share, written and read back as ``tfboot suggest`` does."""
    path = tmp_path / name
    path.write_text(json.dumps(record([gpu()], recorded(env))))
    return read_record(str(path))


# 3000 MiB peak + 15% = 3456 (MEMORY_LIMIT_MB); 600 MiB outside + 15% = 690, up to 704.
SHARE = 3456 + 704


@pytest.mark.parametrize(
    ("env", "plugin", "terms"),
    [
        ({"CUDA_DEVICE_MEMORY_LIMIT_0": "8192m"}, "HAMi",
         {"env": {"CUDA_DEVICE_MEMORY_LIMIT": f"{SHARE}m"},
          "resources": {"limits": {"nvidia.com/gpumem": str(SHARE)}}}),
        ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "6G", "CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps"}, "MPS",
         {"env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{SHARE}M"}}),
        ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=6G,1=6G"}, "MPS",
         {"env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={SHARE}M,1={SHARE}M"}}),
        ({"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}, "MPS",
         {"claim": {"defaultPinnedDeviceMemoryLimit": f"{SHARE}Mi"}}),
        ({"NVIDIA_GPU_MEMORY_LIMITS": "8192"}, "KAI", {"annotations": {"gpu-memory": str(SHARE)}}),
        ({"GPU_PORTION": "0.5"}, "KAI", {"annotations": {"gpu-memory": str(SHARE)}}),
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "8"}, "gpushare",
         {"resources": {"limits": {"aliyun.com/gpu-mem": "5"}}, "unit": "GiB"}),  # 4160 MiB
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "8192", "ALIYUN_COM_GPU_MEM_DEV": "81920"}, "gpushare",
         {"resources": {"limits": {"aliyun.com/gpu-mem": str(SHARE)}}, "unit": "MiB"}),
    ],
)  # fmt: skip
def test_the_share_in_the_terms_of_the_plugin_the_run_was_under(
    tmp_path: Path, env: dict[str, str], plugin: str, terms: dict[str, Any]
) -> None:
    found = suggest([from_file(tmp_path, env | {"PATH": "/usr/bin"})])
    assert found["gpu_share_mib"] == SHARE
    assert found["gpu_share"] == {plugin: terms}
    assert "recorded from the process environment" in found["sources"]["gpu_share"]
    assert f"GPU share {plugin} " in summary(found)


def test_no_share_recorded_gives_the_share_in_mib_only(tmp_path: Path) -> None:
    found = suggest([from_file(tmp_path, {"PATH": "/usr/bin"})])
    assert found["gpu_share_mib"] == SHARE and "gpu_share" not in found


def test_runs_under_two_plugins_get_both(tmp_path: Path) -> None:
    hami = from_file(tmp_path, {"CUDA_DEVICE_MEMORY_LIMIT": "8g"}, "a.json")
    mps = from_file(tmp_path, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "6G"}, "b.json")
    assert list(suggest([hami, mps])["gpu_share"]) == ["HAMi", "MPS"]


def test_the_record_keeps_only_the_share_variables_bounded() -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_1": " 4096m ", "CUDA_DEVICE_MEMORY_LIMIT_X": "1",
           "CUDA_MPS_PIPE_DIRECTORY": "/tmp/" + "x" * 400, "GPU_PORTION": "",
           "AWS_SECRET_ACCESS_KEY": "secret"}  # fmt: skip
    kept = recorded(env)
    assert kept is not None and kept["plugins"] == ["HAMi", "MPS"]
    assert list(kept["variables"]) == ["CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_MPS_PIPE_DIRECTORY"]
    assert kept["variables"]["CUDA_DEVICE_MEMORY_LIMIT_1"] == "4096m"
    assert len(kept["variables"]["CUDA_MPS_PIPE_DIRECTORY"]) == 256
    many = recorded({f"CUDA_DEVICE_MEMORY_LIMIT_{i}": "1g" for i in range(100)})
    assert many is not None and len(many["variables"]) == 64
    assert recorded({"PATH": "/usr/bin"}) is None
    assert problem(record([gpu()], kept)) is None and problem(record([gpu()], many)) is None


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"pool_mib": -1}, "the record.gpus[0].pool_mib is not a number"),
        ({"peak_pool_mib": MAX_MIB + 1}, "the record.gpus[0].peak_pool_mib is not a number"),
        ({"outside_pool_mib": "600"}, "the record.gpus[0].outside_pool_mib is not a number"),
        ({"pool_source": "x" * 513}, "the record.gpus[0].pool_source is not a string"),
        ({"outside_pool_source": 1}, "the record.gpus[0].outside_pool_source is not a string"),
    ],
)
def test_the_schema_bounds_the_pool_figures(change: dict[str, Any], named: str) -> None:
    assert problem(record([gpu(**change)])).startswith(named)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("share", "named"),
    [
        ([], "the record.gpu_share is not an object"),
        ({"plugins": ["Other"], "variables": {}}, "the record.gpu_share.plugins is not a list"),
        ({"plugins": ["HAMi"] * 5, "variables": {}}, "the record.gpu_share.plugins is not a list"),
        ({"plugins": ["HAMi"], "variables": []}, "the record.gpu_share.variables is not an"),
        ({"plugins": ["HAMi"], "variables": {"PATH": "/bin"}},
         "the record.gpu_share.variables holds a name"),
        ({"plugins": ["HAMi"], "variables": {"CUDA_DEVICE_MEMORY_LIMIT": 8}},
         "the record.gpu_share.variables holds a name"),
        ({"plugins": ["HAMi"], "variables": {"CUDA_DEVICE_MEMORY_LIMIT": "8" * 257}},
         "the record.gpu_share.variables holds a name"),
        ({"plugins": ["HAMi"],
          "variables": {f"CUDA_DEVICE_MEMORY_LIMIT_{i}": "1g" for i in range(65)}},
         "the record.gpu_share.variables is not an object of at most 64"),
        ({"plugins": ["HAMi"], "variables": {}, "source": 1},
         "the record.gpu_share.source is not a string"),
    ],
)  # fmt: skip
def test_the_schema_bounds_the_share(share: Any, named: str) -> None:
    found = problem(record([gpu()], share))
    assert found is not None and found.startswith(named) and "/bin" not in found
