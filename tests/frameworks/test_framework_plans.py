"""JAX's and PyTorch's plans: settings plus the GPUs NVML lists -> each framework's knobs (pure)."""

from __future__ import annotations

import pytest
from support import called
from tfboot import ConfigError, resolve
from tfboot.adapters import Patch, Plan
from tfboot.adapters import jax as jax_adapter
from tfboot.adapters.jax import fraction_text, plan_jax
from tfboot.adapters.torch import plan_torch
from tfboot.budget import NO_LIMIT, Budget, make_budget
from tfboot.budget.roles import ALONG, RUNS_MODEL, Role
from tfboot.node.cpu import CpuBudget
from tfboot.node.cuda import cuda_devices
from tfboot.provenance import RECORD, with_write

NO_QUOTA = CpuBudget(affinity=8, quota=None, quota_source="")
QUOTA = CpuBudget(affinity=8, quota=1.5, quota_source="/sys/fs/cgroup/cpu.max")
MODEL = RUNS_MODEL
CAME_ALONG = Role(ALONG, "came along with TensorFlow's import")
GIB = 1 << 30
H100 = 80 * GIB  # NVML's total for an 80 GB H100 is a little less; any size will do


def budget(env: dict[str, str], role: Role, cpu: CpuBudget, framework: str) -> Budget:
    return make_budget(resolve(env, framework), env, role, cpu, NO_LIMIT)


def jax(env: dict[str, str], gpus: int = 0, role: Role = MODEL, cpu: CpuBudget = NO_QUOTA):
    """JAX's plan at both hook points: its environment, then its CPU client's pool."""
    made = budget(env, role, cpu, "jax")
    plan = plan_jax(made, (H100,) * gpus)
    pool = jax_adapter.plan(
        "after",
        made,
        {"pool": None, "started": False, "gpus": gpus, "narrowed": False, "jax": None},
    )
    plan.decisions += pool.decisions
    plan.calls += pool.calls
    return plan


def torch(env: dict[str, str], gpus: int = 0, role: Role = MODEL, cpu: CpuBudget = NO_QUOTA):
    return plan_torch(budget(env, role, cpu, "torch"), cuda_devices(env, gpus)[0])


def patched(plan: Plan, name: str) -> tuple | None:
    """The arguments of the plan's patch ``name``, or None."""
    return next((c.args for c in plan.calls if isinstance(c, Patch) and c.name == name), None)


def pool(plan: Plan) -> int | None:
    """The threads JAX's CPU client pool gets."""
    args = patched(plan, "jax cpu pool")
    return args[0] if args else None


def torch_threads(plan: Plan, name: str = "set_num_threads") -> int | None:
    found = called(plan, name)
    return found[0][0] if found else None


def caps(plan: Plan) -> dict[int, int]:
    args = patched(plan, "torch caps")
    return args[0] if args else {}


def refused(make, env: dict[str, str], gpus: int = 0) -> str:
    with pytest.raises(ConfigError) as info:
        make(env, gpus)
    return str(info.value)


