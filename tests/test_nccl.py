"""NCCL readiness: /dev/shm and the memlock limit, measured, and when they matter."""

from __future__ import annotations

import json

from support import run_python
from tfboot.node.nccl import readiness, why_needed


def test_needed_with_several_gpus_or_gpus_in_a_cluster() -> None:
    assert why_needed(2, 0) == "2 GPUs are visible"
    assert why_needed(1, 3) == "this task has 1 GPU(s) and is one of 3 in a cluster"
    assert why_needed(1, 0) is None and why_needed(0, 4) is None  # CPU collectives: gRPC


def test_nothing_needed_reports_sizes_without_warnings() -> None:
    found = readiness(None)
    assert found.warnings == [] and found.shm_mib is not None


def test_a_missing_shm_warns_with_both_remedies() -> None:
    (warning,) = [
        w for w in readiness("2 GPUs are visible", "/nonexistent/shm").warnings if "shm" in w
    ]
    assert warning.startswith("NCCL: 2 GPUs are visible, and /nonexistent/shm is missing")
    assert "--shm-size=1g" in warning and "medium: Memory" in warning


LOW_MEMLOCK = """
import json, resource
from tfboot.node.nccl import readiness
hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, hard))
print(json.dumps(readiness("2 GPUs are visible").to_dict()))
"""


def test_a_low_memlock_limit_warns() -> None:
    result = run_python(LOW_MEMLOCK, timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["memlock_mib"] == 1
    assert any("memlock limit is 1024 KiB, below 64 MiB" in w for w in found["warnings"])
    assert any("--ulimit memlock=-1" in w for w in found["warnings"])
