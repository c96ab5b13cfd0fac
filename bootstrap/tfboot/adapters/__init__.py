"""One adapter per framework, each of the same shape; and the plan they all return.

An adapter is a module with:

- ``MODULE``, ``NAME``: the module it configures and how messages name the framework;
  ``QUALIFIED``: whether its messages carry that name (TensorFlow's, the first, do not);
- ``READS``: the contract variables it reads (None: all of them);
- ``PREFIX``: how its calls are shown in the log (``tf.config.``);
- ``STAGES``: the hook points it uses, ``before`` and/or ``after`` the module's code runs;
  the last one logs the result;
- ``OLDEST``: module name -> the oldest version tfboot supports (docs/seams.md); an older
  one is left alone with one warning; ``DISTRIBUTIONS``: the distributions that install it,
  where its version is read from their ``.dist-info`` folder (``node.versions``);
- ``WRITES``: the variables tfboot may write for it; ``SETS``: those the framework sets
  itself while it imports that tfboot reads as a user's elsewhere (recorded as the
  framework's);
- ``facts(stage, budget, read)``: what it needs to know of the framework, asked through
  ``read`` (the executor's, the only code that touches a framework) and the node layer;
- ``plan(stage, budget, facts)``: pure, the ``Plan`` for that hook point;
- ``refused(described, exc, applied)``: the problem when the framework refuses a call;
- ``peaks(read, plan)``: each GPU's allocator peak so far (``Peak``), read through ``read``
  and never starting the framework's runtime: empty until the framework has started it.

The executor (``tfboot.executor``) runs them; the package's one table (``FRAMEWORKS``) maps
module names to adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from ..budget.roles import RUNS_MODEL, Role
from ..errors import ConfigError, Problem
from ..provenance import user_value
from ..settings import Settings
from ..values import shorten

if TYPE_CHECKING:
    from ..budget import Budget
    from ..budget.hostmemory import HostMemory
    from ..cluster.plan import ClusterPlan


class Read(Protocol):
    """The executor's reads of a framework: ``attr`` follows a path, ``call`` calls it."""

    def attr(self, target: str, default: Any = None) -> Any: ...

    def call(self, target: str, *args: Any) -> Any: ...

    def loaded(self, module: str) -> Any: ...  # a module already imported, or None


@dataclass(frozen=True)
class Peak:
    """One GPU's memory as the framework's own allocator saw it, for the usage report."""

    index: int  # the device's index as the framework numbers it (GPU:1, cuda:1)
    physical: int  # its physical GPU's position in the framework's list (before any split)
    peak_bytes: int  # the allocator's peak: what was in use (TensorFlow, JAX) or held (PyTorch)
    source: str  # the call it came from
    cap_mib: int | None = None  # the cap tfboot gave it; None: none
    limit_bytes: int | None = None  # the allocator's own limit, where it says
    ooms: int | None = None  # allocations it refused, where it counts them
    # The pool: what the allocator holds from the driver now and at its most (what NVML
    # counts for it), None where the framework does not say; where they came from, or why not.
    pool_bytes: int | None = None
    peak_pool_bytes: int | None = None
    pool_source: str = ""


@dataclass(frozen=True)
class Item:
    """An argument: item ``index`` of what ``target(*args)`` returns (a listed device)."""

    target: str
    args: tuple[Any, ...]
    index: int


@dataclass(frozen=True)
class New:
    """An argument: the object ``target(**kwargs)`` makes (a logical device configuration)."""

    target: str
    kwargs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Call:
    """One call of the plan: ``module.target(*args)``, shown as ``PREFIX + name`` in logs."""

    target: str  # an attribute path under the module, such as "config.set_visible_devices"
    args: tuple[Any, ...]  # plain values, Item, New, or lists of them
    reason: str
    name: str


@dataclass(frozen=True)
class Patch:
    """One of the executor's own operations on a framework (``executor.patches``), by name."""

    name: str
    args: tuple[Any, ...]
    reason: str
    needs: tuple[str, ...] = ()  # the attributes of the module it uses


