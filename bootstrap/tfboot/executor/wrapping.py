"""How the executor puts a wrapper in place of a framework function, and finds the original
again: a second configuration wraps the original, never tfboot's own wrapper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WRAPPED = "__tfboot_wraps__"  # on tfboot's wrapper of a framework function: the original


def replace(owner: Any, name: str, wrap: Callable[[Any], Any], static: bool = False) -> None:
    """``owner.name`` replaced by ``wrap(original)``, the original taken from under an
    earlier tfboot wrapper; ``static``: set on a class as a ``staticmethod``, so that it is
    called alike through the class and through an instance."""
    current = getattr(owner, name)
    original = getattr(current, WRAPPED, current)
    wrapped = wrap(original)
    setattr(wrapped, WRAPPED, original)
    setattr(owner, name, staticmethod(wrapped) if static else wrapped)
