"""Host memory on a (simulated) GPU host: pinned memory follows the limit, the cap row holds.

The limit comes from a fake cgroup tree (4 GiB, ``TFBOOT_CGROUP_ROOT``), as inside a Pod.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import cgroup_limits

from simgpu.scenarios import SimGpu

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]


def test_pinned_host_memory_is_a_quarter_of_the_limit(stable_gpu: SimGpu, tmp_path: Path) -> None:
    run = stable_gpu.tfboot("doctor", "--json", env={"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)})
    assert run.proc.returncode == 0, run.stderr
    report = run.output
    assert report["host_memory"]["pinned_mib"] == "1024", report["host_memory"]
    assert any("TF_GPU_HOST_MEM_LIMIT_IN_MB" in d for d in report["decisions"])


def test_an_explicit_pinned_limit_is_kept(stable_gpu: SimGpu, tmp_path: Path) -> None:
    env = {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path), "TF_GPU_HOST_MEM_LIMIT_IN_MB": "512"}
    run = stable_gpu.tfboot("doctor", "--json", env=env)
    assert run.proc.returncode == 0, run.stderr
    assert run.output["host_memory"]["pinned_mib"] == "512"


@pytest.mark.nightly
def test_the_cap_row_passes_under_a_memory_limit(nightly_gpu: SimGpu, tmp_path: Path) -> None:
    env = {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)}
    run = nightly_gpu.tfboot(
        "selftest", "--json", "--only", "memory_limit", env=env, memory_mb="2048"
    )
    assert run.proc.returncode == 0, run.proc.stdout + run.stderr
    (row,) = run.output["rows"]
    assert row["status"] == "PASS", row
