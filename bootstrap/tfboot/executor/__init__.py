"""The executor: the only code that writes ``os.environ`` or calls into a framework.

For each hook point of an adapter (``run``): the settings are resolved (or taken from the
validate-then-reuse cache, when the environment is unchanged since the adapter's earlier
hook point), the framework's role decided, the budget made, the framework's facts read
through ``Reader``, the adapter's pure plan made, then carried out: its environment, then
its calls and patches, in order. A bad value or a refusal goes through ``fail``, the one
raise-or-warn; the last hook point logs the one ``Result``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..adapters import Call, Item, New, Patch, Peak, Plan
from ..budget import Budget, make_budget
from ..budget.caps import settings_for
from ..budget.roles import RUNS_MODEL, Role
from ..errors import ConfigError
from ..node.kerasconfig import keras_backend
from ..node.versions import installed, shown
from ..settings import DISABLE, LOG, ON_ERROR, disabled, read_control
from .environ import inherited, note_writes, restore, setenv
from .patches import PATCHES
from .result import Result, emit, log

if TYPE_CHECKING:
    from ..cluster.plan import ClusterPlan

_lock = threading.RLock()  # a framework's hook points, one at a time
_results: dict[str, Result] = {}  # module name -> what its framework got
_partial: dict[str, Result] = {}  # module name -> what its earlier hook points did
_said_typos: list[bool] = []  # misspelled variables were said in this process
_roles: dict[str, Role] = {}  # module name -> its role, decided at its first import
# The validate-then-reuse cache: module name -> (the environment, the budget) after its
# earlier hook point, reused by the next one while the environment is the same.
_checked: dict[str, tuple[dict[str, str], Budget]] = {}
# module name -> its framework's ``SETS`` when its import began, to see what it wrote
_snapshots: dict[str, dict[str, str | None]] = {}


def _after_fork_in_child() -> None:
    """A child forked while another thread ran a hook point gets the lock free."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def last_result() -> Result | None:
    """The result of the TensorFlow configuration applied in this process, if any."""
    return _results.get("tensorflow")


def results() -> dict[str, Result]:
    """What each framework got in this process, by module name."""
    return dict(_results)


class NotTheFramework(AttributeError):
    """The watched module lacks what tfboot needs: a stub, a stand-in, a same-named file."""


class Reader:
    """Reads a framework module's attributes and calls, each call made once per run."""

    def __init__(self, module: ModuleType | None) -> None:
        self.module = module
        self._called: dict[tuple[str, tuple[Any, ...]], Any] = {}

    def attr(self, target: str, default: Any = None) -> Any:
        """The attribute at ``target``, a dotted path under the module, or ``default``."""
        node: Any = self.module
        for name in target.split("."):
            node = getattr(node, name, _MISSING)
            if node is _MISSING:
                return default
        return node

    def call(self, target: str, *args: Any) -> Any:
        key = (target, args)
        if key not in self._called:
            self._called[key] = self.function(target)(*args)
        return self._called[key]

    def loaded(self, module: str) -> Any:
        """A module already imported (never imported here), or None."""
        return sys.modules.get(module)

    def function(self, target: str) -> Any:
        found = self.attr(target, _MISSING)
        if found is _MISSING:
            raise NotTheFramework(f"{getattr(self.module, '__name__', '?')}.{target}")
        return found

    def check(self, plan: Plan) -> None:
        """Every attribute the plan uses is there, before anything is done."""
        for step in plan.calls:
            targets = step.needs if isinstance(step, Patch) else (step.target,)
            args = [] if isinstance(step, Patch) else list(step.args)
            while args:
                arg = args.pop()
                if isinstance(arg, list):
                    args += arg
                elif isinstance(arg, Item | New):
                    targets += (arg.target,)
            for target in targets:
                self.function(target)

    def materialize(self, arg: Any) -> Any:
        """A plan's argument as the framework's object."""
        if isinstance(arg, list):
            return [self.materialize(a) for a in arg]
        if isinstance(arg, Item):
            return self.call(arg.target, *arg.args)[arg.index]
        if isinstance(arg, New):
            return self.function(arg.target)(**dict(arg.kwargs))
        return arg


_MISSING = object()


def peaks(adapter: Any, name: str = "") -> tuple[list[Peak], str]:
    """The GPUs' allocator peaks so far of the framework imported as ``name``, which tfboot
    configured, and a problem met reading them (a framework shutting down, a stand-in)."""
    name = name or adapter.MODULE
    result, module = _results.get(name), sys.modules.get(name)
    if result is None or result.plan is None or module is None:
        return [], ""
    try:
        return adapter.peaks(Reader(module), result.plan), ""
    except Exception as exc:  # the report goes on without them, saying why
        return [], f"{adapter.NAME}'s GPU memory could not be read ({type(exc).__name__}: {exc})"


