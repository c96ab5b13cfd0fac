"""Carry out JAX's and PyTorch's plans at their import: the only module that touches them.

``import jax``: before JAX's code runs, the plan's environment is set (JAX reads it when
it starts a backend); after, its CPU client's pool is sized. ``import torch``: the
settings are checked before PyTorch's code runs; after it, before CUDA starts, the plan's
environment, thread pools and per-GPU caps are applied. A bad value fails that import,
naming the variable and the framework (``TFBOOT_ON_ERROR=warn``: a warning, defaults).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .. import report
from ..cpu import cpu_budget
from ..errors import ConfigError, Problem
from ..plan import DEVICE_SETTINGS
from ..settings import LOG, ON_ERROR, Settings, disabled, read_control, resolve
from . import NAMES
from .budget import FRAMEWORK_NAMES, FrameworkPlan, cap_over_gpu, cuda_devices
from .jaxplan import plan_jax
from .nvml import read_inventory
from .roles import Role, role
from .torchplan import plan_torch, refusals

# JAX's CUDA plugins: without one JAX sees no GPU, whatever the node has.
JAX_CUDA_PLUGINS = ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")

_lock = threading.RLock()


@dataclass
class FrameworkResult:
    """What one framework got in this process."""

    framework: str
    plan: FrameworkPlan | None = None
    calls: list[str] = field(default_factory=list)
    error: str | None = None
    role: Role | None = None  # where no plan was made (invalid settings)

    def to_dict(self) -> dict[str, Any]:
        plan = self.plan
        role = plan.role if plan is not None else self.role
        return {
            "framework": self.framework,
            "role": "runs the model" if role is None or role.runs_model else role.why,
            "error": self.error,
            "decisions": list(plan.decisions) if plan else [],
            "calls": list(self.calls),
            "warnings": list(plan.warnings) if plan else [],
        }


_results: dict[str, FrameworkResult] = {}
# Settings checked before a framework's code ran, for its configuration right after, if the
# environment is still the same: module -> (environment, settings).
_validated: dict[str, tuple[dict[str, str], Settings]] = {}


def results() -> dict[str, FrameworkResult]:
    """What JAX and PyTorch got in this process, by module name."""
    return dict(_results)


def _settings(module: str, env: Mapping[str, str]) -> Settings | None:
    """The settings this framework reads; None (after a warning) when invalid under warn."""
    try:
        return resolve(env, FRAMEWORK_NAMES)
    except ConfigError as exc:
        return _failed(module, env, exc)


def _failed(module: str, env: Mapping[str, str], exc: ConfigError) -> None:
    """Fail the framework's import, naming it; under ``TFBOOT_ON_ERROR=warn`` warn once.

    A framework that came along with another never fails that import: the framework that
    runs the model reports the problem, and this one's is a debug line.
    """
    framework = NAMES[module]
    error = ConfigError(exc.problems, framework)
    taken = role(module, env)
    try:
        mode = read_control(env, ON_ERROR) if taken.runs_model else "debug"
    except ConfigError:
        mode = "raise"
    if mode == "raise":
        raise error from None
    if module not in _results:
        if mode == "warn" or _level(env) == "debug":
            kind = "warning" if mode == "warn" else "debug"
            report.emit(kind, f"invalid configuration, {framework} keeps its defaults: {error}")
        _results[module] = FrameworkResult(framework, error=str(error), role=taken)
    return None


def before_jax(_module: ModuleType) -> None:
    """Set JAX's environment before its code runs (it reads it when a backend starts)."""
    env = os.environ
    if disabled(env) or "jax" in _results:
        return
    taken = role("jax", env)
    with _lock:
        settings = _settings("jax", env)
        if settings is None:
            return
        devices = any(name in settings.given for name in DEVICE_SETTINGS)
        totals = _jax_gpus(env) if devices else ()
        narrowed = cuda_devices(env, len(totals))[1]
        try:
            plan = plan_jax(settings, totals, cpu_budget(env), env, taken, narrowed)
        except ConfigError as exc:
            _failed("jax", env, exc)
            return
        result = FrameworkResult("JAX", plan, _set_environ(plan))
        _results["jax"] = result


def after_jax(jax: ModuleType) -> None:
    """Size JAX's CPU client pool, then log what JAX got."""
    result = _results.get("jax")
    if result is None or result.plan is None:
        return
    plan = result.plan
    if plan.threads is not None:
        problem = _size_cpu_pool(plan.threads)
        if problem is None:
            result.calls.append(f"JAX's CPU client created with {plan.threads} threads")
        else:
            plan.warnings.append(problem)
            plan.decisions.pop(-1)  # the pool decision, last in the plan, did not hold
    _log(result)


def before_torch(_module: ModuleType) -> None:
    """Check PyTorch's settings before its code runs, and record its role."""
    env = os.environ
    if disabled(env) or "torch" in _results:
        return
    taken = role("torch", env)
    settings = _settings("torch", env)
    if settings is not None:
        plan = FrameworkPlan(NAMES["torch"], taken)
        refusals(plan, settings)
        try:
            plan.check()
        except ConfigError as exc:
            _failed("torch", env, exc)
            return
        _validated["torch"] = (dict(env), settings)  # one resolution per import


