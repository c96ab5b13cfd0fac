"""JAX's plan: the contract as JAX's own environment variables and its CPU client's pool.

Pure: no JAX import. Everything but the thread count is an environment variable JAX reads
when it starts a backend, so it is set at ``import jax``, before JAX's code runs:

- ``VISIBLE_GPU``: ``JAX_CUDA_VISIBLE_DEVICES`` (JAX's alone; other frameworks keep
  theirs); ``none`` is ``JAX_PLATFORMS=cpu``.
- ``MEMORY_LIMIT_MB``: ``XLA_CLIENT_MEM_FRACTION``, the cap over the GPU's total memory
  (NVML), rounded down to 6 decimals so it never passes the cap.
- ``MEMORY_GROWTH``: ``XLA_PYTHON_CLIENT_PREALLOCATE`` (``false`` grows on demand).
- ``VIRTUAL_SPLIT`` on a host without GPUs: ``JAX_NUM_CPU_DEVICES``.
- ``REQUIRE_GPU``: ``JAX_PLATFORMS=cuda``, so JAX fails instead of falling back to CPU.
- ``CPU_THREADS``: the size of the CPU client's pool (see ``apply``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..cpu import CpuBudget
from ..errors import ConfigError
from ..plan import given_text
from ..settings import Settings
from ..values import nonblank
from .budget import FrameworkPlan, cap_over_gpu, check_visible, no_gpu, plan_threads
from .roles import Role

FRAMEWORK = "JAX"
FRACTION_ENV = "XLA_CLIENT_MEM_FRACTION"
OLD_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # JAX's deprecated name, still read
PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
ALLOCATOR_ENV = "XLA_PYTHON_CLIENT_ALLOCATOR"
PLATFORMS_ENV = "JAX_PLATFORMS"
VISIBLE_ENV = "JAX_CUDA_VISIBLE_DEVICES"
CPU_DEVICES_ENV = "JAX_NUM_CPU_DEVICES"
DECIMALS = 6


def fraction_text(cap_mib: int, total_bytes: int) -> str:
    """``cap / total`` rounded down to ``DECIMALS`` places, as JAX parses it."""
    scaled = cap_mib * (1 << 20) * 10**DECIMALS // total_bytes
    return f"{scaled // 10**DECIMALS}.{scaled % 10**DECIMALS:0{DECIMALS}d}"


def plan_jax(
    settings: Settings,
    totals: tuple[int, ...],
    cpu: CpuBudget,
    env: Mapping[str, str],
    role: Role,
    narrowed: bool = False,
) -> FrameworkPlan:
    """JAX's plan; ``totals``: total bytes of each GPU JAX will list (none: no GPU for it).

    ``narrowed``: CUDA_VISIBLE_DEVICES already holds only the visible GPUs (set for PyTorch).
    """
    plan = FrameworkPlan(FRAMEWORK, role)
    _refusals(plan, settings)
    gpu_count = len(totals)
    if gpu_count and settings.visible_gpu != ():
        _plan_gpus(plan, settings, totals, env, narrowed)
    else:
        no_gpu(plan, settings, gpu_count)
        if gpu_count and plan.setenv(env, PLATFORMS_ENV, "cpu", settings, "VISIBLE_GPU"):  # none
            plan.decisions.append(
                f"no GPU: {PLATFORMS_ENV}=cpu ({given_text(settings, 'VISIBLE_GPU')})"
            )
        split = settings.virtual_split
        count = len(split) if isinstance(split, tuple) else split
        if count > 1 and plan.setenv(env, CPU_DEVICES_ENV, str(count), settings, "VIRTUAL_SPLIT"):
            why = given_text(settings, "VIRTUAL_SPLIT")
            plan.decisions.append(f"{count} CPU devices via {CPU_DEVICES_ENV} ({why}, no GPU)")
    threads = plan_threads(plan, settings, cpu)
    if threads.count is not None:
        plan.threads = threads.count
        plan.decisions.append(f"CPU client pool {threads.count} threads ({threads.why})")
    plan.check()
    return plan


def _refusals(plan: FrameworkPlan, settings: Settings) -> None:
    for name, why in (
        ("SOFT_PLACEMENT", "JAX places each computation itself; soft placement is TensorFlow's"),
        (
            "LOG_DEVICE_PLACEMENT",
            "TensorFlow's placement log; JAX logs compilations with JAX_LOG_COMPILES",
        ),
    ):
        if name in settings.given:
            plan.refuse(settings, name, why)
    if settings.xla_jit is False:
        plan.refuse(
            settings,
            "XLA_JIT",
            "JAX always compiles with XLA (jax.disable_jit is a debugging switch)",
        )
    elif settings.xla_jit:
        plan.decisions.append(f"XLA JIT: always on in JAX ({given_text(settings, 'XLA_JIT')})")
    if settings.distributed != "off":
        plan.refuse(
            settings,
            "DISTRIBUTED",
            "it builds TensorFlow's TF_CONFIG; JAX starts a "
            "cluster with jax.distributed.initialize()",
        )


def _plan_gpus(
    plan: FrameworkPlan,
    settings: Settings,
    totals: tuple[int, ...],
    env: Mapping[str, str],
    narrowed: bool,
) -> None:
    visible = check_visible(settings, FRAMEWORK, len(totals))
    if visible is not None and not narrowed:
        listed = ",".join(map(str, visible))
        if plan.setenv(env, VISIBLE_ENV, listed, settings, "VISIBLE_GPU"):
            why = given_text(settings, "VISIBLE_GPU")
            plan.decisions.append(f"GPUs {list(visible)} visible via {VISIBLE_ENV} ({why})")
    elif visible is not None:
        plan.decisions.append(
            f"GPUs {list(visible)} visible: CUDA_VISIBLE_DEVICES already narrowed for PyTorch"
        )
    indexes = visible if visible is not None else range(len(totals))
    if settings.require_gpu and plan.role.runs_model and nonblank(env, PLATFORMS_ENV) is None:
        plan.environ[PLATFORMS_ENV] = "cuda"
        plan.decisions.append(
            f"{PLATFORMS_ENV}=cuda: no CPU fallback ({given_text(settings, 'REQUIRE_GPU')})"
        )
    split = settings.virtual_split
    if split != 1:
        plan.refuse(settings, "VIRTUAL_SPLIT", "JAX has no logical GPUs: one device per GPU")
    caps = [settings.caps_mb(i) for i in indexes]
    if caps and all(c is not None for c in caps):
        _plan_cap(plan, settings, min(c for c in caps if c is not None), max(totals), env)
    growth = settings.memory_growth
    if growth is not None and plan.setenv(
        env, PREALLOCATE_ENV, str(not growth).lower(), settings, "MEMORY_GROWTH"
    ):
        how = "grows on demand" if growth else "preallocated"
        plan.decisions.append(
            f"memory {how} via {PREALLOCATE_ENV}={plan.environ[PREALLOCATE_ENV]} "
            f"({given_text(settings, 'MEMORY_GROWTH')})"
        )


def _plan_cap(
    plan: FrameworkPlan, settings: Settings, cap: int, total: int, env: Mapping[str, str]
) -> None:
    total_mib = total >> 20
    if cap > total_mib:
        raise ConfigError(
            cap_over_gpu(settings.given["MEMORY_LIMIT_MB"][0], cap, total_mib, "the GPU")
        )
    fraction = fraction_text(cap, total)
    if not plan.agrees(env, OLD_FRACTION_ENV, fraction, settings, "MEMORY_LIMIT_MB"):
        return
    if not plan.setenv(env, FRACTION_ENV, fraction, settings, "MEMORY_LIMIT_MB"):
        return
    plan.decisions.append(
        f"memory capped at {FRACTION_ENV}={fraction} of {total_mib} MiB "
        f"({given_text(settings, 'MEMORY_LIMIT_MB')})"
    )
    allocator = nonblank(env, ALLOCATOR_ENV)
    if allocator is not None and allocator.lower() == "platform":
        plan.warnings.append(
            f"{ALLOCATOR_ENV}={allocator}: JAX then ignores {FRACTION_ENV}, so the cap does not "
            f"hold; unset {ALLOCATOR_ENV}"
        )
