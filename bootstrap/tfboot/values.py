"""Values and messages: whole numbers from configuration text, and what a message may quote.

Numbers. ``int()`` of a long digit string does quadratic work and, past Python's int-string
limit (4300 digits), raises ``ValueError``. No limit of tfboot needs more than 18 digits,
so a longer number is not converted: it reads as ``HUGE``, which every limit rejects. Only
ASCII digits count (``١٢`` and ``1_0`` are not numbers here), and every bounded variable
says what it accepts the same way: ``expected <what> from LOW to HIGH``.

Messages. One rule decides what a message may quote (``quote``):

- the value of a variable tfboot reads, as given in the process environment or a manifest's
  ``env`` list (where configuration is written in plain sight), shortened;
- never a line of a ``.env`` file, nor a value read from one that does not parse, nor the
  result of a ``${VAR}`` interpolation: those are named by variable and line number;
- never the content of a kernel or cgroup file: those are named by path and line number;
- never the credentials of a URL (``https://user:secret@host`` is shown as
  ``https://***@host``), wherever the value is printed (``hide_credentials``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PREFIX = "tfboot:"  # every line tfboot writes starts with it
MAX_DIGITS = 18
HUGE = 10**MAX_DIGITS  # stands for any number of more than MAX_DIGITS digits
SHOWN_CHARS = 256  # a longer value is shortened in messages, its length given
SHOWN_HEAD = 64  # the characters of a shortened value that are kept


def nonblank(env: Mapping[str, str], name: str) -> str | None:
    """``env[name]``, or None when it is unset or blank (an empty value counts as unset)."""
    value = env.get(name)
    return value if value is not None and value.strip() else None


def digits(text: str) -> int | None:
    """``text`` (ASCII digits, blanks around them allowed) as an int, or None if not one."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0") or "0"
    return HUGE if len(significant) > MAX_DIGITS else int(significant)


def positive(text: str) -> int | None:
    """A whole number of at least 1, or None."""
    number = digits(text)
    return number if number else None


_SCHEME = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
HIDDEN = "***"


def hide_credentials(value: str) -> str:
    """``value`` with a URL's user information replaced by ``***``: after the scheme, or
    from the start of a value without one that holds a colon before its "@" (``user:secret@
    host``), up to the last "@" (a password may hold "/" or "@" itself)."""
    at = value.rfind("@")
    if at < 0:
        return value
    scheme = _SCHEME.match(value)
    if scheme is not None and scheme.end() <= at:
        return value[: scheme.end()] + HIDDEN + value[at:]
    if ":" in value[:at]:
        return HIDDEN + value[at:]
    return value


def shorten(value: str) -> str:
    """``value`` quoted for a message: as it is up to ``SHOWN_CHARS``, else its head and length;
    a URL's credentials never."""
    value = hide_credentials(value)
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_HEAD]!r}... ({len(value)} characters)"


def quote(value: Any) -> str:
    """Any value quoted for a message, by the same rule as ``shorten``."""
    return shorten(value if isinstance(value, str) else repr(value))


def line(kind: str, text: str) -> str:
    """One line of tfboot's output: ``tfboot: TEXT``, or ``tfboot: KIND: TEXT``."""
    label = "" if kind == "info" else f" {kind}:"
    return f"{PREFIX}{label} {text}"


def rows(given: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    """name -> {value, source}, as ``show``, ``check``, ``doctor`` and the JSON report print."""
    return {name: {"value": hide_credentials(value) if isinstance(value, str) else value,
                   "source": source} for name, (value, source) in given.items()}  # fmt: skip