def after_torch(torch: ModuleType) -> None:
    """Apply PyTorch's plan after its import, before CUDA starts."""
    env = os.environ
    if disabled(env) or "torch" in _results:
        return
    taken = role("torch", env)
    validated = _validated.pop("torch", None)
    with _lock:
        fresh = validated is not None and validated[0] == env
        settings = validated[1] if validated and fresh else _settings("torch", env)
        if settings is None:
            return
        cuda_build = getattr(getattr(torch, "version", None), "cuda", None) is not None
        devices: list[str] = []
        if cuda_build and any(name in settings.given for name in DEVICE_SETTINGS):
            devices = cuda_devices(env, read_inventory(env).count)[0]
        try:
            plan = plan_torch(settings, devices, cpu_budget(env), env, taken)
            calls = _apply_torch(torch, plan, settings.given.get("MEMORY_LIMIT_MB", ("",))[0])
        except ConfigError as exc:
            _failed("torch", env, exc)
            return
        result = FrameworkResult("PyTorch", plan, calls)
        _results["torch"] = result
        _log(result)


def _jax_gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    """Total bytes of each GPU JAX will list: none without a CUDA plugin or NVML."""
    from importlib.util import find_spec

    try:
        plugin = any(find_spec(name) is not None for name in JAX_CUDA_PLUGINS)
    except (ImportError, ValueError):
        plugin = False
    if not plugin:
        return ()
    inventory = read_inventory(env)
    listed = cuda_devices(env, inventory.count)[0]
    if not inventory.totals:
        return ()
    # CUDA's order need not be NVML's: each GPU is taken as the largest, so the fraction
    # never gives a GPU more than the cap.
    return (max(inventory.totals),) * len(listed)


def _set_environ(plan: FrameworkPlan) -> list[str]:
    calls = []
    for name, value in plan.environ.items():
        os.environ[name] = value
        calls.append(f"os.environ[{name!r}] = {value!r}")
    return calls


def _size_cpu_pool(threads: int) -> str | None:
    """Make JAX's CPU client with ``threads`` threads in its pool; a problem, or None.

    JAX sizes the pool from the CPUs the creating thread may run on. The client is created
    with that thread's affinity narrowed to ``threads`` CPUs; then the thread and every
    thread started meanwhile get their affinity back, so the pool is smaller but not pinned.
    """
    try:
        from jax._src import xla_bridge

        registration = xla_bridge._backend_factories["cpu"]
        factory = registration.factory
        started = bool(xla_bridge._backends)
    except (ImportError, AttributeError, KeyError) as exc:
        return f"CPU_THREADS not applied to JAX: this JAX has no CPU client to size ({exc!r})"
    if started:
        return "CPU_THREADS not applied to JAX: its backends had already started"

    def sized(*args: Any, **kwargs: Any) -> Any:
        allowed = os.sched_getaffinity(0)
        if len(allowed) <= threads:
            return factory(*args, **kwargs)
        before = set(os.listdir("/proc/self/task"))
        os.sched_setaffinity(0, sorted(allowed)[:threads])
        try:
            return factory(*args, **kwargs)
        finally:
            os.sched_setaffinity(0, allowed)
            for task in set(os.listdir("/proc/self/task")) - before:
                with contextlib.suppress(OSError):  # the thread has ended
                    os.sched_setaffinity(int(task), allowed)

    xla_bridge._backend_factories["cpu"] = dataclasses.replace(registration, factory=sized)
    return None


def _apply_torch(torch: ModuleType, plan: FrameworkPlan, given: str) -> list[str]:
    if torch.cuda.is_initialized():
        raise ConfigError(
            Problem(
                "",
                None,
                "PyTorch's CUDA had already started before tfboot applied the configuration",
                "set the variables before the first CUDA call",
            )
        )
    calls = _set_environ(plan)
    try:
        if plan.threads is not None:
            torch.set_num_threads(plan.threads)
            calls.append(f"torch.set_num_threads({plan.threads})")
        if plan.interop_threads is not None:
            torch.set_num_interop_threads(plan.interop_threads)
            calls.append(f"torch.set_num_interop_threads({plan.interop_threads})")
    except RuntimeError as exc:
        raise ConfigError(
            Problem(
                "CPU_THREADS",
                None,
                f"PyTorch refused its thread count ({exc})",
                "set the variables before PyTorch's first parallel work",
            )
        ) from None
    if plan.gpu_caps_mib:
        _cap_at_cuda_start(torch, dict(plan.gpu_caps_mib), given)
        calls.append(
            f"torch.cuda.set_per_process_memory_fraction when CUDA starts: {plan.gpu_caps_mib} MiB"
        )
    return calls


def _cap_at_cuda_start(torch: ModuleType, caps: dict[int, int], given: str) -> None:
    """Queue each GPU's cap, as a fraction of its total memory, for CUDA's start."""

    def cap_memory() -> None:
        for ordinal, cap in caps.items():
            if ordinal >= torch.cuda.device_count():
                continue
            total = torch.cuda.get_device_properties(ordinal).total_memory
            if cap * (1 << 20) > total:
                raise ConfigError(
                    cap_over_gpu(given, cap, total >> 20, f"cuda:{ordinal}"), "PyTorch"
                )
            torch.cuda.set_per_process_memory_fraction(cap * (1 << 20) / total, ordinal)

    torch.cuda._lazy_call(cap_memory)


def _level(env: Mapping[str, str]) -> str:
    """``TFBOOT_LOG``; an invalid value (reported with the settings) counts as info."""
    try:
        return str(read_control(env, LOG))
    except ConfigError:
        return "info"


def _log(result: FrameworkResult) -> None:
    plan = result.plan
    if plan is None:
        return
    level = _level(os.environ)
    if level == "quiet" or (level == "info" and not plan.role.runs_model):
        return  # a framework that came along is logged under debug only
    report.log_framework(
        plan.framework + plan.role.label,
        plan.decisions,
        plan.warnings,
        result.calls if level == "debug" else [],
    )
