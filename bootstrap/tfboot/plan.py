"""Turn ``Settings`` plus the devices TensorFlow lists into the exact ``tf.config`` calls.

Pure: no TensorFlow import. The plan is the program: ``Plan.calls`` lists the calls in the
order TensorFlow requires (visible devices, memory growth, logical devices, threads,
placement and JIT flags), each with its reason, and ``Plan.keras_calls`` the Keras ones;
``apply`` only carries them out. Every decision is recorded with its reason, for the log
line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cpu import CpuBudget
from .deviceplugin import mig_instances
from .errors import ConfigError, Problem
from .hostmem import PINNED_ENV, PINNED_SHARE, RAM_SHARE, MemoryBudget
from .settings import Settings
from .values import nonblank
from .xla import Toolchain

GPU_SETTINGS = ("VISIBLE_GPU", "MEMORY_LIMIT_MB", "MEMORY_GROWTH")
# Settings that need TensorFlow's device list; without them tfboot never lists devices.
DEVICE_SETTINGS = (*GPU_SETTINGS, "VIRTUAL_SPLIT", "REQUIRE_GPU")
ON_THIS_HOST = "cannot be applied on this host"
INTRA_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_ENV = "TF_NUM_INTEROP_THREADS"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
TF_INITIAL_PARALLELISM = 16  # tf.data's initial parallelism per autotuned transformation


@dataclass(frozen=True)
class Device:
    """A physical device by its position in ``tf.config.list_physical_devices(kind)``."""

    kind: str
    index: int


@dataclass(frozen=True)
class Logical:
    """``tf.config.LogicalDeviceConfiguration``, with a ``memory_limit`` in MiB or none."""

    memory_limit: int | None = None


@dataclass(frozen=True)
class Call:
    """One call of the plan: ``module.target(*args)``, named ``tf.config.<name>`` in logs."""

    target: str  # an attribute path under the module, such as "config.set_visible_devices"
    args: tuple[Any, ...]  # plain values, Device, Logical, or lists of them
    reason: str
    name: str  # how the call is named in the log and in doctor's "calls"


@dataclass(frozen=True)
class DataDefaults:
    """tf.data autotune options every pipeline gets; a pipeline's own options win.

    None where tfboot leaves TensorFlow's default.
    """

    ram_budget_mib: int | None = None
    cpu_budget: int | None = None
    initial_parallelism: int | None = None

    def describe(self) -> str:
        parts = [
            f"{label} {value}{unit}"
            for label, value, unit in (
                ("RAM budget", self.ram_budget_mib, " MiB"),
                ("CPU budget", self.cpu_budget, ""),
                ("initial parallelism", self.initial_parallelism, ""),
            )
            if value is not None
        ]
        return ", ".join(parts)


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
    gpu_count: int = 0  # GPUs TensorFlow listed
    data: DataDefaults | None = None  # tf.data defaults, installed after the calls
    host_memory_mib: int | None = None  # the host-memory limit the budgets come from
    # field -> the decision behind it, the reason of its calls
    why: dict[str, str] = field(default_factory=dict)

    def decide(self, attr: str, text: str) -> None:
        """Record a decision, and that it is the reason for ``attr``'s calls."""
        self.decisions.append(text)
        self.why[attr] = text

    @property
    def calls(self) -> list[Call]:
        """The ``tf.config`` calls, in the order TensorFlow requires."""
        why = self.why
        calls: list[Call] = []
        if self.visible_gpus is not None:
            chosen = [Device("GPU", i) for i in self.visible_gpus]
            calls.append(
                Call(
                    "config.set_visible_devices",
                    (chosen, "GPU"),
                    why["visible_gpus"],
                    "set_visible_devices",
                )
            )
        visible = self.visible(self.gpu_count)
        if self.memory_growth is not None:
            calls += [
                Call(
                    "config.experimental.set_memory_growth",
                    (Device("GPU", i), self.memory_growth),
                    why["memory_growth"],
                    "set_memory_growth",
                )
                for i in visible
            ]
        logical = [(Device("GPU", i), [Logical(mb) for mb in sizes])
                   for i, sizes in self.gpu_logical_mb.items()]  # fmt: skip
        if self.cpu_logical:
            logical.append((Device("CPU", 0), [Logical()] * self.cpu_logical))
        calls += [
            Call(
                "config.set_logical_device_configuration",
                (device, configs),
                why["cpu_logical" if device.kind == "CPU" else "gpu_logical_mb"],
                "set_logical_device_configuration",
            )
            for device, configs in logical
        ]
        for attr, target, name in (
            ("intra_op_threads", "config.threading.set_intra_op_parallelism_threads",
             "set_intra_op_parallelism_threads"),
            ("inter_op_threads", "config.threading.set_inter_op_parallelism_threads",
             "set_inter_op_parallelism_threads"),
            ("soft_placement", "config.set_soft_device_placement", "set_soft_device_placement"),
            ("log_device_placement", "debugging.set_log_device_placement",
             "set_log_device_placement"),
            ("xla_jit", "config.optimizer.set_jit", "optimizer.set_jit"),
        ):  # fmt: skip
            value = getattr(self, attr)
            if value is not None:
                calls.append(Call(target, (value,), why[attr], name))
        return calls

    @property
    def keras_calls(self) -> list[Call]:
        """The Keras calls, made when Keras is imported (tfboot never imports it)."""
        if self.mixed_precision is None:
            return []
        return [
            Call(
                "mixed_precision.set_global_policy",
                (self.mixed_precision,),
                self.why["mixed_precision"],
                "set_global_policy",
            )
        ]

    @property
    def empty(self) -> bool:
        """True when nothing is changed in TensorFlow."""
        return not self.decisions

    def visible(self, gpu_count: int) -> Sequence[int]:
        """The physical GPUs left visible, by index, of ``gpu_count`` listed."""
        return range(gpu_count) if self.visible_gpus is None else self.visible_gpus

    def local_replicas(self, gpu_count: int) -> int:
        """Visible logical GPUs after this plan (visible GPUs x split), else 1 (CPU:0)."""
        return sum(len(self.gpu_logical_mb.get(i, ())) or 1 for i in self.visible(gpu_count)) or 1


