"""Whether tfboot's start-up hook ran in this interpreter, and why not: what ``tfboot show``,
``check`` and ``doctor`` say first when a plain framework import here gets no settings."""

from __future__ import annotations

import os
import sys


def not_started() -> str | None:
    """Why tfboot's start-up hook did not run in this interpreter, or None when it did."""
    package = sys.modules.get("tfboot")
    if package is None or getattr(package, "STARTED", True):
        return None
    where = os.path.dirname(os.path.dirname(os.path.abspath(package.__file__)))
    if sys.flags.no_site:
        why = "Python runs no start-up file under -S"
    else:
        import site

        sites = [*site.getsitepackages(), site.getusersitepackages()]
        if any(os.path.abspath(d) == where for d in sites):
            why = f"tfboot.pth in {where} was not run"
        else:
            why = (f"tfboot is imported from {where}, which is not a site directory (a "
                   "`pip install --target` tree on PYTHONPATH): Python runs .pth files only in "
                   "site directories")  # fmt: skip
    return (
        f"tfboot's start-up hook did not run in this interpreter ({why}), so a plain "
        "`import tensorflow` (or keras, jax, torch) here gets none of these settings; "
        "install tfboot into the interpreter's site-packages (pip install tfboot)"
    )


def copy() -> dict[str, object]:
    """Which copy of tfboot runs here (path and version), and whether ``tfboot inject``'s
    hook ran: the injected copy, or the image's own with the injected one standing down."""
    package = sys.modules.get("tfboot")
    path = os.path.dirname(os.path.abspath(getattr(package, "__file__", None) or "."))
    injected = getattr(package, "INJECTED", None)  # (hook, tree), set by the injected hook
    tree = os.path.abspath(injected[1]) if injected else None
    return {
        "path": path,
        "version": getattr(package, "__version__", None),
        "injected": bool(tree and os.path.dirname(path) == tree),
        "stood_down": bool(tree and os.path.dirname(path) != tree),
    }


def copy_line(found: dict[str, object]) -> str:
    """``copy()`` in words."""
    line = f"tfboot {found['version']} from {found['path']}"
    if found["injected"]:
        return line + " (injected by tfboot inject)"
    if found["stood_down"]:
        return line + " (the image's own tfboot; the injected copy stood down)"
    return line
