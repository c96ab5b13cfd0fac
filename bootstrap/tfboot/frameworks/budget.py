"""What JAX's and PyTorch's plans share: the plan's shape, refusals, GPUs seen, threads.

Pure: no framework import. A plan is environment variables to set before the framework
starts its devices, thread counts and per-GPU caps to apply after its import, and the
decisions and warnings for the log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..cpu import CpuBudget
from ..errors import ConfigError, Problem
from ..plan import GPU_SETTINGS, ON_THIS_HOST, Threads, given_text, gpu_required, thread_budget
from ..settings import Settings
from ..values import nonblank, shorten
from .roles import Role

# What JAX and PyTorch read: the device budget, and what they must refuse by name.
# MIXED_PRECISION is Keras's, HOST_MEMORY_LIMIT_MB tf.data's, LOADER_GPU TensorFlow's.
FRAMEWORK_NAMES = frozenset(
    {
        "VISIBLE_GPU",
        "MEMORY_LIMIT_MB",
        "VIRTUAL_SPLIT",
        "MEMORY_GROWTH",
        "CPU_THREADS",
        "REQUIRE_GPU",
        "SOFT_PLACEMENT",
        "LOG_DEVICE_PLACEMENT",
        "XLA_JIT",
        "DISTRIBUTED",
    }
)
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
# What CUDA_VISIBLE_DEVICES was before tfboot narrowed it for PyTorch ("" when unset): a
# child process, or a second framework, then counts VISIBLE_GPU from the same list.
CUDA_VISIBLE_BASE = "TFBOOT_CUDA_VISIBLE_BASE"
UNSET = "-"


@dataclass
class FrameworkPlan:
    """What one framework gets, and why."""

    framework: str  # "JAX" or "PyTorch"
    role: Role
    environ: dict[str, str] = field(default_factory=dict)
    threads: int | None = None  # the intra-op pool (JAX: its CPU client's pool)
    interop_threads: int | None = None
    gpu_caps_mib: dict[int, int] = field(default_factory=dict)  # device ordinal -> cap
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def refuse(self, settings: Settings, name: str, why: str) -> None:
        """``name`` is set and this framework cannot apply it: an error when it runs the
        model, a note when it only came along."""
        if self.role.runs_model:
            self.problems.append(
                Problem(
                    name,
                    settings.given[name][0],
                    why,
                    f"unset {name} for this process",
                    "cannot be applied",
                )
            )
        else:
            self.decisions.append(f"{given_text(settings, name)} not applied: {why}")

    def setenv(
        self, env: Mapping[str, str], name: str, value: str, settings: Settings, variable: str
    ) -> bool:
        """Set ``name`` for the framework unless the process already set it otherwise."""
        if not self.agrees(env, name, value, settings, variable):
            return False
        self.environ[name] = value
        return True

    def agrees(
        self, env: Mapping[str, str], name: str, value: str, settings: Settings, variable: str
    ) -> bool:
        """False, with the problem recorded, when the process set ``name`` otherwise."""
        current = nonblank(env, name)
        if current is not None and current != value:
            self.problems.append(
                Problem(
                    variable,
                    settings.given[variable][0],
                    f"it contradicts {name}={shorten(current)}, which {self.framework} reads",
                    "set only one of them",
                )
            )
            return False
        return True

    def check(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def check_visible(settings: Settings, framework: str, gpu_count: int) -> tuple[int, ...] | None:
    """``VISIBLE_GPU``'s indexes, each checked against the ``gpu_count`` CUDA will list."""
    visible = settings.visible_gpu
    missing = [i for i in visible or () if i >= gpu_count]
    if missing:
        raise ConfigError(
            Problem(
                "VISIBLE_GPU",
                settings.given["VISIBLE_GPU"][0],
                f"index {missing[0]} does not exist: {framework} will list {gpu_count} GPU(s), "
                f"indexes 0 to {gpu_count - 1}",
                "indexes count after CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES",
                verdict=ON_THIS_HOST,
            )
        )
    return visible


def cap_over_gpu(given: str, cap: int, total_mib: int, gpu: str) -> Problem:
    """``MEMORY_LIMIT_MB`` above what ``gpu`` has: never clamped."""
    return Problem(
        "MEMORY_LIMIT_MB",
        given,
        f"the cap of {cap} MiB is more than the {total_mib} MiB {gpu} has",
        verdict=ON_THIS_HOST,
    )


def no_gpu(plan: FrameworkPlan, settings: Settings, gpu_count: int) -> None:
    """No GPU for this framework: ``REQUIRE_GPU`` fails; GPU settings are named as unused."""
    hidden = gpu_count > 0
    if settings.require_gpu and plan.role.runs_model:
        raise gpu_required(settings, hidden, f"{plan.framework} finds no GPU")
    ignored = [given_text(settings, n) for n in GPU_SETTINGS if n in settings.given]
    if not hidden and ignored and plan.role.runs_model:
        plan.warnings.append(f"no GPU found, running on CPU; not applied: {', '.join(ignored)}")


def cuda_devices(env: Mapping[str, str], gpu_count: int) -> tuple[list[str], bool]:
    """The devices CUDA lists before tfboot narrows them, and whether tfboot already did.

    From ``CUDA_VISIBLE_DEVICES`` (as set before tfboot, see ``CUDA_VISIBLE_BASE``), else
    NVML's ``gpu_count`` indexes.
    """
    current = env.get(CUDA_VISIBLE)
    base = env.get(CUDA_VISIBLE_BASE)
    narrowed = base is not None and current is not None
    source = (base if base != UNSET else None) if narrowed else current
    if source is None:
        return [str(i) for i in range(gpu_count)], narrowed
    entries = [e.strip() for e in source.split(",")]
    listed: list[str] = []
    for entry in entries:  # CUDA stops at the first entry it cannot use
        if not entry or entry.startswith("-") or (entry.isdigit() and int(entry) >= gpu_count):
            break
        listed.append(entry)
    return listed, narrowed


def plan_threads(plan: FrameworkPlan, settings: Settings, cpu: CpuBudget) -> Threads:
    """The thread count for the framework's pools (None: its default); warnings recorded."""
    budget = thread_budget(settings, cpu, plan.framework)
    plan.warnings += budget.warnings
    return budget
