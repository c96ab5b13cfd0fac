"""PyTorch's plan: ``CUDA_VISIBLE_DEVICES``, the caching allocator's cap, and its two pools.

Pure: no PyTorch import. PyTorch starts CUDA at its first CUDA call, not at import, so
everything is applied at ``import torch``:

- ``VISIBLE_GPU``: ``CUDA_VISIBLE_DEVICES`` narrowed to the chosen GPUs. PyTorch has no
  other way, and the variable is the process's: other frameworks see the same GPUs.
- ``MEMORY_LIMIT_MB``: ``torch.cuda.set_per_process_memory_fraction`` on each GPU, as the
  cap over that GPU's total memory, set when CUDA starts.
- ``MEMORY_GROWTH=true`` is what PyTorch's caching allocator always does; ``false``
  (preallocate) is refused.
- ``CPU_THREADS``: ``torch.set_num_threads`` (unless ``OMP_NUM_THREADS`` is set, which
  PyTorch reads itself) and ``torch.set_num_interop_threads``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..cpu import CpuBudget
from ..plan import given_text
from ..settings import Settings
from ..values import nonblank
from .budget import (
    CUDA_VISIBLE,
    CUDA_VISIBLE_BASE,
    UNSET,
    FrameworkPlan,
    check_visible,
    no_gpu,
    plan_threads,
)
from .roles import Role

FRAMEWORK = "PyTorch"
OMP_ENV = "OMP_NUM_THREADS"


def plan_torch(
    settings: Settings,
    devices: list[str],
    cpu: CpuBudget,
    env: Mapping[str, str],
    role: Role,
) -> FrameworkPlan:
    """PyTorch's plan; ``devices``: what CUDA lists before narrowing (see ``cuda_devices``)."""
    plan = FrameworkPlan(FRAMEWORK, role)
    refusals(plan, settings)
    if devices and settings.visible_gpu != ():
        _plan_gpus(plan, settings, devices, env)
    else:
        no_gpu(plan, settings, len(devices))
        if devices:
            _narrow(plan, env, "")
            plan.decisions.append(
                f"no GPU: {CUDA_VISIBLE}= ({given_text(settings, 'VISIBLE_GPU')})"
            )
    threads = plan_threads(plan, settings, cpu)
    if threads.count is not None:
        if nonblank(env, OMP_ENV) is None:
            plan.threads = threads.count
            plan.decisions.append(f"intra-op threads {threads.count} ({threads.why})")
        else:
            plan.decisions.append(f"intra-op threads left to {OMP_ENV}={env[OMP_ENV]} (explicit)")
        plan.interop_threads = threads.count
        plan.decisions.append(f"inter-op threads {threads.count} ({threads.why})")
    plan.check()
    return plan


def refusals(plan: FrameworkPlan, settings: Settings) -> None:
    """What PyTorch cannot apply (checked before its code runs, and again in the plan)."""
    for name, why in (
        ("SOFT_PLACEMENT", "PyTorch runs each operation where its tensors are"),
        ("LOG_DEVICE_PLACEMENT", "TensorFlow's placement log; PyTorch has none"),
        ("XLA_JIT", "PyTorch does not compile with XLA; torch.compile is chosen in the code"),
    ):
        if name in settings.given:
            plan.refuse(settings, name, why)
    if settings.distributed != "off":
        plan.refuse(
            settings,
            "DISTRIBUTED",
            "it builds TensorFlow's TF_CONFIG; torchrun and "
            "torch.distributed read their own variables",
        )
    if settings.virtual_split != 1:
        plan.refuse(settings, "VIRTUAL_SPLIT", "PyTorch has no logical devices")
    if settings.memory_growth is False:
        plan.refuse(
            settings,
            "MEMORY_GROWTH",
            "PyTorch's caching allocator always allocates on demand and cannot preallocate",
        )


def _narrow(plan: FrameworkPlan, env: Mapping[str, str], chosen: str) -> None:
    """Narrow ``CUDA_VISIBLE_DEVICES``, keeping what it was before the first narrowing."""
    plan.environ[CUDA_VISIBLE] = chosen
    plan.environ[CUDA_VISIBLE_BASE] = env.get(CUDA_VISIBLE_BASE) or env.get(CUDA_VISIBLE, UNSET)


def _plan_gpus(
    plan: FrameworkPlan,
    settings: Settings,
    devices: list[str],
    env: Mapping[str, str],
) -> None:
    visible = check_visible(settings, FRAMEWORK, len(devices))
    if visible is not None:
        chosen = ",".join(devices[i] for i in visible)
        _narrow(plan, env, chosen)
        plan.decisions.append(
            f"GPUs {list(visible)} visible via {CUDA_VISIBLE}={chosen} "
            f"({given_text(settings, 'VISIBLE_GPU')})"
        )
    physical = visible if visible is not None else range(len(devices))
    for ordinal, index in enumerate(physical):
        cap = settings.caps_mb(index)
        if cap is not None:
            plan.gpu_caps_mib[ordinal] = cap
    if plan.gpu_caps_mib:
        shown = ", ".join(f"cuda:{o} {c} MiB" for o, c in plan.gpu_caps_mib.items())
        plan.decisions.append(
            f"caching allocator capped at {shown} via set_per_process_memory_fraction "
            f"({given_text(settings, 'MEMORY_LIMIT_MB')})"
        )
    if settings.memory_growth:
        plan.decisions.append(
            f"memory grows on demand, as PyTorch's caching allocator always does "
            f"({given_text(settings, 'MEMORY_GROWTH')})"
        )
