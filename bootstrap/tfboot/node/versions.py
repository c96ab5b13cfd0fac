"""The installed version of a framework's package, read from its files without importing it
(an adapter plans before the framework's code runs).

JAX and jaxlib keep theirs in ``version.py`` as ``_version = "0.4.30"``; any other package
is asked through its distribution's metadata. A version is a tuple of its leading numbers
(``0.5.1``, ``2.22.0rc0`` -> ``(2, 22, 0)``); None when it cannot be read.
"""

from __future__ import annotations

import os
import re
from importlib.util import find_spec

# The distributions that install the ``tensorflow`` package.
TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tf-nightly-cpu", "tensorflow-intel",
              "tensorflow-aarch64", "tensorflow-macos")  # fmt: skip
_ASSIGNED = re.compile(r"""^_version\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.M)
_NUMBERS = re.compile(r"\d+(?:\.\d+)*")
Version = tuple[int, ...]


def parse(text: str) -> Version | None:
    """The leading dotted numbers of ``text`` as a tuple."""
    found = _NUMBERS.match(text.strip())
    return tuple(int(part) for part in found.group(0).split(".")) if found else None


def shown(version: Version | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))


def _from_file(package: str) -> str | None:
    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as source:
                found = _ASSIGNED.search(source.read(65536))
        except (OSError, UnicodeDecodeError):
            continue
        if found:
            return found.group(1)
    return None


def installed(package: str, distributions: tuple[str, ...] = ()) -> Version | None:
    """The version of ``package``: from its ``version.py``, else from the first of
    ``distributions`` (its own name by default) that is installed."""
    text = _from_file(package)
    if text is None:
        from importlib import metadata

        for name in distributions or (package,):
            try:
                text = metadata.version(name)
                break
            except (metadata.PackageNotFoundError, ValueError):
                continue
    return None if text is None else parse(text)
