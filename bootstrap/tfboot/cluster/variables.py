"""Parse the ``DIST_*`` variables into ``ClusterSettings``, with where each came from.

They are read only when ``DISTRIBUTED`` is not ``off``, from the process environment over
``TFBOOT_ENV_FILE``, like the rest of the contract. Every problem is collected, then
raised together as one ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, Problem, bounded
from ..values import digits, positive
from . import TASK_TYPES
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
PORT_ACCEPTED = "a TCP port from 1 to 65535"
MAX_INDEX = MAX_HOSTS - 1
INDEX_ACCEPTED = f"a task index from 0 to {MAX_INDEX}"
MAX_REPLICAS = 4096  # 64 logical devices on each of 64 GPUs: more than any worker has
REPLICAS_ACCEPTED = f"a count from 1 to {MAX_REPLICAS}"
MAX_TIMEOUT_S = 7 * 24 * 3600  # a week: far past any wait for peers
SECONDS_ACCEPTED = f"a number of seconds from 1 to {MAX_TIMEOUT_S} (a week) such as 600"
TERM_GRACE_S = 5  # DIST_TERM_GRACE's default: how long a task outlives a SIGTERM or a lost peer
MAX_GRACE_S = 3600  # an hour: longer than any preemption checkpoint should take
GRACE_ACCEPTED = f"a number of seconds from 1 to {MAX_GRACE_S} such as 5"


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
    startup_timeout: int | None = None
    term_grace: int | None = None  # seconds a task may outlive SIGTERM; None: the default
    # variable -> (raw value, source) for every variable that was given
    given: dict[str, tuple[str, str]] = field(default_factory=dict)

    def source(self, name: str) -> str:
        value, where = self.given[name]
        return f"{name}={value} ({where})"


def _has_port(entry: str) -> bool:
    host, colon, port = entry.rpartition(":")
    return bool(colon) and port.isdigit() and (not host.count(":") or host.endswith("]"))


def _count(name: str, value: str, kind: str, number: str) -> int:
    """One type's task count in ``DIST_TASKS``: 1 or more."""
    count = positive(number)
    if count is None:
        hint = (
            f"a count must be at least 1: leave {kind} out of DIST_TASKS if it has no tasks"
            if digits(number) == 0
            else f"{kind}'s count is not a whole number"
        )
        raise ConfigError(Problem(name, value, TASKS_ACCEPTED, hint))
    return count


def parse_tasks(name: str, value: str) -> tuple[tuple[str, int], ...]:
    if "=" not in value:
        count = positive(value)
        if count is None or count > MAX_HOSTS:
            hint = f"at most {MAX_HOSTS} tasks" if count else ""
            raise ConfigError(Problem(name, value, TASKS_ACCEPTED, hint))
        return (("worker", count),)
    tasks: dict[str, int] = {}
    for part in value.split(","):
        kind, _, number = part.partition("=")
        kind = kind.strip().lower()
        if kind not in TASK_TYPES or kind in tasks:
            if kind == "master":
                why = "rename the TFJob replica Master to Chief"
            elif kind in tasks:
                why = f"{kind!r} is given twice"
            else:
                why = f"the types are {TYPES}"
            raise ConfigError(Problem(name, value, TASKS_ACCEPTED, why))
        tasks[kind] = _count(name, value, kind, number)
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
        sample = entry.replace("{i}", "0")
        bad = check_address(sample, port_required=False)
        if bad or "{" in sample or "}" in sample:
            why = f"{kind}: {bad}" if bad else f"{kind}: a template has no braces but {{i}}"
            raise ConfigError(Problem(name, value, HOSTS_ACCEPTED, why))
        return Hosts(template=entry)
    hosts = tuple(h.strip() for h in entry.split(","))
    for number, host in enumerate(hosts, 1):
        bad = check_address(host, port_required=False) if host else f"entry {number} is empty"
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
    return bounded(name, value, 0, MAX_INDEX, "a task index")


def parse_port(name: str, value: str) -> int:
    return bounded(name, value, 1, 65535, "a TCP port")


def parse_replicas(name: str, value: str) -> int:
    return bounded(name, value, 1, MAX_REPLICAS, "a count")


def parse_seconds(name: str, value: str) -> int:
    return bounded(name, value, 1, MAX_TIMEOUT_S, "a number of seconds", "such as 600")


def parse_grace(name: str, value: str) -> int:
    return bounded(name, value, 1, MAX_GRACE_S, "a number of seconds", "such as 5")


# variable -> (ClusterSettings field, parser, what is accepted, for a value named by its line)
PARSERS: dict[str, tuple[str, Callable[[str, str], Any], str]] = {
    "DIST_TASKS": ("tasks", parse_tasks, TASKS_ACCEPTED[len("expected ") :]),
    "DIST_HOSTS": ("hosts", parse_hosts, HOSTS_ACCEPTED[len("expected ") :]),
    "DIST_TASK_TYPE": ("task_type", parse_type, f"one of {TYPES}"),
    "DIST_TASK_INDEX": ("task_index", parse_index, INDEX_ACCEPTED),
    "DIST_PORT": ("port", parse_port, PORT_ACCEPTED),
    "DIST_REPLICAS_PER_WORKER": ("replicas_per_worker", parse_replicas, REPLICAS_ACCEPTED),
    "DIST_STARTUP_TIMEOUT": ("startup_timeout", parse_seconds, SECONDS_ACCEPTED),
    "DIST_TERM_GRACE": ("term_grace", parse_grace, GRACE_ACCEPTED),
}


def read_cluster(
    given: Mapping[str, tuple[str, str]], parse: Callable[[str, Callable[..., Any], str], Any]
) -> ClusterSettings:
    """The ``DIST_*`` variables among ``given`` (name -> (value, source)), parsed by ``parse``.

    ``parse(name, parser, accepted)`` is the settings' own, which names a bad value read
    from a file by its line. One ``ConfigError`` lists every problem.
    """
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, (attr, parser, accepted) in PARSERS.items():
        if name in given:
            try:
                values[attr] = parse(name, parser, accepted)
            except ConfigError as exc:
                problems += exc.problems
    if problems:
        raise ConfigError(problems)
    return ClusterSettings(given={k: v for k, v in given.items() if k in PARSERS}, **values)
