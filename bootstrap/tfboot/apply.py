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
from .frameworks.roles import tensorflow_is_loader
from .hostmem import memory_budget
from .nccl import readiness, why_needed
from .plan import Call, Device, Logical, Plan, keras_plan, make_plan, needs_devices
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
    loader = None if settings.loader_gpu else tensorflow_is_loader(env)
    # Listing devices initialises the GPU driver: only when a setting depends on them.
    listed = loader is None and needs_devices(settings)
    gpus = tf.config.list_physical_devices("GPU") if listed else []
    memory = memory_budget(env) if settings.host_memory == "auto" else None
    toolchain = None
    if settings.xla_jit and tf.test.is_built_with_cuda():
        from .xla import pip_toolchain, plan_toolchain

        toolchain = plan_toolchain(os.environ, pip_toolchain())
    plan = make_plan(settings, len(gpus), cpu_budget(env), env, memory, toolchain, loader)
    cluster = _cluster(
        settings, env, replicas=plan.local_replicas(len(gpus)), cpu_split=plan.cpu_logical
    )
    if cluster is not None:
        plan.environ.update(cluster.environ)
    calls = _execute(tf, plan, gpus)
    warnings = list(plan.warnings) + (cluster.warnings if cluster else [])
    if plan.data is not None:
        from .tfdata import HOOK, install

        missing = install(tf, plan.data)
        if missing is None:
            calls.append(f"tf.data.Dataset.{HOOK} gives every pipeline: {plan.data.describe()}")
        else:  # the warning says so; the log line claims nothing that was not applied
            warnings.append(missing)
            plan.decisions.remove(plan.why["data"])
    visible = len(plan.visible(len(gpus)))
    config = cluster.identity.config if cluster is not None else None
    warnings += readiness(why_needed(visible, config.size if config is not None else 0)).warnings
    if cluster is not None and cluster.peers:
        from .cluster.watcher import TERM_GRACE_S, watch

        timeout = cluster.settings.startup_timeout
        quiet = settings.control.log == "quiet"
        grace = cluster.settings.term_grace or TERM_GRACE_S
        names = cluster.identity.config.names if cluster.identity.config else {}
        if watch(cluster.peers, timeout, quiet=quiet, names=names, grace=grace) is not None:
            calls.append(f"peer watcher started for {len(cluster.peers)} peer(s)")
    return Result(settings=settings, plan=plan, calls=calls, warnings=warnings, cluster=cluster)


def _execute(tf: ModuleType, plan: Plan, gpus: list[Any]) -> list[str]:
    """Carry out the plan: its environment, then its calls in order; describe each call."""
    calls: list[str] = []
    for name, value in plan.environ.items():
        os.environ[name] = value
        calls.append(f"os.environ[{name!r}] = {value!r}")
    for call in plan.calls:
        args = tuple(_materialize(tf, arg, gpus) for arg in call.args)
        described = f"tf.config.{call.name}({', '.join(_describe(a) for a in args)})"
        try:
            _target(tf, call)(*args)
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


def _target(module: ModuleType, call: Call) -> Any:
    target: Any = module
    for name in call.target.split("."):
        target = getattr(target, name)
    return target


def _materialize(tf: ModuleType, arg: Any, gpus: list[Any]) -> Any:
    """A plan's argument as TensorFlow's object: a physical device, a logical configuration."""
    if isinstance(arg, list):
        return [_materialize(tf, a, gpus) for a in arg]
    if isinstance(arg, Device):
        return (
            gpus[arg.index]
            if arg.kind == "GPU"
            else tf.config.list_physical_devices(arg.kind)[arg.index]
        )
    if isinstance(arg, Logical):
        if arg.memory_limit is None:
            return tf.config.LogicalDeviceConfiguration()
        return tf.config.LogicalDeviceConfiguration(memory_limit=arg.memory_limit)
    return arg


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
    configured = _result.plan if _result is not None else None
    try:
        settings = (
            _result.settings if _result and _result.settings else resolve(env, ("MIXED_PRECISION",))
        )
    except ConfigError as exc:
        if _result is not None or "tensorflow" in sys.modules:
            return None  # the TensorFlow hook reports it (TF's import may load Keras first)
        error = ConfigError(exc.problems, "Keras")
        if read_control(env, ON_ERROR) == "raise":
            raise error from None
        report.emit("warning", f"invalid configuration, Keras keeps its defaults: {error}")
        return None
    policy = None
    for call in (configured or keras_plan(settings)).keras_calls:
        _target(keras, call)(*call.args)
        policy = call.args[0]
        if settings.control.log == "debug":
            report.emit("debug", f"keras.{call.target}({', '.join(map(repr, call.args))})")
    return policy