class TestJax:
    def test_nothing_set_sets_nothing(self) -> None:
        plan = jax({}, gpus=2)
        assert plan.environ == {} and plan.decisions == [] and pool(plan) is None

    def test_cap_is_a_fraction_rounded_down(self) -> None:
        plan = jax({"MEMORY_LIMIT_MB": "6144"}, gpus=1)
        assert plan.environ == {"XLA_CLIENT_MEM_FRACTION": "0.075000"}
        assert "XLA_CLIENT_MEM_FRACTION=0.075000 of 81920 MiB" in plan.decisions[0]

    @pytest.mark.parametrize("cap", [1, 1000, 6144, 40000, 81919, 81920])
    def test_the_fraction_never_passes_the_cap(self, cap: int) -> None:
        total = 81559 * (1 << 20)  # an odd total, as NVML reports
        if cap > total >> 20:
            return
        fraction = float(fraction_text(cap, total))
        assert int(fraction * total) <= cap << 20
        assert (cap << 20) - int(fraction * total) <= total // 10**6 + 1

    def test_cap_over_the_gpu_is_refused_not_clamped(self) -> None:
        text = refused(jax, {"MEMORY_LIMIT_MB": "90000"}, gpus=1)
        assert "MEMORY_LIMIT_MB='90000'" in text and "more than the 81920 MiB" in text

    def test_growth_is_preallocation_off(self) -> None:
        assert jax({"MEMORY_GROWTH": "true"}, 1).environ == {
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false"
        }
        assert jax({"MEMORY_GROWTH": "off"}, 1).environ == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}

    def test_visible_gpus_are_jax_s_own(self) -> None:
        """JAX reads no JAX_CUDA_VISIBLE_DEVICES: its flag is set through jax.config."""
        plan = jax({"VISIBLE_GPU": "1,3"}, gpus=4)
        assert plan.environ == {}
        assert [(c.target, c.args) for c in plan.calls] == [
            ("config.update", ("jax_cuda_visible_devices", "1,3"))
        ]

    def test_visible_index_out_of_range(self) -> None:
        text = refused(jax, {"VISIBLE_GPU": "2"}, gpus=2)
        assert "index 2 does not exist: JAX will list 2 GPU(s)" in text

    def test_none_is_the_cpu_platform(self) -> None:
        assert jax({"VISIBLE_GPU": "none"}, gpus=2).environ == {"JAX_PLATFORMS": "cpu"}

    def test_require_gpu_forbids_the_cpu_fallback(self) -> None:
        assert jax({"REQUIRE_GPU": "true"}, gpus=1).environ == {"JAX_PLATFORMS": "cuda"}
        text = refused(jax, {"REQUIRE_GPU": "true"}, gpus=0)
        assert "REQUIRE_GPU='true'" in text and "JAX finds no GPU" in text

    def test_split_on_cpu_is_the_cpu_device_count(self) -> None:
        assert jax({"VIRTUAL_SPLIT": "4"}).environ == {"JAX_NUM_CPU_DEVICES": "4"}
        assert jax({"VIRTUAL_SPLIT": "512,512"}).environ == {"JAX_NUM_CPU_DEVICES": "2"}

    def test_split_on_gpus_is_refused(self) -> None:
        text = refused(jax, {"VIRTUAL_SPLIT": "2", "MEMORY_LIMIT_MB": "4096"}, gpus=1)
        assert text.startswith("VIRTUAL_SPLIT='2' cannot be applied: JAX has no logical GPUs")

    def test_gpu_settings_on_a_cpu_host_warn(self) -> None:
        plan = jax({"MEMORY_LIMIT_MB": "4096"})
        assert plan.environ == {}
        assert plan.warnings == [
            "no GPU found, running on CPU; not applied: MEMORY_LIMIT_MB=4096 (env)"
        ]

    def test_threads_from_the_quota(self) -> None:
        plan = jax({}, cpu=QUOTA)
        assert pool(plan) == 2 and "quota 1.5 CPUs" in plan.decisions[0]

    @pytest.mark.parametrize(
        ("name", "value", "why"),
        [
            ("SOFT_PLACEMENT", "true", "soft placement is TensorFlow's"),
            ("LOG_DEVICE_PLACEMENT", "false", "JAX_LOG_COMPILES"),
            ("XLA_JIT", "false", "JAX always compiles with XLA"),
        ],
    )
    def test_tensorflow_only_variables_are_refused_by_name(
        self, name: str, value: str, why: str
    ) -> None:
        text = refused(jax, {name: value})
        assert text.startswith(f"{name}='{value}' cannot be applied") and why in text

    def test_xla_jit_true_is_what_jax_does(self) -> None:
        assert jax({"XLA_JIT": "true"}).decisions == [
            "XLA JIT: always on in JAX (XLA_JIT=true (env))"
        ]

    def test_came_along_it_is_not_refused(self) -> None:
        plan = jax({"SOFT_PLACEMENT": "true", "DISTRIBUTED": "k8s"}, role=CAME_ALONG)
        assert any("not applied" in d for d in plan.decisions)

    def test_an_explicit_jax_variable_that_disagrees_is_an_error(self) -> None:
        text = refused(jax, {"MEMORY_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, 1)
        assert (
            "contradicts XLA_PYTHON_CLIENT_PREALLOCATE='true'" in text
            and "set only one of them" in text
        )
        text = refused(jax, {"MEMORY_LIMIT_MB": "100", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, 1)
        assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in text

    def test_platform_allocator_warns_that_the_cap_does_not_hold(self) -> None:
        plan = jax({"MEMORY_LIMIT_MB": "100", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, 1)
        assert "the cap does not hold" in plan.warnings[0]


def narrowed(env: dict[str, str], now: str, was: str | None) -> dict[str, str]:
    """``env`` as a parent leaves it: CUDA_VISIBLE_DEVICES narrowed by tfboot from ``was``."""
    parent = dict(env) if was is None else {**env, "CUDA_VISIBLE_DEVICES": was}
    return {**env, "CUDA_VISIBLE_DEVICES": now,
            RECORD: with_write(parent, "CUDA_VISIBLE_DEVICES", now, "tfboot")}  # fmt: skip


class TestTorch:
    def test_nothing_set_sets_nothing(self) -> None:
        plan = torch({}, gpus=2)
        assert plan.environ == {} and torch_threads(plan) is None and not caps(plan)

    def test_visible_narrows_cuda_visible_devices(self) -> None:
        plan = torch({"VISIBLE_GPU": "1", "CUDA_VISIBLE_DEVICES": "4,5,6"}, gpus=8)
        assert plan.environ == {"CUDA_VISIBLE_DEVICES": "5"}

    def test_a_child_counts_from_the_list_before_tfboot_narrowed_it(self) -> None:
        child = narrowed({"VISIBLE_GPU": "1"}, "5", "4,5,6")
        assert torch(child, gpus=8).environ["CUDA_VISIBLE_DEVICES"] == "5"
        unset = narrowed({"VISIBLE_GPU": "0,2"}, "0,2", None)
        assert torch(unset, gpus=3).environ["CUDA_VISIBLE_DEVICES"] == "0,2"

    def test_a_childs_own_cuda_visible_devices_is_its_own(self) -> None:
        """The parent's narrowing is in the record; the user's later value is theirs."""
        child = {**narrowed({}, "0", "4,5,6"), "CUDA_VISIBLE_DEVICES": "3"}
        assert cuda_devices(child, 8) == (["3"], False)

    def test_cuda_stops_at_the_first_device_it_cannot_use(self) -> None:
        assert cuda_devices({"CUDA_VISIBLE_DEVICES": "1,7,0"}, 2) == (["1"], False)
        assert cuda_devices({"CUDA_VISIBLE_DEVICES": "GPU-ab,GPU-cd"}, 2)[0] == ["GPU-ab", "GPU-cd"]
        assert cuda_devices({"CUDA_VISIBLE_DEVICES": "-1"}, 2)[0] == []

    def test_caps_per_device_ordinal(self) -> None:
        plan = torch({"MEMORY_LIMIT_MB": "6144", "VISIBLE_GPU": "0,2"}, gpus=3)
        assert caps(plan) == {0: 6144, 1: 6144}

    def test_plugin_caps_follow_the_physical_gpu(self) -> None:
        env = {
            "MEMORY_LIMIT_MB": "auto",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
            "CUDA_DEVICE_MEMORY_LIMIT_1": "3072m",
            "VISIBLE_GPU": "1",
        }
        # GPU 1's cap (HAMi's share less PyTorch's headroom; one GPU visible, so no NCCL)
        # becomes cuda:0's, as CUDA renumbers.
        cap = resolve(env, "torch").caps_mb(1)
        assert caps(torch(env, gpus=2)) == {0: cap} == {0: 3072 - 1024}

    def test_growth_true_is_what_pytorch_does(self) -> None:
        plan = torch({"MEMORY_GROWTH": "true"}, gpus=1)
        assert plan.environ == {} and "caching allocator always does" in plan.decisions[0]

    @pytest.mark.parametrize(
        ("name", "value", "why"),
        [
            ("MEMORY_GROWTH", "false", "cannot preallocate"),
            ("VIRTUAL_SPLIT", "2", "no logical devices"),
            ("VIRTUAL_SPLIT", "1024,1024", "no logical devices"),
            ("SOFT_PLACEMENT", "true", "where its tensors are"),
            ("LOG_DEVICE_PLACEMENT", "true", "PyTorch has none"),
            ("XLA_JIT", "true", "torch.compile"),
        ],
    )
    def test_what_pytorch_cannot_apply_is_refused(self, name: str, value: str, why: str) -> None:
        text = refused(torch, {name: value}, gpus=1)
        assert text.startswith(f"{name}='{value}' cannot be applied") and why in text

    def test_threads_both_pools(self) -> None:
        plan = torch({"CPU_THREADS": "3"})
        assert (torch_threads(plan), torch_threads(plan, "set_num_interop_threads")) == (3, 3)

    def test_omp_num_threads_wins_for_the_intra_op_pool(self) -> None:
        plan = torch({"OMP_NUM_THREADS": "5"}, cpu=QUOTA)
        assert (torch_threads(plan), torch_threads(plan, "set_num_interop_threads")) == (None, 2)
        assert "left to OMP_NUM_THREADS=5" in plan.decisions[0]

    def test_none_hides_every_gpu(self) -> None:
        plan = torch({"VISIBLE_GPU": "none"}, gpus=2)
        assert plan.environ["CUDA_VISIBLE_DEVICES"] == ""

    def test_require_gpu_without_one(self) -> None:
        assert "PyTorch finds no GPU" in refused(torch, {"REQUIRE_GPU": "1"})


def test_each_framework_reads_only_its_own_variables() -> None:
    # MIXED_PRECISION is Keras's and LOADER_GPU TensorFlow's: not JAX's business.
    env = {"MIXED_PRECISION": "fp8", "LOADER_GPU": "maybe"}
    assert jax(env).environ == {} and torch(env).environ == {}
