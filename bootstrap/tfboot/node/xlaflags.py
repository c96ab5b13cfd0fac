"""``XLA_FLAGS`` as XLA reads it: its tokenizer, mirrored, and values quoted so XLA reads
them whole.

XLA (``xla/parse_flags_from_env.cc``, ``ParseArgvFromString``, in the XLA that TensorFlow
2.21 and JAX 0.10 build on) reads flags separated by whitespace (space, tab, newline,
carriage return), each starting with ``-``; a flag's value may be quoted, ``--f="a b"`` or
``--f='a b'``, a backslash escaping the next character inside double quotes only. It stops
at the first word that does not start with ``-``. A value that does not start with ``-``
at all names a file of flags, which tfboot does not read.
"""

from __future__ import annotations

WHITESPACE = " \t\n\r"
_NAME_CHARS = "-_"


def tokens(flags: str) -> list[tuple[str, str | None]]:
    """``(--name, value)`` for each flag XLA reads from ``flags`` (value None: no ``=``)."""
    found: list[tuple[str, str | None]] = []
    b = _skip(flags, 0)
    while b < len(flags) and flags[b] == "-":
        e = b
        while (
            e < len(flags)
            and flags[e].isascii()
            and (flags[e].isalnum() or flags[e] in _NAME_CHARS)
        ):
            e += 1
        name = flags[b:e]
        if e + 1 < len(flags) and flags[e] == "=" and flags[e + 1] in "'\"":
            quote, e, value = flags[e + 1], e + 2, ""
            while e < len(flags) and flags[e] != quote:
                if quote == '"' and flags[e] == "\\" and e + 1 < len(flags):
                    e += 1
                value += flags[e]
                e += 1
            e += 1  # past the closing quote
            found.append((name, value))
        else:
            end = e
            while end < len(flags) and flags[end] not in WHITESPACE:
                end += 1
            rest = flags[e:end]
            found.append((name, rest[1:] if rest.startswith("=") else rest or None))
            e = end
        b = _skip(flags, e)
    return found


def _skip(flags: str, at: int) -> int:
    while at < len(flags) and flags[at] in WHITESPACE:
        at += 1
    return at


def value(flags: str, name: str) -> str | None:
    """The last value XLA reads for ``--name`` in ``flags`` (None: not given)."""
    given = [v for n, v in tokens(flags) if n == name]
    return given[-1] if given else None


def flag(name: str, text: str) -> str:
    """``--name=text``, quoted when XLA would otherwise cut ``text`` at a blank or a quote."""
    if not any(c in WHITESPACE + "'\"\\" for c in text):
        return f"{name}={text}"
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{escaped}"'
