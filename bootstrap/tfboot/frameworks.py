"""Every framework tfboot plans a budget for, as its adapter declares it, for the code that
judges a GPU share for a framework without importing it (``tfboot show``, the usage
report's suggestion, ``tfboot manifests`` and ``inject``): its adapter by module, and the
headroom it keeps below a share (``budget.caps``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType

from .adapters import jax, keras, tensorflow, torch
from .budget.caps import Headroom, settings_for
from .settings import Settings

ADAPTERS: dict[str, ModuleType] = {a.MODULE: a for a in (tensorflow, torch, jax, keras)}
# module -> the headroom it keeps below a share, for each framework that reads a GPU cap
HEADROOMS: dict[str, Headroom] = {m: a.HEADROOM for m, a in ADAPTERS.items() if a.HEADROOM}
LEAST_MIB = min(room.mib for room in HEADROOMS.values())  # the smallest any framework keeps


def resolve(env: Mapping[str, str] | None = None, framework: str = "tensorflow") -> Settings:
    """``tfboot.resolve()``: the validated settings ``framework``'s import applies (by module
    name; TensorFlow's read every variable), with their sources and its caps below a GPU
    share; raises one ``ConfigError`` listing every problem. Imports no framework."""
    return settings_for(ADAPTERS[framework], os.environ if env is None else env)
