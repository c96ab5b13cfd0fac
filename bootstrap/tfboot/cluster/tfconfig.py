"""``TF_CONFIG``: what TensorFlow makes of a job (``to_json``), and the check of one tfboot
built or found, with TensorFlow's own rules (a job any engine builds is held to them too).

The rules are those of ``multi_worker_util._validate_cluster_spec`` plus what makes a
cluster hang or fail later: types ``chief``, ``worker``, ``ps``, ``evaluator``; at most one
chief and one evaluator (an evaluator may be absent from ``cluster``); the index in range;
``host:port`` addresses with an integer port, IPv6 in brackets; no address twice.
Keys TensorFlow ignores (TFJob's ``"environment": "cloud"``) are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, Problem
from ..values import digits, quote
from . import TASK_TYPES
from .world import Cluster

VARIABLE = "TF_CONFIG"
SHAPE = 'expected JSON such as {"cluster": {"worker": ["w0:2222", "w1:2222"]}, ' + (
    '"task": {"type": "worker", "index": 0}}'
)


def to_json(cluster: Cluster) -> str:
    """``cluster`` as TensorFlow reads it: ``{"cluster": ..., "task": {"type", "index"}}``."""
    task: dict[str, Any] = {"type": cluster.task_type, "index": cluster.task_index}
    return json.dumps({"cluster": cluster.cluster, "task": task}, separators=(",", ":"))


def check_address(address: Any, port_required: bool = True) -> str | None:
    """Why ``address`` is not ``host:port`` (IPv6 as ``[addr]:port``), or None.

    With ``port_required`` false, a bare host (a ``DIST_HOSTS`` entry that takes
    ``DIST_PORT``) is accepted too. Messages quote the address as written.
    """
    if not isinstance(address, str):
        return f"address {quote(address)} is not a string"
    written = quote(address)
    host, colon, port = address.rpartition(":")
    with_port = bool(colon) and port.isdigit() and (":" not in host or host.endswith("]"))
    if not port_required and not with_port:
        if address.count(":") == 1 and not address.startswith("["):
            return f"address {written} needs an integer port from 1 to 65535"
        host = address
    elif not colon:
        return f"address {written} has no :port"
    elif not port.isascii() or not port.isdigit() or not 1 <= (digits(port) or 0) <= 65535:
        return f"address {written} needs an integer port from 1 to 65535"
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3 or ":" not in host:
            return f"address {written}: an IPv6 host is written [addr]:port"
    elif ":" in host:
        return f"address {written}: write an IPv6 host in brackets, [addr]:port"
    if not host or any(c.isspace() or c in "/@" for c in host):
        return f"address {written} is not host:port"
    return None


def same_address(address: str) -> tuple[str, int]:
    """What names one server: the host, case-folded, and the port as a number."""
    host, _, port = address.rpartition(":")
    return host.lower(), digits(port) or 0


def _addresses(kind: str, value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):  # ClusterSpec's sparse form, index -> address
        indexes: dict[int, Any] = {}  # index -> the key as written
        for key in value:
            text = str(key)
            index = digits(text) if text.isascii() and text.isdigit() else None
            if index is None:
                raise ValueError(f"cluster.{kind} has index {quote(key)}, not 0, 1, 2 ...")
            if index in indexes:
                raise ValueError(f"cluster.{kind} has index {index} twice")
            indexes[index] = key
        keys = sorted(indexes)
        if keys != list(range(len(keys))):
            raise ValueError(f"cluster.{kind} has gaps in its indexes {keys[:8]}")
        return [value[indexes[k]] for k in keys]
    raise ValueError(f"cluster.{kind} is not a list of addresses")


def _type_problem(kind: str) -> str | None:
    if kind == "master":
        return (
            "task type 'master' is not accepted by TensorFlow 2 strategies; rename the TFJob "
            "replica Master to Chief"
        )
    if kind not in TASK_TYPES:
        return f"task type {quote(kind)} is not one of {', '.join(TASK_TYPES)}"
    return None


def _index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("task.index is not an integer")
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("task.index is not an integer")
    index = int(value)
    if index < 0:
        raise ValueError("task.index is negative")
    return index


def _parse(data: Any) -> tuple[dict[str, list[Any]], str | None, int, list[str]]:
    if not isinstance(data, Mapping):
        raise ValueError("it is not a JSON object")
    raw_cluster = data.get("cluster", {})
    if not isinstance(raw_cluster, Mapping):
        raise ValueError("cluster is not an object")
    task = data.get("task", {})
    if not isinstance(task, Mapping):
        raise ValueError("task is not an object")
    cluster = {str(k): _addresses(str(k), v) for k, v in raw_cluster.items()}
    kind = task.get("type")
    if kind is not None and not isinstance(kind, str):
        raise ValueError("task.type is not a string")
    index = _index(task.get("index", 0))
    problems = [p for p in (_type_problem(k) for k in cluster) if p]
    if kind is not None and kind not in cluster and (p := _type_problem(kind)):
        problems.append(p)
    return cluster, kind, index, problems


def _rules(cluster: dict[str, list[Any]], kind: str | None, index: int) -> list[str]:
    problems = [
        f"at most one {single} is allowed, found {len(cluster[single])}"
        for single in ("chief", "evaluator")
        if len(cluster.get(single, [])) > 1
    ]
    if cluster and kind is None:
        problems.append("task.type is missing")
    elif kind is not None and kind in cluster and index >= len(cluster[kind]):
        problems.append(
            f"task {kind}:{index} is out of range: the cluster has {len(cluster[kind])} {kind} "
            f"task(s), indexes 0 to {len(cluster[kind]) - 1}"
        )
    elif kind is not None and kind not in cluster and kind != "evaluator" and cluster:
        problems.append(f"task type {kind!r} is not in the cluster ({', '.join(cluster)})")
    seen: dict[tuple[str, int], str] = {}
    for job, addresses in cluster.items():
        for i, address in enumerate(addresses):
            bad = check_address(address)
            key = same_address(address) if bad is None else None
            if bad:
                problems.append(f"{job}:{i}: {bad}")
            elif key in seen:
                problems.append(
                    f"address {quote(address)} is used by both {seen[key]} and {job}:{i}"
                )
            else:
                seen[key] = f"{job}:{i}"
    return problems


def check(text: str, variable: str = VARIABLE) -> Cluster:
    """Parse and check a ``TF_CONFIG`` value; every problem in one ``ConfigError``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            Problem(
                variable,
                text,
                f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
                f"(character {exc.pos}); {SHAPE}",
            )
        ) from None
    except RecursionError:
        raise ConfigError(Problem(variable, text, "is nested too deeply; " + SHAPE)) from None
    except ValueError:  # a number past Python's int-string limit (4300 digits)
        raise ConfigError(
            Problem(variable, text, "holds a number with too many digits; " + SHAPE)
        ) from None
    try:
        cluster, kind, index, problems = _parse(data)
    except ValueError as exc:
        raise ConfigError(Problem(variable, text, f"{exc}; {SHAPE}")) from None
    problems += _rules(cluster, kind, index)
    if problems:
        raise ConfigError([Problem(variable, text, p) for p in problems])
    return Cluster({k: [str(a) for a in v] for k, v in cluster.items()}, kind, index)


def validate(job: Cluster, text: str, variable: str = VARIABLE) -> None:
    """TensorFlow's rules for ``job`` (written as ``text`` by ``variable``): one chief, the
    index in range, ``host:port`` addresses, none twice; every problem in one ``ConfigError``."""
    problems = _rules(job.cluster, job.task_type, job.task_index)
    if problems:
        raise ConfigError([Problem(variable, text, p) for p in problems])