def given_text(settings: Settings, name: str) -> str:
    """``NAME=value (source)``: how a decision names the variable behind it."""
    value, source = settings.given[name]
    return f"{name}={value} ({source})"


def needs_devices(settings: Settings) -> bool:
    """True when the plan depends on the GPU list (a GPU setting, a split, a cluster)."""
    given = any(name in settings.given for name in DEVICE_SETTINGS)
    return given or settings.distributed != "off"


def make_plan(
    settings: Settings,
    gpu_count: int,
    cpu: CpuBudget,
    env: Mapping[str, str],
    memory: MemoryBudget | None = None,
    toolchain: Toolchain | None = None,
    loader: str | None = None,
) -> Plan:
    """The plan for this host; device-dependent errors raise ``ConfigError``.

    ``memory`` is the container's memory limit (None: not read, as for ``host``);
    ``toolchain`` what XLA needs on a CUDA build under ``XLA_JIT`` (None: nothing);
    ``loader`` why TensorFlow is another framework's data loader (it then sees no GPU).
    """
    plan = Plan(
        soft_placement=settings.soft_placement,
        log_device_placement=settings.log_device_placement,
        xla_jit=settings.xla_jit,
        mixed_precision=settings.mixed_precision,
        gpu_count=gpu_count,
    )
    for name, attr in (
        ("SOFT_PLACEMENT", "soft_placement"),
        ("LOG_DEVICE_PLACEMENT", "log_device_placement"),
        ("XLA_JIT", "xla_jit"),
        ("MIXED_PRECISION", "mixed_precision"),
    ):
        if getattr(plan, attr) is not None:
            plan.decide(attr, given_text(settings, name))
    visible = settings.visible_gpu
    if loader is not None:
        plan.visible_gpus = ()
        plan.decide("visible_gpus", f"no GPU: {loader} (LOADER_GPU=true gives it the GPUs)")
    elif gpu_count and visible != ():
        _check_mig(plan, settings, env)
        _plan_gpus(plan, settings, gpu_count, env)
    else:
        _check_mig(plan, settings, env)
        _plan_no_gpu(plan, settings, gpu_count)
    _plan_threads(plan, settings, cpu, env)
    _plan_host_memory(plan, settings, cpu, env, memory or MemoryBudget(None, ""))
    if toolchain is not None:
        _plan_toolchain(plan, toolchain)
    return plan


def _plan_toolchain(plan: Plan, toolchain: Toolchain) -> None:
    if toolchain.xla_flags is not None:
        plan.environ["XLA_FLAGS"] = toolchain.xla_flags
    if toolchain.decision:
        plan.decide("xla_toolchain", toolchain.decision)
    if toolchain.warning:
        plan.warnings.append(toolchain.warning)


