"""Property test: the settings parser over arbitrary environments raises only ConfigError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support import tf_plan
from tfboot import ConfigError, resolve
from tfboot.node.cpu import CpuBudget
from tfboot.settings import ALL_NAMES

PLUGIN_NAMES = [
    "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_DEVICE_MEMORY_LIMIT_0",
    "ALIYUN_COM_GPU_MEM_CONTAINER",
    "ALIYUN_COM_GPU_MEM_DEV",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
]
NAMES = sorted(ALL_NAMES - {"TFBOOT_ENV_FILE", "TFBOOT_CGROUP_ROOT"}) + PLUGIN_NAMES

# Values near the accepted forms find more edge cases than random text alone.
near_valid = st.sampled_from(
    ["auto", "host", "all", "none", "true", "FALSE", "0", "1", "64", "65", "-1", "2048,2048",
     "0,1", "1,1", "6144m", "6g", "max", "", " ", "mixed_float16", "warn", "raise", "debug"]
)  # fmt: skip
values = st.one_of(near_valid, st.text(max_size=10), st.integers(-5, 10**6).map(str))
environments = st.dictionaries(st.sampled_from(NAMES), values, max_size=8)


@settings(max_examples=600, deadline=None)
@given(environments, st.integers(0, 4))
def test_only_config_errors_escape(env: dict[str, str], gpus: int) -> None:
    try:
        settings_ = resolve(env)
        tf_plan(env, gpus, CpuBudget(4, 1.5, "cpu.max"), settings=settings_)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.accepted
            assert problem.variable == "" or problem.variable in str(exc)