@dataclass
class Plan:
    """What one framework gets at one hook point, and why."""

    framework: str
    role: Role = RUNS_MODEL
    environ: dict[str, str] = field(default_factory=dict)  # set first, in this order
    calls: list[Call | Patch] = field(default_factory=list)  # then these, in order
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # What the plan gives the devices, for reports: visible GPUs (None: all) of ``gpu_count``,
    # the memory of each visible GPU's logical devices, and the host-memory budget.
    gpu_count: int = 0
    visible: tuple[int, ...] | None = None
    logical_mb: dict[int, tuple[int, ...]] = field(default_factory=dict)
    cpu_logical: int | None = None  # logical CPUs on a host without GPUs
    # The cap of each device as the framework numbers it (logical GPUs, CUDA ordinals).
    device_caps: dict[int, int] = field(default_factory=dict)
    host: HostMemory | None = None
    malloc: str = ""  # what the allocator got under the host-memory budget, and why
    cluster: ClusterPlan | None = None

    @property
    def empty(self) -> bool:
        """True when nothing is changed in the framework."""
        return not self.decisions

    def gpus_visible(self, gpu_count: int) -> range | tuple[int, ...]:
        """The physical GPUs left visible, by index, of ``gpu_count`` listed."""
        return range(gpu_count) if self.visible is None else self.visible

    def devices(self) -> list[tuple[int, int | None]]:
        """(physical GPU, cap in MiB or None) of each GPU device the framework lists, in its
        order: a GPU's logical devices in turn, else the GPU itself."""
        found: list[tuple[int, int | None]] = []
        for physical in self.gpus_visible(self.gpu_count):
            sizes = self.logical_mb.get(physical)
            if sizes:
                found += [(physical, mb) for mb in sizes]
            else:
                found.append((physical, self.device_caps.get(len(found))))
        return found

    def local_replicas(self) -> int:
        """Visible logical GPUs (visible GPUs x split), else 1 (CPU:0)."""
        visible = self.gpus_visible(self.gpu_count)
        return sum(len(self.logical_mb.get(i, ())) or 1 for i in visible) or 1

    def extend(self, later: Plan) -> None:
        """Add a later hook point's plan: its lists after these, its other fields over
        these where it set them."""
        for spec in fields(self):
            mine, theirs = getattr(self, spec.name), getattr(later, spec.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif isinstance(mine, dict):
                mine.update(theirs)
            elif spec.default is MISSING or theirs != spec.default:
                setattr(self, spec.name, theirs)

    def refuse(self, settings: Settings, name: str, why: str) -> None:
        """``name`` is set and this framework cannot apply it: an error when it runs the
        model, a note when it only came along."""
        cluster = settings.cluster.given if settings.cluster is not None else {}
        value, source = settings.given.get(name) or cluster[name]
        if self.role.runs_model:
            self.problems.append(
                Problem(name, value, why, f"unset {name} for this process", "cannot be applied")
            )
        else:
            self.decisions.append(f"{name}={value} ({source}) not applied: {why}")

    def setenv(self, env: Mapping[str, str], name: str, value: str, settings: Settings,
               variable: str, meaning: Callable[[str], object] = str) -> bool:  # fmt: skip
        """Set ``name`` for the framework unless the user set it: to the same meaning (as
        ``meaning`` reads it, as the framework does), which is kept, or otherwise, which is
        a contradiction. A value tfboot or a framework wrote is never the user's."""
        if not self.agrees(env, name, value, settings, variable, meaning):
            return False
        if user_value(env, name) is None:
            self.environ[name] = value
        return True

    def agrees(self, env: Mapping[str, str], name: str, value: str, settings: Settings,
               variable: str, meaning: Callable[[str], object] = str) -> bool:  # fmt: skip
        """False, with the problem recorded, when the user set ``name`` to another meaning."""
        current = user_value(env, name)
        if current is not None and meaning(current) != meaning(value):
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
        """Raise the refusals and contradictions found, all together."""
        if self.problems:
            raise ConfigError(self.problems)


def release_memory(plan: Plan, budget: Budget) -> None:
    """Under a host-memory budget, the allocator setting that returns freed memory to the
    kernel (``budget.release``): a decision, and the patch that makes it."""
    found = budget.release()
    if found is None:
        return
    plan.decisions.append(found.why)
    plan.malloc = found.detail or found.why
    if found.watch is not None:
        plan.calls.append(Patch("memory governor", (found.watch,), found.why))
