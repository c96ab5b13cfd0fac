"""``tfboot selftest`` on simulated GPUs: what it passes, and the broken cases it must fail.

TensorFlow 2.21 honours visibility and growth on the simulated GPU but ignores caps and
splits there (no shim): selftest must report exactly those rows as FAIL. The pinned
nightly with the test-only shim enforces caps and splits: those rows must PASS. With no
GPU, selftest says so and exits 3. Each row is a fresh TensorFlow process, so these runs
take a minute or so each; the devices are small (2 GiB) to keep out-of-memory retries cheap.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import run_module

from simgpu.scenarios import STABLE_PYTHON, SimGpu

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]

DEVICE_MB = "2048"
CAP_MB = 1024


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {row["row"]: row["status"] for row in report["rows"]}


def row(report: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for r in report["rows"] if r["row"] == name]
    return found


def test_stable_passes_visibility_and_growth_and_fails_the_ignored_cap(stable_gpu: SimGpu) -> None:
    run = stable_gpu.tfboot("selftest", "--json", "--gpu", "1", count=2, memory_mb=DEVICE_MB)
    assert run.proc.returncode == 1, run.stderr
    report = run.output
    assert report["tested_gpus"] == [1]
    assert statuses(report) == {
        "visible_gpu": "PASS",
        "memory_limit": "FAIL",
        "virtual_split": "FAIL",
        "memory_growth": "PASS",
        "growth_under_cap": "FAIL",
        "cuda_malloc_async": "PASS",
        "require_gpu": "PASS",
        "xla_jit": "SKIP",
    }
    assert "not a CUDA build" in row(report, "xla_jit")["detail"]
    visible = row(report, "visible_gpu")
    assert [(d["logical"], d["physical"]) for d in visible["numbers"]["devices"]] == [("GPU:0", 1)]
    assert row(report, "memory_growth")["numbers"]["regions_mib"][0] == 2
    # The broken case: 2.21's pluggable path ignores the cap, and selftest says so.
    (fill,) = row(report, "memory_limit")["numbers"]["fill"]
    assert fill["next_allocation_failed"] is False
    assert "not enforced" in row(report, "memory_limit")["detail"]
    split_devices = row(report, "virtual_split")["numbers"]["devices"]
    assert len(split_devices) == 1 and split_devices[0]["memory_mb"] > CAP_MB
    assert "not enforced" in row(report, "growth_under_cap")["detail"]
    assert report["summary"] == {"pass": 4, "fail": 3, "skip": 1}
    # Two GPUs: NCCL would run between them, so /dev/shm and memlock are reported.
    assert report["nccl"]["needed"] == "2 GPUs are visible" and report["nccl"]["shm_mib"]


def test_nightly_with_shim_passes_the_cap_and_split_rows(nightly_gpu: SimGpu) -> None:
    """The rows 2.21 fails above; the others are the same code on both TensorFlows."""
    rows = "visible_gpu,memory_limit,virtual_split,growth_under_cap"
    run = nightly_gpu.tfboot("selftest", "--json", "--only", rows, memory_mb=DEVICE_MB)
    assert run.proc.returncode == 0, run.proc.stdout + run.stderr
    report = run.output
    assert statuses(report) == {
        "visible_gpu": "SKIP",
        "memory_limit": "PASS",
        "virtual_split": "PASS",
        "growth_under_cap": "PASS",
    }
    assert "one GPU" in row(report, "visible_gpu")["detail"]
    (fill,) = row(report, "memory_limit")["numbers"]["fill"]
    assert fill["next_allocation_failed"] is True
    assert 0.9 * CAP_MB <= fill["allocated_mb"] <= CAP_MB
    split = row(report, "virtual_split")["numbers"]["devices"]
    assert [(d["logical"], d["memory_mb"]) for d in split] == [("GPU:0", 512), ("GPU:1", 512)]
    regions = row(report, "growth_under_cap")["numbers"]["regions_mib"]
    assert regions[0] == 2 and len(regions) > 2 and sum(regions) <= CAP_MB
    assert all(result["seconds"] > 0 for result in report["rows"] if result["status"] != "SKIP")


def test_text_output_and_a_gpu_index_past_the_list(stable_gpu: SimGpu) -> None:
    run = stable_gpu.tfboot("selftest", "--gpu", "2", count=2, memory_mb=DEVICE_MB)
    assert run.proc.returncode == 2, run.stderr
    assert "--gpu 2: TensorFlow lists 2 GPU(s), 0 to 1" in run.proc.stdout


def test_no_gpu_exits_3_on_a_plain_cpu_environment(stable_plugin: object) -> None:
    """No plugin at all: TensorFlow's CPU wheel, as on a CPU-only node."""
    proc = run_module(["tfboot", "selftest"], python=STABLE_PYTHON)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no GPU: TensorFlow 2.21" in proc.stdout
    assert "lists no GPU on this node" in proc.stdout
