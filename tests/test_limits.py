"""Numbers that cannot be right are errors: 1 TiB per GPU, 1024 threads per pool, any digits."""

from __future__ import annotations

import pytest
from support import cluster_plan, problem_text, tf_plan
from support import threads as intra
from tfboot import ConfigError, resolve
from tfboot.node.cpu import CpuBudget
from tfboot.settings import MAX_CPU_THREADS, MAX_MEMORY_MB

HUGE = "9" * 100_000  # past Python's int-string limit (4300 digits)


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("MEMORY_LIMIT_MB", "99999999999999999999999", "from 1 to 1048576 (1 TiB"),
        ("MEMORY_LIMIT_MB", str(MAX_MEMORY_MB + 1), "from 1 to 1048576 (1 TiB"),
        ("MEMORY_LIMIT_MB", HUGE, "from 1 to 1048576 (1 TiB"),
        ("VIRTUAL_SPLIT", "99999999999999999999,1", "MiB sizes from 1 to 1048576 (1 TiB)"),
        ("VIRTUAL_SPLIT", f"{MAX_MEMORY_MB + 1},1", "MiB sizes from 1 to 1048576 (1 TiB)"),
        ("VIRTUAL_SPLIT", HUGE, "a count from 1 to 64"),
        ("CPU_THREADS", "20000", "a thread count from 1 to 1024"),
        ("CPU_THREADS", str(MAX_CPU_THREADS + 1), "a thread count from 1 to 1024"),
        ("CPU_THREADS", HUGE, "a thread count from 1 to 1024"),
        ("VISIBLE_GPU", f"0,{HUGE}", None),
    ],
)
def test_out_of_range(name: str, value: str, accepted: str | None) -> None:
    if accepted is None:  # a valid form: the plan says the index does not exist
        settings = resolve({name: value})
        with pytest.raises(ConfigError, match="does not exist"):
            tf_plan({}, 2, CpuBudget(2, None, ""), settings=settings)
        return
    text = problem_text({name: value})
    assert text.startswith(f"{name}=") and accepted in text
    assert len(text) < 600  # a long value is shortened, with its length given
    if len(value) > 256:
        assert f"({len(value)} characters)" in text


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_DEVICE_MEMORY_LIMIT": "2000000m"},
        {"CUDA_DEVICE_MEMORY_LIMIT_0": HUGE + "m"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER": "1025"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER": HUGE},
    ],
)
def test_device_plugin_share_over_1_tib(env: dict[str, str]) -> None:
    (name,) = env
    text = problem_text({"MEMORY_LIMIT_MB": "auto", **env})
    assert f"{name}=" in text and "1 TiB" in text


def test_the_limits_themselves_are_accepted() -> None:
    settings = resolve({"MEMORY_LIMIT_MB": str(MAX_MEMORY_MB), "CPU_THREADS": str(MAX_CPU_THREADS)})
    assert (settings.memory_limit_mb, settings.cpu_threads) == (MAX_MEMORY_MB, MAX_CPU_THREADS)


def test_hami_index_with_leading_zero() -> None:
    settings = resolve({"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT_01": "4096m"})
    assert settings.memory_limit_per_gpu == {1: 4096 - 1536}


@pytest.mark.parametrize(("threads", "warned"), [(4, False), (5, True)])
def test_threads_above_the_schedulable_cpus_warn_once(threads: int, warned: bool) -> None:
    settings = resolve({"CPU_THREADS": str(threads)})
    plan = tf_plan({}, 0, CpuBudget(4, None, ""), settings=settings)
    assert intra(plan) == threads
    expected = [f"CPU_THREADS={threads} (env) is more threads per pool than the 4 CPUs this "
                "process may run on"]  # fmt: skip
    assert plan.warnings == (expected if warned else [])


@pytest.mark.parametrize(
    "env",
    [
        {"DISTRIBUTED": "auto", "TF_CONFIG": HUGE},
        {"DISTRIBUTED": "k8s", "DIST_TASKS": "99999999999", "DIST_HOSTS": "w-{i}.svc"},
        {"DISTRIBUTED": "k8s", "DIST_TASKS": "2", "DIST_HOSTS": "w-{i}.svc", "DIST_PORT": HUGE},
        {"DISTRIBUTED": "slurm", "SLURM_PROCID": HUGE, "SLURM_STEP_NODELIST": "n[1-2]",
         "SLURM_STEP_TASKS_PER_NODE": "1(x2)"},
        {"DISTRIBUTED": "slurm", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": f"n[1-{HUGE}]",
         "SLURM_STEP_TASKS_PER_NODE": "1(x2)"},
    ],
)  # fmt: skip
def test_cluster_numbers_of_any_size_are_config_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        env = {"JOB_COMPLETION_INDEX": "0", **env}
        cluster_plan(env["DISTRIBUTED"], env)


def test_every_framework_that_reads_a_gpu_cap_declares_its_headroom() -> None:
    """A framework added without a headroom fails here, instead of being given TensorFlow's
    figure; the catalogue lists every adapter the start-up table names; and a made-up
    framework that reads a cap and declares none is refused by name."""
    import importlib
    from types import SimpleNamespace

    from tfboot import FRAMEWORKS
    from tfboot.budget.caps import settings_for
    from tfboot.frameworks import ADAPTERS as CATALOGUE
    from tfboot.frameworks import HEADROOMS

    named = {adapter for adapter, _name in FRAMEWORKS.values()}
    for name in named:
        adapter = importlib.import_module(f"tfboot.adapters.{name}")
        assert CATALOGUE[adapter.MODULE] is adapter
        if adapter.READS is None or "MEMORY_LIMIT_MB" in adapter.READS:
            assert adapter.MODULE in HEADROOMS, (
                f"{adapter.MODULE} reads MEMORY_LIMIT_MB, no headroom"
            )
    assert len(CATALOGUE) == len(named)
    made_up = SimpleNamespace(READS=None, MIRRORS={}, HEADROOM=None, NAME="MXNet")
    with pytest.raises(KeyError, match="no GPU headroom declared for MXNet"):
        settings_for(made_up, {"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT": "8g"})
