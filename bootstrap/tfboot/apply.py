"""Apply the plan through ``tf.config``: the only module that touches TensorFlow.

It only configures. It never runs an op or lists logical devices, so TensorFlow's runtime
starts when user code first needs it, and user code may still call ``tf.config`` itself.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import report
from .cpu import cpu_budget
from .errors import ConfigError, Problem
from .plan import Plan, make_plan, needs_devices
from .report import Result
from .settings import DISABLE, ON_ERROR, Settings, disabled, read_control, resolve

if TYPE_CHECKING:
    from .cluster.plan import ClusterPlan

_lock = threading.RLock()
_result: Result | None = None
# The settings validated before TensorFlow's code ran, for the configuration right after it:
# one resolution per import, reused only if the environment is still the same.
_validated: tuple[dict[str, str], Settings] | None = None


def last_result() -> Result | None:
    """The result of the configuration applied in this process, if any."""
    return _result


def _cluster(settings: Settings, env: Mapping[str, str], **devices: Any) -> ClusterPlan | None:
    if settings.cluster is None:
        return None
    from .cluster.plan import plan_cluster

    return plan_cluster(settings.distributed, settings.cluster, env, **devices)


def validate(env: Mapping[str, str] | None = None) -> None:
    """Fail fast, before TensorFlow's code runs, when the settings are invalid (raise mode)."""
    global _validated
    env = os.environ if env is None else env
    if disabled(env):
        return
    try:
        settings = resolve(env)
        _cluster(settings, env)
    except ConfigError:
        if read_control(env, ON_ERROR) == "raise":
            raise
        return  # reported by apply() as a warning
    _validated = (dict(env), settings)


def _settings(env: Mapping[str, str]) -> Settings:
    """The settings ``validate`` resolved for this environment, else resolved now."""
    global _validated
    validated, _validated = _validated, None
    if validated is not None and validated[0] == env:
        return validated[1]
    return resolve(env)


def apply(tf: ModuleType | None = None, env: Mapping[str, str] | None = None) -> Result:
    """Configure TensorFlow from the environment once per process; return what was done.

    Raises ``ConfigError`` on invalid configuration unless ``TFBOOT_ON_ERROR=warn``.
    """
    global _result
    env = os.environ if env is None else env
    with _lock:
        if _result is None and disabled(env):
            _result = Result(disabled=True, warnings=[f"{DISABLE} is on: nothing applied"])
        if _result is not None:
            return _result
        if tf is None:
            import tensorflow as tf

            if _result is not None:  # the import hook configured it while importing
                return _result
        try:
            result = _configure(tf, env)
        except ConfigError as exc:
            if read_control(env, ON_ERROR) == "raise":
                raise
            result = Result(error=str(exc))
            report.emit("warning", f"invalid configuration, TensorFlow keeps its defaults: {exc}")
            _result = result
            return result
        report.log_result(result, result.settings.control.log if result.settings else "info")
        _result = result
        return result


def _configure(tf: ModuleType, env: Mapping[str, str]) -> Result:
    settings = _settings(env)
    # Listing devices initialises the GPU driver: only when a setting depends on them.
    gpus = tf.config.list_physical_devices("GPU") if needs_devices(settings) else []
    plan = make_plan(settings, len(gpus), cpu_budget(env), env)
    cluster = _cluster(
        settings, env, replicas=plan.local_replicas(len(gpus)), cpu_split=plan.cpu_logical
    )
    if cluster is not None:
        plan.environ.update(cluster.environ)
    calls = _execute(tf, plan, gpus)
    warnings = list(plan.warnings) + (cluster.warnings if cluster else [])
    if cluster is not None and cluster.peers:
        from .cluster.watcher import watch

        timeout = cluster.settings.startup_timeout
        quiet = settings.control.log == "quiet"
        if watch(cluster.peers, timeout, quiet=quiet) is not None:
            calls.append(f"peer watcher started for {len(cluster.peers)} peer(s)")
    return Result(settings=settings, plan=plan, calls=calls, warnings=warnings, cluster=cluster)


