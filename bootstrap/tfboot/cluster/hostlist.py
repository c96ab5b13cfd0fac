"""Slurm's compressed host and task lists, expanded in Slurm's own order (never sorted), and
the distributions that place a step's ranks on its nodes.

``node[9-10]`` -> node9, node10; ``gpu[01-03,07]`` keeps the zero padding; ``a1,b[1-2]``;
``2(x3),1`` -> 2, 2, 2, 1 tasks per node. ``DISTRIBUTIONS`` lists each distribution
``SLURM_DISTRIBUTION`` may name, with the layout it gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError, Problem
from ..values import digits

HOSTS_ACCEPTED = "expected a Slurm hostlist such as node[1-4], gpu[01-03,07] or a1,b[1-2]"
TASKS_ACCEPTED = "expected Slurm's tasks per node such as 2(x3),1"
MAX_HOSTS = 100_000  # a bound, so a typo like n[0-999999999] cannot exhaust memory
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_COUNT = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$")


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _expand_one(entry: str, variable: str, text: str) -> list[str]:
    if "[" not in entry:
        if not entry or "]" in entry:
            raise ConfigError(Problem(variable, text, HOSTS_ACCEPTED))
        return [entry]
    prefix, _, rest = entry.partition("[")
    body, close, suffix = rest.partition("]")
    if not close or not prefix or "[" in body or "[" in suffix or "]" in suffix:
        raise ConfigError(Problem(variable, text, HOSTS_ACCEPTED))
    names: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ConfigError(Problem(variable, text, HOSTS_ACCEPTED, f"bad range {part!r}"))
        low, high = match.group(1), match.group(2) or match.group(1)
        first, last = digits(low) or 0, digits(high) or 0
        if last < first or last - first >= MAX_HOSTS or len(low) > 18:
            raise ConfigError(Problem(variable, text, HOSTS_ACCEPTED, f"bad range {part!r}"))
        width = len(low) if low.startswith("0") else 0
        names += [f"{prefix}{n:0{width}d}{suffix}" for n in range(first, last + 1)]
    return names


def expand_hosts(text: str, variable: str = "SLURM_STEP_NODELIST") -> list[str]:
    """The host names of a Slurm hostlist, in order; ``ConfigError`` when malformed."""
    if not text.strip() or text.count("[") != text.count("]"):
        raise ConfigError(Problem(variable, text, HOSTS_ACCEPTED))
    hosts: list[str] = []
    for entry in _split_top(text.strip()):
        hosts += _expand_one(entry.strip(), variable, text)
        if len(hosts) > MAX_HOSTS:
            raise ConfigError(Problem(variable, text, f"more than {MAX_HOSTS} hosts"))
    return hosts


def expand_counts(text: str, variable: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Tasks per node, one entry per node: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _COUNT.match(part.strip())
        count = digits(match.group(1)) if match else None
        if not count or count > MAX_HOSTS:
            raise ConfigError(Problem(variable, text, TASKS_ACCEPTED))
        repeat = digits(match.group(2) or "1") or 0
        if repeat == 0 or len(counts) + repeat > MAX_HOSTS:
            raise ConfigError(Problem(variable, text, TASKS_ACCEPTED))
        counts += [count] * repeat
    return counts


def block_layout(hosts: list[str], counts: list[int]) -> list[tuple[str, int]]:
    """(host, local rank) for each global rank under block distribution."""
    pairs = zip(hosts, counts, strict=False)
    return [(host, local) for host, count in pairs for local in range(count)]


def plane_layout(hosts: list[str], counts: list[int], plane: int) -> list[tuple[str, int]]:
    """(host, local rank) for each global rank when nodes take ``plane`` ranks in turn.

    Slurm's ``cyclic`` is a plane of 1: rank 0 on the first node, rank 1 on the next, and so
    on around the nodes, skipping those already full; a node's local ranks follow arrival.
    """
    left, taken = list(counts), [0] * len(counts)
    layout: list[tuple[str, int]] = []
    while any(left):
        for node, host in enumerate(hosts):
            for _ in range(min(plane, left[node])):
                layout.append((host, taken[node]))
                taken[node] += 1
                left[node] -= 1
    return layout


@dataclass(frozen=True)
class Distribution:
    """A node distribution: the first level of ``SLURM_DISTRIBUTION`` that names it, and the
    (host, local rank) of each global rank it gives (``plane``: ``SLURM_DIST_PLANESIZE``)."""

    name: str
    levels: tuple[str, ...]  # the words that name it; a word ending in "=" is a prefix
    layout: Callable[[list[str], list[int], int], list[tuple[str, int]]]
    needs_plane: bool = False
    srun: str = ""  # how srun's --distribution names it, for the fix

    def names(self, level: str) -> bool:
        return any(
            level == w or (w.endswith("=") and level.startswith(w[:-1])) for w in self.levels
        )


# Every distribution tfboot can lay out, the default first.
DISTRIBUTIONS = (
    Distribution("block", ("block", "*", ""), lambda h, c, _p: block_layout(h, c), srun="block"),
    Distribution("cyclic", ("cyclic",), lambda h, c, _p: plane_layout(h, c, 1), srun="cyclic"),
    Distribution("plane", ("plane=",), plane_layout, needs_plane=True, srun="plane=N"),
)