def run(
    adapter: Any,
    stage: str,
    module: ModuleType,
    name: str = "",
    importing: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Result | None:
    """Carry out ``adapter``'s plan for hook point ``stage`` of ``module`` (imported as
    ``name``, while ``importing`` are being imported); the result once it is complete."""
    env = os.environ if env is None else env
    name = name or adapter.MODULE
    if disabled(env):
        return None
    if env is os.environ and adapter.SETS and stage == "before":
        _snapshots[name] = {n: os.environ.get(n) for n in adapter.SETS}
    elif env is os.environ and name in _snapshots:
        note_writes(_snapshots.pop(name), name)  # what the framework set while importing
    if stage not in adapter.STAGES:
        return None
    _typos(env)
    with _lock:
        if name in _results:
            return _results[name]
        role = _role(adapter, name, env, importing)
        if name not in _partial:
            outside = _outside(adapter, name)
            if outside is not None:
                return _left_alone(adapter, name, env, outside, role)
        try:
            budget = _budget(adapter, name, env, role)
            reader = Reader(module)
            plan = adapter.plan(stage, budget, adapter.facts(stage, budget, reader))
            plan.check()
            reader.check(plan)
            calls = execute(adapter, plan, reader)
        except ConfigError as exc:
            return fail(adapter, name, env, exc, role)
        except NotTheFramework as exc:
            return _left_alone(adapter, name, env, exc, role)
        result = _merge(_partial.pop(name, None), adapter, budget, plan, calls)
        if stage != adapter.STAGES[-1]:
            _partial[name] = result
            _checked[name] = (dict(env), budget)
            return None
        _checked.pop(name, None)
        _results[name] = result
        log(result, _level(env))
        return result


def _typos(env: Mapping[str, str]) -> None:
    """Misspelled variables (``typos``), said once per process as warnings."""
    if _said_typos or env is not os.environ:
        return
    _said_typos.append(True)
    if _level(env) != "quiet":
        from ..typos import misspelled

        for _name, text in misspelled(env):
            emit("warning", text)


@dataclass(frozen=True)
class Planned:
    """What a framework's import would do here, planned and not applied."""

    budget: Budget | None  # None: its settings or the node's limits were refused
    cluster: ClusterPlan | None  # its place in the cluster (None: no cluster, or refused)
    error: ConfigError | None  # what its import would refuse, first refusal


def planned(adapter: Any, env: Mapping[str, str], **facts: Any) -> Planned:
    """What ``adapter``'s framework would do at its import in ``env``, before its code runs,
    as a task that runs the model: the import's own settings, budget, place in the cluster
    (its writer given ``facts``) and first plan. ``tfboot show`` and ``check`` read their
    rows from it. Nothing is imported, written or applied."""
    stage = adapter.STAGES[0]
    budget = cluster = None
    try:
        budget = make_budget(settings_for(adapter, env), env)
        if budget.settings.cluster is not None and adapter.LAUNCH is not None:
            cluster = budget.launch(adapter.NAME, adapter.LAUNCH, **facts)
        if stage == "before":
            adapter.plan(stage, budget, adapter.facts(stage, budget, Reader(None))).check()
    except ConfigError as exc:
        error = ConfigError(exc.problems, adapter.NAME) if adapter.QUALIFIED else exc
        return Planned(budget, cluster, error)
    return Planned(budget, cluster, None)


def _role(adapter: Any, name: str, env: Mapping[str, str], importing: Sequence[str]) -> Role:
    """The framework's role, decided at its first hook point and kept."""
    if name not in _roles:
        taken = [m for m, r in _roles.items() if r.runs_model and m in sys.modules and m != name]
        role = adapter.role(importing, taken, lambda: keras_backend(env))
        if role is None:
            return RUNS_MODEL
        _roles[name] = role
    return _roles[name]


def _budget(adapter: Any, name: str, env: Mapping[str, str], role: Role) -> Budget:
    """The budget the earlier hook point made, if the environment is the same; else anew."""
    checked = _checked.pop(name, None)
    if checked is not None and checked[0] == env:
        return checked[1]
    return make_budget(settings_for(adapter, env), env, role)


def _merge(
    earlier: Result | None, adapter: Any, budget: Budget, plan: Plan, calls: list[str]
) -> Result:
    """One result for the framework, its earlier hook points' plan extended by this one's."""
    if earlier is None or earlier.plan is None:
        return Result(adapter.NAME, settings=budget.settings, plan=plan, calls=calls,
                      warnings=list(plan.warnings), role=budget.role,
                      qualified=adapter.QUALIFIED)  # fmt: skip
    earlier.plan.extend(plan)
    earlier.warnings += plan.warnings
    earlier.calls += calls
    return earlier


def execute(adapter: Any, plan: Plan, reader: Reader) -> list[str]:
    """Carry out the plan: its environment, then its calls in order; describe each."""
    calls: list[str] = []
    for variable in inherited(adapter.WRITES, plan.environ):
        value = restore(variable)
        calls.append(f"os.environ[{variable!r}] put back to {value!r}: tfboot's inherited value")
    for variable, value in plan.environ.items():
        setenv(variable, value)
        calls.append(f"os.environ[{variable!r}] = {value!r}")
    for step in plan.calls:
        if isinstance(step, Patch):
            described = PATCHES[step.name](reader.module, *step.args)
            calls += [described] if described else []
            continue
        calls.append(_call(adapter, step, reader, calls))
    return calls


def _call(adapter: Any, call: Call, reader: Reader, applied: list[str]) -> str:
    args = tuple(reader.materialize(a) for a in call.args)
    described = f"{adapter.PREFIX}{call.name}({', '.join(_describe(a) for a in args)})"
    try:
        reader.function(call.target)(*args)
    except RuntimeError as exc:
        raise ConfigError(adapter.refused(described, exc, list(applied))) from None
    return described


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


def fail(
    adapter: Any, name: str, env: Mapping[str, str], exc: ConfigError, role: Role
) -> Result | None:
    """The one raise-or-warn: fail the framework's import, naming it when it is not
    TensorFlow; under ``TFBOOT_ON_ERROR=warn`` warn once and keep the defaults.

    A framework that came along with another never fails that import: the framework that
    runs the model reports the problem, and this one's is a debug line. Keras leaves its
    problem to TensorFlow when TensorFlow is loaded.
    """
    reporter = adapter.REPORTED_BY
    if reporter and (reporter in _results or reporter in sys.modules):
        return None
    error = ConfigError(exc.problems, adapter.NAME) if adapter.QUALIFIED else exc
    try:
        mode = read_control(env, ON_ERROR) if role.runs_model else "debug"
    except ConfigError:
        mode = "raise"
    if mode == "raise":
        raise error from None
    if mode == "warn" or _level(env) == "debug":
        kind = "warning" if mode == "warn" else "debug"
        emit(kind, f"invalid configuration, {adapter.NAME} keeps its defaults: {error}")
    _partial.pop(name, None)
    _checked.pop(name, None)
    _results[name] = Result(adapter.NAME, error=str(error), role=role, qualified=adapter.QUALIFIED)
    return _results[name]


def _outside(adapter: Any, name: str) -> str | None:
    """Why the installed ``name`` is older than tfboot supports, or None."""
    oldest = adapter.OLDEST.get(name)
    found = installed(name, adapter.DISTRIBUTIONS) if oldest is not None else None
    if found is None or oldest is None or found >= oldest:
        return None
    return (f"tfboot configures nothing in {adapter.NAME} {shown(found)} ({name}): it supports "
            f"{shown(oldest)} and newer; its own defaults hold")  # fmt: skip


def _left_alone(
    adapter: Any, name: str, env: Mapping[str, str], missing: NotTheFramework | str, role: Role
) -> Result:
    """A watched module that is not the framework tfboot knows is left alone: one debug line,
    whatever ``TFBOOT_ON_ERROR`` says; one older than tfboot supports, one warning."""
    if isinstance(missing, str):
        emit("warning", missing)
    elif _level(env) == "debug":
        emit("debug", f"{name} is not {adapter.NAME} as tfboot knows it (it has no {missing}): "
                      "left alone")  # fmt: skip
    _partial.pop(name, None)
    _checked.pop(name, None)
    _results[name] = Result(adapter.NAME, role=role, qualified=adapter.QUALIFIED)
    return _results[name]


def _level(env: Mapping[str, str]) -> str:
    """``TFBOOT_LOG``; an invalid value (reported with the settings) counts as info."""
    try:
        return str(read_control(env, LOG))
    except ConfigError:
        return "info"


def apply(tf: ModuleType | None = None, env: Mapping[str, str] | None = None) -> Result:
    """Configure TensorFlow from the environment once per process; return what was done.

    Raises ``ConfigError`` on invalid configuration unless ``TFBOOT_ON_ERROR=warn``.
    """
    from ..adapters import tensorflow as adapter

    env = os.environ if env is None else env
    with _lock:
        if "tensorflow" not in _results and disabled(env):
            _results["tensorflow"] = Result(
                disabled=True, warnings=[f"{DISABLE} is on: nothing applied"]
            )
        if "tensorflow" in _results:
            return _results["tensorflow"]
        if tf is None:
            import tensorflow as tf

            if "tensorflow" in _results:  # the import hook configured it while importing
                return _results["tensorflow"]
        for stage in adapter.STAGES:
            run(adapter, stage, tf, env=env)
        return _results["tensorflow"]
