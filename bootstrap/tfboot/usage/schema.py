"""What a usage record must hold to be read back, and the one reader of a record's file:
``tfboot suggest`` and a job's lead reading its members' records take nothing else.

Every figure the suggestion and the ``used:`` line read is checked for its type and for a
finite, sane range (JSON's ``NaN`` and ``Infinity`` never parse; a boolean is not a number);
``problem`` names the first field that is not, by its path in the record, never its value.
"""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any

from .shares import MAX_VALUE, MAX_VARIABLES, PLUGINS, kept
from .stretches import MAX_STRETCHES

SCHEMA = "tfboot.usage/v1"
MAX_MIB = 1 << 30  # a PiB: far past any GPU's or node's memory
MAX_CPUS = 1 << 20
MAX_SECONDS = 10 * 366 * 86400  # ten years of wall time
MAX_COUNT = 1 << 62
MAX_GPUS = 4096
MAX_MEMBERS = 4096
NUMBER = (int, float)

# field -> (kind, upper bound); kind "number" (>= 0, finite), "count" (int >= 0), "str",
# "bool", "ratio" (0..1); a field may be missing or null unless listed in REQUIRED.
GPU = {"index": ("count", MAX_GPUS), "physical": ("count", MAX_GPUS), "framework": ("str", 64),
       "peak_mib": ("number", MAX_MIB), "cap_mib": ("number", MAX_MIB),
       "limit_mib": ("number", MAX_MIB), "ooms": ("count", MAX_COUNT),
       "pool_mib": ("number", MAX_MIB), "peak_pool_mib": ("number", MAX_MIB),
       "pool_source": ("str", 512), "process_mib": ("number", MAX_MIB),
       "outside_pool_mib": ("number", MAX_MIB), "outside_pool_source": ("str", 1024),
       "pid": ("count", MAX_COUNT), "source": ("str", 512)}  # fmt: skip
MEMORY = {"peak_mib": ("number", MAX_MIB), "limit_mib": ("number", MAX_MIB),
          "oom_kills": ("count", MAX_COUNT), "high_events": ("count", MAX_COUNT),
          "max_events": ("count", MAX_COUNT), "source": ("str", 1024),
          "limit_shared": ("str", 512)}  # fmt: skip
CPU = {"used_cpus": ("number", MAX_CPUS), "quota": ("number", MAX_CPUS),
       "cpu_seconds": ("number", MAX_SECONDS * MAX_CPUS), "wall_seconds": ("number", MAX_SECONDS),
       "throttled_fraction": ("ratio", 1), "threads": ("count", MAX_CPUS),
       "source": ("str", 1024), "quota_shared": ("str", 512)}  # fmt: skip
SHM = {"peak_mib": ("number", MAX_MIB), "size_mib": ("number", MAX_MIB),
       "source": ("str", 256)}  # fmt: skip
# What the job used under one memory limit or CPU quota (``stretches``): ``earlier_limits``,
# ``earlier_quotas`` (with the limit and when it ended) and ``since_resize``.
STRETCHES = {
    "host_memory": ("earlier_limits", {"limit_mib": ("number", MAX_MIB), "until": ("str", 32),
                    "peak_mib": ("number", MAX_MIB), "oom_kills": ("count", MAX_COUNT),
                    "high_events": ("count", MAX_COUNT)}),
    "cpu": ("earlier_quotas", {"quota": ("number", MAX_CPUS), "until": ("str", 32),
            "used_cpus": ("number", MAX_CPUS), "throttled_fraction": ("ratio", 1),
            "seconds": ("number", MAX_SECONDS)}),
}  # fmt: skip
# A record written as a wait that ends the process in C began (no final record follows).
WAITING = {"limit": ("str", 64), "seconds": ("number", MAX_SECONDS)}
REQUIRED = {"gpu": ("index", "physical", "framework"), "cpu": (), "host_memory": (),
            "waiting": ("limit", "seconds"), "shm": ("peak_mib",)}  # fmt: skip


class Unusable(ValueError):
    """Not a usage record tfboot can read; the message says why, never the content."""


def _constant(name: str) -> Any:
    raise Unusable(f"not JSON ({name} is not a number a usage record holds)")


def loads(data: bytes) -> Any:
    """JSON without ``NaN``/``Infinity``; ``Unusable`` for anything else it cannot take
    (nesting too deep included)."""
    try:
        return json.loads(data, parse_constant=_constant)
    except RecursionError:
        raise Unusable("not JSON (nested too deeply)") from None
    except Unusable:
        raise
    except ValueError:
        raise Unusable("not JSON") from None