def _check_mig(plan: Plan, settings: Settings, env: Mapping[str, str]) -> None:
    """One process can use one MIG slice: more than one visible is a warning (an error under
    ``REQUIRE_GPU``), as the others would stay idle."""
    slices = mig_instances(env)
    if len(slices) < 2:
        return
    shown = ", ".join(slices[:2]) + (f" and {len(slices) - 2} more" if len(slices) > 2 else "")
    text = (
        f"{len(slices)} MIG instances are visible ({shown}), but one process uses one MIG "
        "slice: CUDA gives it the first and the others stay idle"
    )
    how = (
        "run one process per slice, each with CUDA_VISIBLE_DEVICES set to its own MIG UUID "
        "(under Kubernetes, one Pod or container per nvidia.com/mig-* slice)"
    )
    if settings.require_gpu:
        raise ConfigError(
            Problem("REQUIRE_GPU", settings.given["REQUIRE_GPU"][0], text, how, ON_THIS_HOST)
        )
    plan.warnings.append(f"{text}; {how}")


def keras_plan(settings: Settings) -> Plan:
    """The Keras part of the plan alone, for Keras imported before TensorFlow is configured."""
    plan = Plan(mixed_precision=settings.mixed_precision)
    if settings.mixed_precision is not None:
        plan.decide("mixed_precision", given_text(settings, "MIXED_PRECISION"))
    return plan


def gpu_required(settings: Settings, hidden: bool, none_found: str) -> ConfigError:
    """``REQUIRE_GPU`` with no GPU: hidden by ``VISIBLE_GPU=none``, or ``none_found``."""
    why = "VISIBLE_GPU=none hides every GPU" if hidden else none_found
    return ConfigError(
        Problem(
            "REQUIRE_GPU",
            settings.given["REQUIRE_GPU"][0],
            f"a GPU is required, but {why}",
            verdict=ON_THIS_HOST,
        )
    )


