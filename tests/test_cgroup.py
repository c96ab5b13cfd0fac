"""The CPU quota reader over fake cgroup trees (tests/testdata/cgroup)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tfboot.node.cgroup import CgroupError, cpu_quota
from tfboot.node.cpu import CpuBudget, cpu_budget

TREES = Path(__file__).parent / "testdata" / "cgroup"


@pytest.mark.parametrize(
    ("case", "cpus", "source"),
    [
        ("v2-quota", 1.5, "/sys/fs/cgroup/cpu.max"),
        ("v2-nested", 2.5, "/sys/fs/cgroup/kubepods/burstable/pod1/cpu.max"),
        ("v1-docker", 1.0, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"),
        ("hybrid", 0.5, "/sys/fs/cgroup/cpu,cpuacct/user.slice/job/cpu.cfs_quota_us"),
    ],
)
def test_quota_found(case: str, cpus: float, source: str) -> None:
    quota = cpu_quota(str(TREES / case))
    assert quota is not None
    assert quota.cpus == cpus
    assert quota.source == source


def test_a_parent_s_quota_is_said_to_be_shared_in_the_threads_reason() -> None:
    """v2-nested: the container's cpu.max says max under the Pod's 2.5 CPUs."""
    budget = cpu_budget({"TFBOOT_CGROUP_ROOT": str(TREES / "v2-nested")})
    assert budget.shared == ("a parent cgroup's, shared with every process under it")
    from tfboot import resolve
    from tfboot.budget.threads import thread_budget

    assert budget.shared in thread_budget(resolve({}), budget, "TensorFlow").why
    assert cpu_budget({"TFBOOT_CGROUP_ROOT": str(TREES / "v2-quota")}).shared == ""


@pytest.mark.parametrize("case", ["v2-max", "v2-unset", "v1-unlimited", "no-cgroup"])
def test_no_quota(case: str) -> None:
    assert cpu_quota(str(TREES / case)) is None


@pytest.mark.parametrize(
    ("case", "words"), [("v2-invalid", "QUOTA PERIOD"), ("v2-zero-period", "positive")]
)
def test_malformed_file_is_an_error(case: str, words: str) -> None:
    with pytest.raises(CgroupError, match=words):
        cpu_quota(str(TREES / case))


def test_budget_reports_malformed_file_instead_of_raising() -> None:
    budget = cpu_budget({"TFBOOT_CGROUP_ROOT": str(TREES / "v2-invalid")})
    assert budget.quota is None and budget.threads is None
    assert "could not read the CPU quota" in budget.problem


@pytest.mark.parametrize(
    ("quota", "affinity", "threads"),
    [(1.5, 8, 2), (0.5, 8, 1), (1.0, 8, 1), (4.01, 8, 5), (16.0, 4, 4), (None, 4, None)],
)
def test_threads_round_the_quota_up_within_affinity(
    quota: float | None, affinity: int, threads: int | None
) -> None:
    assert CpuBudget(affinity, quota, "x").threads == threads
