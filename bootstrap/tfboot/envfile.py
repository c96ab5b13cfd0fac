"""Read the ``.env`` file named by ``TFBOOT_ENV_FILE`` (python-dotenv), strictly and safely.

Only an explicitly named file is read; a ``.env`` in the working directory never is. Only a
regular file of at most ``MAX_BYTES`` is read: a device, FIFO, socket or directory is
refused before any read, so nothing can block or stream forever. Lines python-dotenv
cannot parse, and lines that are not ``KEY=VALUE`` (a pasted token), are errors here, not
skipped lines. Errors never quote the file's text (the path may name a file of secrets):
they give line numbers, and the names of unknown keys that look like variable names.
``${VAR}`` is expanded from the mapping the settings are resolved from, never from
``os.environ`` behind its back.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .errors import ConfigError, Problem

VARIABLE = "TFBOOT_ENV_FILE"
MAX_BYTES = 64 * 1024
# A key is named in a message only if it looks like a variable name.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _problem(path: str, accepted: str, hint: str = "") -> ConfigError:
    return ConfigError(Problem(VARIABLE, path, accepted, hint))


def _check(path: str, status: os.stat_result) -> None:
    """Refuse anything but a regular file of at most ``MAX_BYTES``."""
    for test, kind in _KINDS:
        if test(status.st_mode):
            raise _problem(path, f"it is {kind}, not a .env file (only a regular file is read)")
    if not stat.S_ISREG(status.st_mode):
        raise _problem(path, "it is not a regular file (only a regular file is read)")
    if status.st_size > MAX_BYTES:
        raise _problem(
            path, f"the file has {status.st_size} bytes, more than the {MAX_BYTES} a .env may have"
        )


def _unreadable(path: str, exc: Exception) -> ConfigError:
    if isinstance(exc, FileNotFoundError):
        return _problem(path, "the file does not exist", "give the path of a readable .env file")
    if isinstance(exc, PermissionError):
        return _problem(path, f"the file cannot be read by uid {os.getuid()} (permission denied)")
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return _problem(path, f"the file cannot be read ({reason})")


def _read_bytes(path: str) -> bytes:
    """At most ``MAX_BYTES`` of a regular file, checked before and after opening (races)."""
    try:
        status = os.stat(path)
    except (OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None
    _check(path, status)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        _check(path, os.fstat(fd))
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _problem(path, f"the file cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_BYTES:
        raise _problem(path, f"the file grew past the {MAX_BYTES} bytes a .env may have")
    return data


def _text(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _problem(path, f"line {line} is not UTF-8 text (a .env file is UTF-8)") from None


def _listed(items: list[str], shown: int = 10) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _lines(numbers: list[str]) -> str:
    """The subject of a sentence about lines: ``line 3 is``, ``lines 3, 4 are``."""
    return f"line {numbers[0]} is" if len(numbers) == 1 else f"lines {_listed(numbers)} are"


@dataclass(frozen=True)
class FileValue:
    """A value set in the file, the line that set it, and whether ``${VAR}`` built it."""

    value: str
    line: int
    interpolated: bool


PRIVATE = "tfboot._dotenv"  # python-dotenv from beside tfboot, when the path has another


def _dotenv(part: str) -> ModuleType:
    """python-dotenv's ``part`` (``parser``, ``variables``): the copy installed beside tfboot
    (pip resolved it for tfboot; the injected tree carries one), loaded under a private name
    when the path would give another (an image's own, older one); else the path's. Either
    must have what tfboot reads (python-dotenv 1.0 and later), or it is a problem naming
    ``TFBOOT_ENV_FILE``."""
    beside = Path(__file__).resolve().parent.parent / "dotenv"
    found = importlib.util.find_spec("dotenv")
    ours = found is not None and found.origin and Path(found.origin).resolve().parent == beside
    try:
        if ours or not (beside / "__init__.py").is_file():
            return importlib.import_module(f"dotenv.{part}")
        if PRIVATE not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                PRIVATE, beside / "__init__.py", submodule_search_locations=[str(beside)]
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[PRIVATE] = module
            spec.loader.exec_module(module)
        return importlib.import_module(f"{PRIVATE}.{part}")
    except ImportError as exc:
        where = found.origin if found is not None else "none found"
        raise ConfigError(
            Problem(
                VARIABLE,
                None,
                f"reading it needs python-dotenv 1.0 or later, and the "
                f"python-dotenv found ({where}) has no dotenv.{part} ({exc})",
                "install python-dotenv 1.0 or later beside tfboot",
            )
        ) from None


def _interpolate(
    values: list[tuple[str, str, int]], env: Mapping[str, str]
) -> dict[str, FileValue]:
    """python-dotenv's ``${VAR}`` and ``${VAR:-default}`` expansion, against ``env`` only.

    As python-dotenv does, a key set earlier in the file wins over ``env``.
    """
    variables = _dotenv("variables")
    Variable, parse_variables = variables.Variable, variables.parse_variables

    resolved: dict[str, FileValue] = {}
    for key, raw, line in values:
        atoms = list(parse_variables(raw))
        scope = {**env, **{k: v.value for k, v in resolved.items()}}
        text = "".join(atom.resolve(scope) for atom in atoms)
        resolved[key] = FileValue(text, line, any(isinstance(a, Variable) for a in atoms))
    return resolved


def read_env_file(
    path: str, allowed: frozenset[str], env: Mapping[str, str]
) -> dict[str, FileValue]:
    """The variables set in ``path``, ``${VAR}`` read from ``env``; every key in ``allowed``."""
    parse_stream = _dotenv("parser").parse_stream
    text = _text(path, _read_bytes(path))
    bad: list[str] = []  # lines that are not KEY=VALUE: named by number only
    odd: list[str] = []  # lines whose key does not look like a name: not quoted
    unknown: list[str] = []
    values: list[tuple[str, str, int]] = []
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error or (binding.key is not None and binding.value is None):
            bad.append(str(line))
        elif binding.key and not _NAME.match(binding.key):
            odd.append(str(line))
        elif binding.key and binding.key not in allowed:
            unknown.append(binding.key)
        elif binding.key and binding.value is not None:
            values.append((binding.key, binding.value, line))
    problems = [
        Problem(VARIABLE, path, accepted)
        for found, accepted in (
            (bad, f"{_lines(bad)} not KEY=VALUE"),
            (odd, f"{_lines(odd)} setting a key that is not a variable name"),
            (
                unknown,
                f"unknown variable(s) {_listed(unknown)}; a tfboot .env file may set only "
                + ", ".join(sorted(allowed)),
            ),
        )
        if found
    ]
    if problems:
        raise ConfigError(problems)
    return {k: v for k, v in _interpolate(values, env).items() if v.value.strip()}
