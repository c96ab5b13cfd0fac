"""What tfboot wrote into the environment, so its own values are never taken for the user's.

Every variable tfboot sets goes through the executor's one writer (``executor.environ``),
which records it in ``TFBOOT_WROTE``: a JSON object, name -> [the value written, the value
before it (null: unset), who wrote it]. Who is ``tfboot``, or a framework that set the
variable itself while its import ran (Keras on JAX sets ``TF_FORCE_GPU_ALLOW_GROWTH``).
Children inherit the record with the environment (``subprocess``, ``multiprocessing``'s
spawn and fork), so every process can tell, for any variable:

- unchanged since it was recorded: not the user's. It is never "explicit" and never a
  contradiction; a process whose plan sets it writes its own value, and one whose plan
  does not puts back the value from before;
- changed since: the user's again.

A record that does not parse counts as empty: the variables are then all the user's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from .values import nonblank

RECORD = "TFBOOT_WROTE"
TFBOOT = "tfboot"
FROM_ENV = object()  # the value before a write: the environment's, read when writing


def written(env: Mapping[str, str]) -> dict[str, tuple[str, str | None, str]]:
    """The record: name -> (value written, value before or None, writer)."""
    try:
        found = json.loads(env.get(RECORD) or "{}")
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    record = {}
    for name, entry in found.items():
        if (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and (entry[1] is None or isinstance(entry[1], str))
            and isinstance(entry[2], str)
        ):
            record[name] = (entry[0], entry[1], entry[2])
    return record


def writer(env: Mapping[str, str], name: str) -> str | None:
    """Who wrote ``name``'s current value (``tfboot``, a framework), or None: the user."""
    entry = written(env).get(name)
    return entry[2] if entry is not None and env.get(name) == entry[0] else None


def user_value(env: Mapping[str, str], name: str) -> str | None:
    """``name``'s value when the user set it (not blank, not a recorded write), else None."""
    value = nonblank(env, name)
    return None if value is None or writer(env, name) is not None else value


def before(env: Mapping[str, str], name: str) -> str | None:
    """``name``'s value before a recorded write that still holds; else its value now."""
    entry = written(env).get(name)
    if entry is not None and env.get(name) == entry[0]:
        return entry[1]
    return env.get(name)


def with_write(
    env: Mapping[str, str], name: str, value: str | None, who: str, previous: object = FROM_ENV
) -> str:
    """The record after ``who`` set ``name`` to ``value`` (None: put back, no longer ours);
    ``previous`` is the value before, when the environment no longer holds it."""
    record = written(env)
    if value is None:
        record.pop(name, None)
    else:
        old = before(env, name) if previous is FROM_ENV else previous
        record[name] = (value, old if isinstance(old, str) else None, who)
    return json.dumps({k: list(v) for k, v in sorted(record.items())}, separators=(",", ":"))