def _execute(tf: ModuleType, plan: Plan, gpus: list[Any]) -> list[str]:
    """Run the plan in TensorFlow's required order; return a description of each call."""
    calls: list[str] = []
    for name, value in plan.environ.items():
        os.environ[name] = value
        calls.append(f"os.environ[{name!r}] = {value!r}")
    config = tf.config
    steps: list[tuple[str, Any, tuple[Any, ...]]] = []
    visible = range(len(gpus)) if plan.visible_gpus is None else plan.visible_gpus
    if plan.visible_gpus is not None:
        chosen = [gpus[i] for i in plan.visible_gpus]
        steps.append(("set_visible_devices", config.set_visible_devices, (chosen, "GPU")))
    if plan.memory_growth is not None:
        for i in visible:
            steps.append(
                (
                    "set_memory_growth",
                    config.experimental.set_memory_growth,
                    (gpus[i], plan.memory_growth),
                )
            )
    for i, sizes in plan.gpu_logical_mb.items():
        logical = [config.LogicalDeviceConfiguration(memory_limit=mb) for mb in sizes]
        steps.append(
            (
                "set_logical_device_configuration",
                config.set_logical_device_configuration,
                (gpus[i], logical),
            )
        )
    if plan.cpu_logical:
        cpu = config.list_physical_devices("CPU")[0]
        logical = [config.LogicalDeviceConfiguration() for _ in range(plan.cpu_logical)]
        steps.append(
            (
                "set_logical_device_configuration",
                config.set_logical_device_configuration,
                (cpu, logical),
            )
        )
    threading_ = config.threading
    for value, name, setter in (
        (
            plan.intra_op_threads,
            "set_intra_op_parallelism_threads",
            threading_.set_intra_op_parallelism_threads,
        ),
        (
            plan.inter_op_threads,
            "set_inter_op_parallelism_threads",
            threading_.set_inter_op_parallelism_threads,
        ),
        (plan.soft_placement, "set_soft_device_placement", config.set_soft_device_placement),
        (
            plan.log_device_placement,
            "set_log_device_placement",
            tf.debugging.set_log_device_placement,
        ),
        (plan.xla_jit, "optimizer.set_jit", config.optimizer.set_jit),
    ):
        if value is not None:
            steps.append((name, setter, (value,)))
    for name, call, args in steps:
        described = f"tf.config.{name}({', '.join(_describe(a) for a in args)})"
        try:
            call(*args)
        except RuntimeError as exc:
            raise ConfigError(
                Problem(
                    "",
                    None,
                    f"TensorFlow's runtime was already initialised before tfboot applied the "
                    f"configuration, so {described} was refused ({exc}); applied before it: "
                    f"{calls or 'nothing'}",
                    "set the variables before the first TensorFlow op (tfboot applies them at "
                    "`import tensorflow`), or restart the process",
                )
            ) from None
        calls.append(described)
    return calls


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    limit = getattr(value, "memory_limit", "missing")
    if limit != "missing":
        return f"LogicalDeviceConfiguration(memory_limit={limit})"
    return repr(value)


def apply_keras(keras: ModuleType, env: Mapping[str, str] | None = None) -> str | None:
    """Set Keras's global dtype policy from ``MIXED_PRECISION``; return the policy set."""
    env = os.environ if env is None else env
    if disabled(env):
        return None
    try:
        settings = resolve(env)
    except ConfigError as exc:
        if _result is not None or "tensorflow" in sys.modules:
            return None  # the TensorFlow hook reports it (TF's import may load Keras first)
        if read_control(env, ON_ERROR) == "raise":
            raise
        report.emit("warning", f"invalid configuration, Keras keeps its defaults: {exc}")
        return None
    policy = settings.mixed_precision
    if policy is not None:
        keras.mixed_precision.set_global_policy(policy)
        if settings.control.log == "debug":
            report.emit("debug", f"keras.mixed_precision.set_global_policy({policy!r})")
    return policy
