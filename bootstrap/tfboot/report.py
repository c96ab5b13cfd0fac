"""What was applied and why: the ``tfboot:`` lines on stderr and the structured result."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from .plan import Plan
from .settings import Settings
from .values import line, rows


@dataclass
class Result:
    """The outcome of one configuration attempt."""

    disabled: bool = False
    settings: Settings | None = None
    plan: Plan | None = None
    calls: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    cluster: Any = None  # a cluster.plan.ClusterPlan when DISTRIBUTED is not off

    @property
    def applied(self) -> bool:
        return bool(self.calls) and self.error is None

    def to_dict(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "disabled": self.disabled,
            "applied": self.applied,
            "error": self.error,
            "settings": rows(settings.given) if settings else {},
            "decisions": list(self.plan.decisions) if self.plan else [],
            "calls": list(self.calls),
            "warnings": list(self.warnings),
            "cluster": self.cluster.to_dict() if self.cluster is not None else None,
        }


def emit(kind: str, text: str) -> None:
    """One line on stderr, prefixed so it can be grepped."""
    print(line(kind, text), file=sys.stderr, flush=True)


def log_result(result: Result, level: str) -> None:
    """The info line (what was applied and why), warnings, and under debug every call."""
    if level == "quiet":
        return
    for warning in result.warnings:
        emit("warning", warning)
    if level == "debug":
        for call in result.calls:
            emit("debug", call)
    if result.plan is not None and not result.plan.empty:
        emit("info", "configured TensorFlow: " + "; ".join(result.plan.decisions))
    if result.cluster is not None:
        emit("info", result.cluster.line())


def log_framework(
    framework: str, decisions: list[str], warnings: list[str], calls: list[str]
) -> None:
    """JAX's or PyTorch's lines: its warnings, its calls (debug), what it got and why."""
    for warning in warnings:
        emit("warning", f"{framework}: {warning}")
    for call in calls:
        emit("debug", call)
    if decisions:
        emit("info", f"configured {framework}: " + "; ".join(decisions))
