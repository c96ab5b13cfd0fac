"""Keras's adapter: ``MIXED_PRECISION`` as Keras's global dtype policy.

Keras (``keras``, or ``tf_keras`` for TensorFlow's legacy Keras) reads one variable; the
policy is set right after Keras is imported (tfboot never imports Keras itself). An
invalid value is TensorFlow's to report when TensorFlow is configured or importing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..budget import Budget
from ..budget.roles import NAMES
from ..errors import Problem
from . import Call, Peak, Plan, Read

MODULE = "keras"
NAME = NAMES[MODULE]
QUALIFIED = True
OLDEST = {MODULE: (2, 12), "tf_keras": (2, 15)}  # Keras 2 as TensorFlow 2.12 bundles it; Keras 3
DISTRIBUTIONS = ()
READS = frozenset({"MIXED_PRECISION"})
PREFIX = "keras."
HEADROOM = None  # it reads no GPU cap: the backend's
MIRRORS: dict[str, str] = {}
LAUNCH = None  # the backend forms the cluster
STAGES = ("after",)
WRITES = ()  # Keras gets calls only
# What Keras sets itself while it imports, that tfboot reads as a user's setting elsewhere:
# on another backend, TensorFlow's growth (keras/src/backend/config.py, Keras 3.15.1, 364-368).
SETS = ("TF_FORCE_GPU_ALLOW_GROWTH",)
REPORTED_BY = "tensorflow"  # an invalid value is reported by TensorFlow when it is loaded


def role(importing: Sequence[str], taken: Sequence[str], backend: Callable[[], str]) -> None:
    """Keras takes no part in the GPU owner rule: its backend does."""
    return None


def facts(stage: str, budget: Budget, read: Read) -> dict[str, Any]:
    """Keras's plan needs nothing of Keras."""
    return {}


def plan(stage: str, budget: Budget, facts: Mapping[str, Any]) -> Plan:
    """The global policy, when ``MIXED_PRECISION`` is given (TensorFlow's line names it)."""
    plan = Plan(NAME, budget.role)
    policy = budget.settings.mixed_precision
    if policy is not None:
        call = "mixed_precision.set_global_policy"
        plan.calls.append(Call(call, (policy,), budget.settings.shown("MIXED_PRECISION"), call))
    return plan


def refused(described: str, exc: Exception, applied: list[str]) -> Problem:
    """Keras refused its policy."""
    return Problem("MIXED_PRECISION", None, f"Keras refused {described} ({exc})")


def peaks(read: Read, plan: Plan) -> list[Peak]:
    """Keras allocates nothing itself: its backend's adapter reports the GPUs."""
    return []
