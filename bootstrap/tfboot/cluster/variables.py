"""Parse the ``DIST_*`` variables into ``ClusterSettings``, with where each came from.

They are read only when ``DISTRIBUTED`` is not ``off``, from the process environment over
``TFBOOT_ENV_FILE``, like the rest of the contract. Every problem is collected, then
raised together as one ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, Problem
from ..numbers import digits
from ..settings import layer
from . import NAMES, TASK_TYPES
from .hostlist import MAX_HOSTS
from .tfconfig import check_address

TYPES = ", ".join(TASK_TYPES)
TASKS_ACCEPTED = (
    f"expected a worker count such as 4, or type=count pairs such as chief=1,worker=3 "
    f"(types {TYPES})"
)
HOSTS_ACCEPTED = (
    "expected type=entries separated by ';': a template with {i} such as worker=train-{i}.train, "
    "or a comma list of host[:port] such as worker=10.0.0.5:2222,10.0.0.6:2222"
)
PORT_ACCEPTED = "expected a TCP port from 1 to 65535"


@dataclass(frozen=True)
class Hosts:
    """One task type's hosts: a ``{i}`` template, or an explicit list."""

    template: str | None = None
    explicit: tuple[str, ...] = ()

    def addresses(self, count: int, port: int) -> list[str]:
        """``count`` addresses; entries without a port get ``port``."""
        if self.template is not None:
            names = [self.template.replace("{i}", str(i)) for i in range(count)]
        else:
            names = list(self.explicit)
        return [n if _has_port(n) else f"{n}:{port}" for n in names]


@dataclass(frozen=True)
class ClusterSettings:
    """The validated ``DIST_*`` values; None where not given."""

    tasks: tuple[tuple[str, int], ...] | None = None
    hosts: dict[str, Hosts] | None = None
    task_type: str | None = None
    task_index: int | None = None
    port: int | None = None
    replicas_per_worker: int | None = None
    startup_timeout: float | None = None
    # variable -> (raw value, source) for every variable that was given
    given: dict[str, tuple[str, str]] = field(default_factory=dict)

    def source(self, name: str) -> str:
        value, where = self.given[name]
        return f"{name}={value} ({where})"


def _has_port(entry: str) -> bool:
    host, colon, port = entry.rpartition(":")
    return bool(colon) and port.isdigit() and (not host.count(":") or host.endswith("]"))


def _count(text: str) -> int | None:
    number = digits(text)
    return number if number else None


def parse_tasks(name: str, value: str) -> tuple[tuple[str, int], ...]:
    if "=" not in value:
        count = _count(value)
        if count is None or count > MAX_HOSTS:
            hint = f"at most {MAX_HOSTS} tasks" if count else ""
            raise ConfigError(Problem(name, value, TASKS_ACCEPTED, hint))
        return (("worker", count),)
    tasks: dict[str, int] = {}
    for part in value.split(","):
        kind, _, number = part.partition("=")
        kind, count = kind.strip().lower(), _count(number)
        if kind not in TASK_TYPES or count is None or kind in tasks:
            hint = "rename the TFJob replica Master to Chief" if kind == "master" else ""
            why = f"{kind!r} is given twice" if kind in tasks else hint
            raise ConfigError(Problem(name, value, TASKS_ACCEPTED, why))
        tasks[kind] = count
    for single in ("chief", "evaluator"):
        if tasks.get(single, 0) > 1:
            raise ConfigError(Problem(name, value, f"at most one {single} is allowed"))
    if sum(tasks.values()) > MAX_HOSTS:
        raise ConfigError(Problem(name, value, f"at most {MAX_HOSTS} tasks in all"))
    if not tasks.get("chief") and not tasks.get("worker"):
        raise ConfigError(Problem(name, value, "the cluster needs a chief or a worker"))
    return tuple(tasks.items())


def _host_entry(name: str, value: str, kind: str, entry: str) -> Hosts:
    if "{i}" in entry:
        bad = check_address(entry.replace("{i}", "0") + ("" if _has_port(entry) else ":1"))
        if bad or "{" in entry.replace("{i}", ""):
            raise ConfigError(
                Problem(name, value, HOSTS_ACCEPTED, f"{kind}: {bad or 'bad template'}")
            )
        return Hosts(template=entry)
    hosts = tuple(h.strip() for h in entry.split(","))
    for host in hosts:
        bad = check_address(host if _has_port(host) else f"{host}:1")
        if bad:
            raise ConfigError(Problem(name, value, HOSTS_ACCEPTED, f"{kind}: {bad}"))
    return Hosts(explicit=hosts)


def parse_hosts(name: str, value: str) -> dict[str, Hosts]:
    hosts: dict[str, Hosts] = {}
    for part in value.split(";"):
        if not part.strip():
            continue
        kind, equals, entry = part.partition("=")
        kind = kind.strip().lower() if equals else "worker"
        entry = (entry if equals else part).strip()
        if kind not in TASK_TYPES or kind in hosts or not entry:
            why = f"{kind!r} is given twice" if kind in hosts else f"types are {TYPES}"
            raise ConfigError(Problem(name, value, HOSTS_ACCEPTED, why))
        hosts[kind] = _host_entry(name, value, kind, entry)
    return hosts


def parse_type(name: str, value: str) -> str:
    kind = value.strip().lower()
    if kind not in TASK_TYPES:
        hint = (
            "rename the TFJob replica Master to Chief"
            if kind == "master"
            else ("under a JobSet, name each replicatedJob after its task type")
        )
        raise ConfigError(Problem(name, value, f"expected one of {TYPES}", hint))
    return kind


def parse_index(name: str, value: str) -> int:
    index = digits(value)
    if index is None:
        raise ConfigError(Problem(name, value, "expected a task index: an integer from 0"))
    return index


def parse_port(name: str, value: str) -> int:
    number = _count(value)
    if number is None or number > 65535:
        raise ConfigError(Problem(name, value, PORT_ACCEPTED))
    return number


def parse_positive(name: str, value: str) -> int:
    number = _count(value)
    if number is None:
        raise ConfigError(Problem(name, value, "expected a positive integer"))
    return number


def parse_seconds(name: str, value: str) -> float:
    try:
        seconds = float(value.strip())
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 10**7:  # also rejects nan and inf
        raise ConfigError(Problem(name, value, "expected a positive number of seconds such as 600"))
    return seconds


PARSERS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "DIST_TASKS": ("tasks", parse_tasks),
    "DIST_HOSTS": ("hosts", parse_hosts),
    "DIST_TASK_TYPE": ("task_type", parse_type),
    "DIST_TASK_INDEX": ("task_index", parse_index),
    "DIST_PORT": ("port", parse_port),
    "DIST_REPLICAS_PER_WORKER": ("replicas_per_worker", parse_positive),
    "DIST_STARTUP_TIMEOUT": ("startup_timeout", parse_seconds),
}


def read(env: Mapping[str, str]) -> ClusterSettings:
    """Every ``DIST_*`` variable given, parsed; one ``ConfigError`` listing all problems."""
    given = layer(env, frozenset(NAMES))
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, (attr, parse) in PARSERS.items():
        if name in given:
            try:
                values[attr] = parse(name, given[name][0])
            except ConfigError as exc:
                problems += exc.problems
    if problems:
        raise ConfigError(problems)
    return ClusterSettings(given=given, **values)