def _plan_no_gpu(plan: Plan, settings: Settings, gpu_count: int) -> None:
    hidden = gpu_count > 0  # VISIBLE_GPU=none on a GPU host
    if hidden:
        plan.visible_gpus = ()
        plan.decide("visible_gpus", f"no GPU visible: {given_text(settings, 'VISIBLE_GPU')}")
    if settings.require_gpu:
        raise gpu_required(settings, hidden, "TensorFlow lists no GPU")
    ignored = [given_text(settings, n) for n in GPU_SETTINGS if n in settings.given and not hidden]
    if isinstance(settings.virtual_split, tuple) and not hidden:
        ignored.append(given_text(settings, "VIRTUAL_SPLIT") + " sizes")
    if not hidden and (ignored or "REQUIRE_GPU" in settings.given):
        detail = "; not applied: " + ", ".join(ignored) if ignored else ""
        plan.warnings.append(f"no GPU found, running on CPU{detail}")
    split = settings.virtual_split
    count = len(split) if isinstance(split, tuple) else split
    if count > 1:
        plan.cpu_logical = count
        why = given_text(settings, "VIRTUAL_SPLIT")
        plan.decide("cpu_logical", f"CPU:0 split into {count} logical CPUs ({why}, no GPU)")


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
        plan.decide(
            "visible_gpus", f"GPUs {list(visible)} visible ({given_text(settings, 'VISIBLE_GPU')})"
        )
    split = settings.virtual_split
    for index in visible if visible is not None else range(gpu_count):
        cap = settings.caps_mb(index)
        sizes = _logical_sizes(settings, index, cap, split)
        if sizes:
            plan.gpu_logical_mb[index] = sizes
    if plan.gpu_logical_mb:
        described = ", ".join(f"GPU:{i} -> {list(s)} MiB" for i, s in plan.gpu_logical_mb.items())
        origin = [
            given_text(settings, n)
            for n in ("MEMORY_LIMIT_MB", "VIRTUAL_SPLIT")
            if n in settings.given
        ]
        plan.decide("gpu_logical_mb", f"logical GPUs {described} ({', '.join(origin)})")
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
        plan.decisions.append(f"memory {how} ({given_text(settings, 'MEMORY_GROWTH')})")
    else:
        plan.memory_growth = growth
        plan.decide(
            "memory_growth",
            f"memory growth {'on' if growth else 'off'} ({given_text(settings, 'MEMORY_GROWTH')})",
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


@dataclass(frozen=True)
class Threads:
    """The pool size ``CPU_THREADS`` gives, and why; ``count`` None: the framework's default."""

    count: int | None
    why: str = ""
    warnings: tuple[str, ...] = ()


def thread_budget(settings: Settings, cpu: CpuBudget, framework: str = "TensorFlow") -> Threads:
    """Threads per pool from ``CPU_THREADS``: a count, the quota rounded up, or none."""
    choice = settings.cpu_threads
    if cpu.problem and choice == "auto":
        return Threads(None, warnings=(f"{cpu.problem}; {framework}'s default threads are used",))
    if isinstance(choice, int):
        why = given_text(settings, "CPU_THREADS")
        over = (
            (f"{why} is more threads per pool than the {cpu.affinity} CPUs this process may "
             "run on",)
            if choice > cpu.affinity
            else ()
        )  # fmt: skip
        return Threads(choice, why, over)
    if choice == "host" or cpu.threads is None:
        return Threads(None)
    why = f"CPU_THREADS=auto: quota {cpu.quota:g} CPUs from {cpu.quota_source}, rounded up"
    if cpu.threads < (cpu.quota or 0):
        why += f", within {cpu.affinity} schedulable CPUs"
    return Threads(cpu.threads, why)


def _plan_threads(plan: Plan, settings: Settings, cpu: CpuBudget, env: Mapping[str, str]) -> None:
    budget = thread_budget(settings, cpu)
    plan.warnings += budget.warnings
    if budget.count is None:
        return
    for attr, variable, pool in (
        ("intra_op_threads", INTRA_ENV, "intra-op"),
        ("inter_op_threads", INTER_ENV, "inter-op"),
    ):
        if env.get(variable, "").strip():
            plan.decisions.append(f"{pool} threads left to {variable}={env[variable]} (explicit)")
        else:
            setattr(plan, attr, budget.count)
            plan.decide(attr, f"{pool} threads {budget.count} ({budget.why})")


@dataclass(frozen=True)
class HostMemory:
    """What ``HOST_MEMORY_LIMIT_MB`` and the CPU budget give: the limit and tf.data's defaults."""

    limit_mib: int | None
    origin: str  # where the limit came from, for the log line
    data: DataDefaults | None  # None: TensorFlow's defaults
    reasons: tuple[str, ...] = ()


def host_memory(settings: Settings, cpu: CpuBudget, memory: MemoryBudget) -> HostMemory:
    """The limit in force and the tf.data defaults derived from it and the CPU budget."""
    choice = settings.host_memory
    if choice == "host":
        return HostMemory(None, given_text(settings, "HOST_MEMORY_LIMIT_MB"), None)
    if isinstance(choice, int):
        limit, origin = choice, given_text(settings, "HOST_MEMORY_LIMIT_MB")
    else:
        limit = memory.limit_mib
        origin = f"HOST_MEMORY_LIMIT_MB=auto: {limit} MiB from {memory.source}"
    cpus = _data_cpus(settings, cpu)
    ram = max(1, limit // RAM_SHARE) if limit is not None else None
    initial = cpus if cpus is not None and cpus < TF_INITIAL_PARALLELISM else None
    if ram is None and cpus is None:
        return HostMemory(None, "no memory limit or CPU quota found", None)
    reasons = []
    if ram is not None:
        reasons.append(f"RAM a quarter of {origin}")
    if cpus is not None:
        reasons.append(
            f"CPUs {given_text(settings, 'CPU_THREADS')}"
            if isinstance(settings.cpu_threads, int)
            else f"CPUs the quota's, {cpu.quota:g} from {cpu.quota_source}, rounded up"
        )
    return HostMemory(limit, origin, DataDefaults(ram, cpus, initial), tuple(reasons))


def _plan_host_memory(
    plan: Plan, settings: Settings, cpu: CpuBudget, env: Mapping[str, str], memory: MemoryBudget
) -> None:
    """tf.data's autotune budgets and pinned host memory from the limit and the CPU quota."""
    if memory.problem and settings.host_memory == "auto":
        plan.warnings.append(f"{memory.problem}; TensorFlow's host-memory defaults are used")
    found = host_memory(settings, cpu, memory)
    if found.data is None:
        return
    plan.data, plan.host_memory_mib = found.data, found.limit_mib
    plan.decide(
        "data",
        f"tf.data defaults {found.data.describe()} ({'; '.join(found.reasons)}; a pipeline's "
        "own options win)",
    )
    limit = found.limit_mib
    if limit is None:
        return
    # Read only where TensorFlow makes a GPU's pinned host allocator; set without listing
    # devices, which would start the GPU driver at import.
    if nonblank(env, PINNED_ENV) is not None:
        plan.decisions.append(
            f"pinned host memory left to {PINNED_ENV}={env[PINNED_ENV]} (explicit)"
        )
        return
    plan.environ[PINNED_ENV] = str(max(1, limit // PINNED_SHARE))
    plan.decide(
        "pinned",
        f"pinned host memory up to {plan.environ[PINNED_ENV]} MiB via {PINNED_ENV} "
        f"(a quarter of {found.origin})",
    )


def _data_cpus(settings: Settings, cpu: CpuBudget) -> int | None:
    """tf.data's CPU budget: the threads CPU_THREADS gives (a count, or the quota's CPUs)."""
    if isinstance(settings.cpu_threads, int):
        return settings.cpu_threads
    return cpu.threads if settings.cpu_threads == "auto" else None