def read(path: str, limit: int) -> dict[str, Any]:
    """The usage record in the regular file ``path`` (at most ``limit`` bytes); ``Unusable``
    saying why it is not one, or ``OSError``. A FIFO or a device is refused before it is
    opened, and opened without waiting should it become one meanwhile."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise Unusable("not a regular file")
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise Unusable("not a regular file")
        data = source.read(limit + 1)
    if len(data) > limit:
        raise Unusable(f"larger than {limit} bytes, not a usage record")
    record = loads(data)
    found = problem(record)
    if found is not None:
        raise Unusable(found)
    return record


def _field(value: Any, kind: str, bound: float) -> bool:
    if kind == "str":
        return isinstance(value, str) and len(value) <= bound
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, NUMBER):
        return False
    if kind == "count" and not isinstance(value, int):
        return False
    return math.isfinite(value) and 0 <= value <= bound


def _section(section: Any, fields: dict[str, tuple[str, float]], where: str,
             required: tuple[str, ...]) -> str | None:  # fmt: skip
    if not isinstance(section, dict):
        return f"{where} is not an object"
    for name, (kind, bound) in fields.items():
        value = section.get(name)
        if value is None:
            if name in required:
                return f"{where}.{name} is missing"
            continue
        if not _field(value, kind, bound):
            return (
                f"{where}.{name} is not a {kind} from 0 to {bound:g}"
                if kind != "str"
                else f"{where}.{name} is not a string of at most {bound:g} characters"
            )
    return None


def _stretches(section: dict[str, Any], key: str, where: str) -> str | None:
    """What is wrong with a section's stretches under earlier limits and since the last
    resize, or None."""
    name, fields = STRETCHES[key]
    earlier = section.get(name)
    if earlier is not None and (not isinstance(earlier, list) or len(earlier) > MAX_STRETCHES):
        return f"{where}.{name} is not a list of at most {MAX_STRETCHES}"
    for number, stretch in enumerate(earlier or []):
        found = _section(stretch, fields, f"{where}.{name}[{number}]", ())
        if found:
            return found
    since = section.get("since_resize")
    return None if since is None else _section(since, fields, f"{where}.since_resize", ())


def _share(share: Any, where: str) -> str | None:
    """What is wrong with a record's ``gpu_share`` (the plugins' variables), or None."""
    if share is None:
        return None
    if not isinstance(share, dict):
        return f"{where} is not an object"
    plugins, variables = share.get("plugins"), share.get("variables")
    if not isinstance(plugins, list) or len(plugins) > len(PLUGINS) or \
            not all(isinstance(p, str) and p in PLUGINS for p in plugins):  # fmt: skip
        return f"{where}.plugins is not a list of {', '.join(PLUGINS)}"  # fmt: skip
    if not isinstance(variables, dict) or len(variables) > MAX_VARIABLES:
        return f"{where}.variables is not an object of at most {MAX_VARIABLES} variables"
    for name, value in variables.items():
        if not kept(name) or not _field(value, "str", MAX_VALUE):
            return (f"{where}.variables holds a name that is not a GPU share's variable or a "
                    f"value that is not a string of at most {MAX_VALUE} characters")  # fmt: skip
    if share.get("source") is not None and not _field(share["source"], "str", 256):
        return f"{where}.source is not a string of at most 256 characters"
    return None


def problem(record: Any, where: str = "the record", members: bool = True) -> str | None:
    """What is wrong with ``record`` as a usage record, or None."""
    if not isinstance(record, dict):
        return f"{where} is not a JSON object"
    if record.get("schema") != SCHEMA:
        return f"{where} is not a tfboot usage record (expected schema {SCHEMA})"
    if not isinstance(record.get("final", False), bool):
        return f"{where}.final is not true or false"
    if record.get("pid") is not None and not _field(record["pid"], "count", MAX_COUNT):
        return f"{where}.pid is not a process id"
    gpus = record.get("gpus")
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        return f"{where}.gpus is missing or not a list of at most {MAX_GPUS}"
    for number, gpu in enumerate(gpus):
        found = _section(gpu, GPU, f"{where}.gpus[{number}]", REQUIRED["gpu"])
        if found:
            return found
    for key, fields in (("host_memory", MEMORY), ("cpu", CPU)):
        found = _section(record.get(key), fields, f"{where}.{key}", REQUIRED[key]) or \
            _stretches(record[key], key, f"{where}.{key}")  # fmt: skip
        if found:
            return found
    found = _share(record.get("gpu_share"), f"{where}.gpu_share")
    if found:
        return found
    if record.get("shm") is not None:
        found = _section(record["shm"], SHM, f"{where}.shm", REQUIRED["shm"])
        if found:
            return found
    if record.get("waiting") is not None:
        found = _section(record["waiting"], WAITING, f"{where}.waiting", REQUIRED["waiting"])
        if found:
            return found
    run = record.get("run")
    if run is not None and not (isinstance(run, dict) and isinstance(run.get("id"), str)
                                and len(run["id"]) <= 256):  # fmt: skip
        return f"{where}.run is not an object with a string id"
    listed = record.get("members")
    if listed is not None:
        if not members or not isinstance(listed, list) or len(listed) > MAX_MEMBERS:
            return f"{where}.members is not a list of at most {MAX_MEMBERS} records"
        for number, member in enumerate(listed):
            if isinstance(member, dict):
                member = {"schema": SCHEMA, **member}
            found = problem(member, f"{where}.members[{number}]", members=False)
            if found:
                return found
    return None
