"""Turn ``Settings`` plus the devices TensorFlow lists into the exact ``tf.config`` calls.

Pure: no TensorFlow import. Every decision is recorded with its reason, for the log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .cpu import CpuBudget
from .errors import ConfigError, Problem
from .settings import Settings

GPU_SETTINGS = ("VISIBLE_GPU", "MEMORY_LIMIT_MB", "MEMORY_GROWTH")
# Settings that need TensorFlow's device list; without them tfboot never lists devices.
DEVICE_SETTINGS = (*GPU_SETTINGS, "VIRTUAL_SPLIT", "REQUIRE_GPU")
ON_THIS_HOST = "cannot be applied on this host"
INTRA_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_ENV = "TF_NUM_INTEROP_THREADS"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"


@dataclass
class Plan:
    """What to do, in TensorFlow's required order, and why."""

    visible_gpus: tuple[int, ...] | None = None  # physical indexes; None: leave TF's default
    memory_growth: bool | None = None  # set_memory_growth on every visible GPU
    gpu_logical_mb: dict[int, tuple[int, ...]] = field(default_factory=dict)
    cpu_logical: int | None = None
    environ: dict[str, str] = field(default_factory=dict)
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    soft_placement: bool | None = None
    log_device_placement: bool | None = None
    xla_jit: bool | None = None
    mixed_precision: str | None = None
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing is changed in TensorFlow."""
        return not self.decisions

    def local_replicas(self, gpu_count: int) -> int:
        """Visible logical GPUs after this plan (visible GPUs x split), else 1 (CPU:0)."""
        visible = range(gpu_count) if self.visible_gpus is None else self.visible_gpus
        return sum(len(self.gpu_logical_mb.get(i, ())) or 1 for i in visible) or 1


def _given(settings: Settings, name: str) -> str:
    value, source = settings.given[name]
    return f"{name}={value} ({source})"


def needs_devices(settings: Settings) -> bool:
    """True when the plan depends on the GPU list (a GPU setting, a split, a cluster)."""
    given = any(name in settings.given for name in DEVICE_SETTINGS)
    return given or settings.distributed != "off"


def make_plan(settings: Settings, gpu_count: int, cpu: CpuBudget, env: Mapping[str, str]) -> Plan:
    """The plan for this host; device-dependent errors raise ``ConfigError``."""
    plan = Plan(
        soft_placement=settings.soft_placement,
        log_device_placement=settings.log_device_placement,
        xla_jit=settings.xla_jit,
        mixed_precision=settings.mixed_precision,
    )
    for name, attr in (
        ("SOFT_PLACEMENT", "soft_placement"),
        ("LOG_DEVICE_PLACEMENT", "log_device_placement"),
        ("XLA_JIT", "xla_jit"),
        ("MIXED_PRECISION", "mixed_precision"),
    ):
        if getattr(plan, attr) is not None:
            plan.decisions.append(_given(settings, name))
    visible = settings.visible_gpu
    if gpu_count and visible != ():
        _plan_gpus(plan, settings, gpu_count, env)
    else:
        _plan_no_gpu(plan, settings, gpu_count)
    _plan_threads(plan, settings, cpu, env)
    return plan


def _plan_no_gpu(plan: Plan, settings: Settings, gpu_count: int) -> None:
    hidden = gpu_count > 0  # VISIBLE_GPU=none on a GPU host
    if hidden:
        plan.visible_gpus = ()
        plan.decisions.append(f"no GPU visible: {_given(settings, 'VISIBLE_GPU')}")
    if settings.require_gpu:
        why = "VISIBLE_GPU=none hides every GPU" if hidden else "TensorFlow lists no GPU"
        raise ConfigError(
            Problem(
                "REQUIRE_GPU",
                settings.given["REQUIRE_GPU"][0],
                f"a GPU is required, but {why}",
                verdict=ON_THIS_HOST,
            )
        )
    ignored = [_given(settings, n) for n in GPU_SETTINGS if n in settings.given and not hidden]
    if isinstance(settings.virtual_split, tuple) and not hidden:
        ignored.append(_given(settings, "VIRTUAL_SPLIT") + " sizes")
    if not hidden and (ignored or "REQUIRE_GPU" in settings.given):
        detail = "; not applied: " + ", ".join(ignored) if ignored else ""
        plan.warnings.append(f"no GPU found, running on CPU{detail}")
    split = settings.virtual_split
    count = len(split) if isinstance(split, tuple) else split
    if count > 1:
        plan.cpu_logical = count
        plan.decisions.append(
            f"CPU:0 split into {count} logical CPUs ({_given(settings, 'VIRTUAL_SPLIT')}, no GPU)"
        )


def _plan_gpus(plan: Plan, settings: Settings, gpu_count: int, env: Mapping[str, str]) -> None:
    visible = settings.visible_gpu
    if visible is not None:
        missing = [i for i in visible if i >= gpu_count]
        if missing:
            raise ConfigError(
                Problem(
                    "VISIBLE_GPU",
                    settings.given["VISIBLE_GPU"][0],
                    f"index {missing[0]} does not exist: TensorFlow lists {gpu_count} GPU(s), "
                    f"indexes 0 to {gpu_count - 1}",
                    "indexes count after CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES",
                    verdict=ON_THIS_HOST,
                )
            )
        plan.visible_gpus = visible
        plan.decisions.append(f"GPUs {list(visible)} visible ({_given(settings, 'VISIBLE_GPU')})")
    split = settings.virtual_split
    for index in visible if visible is not None else range(gpu_count):
        cap = settings.caps_mb(index)
        sizes = _logical_sizes(settings, index, cap, split)
        if sizes:
            plan.gpu_logical_mb[index] = sizes
    if plan.gpu_logical_mb:
        described = ", ".join(f"GPU:{i} -> {list(s)} MiB" for i, s in plan.gpu_logical_mb.items())
        origin = [
            _given(settings, n) for n in ("MEMORY_LIMIT_MB", "VIRTUAL_SPLIT") if n in settings.given
        ]
        plan.decisions.append(f"logical GPUs {described} ({', '.join(origin)})")
        if env.get("TF_GPU_ALLOCATOR", "").strip() == "cuda_malloc_async":
            plan.warnings.append(
                "TF_GPU_ALLOCATOR=cuda_malloc_async: memory_limit is then a release threshold, "
                "not a hard cap; unset TF_GPU_ALLOCATOR for a hard cap"
            )
    growth = settings.memory_growth
    if growth is None:
        return
    if plan.gpu_logical_mb:
        # TF refuses set_memory_growth with logical devices; the allocator reads this instead.
        if growth:
            plan.environ[GROWTH_ENV] = "true"
        how = f"grows up to the cap, via {GROWTH_ENV}=true" if growth else "preallocated, capped"
        plan.decisions.append(f"memory {how} ({_given(settings, 'MEMORY_GROWTH')})")
    else:
        plan.memory_growth = growth
        plan.decisions.append(
            f"memory growth {'on' if growth else 'off'} ({_given(settings, 'MEMORY_GROWTH')})"
        )


def _logical_sizes(
    settings: Settings, index: int, cap: int | None, split: int | tuple[int, ...]
) -> tuple[int, ...]:
    if isinstance(split, tuple):
        if cap is not None and sum(split) > cap:
            raise ConfigError(
                Problem(
                    "VIRTUAL_SPLIT",
                    settings.given["VIRTUAL_SPLIT"][0],
                    f"the sizes add up to {sum(split)} MiB, "
                    f"more than GPU:{index}'s cap of {cap} MiB",
                )
            )
        return split
    if split > 1:
        if cap is None:
            raise ConfigError(
                Problem(
                    "VIRTUAL_SPLIT",
                    settings.given["VIRTUAL_SPLIT"][0],
                    f"splitting GPU:{index} into {split} logical GPUs needs a memory cap "
                    "to divide, and MEMORY_LIMIT_MB is not set",
                    f"set MEMORY_LIMIT_MB (each logical GPU gets MEMORY_LIMIT_MB // {split}), "
                    "MEMORY_LIMIT_MB=auto under a GPU-sharing plugin, or give sizes such as "
                    "VIRTUAL_SPLIT=2048,2048",
                    verdict=ON_THIS_HOST,
                )
            )
        return (cap // split,) * split
    return (cap,) if cap is not None else ()


def _plan_threads(plan: Plan, settings: Settings, cpu: CpuBudget, env: Mapping[str, str]) -> None:
    choice = settings.cpu_threads
    if cpu.problem and choice == "auto":
        plan.warnings.append(f"{cpu.problem}; TensorFlow's default threads are used")
    if choice == "host":
        return
    if isinstance(choice, int):
        threads, why = choice, _given(settings, "CPU_THREADS")
        if choice > cpu.affinity:
            plan.warnings.append(
                f"{why} is more threads per pool than the {cpu.affinity} CPUs this process "
                "may run on"
            )
    elif cpu.threads is not None:
        threads = cpu.threads
        why = f"CPU_THREADS=auto: quota {cpu.quota:g} CPUs from {cpu.quota_source}, rounded up"
        if cpu.threads < (cpu.quota or 0):
            why += f", within {cpu.affinity} schedulable CPUs"
    else:
        return
    for attr, variable, pool in (
        ("intra_op_threads", INTRA_ENV, "intra-op"),
        ("inter_op_threads", INTER_ENV, "inter-op"),
    ):
        if env.get(variable, "").strip():
            plan.decisions.append(f"{pool} threads left to {variable}={env[variable]} (explicit)")
        else:
            setattr(plan, attr, threads)
            plan.decisions.append(f"{pool} threads {threads} ({why})")
