"""The one exception tfboot raises for bad configuration, its parts, and bounded numbers."""

from __future__ import annotations

from dataclasses import dataclass

from .values import digits, shorten

AUTO_WITHOUT_SHARE = "auto-without-share"  # MEMORY_LIMIT_MB=auto and no share found
SHARE_BELOW_ROOM = "share-below-headroom"  # a share at or below the framework's headroom
ON_THIS_HOST = "cannot be applied on this host"  # the verdict of a valid value this host refuses


@dataclass(frozen=True)
class Problem:
    """One invalid input: which variable, the value given, and what is accepted."""

    variable: str
    value: str | None
    accepted: str
    hint: str = ""
    # A valid value that this host cannot satisfy says so instead of "is invalid".
    verdict: str = "is invalid"
    # What a caller recognises the problem by (``AUTO_WITHOUT_SHARE``, ``SHARE_BELOW_ROOM``),
    # never by its text; "" for any other.
    kind: str = ""

    def __str__(self) -> str:
        if self.value is None:
            text = f"{self.variable}: {self.accepted}" if self.variable else self.accepted
        else:
            text = f"{self.variable}={shorten(self.value)} {self.verdict}: {self.accepted}"
        return f"{text}; {self.hint}" if self.hint else text


class ConfigError(ValueError):
    """Invalid tfboot configuration. ``problems`` lists every invalid input found."""

    def __init__(self, problems: list[Problem] | Problem | str, framework: str = "") -> None:
        if isinstance(problems, str):
            problems = [Problem("", None, problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        self.framework = framework  # the framework whose import it fails, when not TensorFlow
        super().__init__(self._message())

    def _message(self) -> str:
        if len(self.problems) == 1:
            return (
                f"{self.framework}: {self.problems[0]}" if self.framework else str(self.problems[0])
            )
        whose = f" for {self.framework}" if self.framework else ""
        lines = [f"{len(self.problems)} problems in the tfboot configuration{whose}:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def bounded(name: str, value: str, low: int, high: int, what: str, hint: str = "") -> int:
    """``value`` as a whole number from ``low`` to ``high``, or a ``ConfigError`` saying so."""
    number = digits(value)
    if number is None or not low <= number <= high:
        raise ConfigError(Problem(name, value, f"expected {what} from {low} to {high}", hint))
    return number


# Tracebacks and reprs name the public path, tfboot.ConfigError.
ConfigError.__module__ = "tfboot"
