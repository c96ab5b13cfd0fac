"""Containers whose command runs Python so that ``PYTHONPATH`` or ``site`` is ignored
(``-I``, ``-E``, ``-S``): the injected hook cannot reach them."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

# A python executable followed by option clusters (stops at the first word that is not one).
_PYTHON = re.compile(r"(?:^|[\s/;&|(])python[0-9.]*((?:\s+-[A-Za-z]+)+)")
_WHY = {"I": "-I (isolated: PYTHONPATH ignored)", "E": "-E (PYTHON* variables ignored)",
        "S": "-S (no site: no start-up hook at all)"}  # fmt: skip


def ignored_by(container: Mapping[str, Any], pth: bool = False) -> list[str]:
    """The options in the container's command and args that keep the hook out, described;
    with the ``.pth`` way (``pth``), only ``-S`` does."""
    words = [str(w) for key in ("command", "args") for w in container.get(key) or []]
    text = " ".join(shlex.quote(w) if " " not in w else w for w in words)
    found: set[str] = set()
    for match in _PYTHON.finditer(text):
        found |= set("".join(flag.lstrip("-") for flag in match.group(1).split())) & set(_WHY)
    return [_WHY[f] for f in ("S" if pth else "IES") if f in found]


ADVICE = (
    "drop the option, or name the image's site-packages in the annotation "
    "tfboot/site-packages, so a .pth file starts tfboot there (docs/inject.md); under -S "
    "nothing can start it"
)
