"""The one writer of ``os.environ``: every variable tfboot sets, puts back or sees a
framework set is recorded in ``provenance.RECORD`` as it is written."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..provenance import RECORD, TFBOOT, before, with_write, writer

_here: set[str] = set()  # the variables tfboot wrote in this process (not inherited)


def setenv(name: str, value: str, who: str = TFBOOT) -> None:
    """Set ``name`` and record that ``who`` wrote it."""
    _here.add(name)
    os.environ[RECORD] = with_write(os.environ, name, value, who)
    os.environ[name] = value


def restore(name: str) -> str | None:
    """Put back ``name``'s value from before tfboot's write (unset it if there was none)."""
    value = before(os.environ, name)
    os.environ[RECORD] = with_write(os.environ, name, None, TFBOOT)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    return value


def inherited(names: tuple[str, ...], planned: Mapping[str, str]) -> list[str]:
    """Of ``names``, those tfboot wrote for a parent process that ``planned`` does not set:
    a child with its own settings puts back what was there before."""
    return [
        n for n in names if n not in planned and n not in _here and writer(os.environ, n) == TFBOOT
    ]


def note_writes(snapshot: Mapping[str, str | None], who: str) -> None:
    """Record the variables of ``snapshot`` that ``who`` (a framework, while it imported)
    changed since it was taken."""
    for name, old in snapshot.items():
        value = os.environ.get(name)
        if value is not None and value != old and writer(os.environ, name) is None:
            os.environ[RECORD] = with_write(os.environ, name, value, who, old)
