"""Read the ``.env`` file named by ``TFBOOT_ENV_FILE`` (python-dotenv), strictly.

Only an explicitly named file is read; a ``.env`` in the working directory never is.
Lines python-dotenv cannot parse are errors here, not skipped lines.
"""

from __future__ import annotations

import os

from .errors import ConfigError, Problem

VARIABLE = "TFBOOT_ENV_FILE"


def _problem(path: str, accepted: str, hint: str = "") -> ConfigError:
    return ConfigError(Problem(VARIABLE, path, accepted, hint))


def read_env_file(path: str, allowed: frozenset[str]) -> dict[str, str]:
    """Return the variables set in ``path``; every key must be in ``allowed``."""
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except FileNotFoundError:
        raise _problem(
            path, "the file does not exist", "give the path of a readable .env file"
        ) from None
    except IsADirectoryError:
        raise _problem(path, "it is a directory, not a .env file") from None
    except PermissionError:
        raise _problem(
            path, f"the file cannot be read by uid {os.getuid()} (permission denied)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _problem(path, f"the file cannot be read ({exc})") from None

    import io

    problems = [
        Problem(
            VARIABLE,
            path,
            f"line {b.original.line} is not KEY=VALUE: {b.original.string.strip()!r}",
        )
        for b in parse_stream(io.StringIO(text))
        if b.error
    ]
    values = {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if k}
    unknown = sorted(k for k in values if k not in allowed)
    if unknown:
        problems.append(
            Problem(
                VARIABLE,
                path,
                f"unknown variable(s) {', '.join(unknown)}; a tfboot .env file may set only "
                + ", ".join(sorted(allowed)),
            )
        )
    missing = sorted(k for k, v in values.items() if v is None)
    if missing:
        problems.append(
            Problem(VARIABLE, path, f"{', '.join(missing)} has no value (write KEY=VALUE)")
        )
    if problems:
        raise ConfigError(problems)
    return {k: v for k, v in values.items() if v is not None}
