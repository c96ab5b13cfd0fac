"""Every framework tfboot plans a budget for, as its adapter declares it, for the code that
judges a GPU share for a framework without importing it (``tfboot show``, the usage
report's suggestion, ``tfboot manifests`` and ``inject``): its adapter by module, the
headroom it keeps below a share (``budget.caps``), and which frameworks a budget is planned
for. All of it is derived from the package's one table (``tfboot.FRAMEWORKS``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import import_module
from types import ModuleType

from . import FRAMEWORKS
from .budget.caps import Headroom, settings_for
from .settings import Settings

# Each adapter of the table once (Keras's serves keras and tf_keras), by the module it names.
ADAPTERS: dict[str, ModuleType] = {
    adapter.MODULE: adapter
    for adapter in (
        import_module(f"{__package__}.adapters.{name}")
        for name in dict.fromkeys(name for name, _shown in FRAMEWORKS.values())
    )
}
# module -> the headroom it keeps below a share, for each framework that reads a GPU cap
HEADROOMS: dict[str, Headroom] = {m: a.HEADROOM for m, a in ADAPTERS.items() if a.HEADROOM}
LEAST_MIB = min(room.mib for room in HEADROOMS.values())  # the smallest any framework keeps
# The frameworks a budget is planned for, by module, in the table's order: each that reads
# a GPU cap (Keras's is its backend's). The commands' --framework, what they judge.
PLANNED: tuple[str, ...] = tuple(HEADROOMS)


def resolve(env: Mapping[str, str] | None = None, framework: str = "tensorflow") -> Settings:
    """``tfboot.resolve()``: the validated settings ``framework``'s import applies (by module
    name; TensorFlow's read every variable), with their sources and its caps below a GPU
    share; raises one ``ConfigError`` listing every problem. Imports no framework."""
    return settings_for(ADAPTERS[framework], os.environ if env is None else env)
