"""The host-memory budget: the limit read from cgroup trees, ``HOST_MEMORY_LIMIT_MB``, and the
tf.data and pinned-memory defaults the plan derives from it (pure; no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import data_defaults, decision, problem_text, tf_plan
from tfboot import resolve
from tfboot.budget.hostmemory import DataDefaults
from tfboot.errors import ConfigError
from tfboot.node.cgroup import CgroupError, memory_limit
from tfboot.node.cpu import CpuBudget
from tfboot.node.hostmem import MemoryBudget, memory_budget

TREES = Path(__file__).parent / "testdata" / "cgroup"


@pytest.mark.parametrize(
    ("case", "mib", "source"),
    [
        ("v2-memory", 600, "/sys/fs/cgroup/memory.max"),
        ("v2-memory-parent", 1024, "/sys/fs/cgroup/kubepods/burstable/pod1/memory.max"),
        ("v2-memory-swap", 1024, "/sys/fs/cgroup/memory.max"),
        ("v1-memory-docker", 600, "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    ],
)
def test_limit_found(case: str, mib: int, source: str) -> None:
    limit = memory_limit(str(TREES / case))
    assert limit is not None and (limit.mib, limit.source) == (mib, source)


def test_a_parent_s_limit_is_said_to_be_shared() -> None:
    """The container's own file says max under the Pod's cgroup's limit (a container without
    a limit of its own, a systemd slice, a Slurm job): the budget is the parent's, shared with
    every process under it; the container's own limit is its own."""
    parent = memory_limit(str(TREES / "v2-memory-parent"))
    assert parent is not None and parent.shared == (
        "a parent cgroup's, shared with every process under it"
    )
    own = memory_limit(str(TREES / "v2-memory"))
    assert own is not None and own.shared == ""


@pytest.mark.parametrize(
    ("case", "pod", "mib", "source", "shared"),
    [
        # the parents hidden, the container's file max: the Downward API's figure is the limit
        ("v2-memory-max", "3000", 3000, "TFBOOT_POD_MEMORY_LIMIT_MB=3000",
         "the Pod's, shared with its other containers"),
        # the container's file holds the Pod's limit (pod-level resources): said to be shared
        ("v2-memory", "600", 600, "/sys/fs/cgroup/memory.max",
         "the Pod's, shared with its other containers (TFBOOT_POD_MEMORY_LIMIT_MB=600)"),
        # a container limit of its own, under the Pod's: its own
        ("v2-memory", "2048", 600, "/sys/fs/cgroup/memory.max", ""),
    ],
)  # fmt: skip
def test_the_pod_s_limit_from_the_downward_api(
    case: str, pod: str, mib: int, source: str, shared: str
) -> None:
    env = {"TFBOOT_CGROUP_ROOT": str(TREES / case), "TFBOOT_POD_MEMORY_LIMIT_MB": pod}
    found = memory_budget(env)
    assert (found.limit_mib, found.source, found.shared) == (mib, source, shared)
    host = tf_plan(env, 0, memory=found).host
    assert host.limit_mib == mib and (shared or "from") in host.origin


@pytest.mark.parametrize("value", ["lots", "0", "-5", "99999999"])
def test_a_pod_limit_that_is_not_mib_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve({"TFBOOT_POD_MEMORY_LIMIT_MB": value})
    assert "TFBOOT_POD_MEMORY_LIMIT_MB" in str(raised.value) and "from 1 to 16777216" in str(
        raised.value
    )


@pytest.mark.parametrize(
    "case", ["v2-memory-max", "v1-memory-unlimited", "v1-memory-over-host", "no-cgroup", "v2-quota"]
)
def test_no_limit(case: str) -> None:
    assert memory_limit(str(TREES / case)) is None


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("v2-memory-unreadable", r"cannot be read \(Is a directory\)"),
        ("v2-memory-garbage", "bytes"),
    ],
)
def test_a_bad_file_is_an_error_and_a_documented_fallback(case: str, words: str) -> None:
    with pytest.raises(CgroupError, match=words):
        memory_limit(str(TREES / case))
    budget = memory_budget({"TFBOOT_CGROUP_ROOT": str(TREES / case)})
    assert budget.limit_mib is None and "could not read the memory limit" in budget.problem
    plan = tf_plan({}, 0, NO_QUOTA, budget)
    assert data_defaults(plan) is None
    assert plan.warnings == [f"{budget.problem}; TensorFlow's host-memory defaults are used"]


NO_QUOTA = CpuBudget(affinity=64, quota=None, quota_source="")
QUOTA_2 = CpuBudget(affinity=64, quota=2.0, quota_source="/sys/fs/cgroup/cpu.max")
# A 4 GiB container whose working set is 500 MiB when TensorFlow is imported: tf.data's RAM
# budget is a third of the room under 60% of the limit, (2457 - 500) // 3.
LIMIT_4G = MemoryBudget(4096, "/sys/fs/cgroup/memory.max", working_mib=500)
RAM_4G = 652
NO_LIMIT = MemoryBudget(None, "")


