"""The planner: settings plus the devices TensorFlow lists -> the tf.config calls (pure)."""

from __future__ import annotations

import pytest
from support import called, tf_plan, threads
from tfboot import ConfigError
from tfboot.adapters import Plan
from tfboot.node.cpu import CpuBudget

NO_QUOTA = CpuBudget(affinity=8, quota=None, quota_source="")


def plan(env: dict[str, str], gpus: int, cpu: CpuBudget = NO_QUOTA) -> Plan:
    return tf_plan(env, gpus, cpu)


def plan_error(env: dict[str, str], gpus: int) -> str:
    with pytest.raises(ConfigError) as info:
        plan(env, gpus)
    return str(info.value)


def test_nothing_set_plans_nothing() -> None:
    result = plan({}, gpus=2)
    assert result.empty and not result.warnings
    assert result.visible is None and not result.logical_mb


class TestGpuHost:
    def test_visible_index(self) -> None:
        assert plan({"VISIBLE_GPU": "1"}, gpus=2).visible == (1,)

    def test_visible_index_out_of_range_is_never_clamped(self) -> None:
        text = plan_error({"VISIBLE_GPU": "0,2"}, gpus=2)
        assert "VISIBLE_GPU='0,2'" in text and "index 2 does not exist" in text
        assert "indexes 0 to 1" in text

    def test_cap_on_every_visible_gpu(self) -> None:
        result = plan({"MEMORY_LIMIT_MB": "6144", "VISIBLE_GPU": "0,2"}, gpus=3)
        assert result.logical_mb == {0: (6144,), 2: (6144,)}

    def test_split_count_divides_the_cap(self) -> None:
        result = plan({"MEMORY_LIMIT_MB": "6145", "VIRTUAL_SPLIT": "2"}, gpus=1)
        assert result.logical_mb == {0: (3072, 3072)}

    def test_split_count_without_a_cap_is_an_error_on_gpus(self) -> None:
        text = plan_error({"VIRTUAL_SPLIT": "2"}, gpus=1)
        assert "VIRTUAL_SPLIT='2'" in text and "MEMORY_LIMIT_MB is not set" in text
        assert "VIRTUAL_SPLIT=2048,2048" in text

    def test_split_sizes_without_a_cap(self) -> None:
        assert plan({"VIRTUAL_SPLIT": "256,768"}, gpus=1).logical_mb == {0: (256, 768)}

    def test_split_sizes_over_a_per_gpu_plugin_cap(self) -> None:
        env = {
            "MEMORY_LIMIT_MB": "auto",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
            "CUDA_DEVICE_MEMORY_LIMIT_1": "4096m",
            "VIRTUAL_SPLIT": "1024,1024",
        }  # two GPUs: TensorFlow's 1536 MiB and NCCL's 1024 come off each share
        with pytest.raises(ConfigError, match="cap of 1536 MiB"):
            plan(env, gpus=2)

    def test_growth_without_logical_devices_uses_set_memory_growth(self) -> None:
        result = plan({"MEMORY_GROWTH": "true"}, gpus=2)
        assert called(result, "set_memory_growth") == [(_gpu(0), True), (_gpu(1), True)]
        assert not result.environ

    def test_growth_with_a_cap_goes_through_the_allocator_env(self) -> None:
        result = plan({"MEMORY_GROWTH": "true", "MEMORY_LIMIT_MB": "1024"}, gpus=1)
        assert called(result, "set_memory_growth") == []
        assert result.environ == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        assert result.logical_mb == {0: (1024,)}

    def test_cuda_malloc_async_with_a_cap_warns(self) -> None:
        env = {"MEMORY_LIMIT_MB": "1024", "TF_GPU_ALLOCATOR": "cuda_malloc_async"}
        assert any("release threshold" in w for w in plan(env, gpus=1).warnings)

    def test_none_visible_hides_every_gpu(self) -> None:
        result = plan({"VISIBLE_GPU": "none", "VIRTUAL_SPLIT": "2"}, gpus=2)
        assert result.visible == () and result.cpu_logical == 2 and not result.warnings

    def test_require_gpu_with_every_gpu_hidden(self) -> None:
        assert "hides every GPU" in plan_error({"VISIBLE_GPU": "none", "REQUIRE_GPU": "true"}, 2)


class TestCpuHost:
    def test_split_count_splits_cpu0(self) -> None:
        result = plan({"VIRTUAL_SPLIT": "3"}, gpus=0)
        assert result.cpu_logical == 3 and not result.warnings

    def test_split_sizes_give_as_many_logical_cpus(self) -> None:
        result = plan({"VIRTUAL_SPLIT": "1024,1024"}, gpus=0)
        assert result.cpu_logical == 2
        assert len(result.warnings) == 1 and "VIRTUAL_SPLIT=1024,1024" in result.warnings[0]

    def test_gpu_settings_give_one_warning(self) -> None:
        result = plan({"VISIBLE_GPU": "3", "MEMORY_LIMIT_MB": "1024", "MEMORY_GROWTH": "1"}, gpus=0)
        assert len(result.warnings) == 1
        warning = result.warnings[0]
        assert warning.startswith("no GPU found")
        assert all(
            v in warning for v in ("VISIBLE_GPU=3", "MEMORY_LIMIT_MB=1024", "MEMORY_GROWTH=1")
        )
        assert result.visible is None and not result.logical_mb

    def test_require_gpu_true_is_an_error(self) -> None:
        text = plan_error({"REQUIRE_GPU": "true"}, gpus=0)
        assert "REQUIRE_GPU='true'" in text and "lists no GPU" in text

    def test_require_gpu_false_warns_once(self) -> None:
        assert plan({"REQUIRE_GPU": "false"}, gpus=0).warnings == ["no GPU found, running on CPU"]


class TestThreads:
    QUOTA = CpuBudget(affinity=8, quota=1.5, quota_source="/sys/fs/cgroup/cpu.max")

    def test_auto_takes_the_quota_rounded_up(self) -> None:
        result = plan({}, gpus=0, cpu=self.QUOTA)
        assert (threads(result), threads(result, "inter")) == (2, 2)
        assert any("quota 1.5 CPUs from /sys/fs/cgroup/cpu.max" in d for d in result.decisions)

    def test_auto_without_quota_leaves_tf_default(self) -> None:
        result = plan({}, gpus=0)
        assert threads(result) is None and result.empty

    def test_host_ignores_the_quota(self) -> None:
        assert threads(plan({"CPU_THREADS": "host"}, gpus=0, cpu=self.QUOTA)) is None

    def test_explicit_count(self) -> None:
        assert threads(plan({"CPU_THREADS": "3"}, gpus=0, cpu=self.QUOTA)) == 3

    def test_explicit_tf_variables_win(self) -> None:
        result = plan({"TF_NUM_INTRAOP_THREADS": "5"}, gpus=0, cpu=self.QUOTA)
        assert threads(result) is None and threads(result, "inter") == 2
        assert any("TF_NUM_INTRAOP_THREADS=5" in d for d in result.decisions)

    def test_unreadable_quota_warns(self) -> None:
        broken = CpuBudget(affinity=8, quota=None, quota_source="", problem="could not read")
        assert plan({}, gpus=0, cpu=broken).warnings == [
            "could not read; TensorFlow's default threads are used"
        ]


def _gpu(index: int) -> object:
    from tfboot.adapters import Item

    return Item("config.list_physical_devices", ("GPU",), index)