class TestVariable:
    @pytest.mark.parametrize(
        ("value", "parsed"), [("auto", "auto"), ("HOST", "host"), ("4096", 4096), (" 1 ", 1)]
    )
    def test_accepted(self, value: str, parsed: object) -> None:
        assert resolve({"HOST_MEMORY_LIMIT_MB": value}).host_memory == parsed

    @pytest.mark.parametrize("value", ["0", "-1", "4g", "1_0", "\u0661", "16777217", "9" * 40])
    def test_refused_with_what_is_accepted(self, value: str) -> None:
        text = problem_text({"HOST_MEMORY_LIMIT_MB": value})
        assert f"HOST_MEMORY_LIMIT_MB={value!r} is invalid" in text
        assert "expected auto, host or a number of MiB from 1 to 16777216" in text


def plan_for(env: dict[str, str], memory: MemoryBudget, cpu: CpuBudget, gpus: int = 0):
    return tf_plan(env, gpus, cpu, memory)


class TestPlan:
    def test_nothing_outside_a_container_with_limits(self) -> None:
        plan = plan_for({}, MemoryBudget(None, ""), NO_QUOTA)
        assert data_defaults(plan) is None and plan.empty

    def test_auto_measures_the_room_and_takes_the_quota(self) -> None:
        plan = plan_for({}, LIMIT_4G, QUOTA_2)
        assert data_defaults(plan) == DataDefaults(
            ram_budget_mib=RAM_4G, cpu_budget=2, initial_parallelism=2, limit_mib=4096,
            limit_file="/sys/fs/cgroup/memory.max",
        )  # fmt: skip
        assert "RAM a third of the room under 60% of the limit beside the working set, 500 MiB " \
            "now" in decision(plan, "tf.data defaults")  # fmt: skip
        # the limit and whence: the host-memory budget's own line
        assert "host memory limit 4096 MiB (HOST_MEMORY_LIMIT_MB=auto: 4096 MiB from " \
            "/sys/fs/cgroup/memory.max)" in decision(plan, "host memory limit")  # fmt: skip
        assert "a pipeline's own options win" in decision(plan, "tf.data defaults")

    def test_memory_limit_only(self) -> None:
        plan = plan_for({}, LIMIT_4G, NO_QUOTA)
        assert data_defaults(plan) == DataDefaults(
            ram_budget_mib=RAM_4G, limit_mib=4096, limit_file="/sys/fs/cgroup/memory.max"
        )

    def test_quota_only(self) -> None:
        plan = plan_for({}, MemoryBudget(None, ""), QUOTA_2)
        assert data_defaults(plan) == DataDefaults(cpu_budget=2, initial_parallelism=2)

    def test_a_number_wins_over_the_cgroup(self) -> None:
        plan = plan_for({"HOST_MEMORY_LIMIT_MB": "2048"}, LIMIT_4G, NO_QUOTA)
        # 1228 // 3: a figure is this process tree's budget, its working set read as each
        # pipeline starts (limit_file ""), not the container's 500 MiB
        assert data_defaults(plan) == DataDefaults(
            ram_budget_mib=409, limit_mib=2048, limit_file=""
        )
        assert "HOST_MEMORY_LIMIT_MB=2048 (env)" in decision(plan, "host memory limit")

    def test_host_keeps_tensorflows_defaults(self) -> None:
        plan = plan_for({"HOST_MEMORY_LIMIT_MB": "host"}, LIMIT_4G, QUOTA_2)
        assert data_defaults(plan) is None and "TF_GPU_HOST_MEM_LIMIT_IN_MB" not in plan.environ

    def test_cpu_threads_count_is_the_cpu_budget(self) -> None:
        plan = plan_for({"CPU_THREADS": "3"}, LIMIT_4G, QUOTA_2)
        assert data_defaults(plan) == DataDefaults(RAM_4G, 3, 3, 4096, LIMIT_4G.source)

    def test_many_cpus_keep_tensorflows_initial_parallelism(self) -> None:
        cpu = CpuBudget(affinity=64, quota=32.0, quota_source="cpu.max")
        assert data_defaults(plan_for({}, LIMIT_4G, cpu)) == DataDefaults(
            RAM_4G, 32, None, 4096, LIMIT_4G.source
        )

    def test_pinned_memory_follows_the_limit(self) -> None:
        """Set without a device list: TensorFlow reads it only for a GPU's host allocator."""
        for gpus in (0, 1):
            plan = plan_for({}, LIMIT_4G, NO_QUOTA, gpus=gpus)
            assert plan.environ["TF_GPU_HOST_MEM_LIMIT_IN_MB"] == "1024"
        assert "TF_GPU_HOST_MEM_LIMIT_IN_MB" not in plan_for({}, NO_LIMIT, QUOTA_2).environ

    def test_pinned_memory_set_by_the_user_wins(self) -> None:
        env = {"TF_GPU_HOST_MEM_LIMIT_IN_MB": "8192"}
        plan = plan_for(env, LIMIT_4G, NO_QUOTA, gpus=1)
        assert "TF_GPU_HOST_MEM_LIMIT_IN_MB" not in plan.environ
        assert any("left to TF_GPU_HOST_MEM_LIMIT_IN_MB=8192" in d for d in plan.decisions)


def test_budget_reads_the_tree_named_by_tfboot_cgroup_root() -> None:
    budget = memory_budget({"TFBOOT_CGROUP_ROOT": str(TREES / "v2-memory")})
    assert budget == MemoryBudget(600, "/sys/fs/cgroup/memory.max", host_mib=24684092 // 1024)
