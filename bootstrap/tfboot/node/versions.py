"""The installed version of a framework's package, read from its files without importing it
(an adapter plans before the framework's code runs).

JAX and jaxlib keep theirs in ``version.py`` as ``_version = "0.4.30"``, PyTorch as
``__version__``; any other package's is read from its distribution's ``.dist-info`` folder
beside it. A version is a tuple of its leading numbers
(``0.5.1``, ``2.22.0rc0`` -> ``(2, 22, 0)``); None when it cannot be read.
"""

from __future__ import annotations

import os
import re
from importlib.util import find_spec

# The distributions that install the ``tensorflow`` package.
TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tf-nightly-cpu", "tensorflow-intel",
              "tensorflow-aarch64", "tensorflow-macos")  # fmt: skip
_ASSIGNED = re.compile(r"""^_{1,2}version_{0,2}\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""",
                       re.M)  # fmt: skip
_NUMBERS = re.compile(r"\d+(?:\.\d+)*")
Version = tuple[int, ...]


def parse(text: str) -> Version | None:
    """The leading dotted numbers of ``text`` as a tuple."""
    found = _NUMBERS.match(text.strip())
    return tuple(int(part) for part in found.group(0).split(".")) if found else None


def shown(version: Version | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))


def _folders(package: str) -> list[str]:
    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def _from_file(folders: list[str]) -> str | None:
    """``_version`` or ``__version__`` from the package's ``version.py``."""
    for folder in folders:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as source:
                found = _ASSIGNED.search(source.read(65536))
        except (OSError, UnicodeDecodeError):
            continue
        if found:
            return found.group(1)
    return None


def _from_dist_info(folders: list[str], distributions: tuple[str, ...]) -> str | None:
    """The version in the name of a distribution's ``NAME-VERSION.dist-info`` folder beside
    the package (cheaper than ``importlib.metadata``, which imports a dozen modules)."""
    wanted = {re.sub(r"[-_.]+", "_", name).lower() for name in distributions}
    for folder in folders:
        try:
            entries = os.listdir(os.path.dirname(folder))
        except OSError:
            continue
        for entry in entries:
            name, dash, rest = entry.partition("-")
            if dash and rest.endswith(".dist-info") and re.sub(r"[-_.]+", "_", name).lower() \
                    in wanted:  # fmt: skip
                return rest[: -len(".dist-info")]
    return None


def installed(package: str, distributions: tuple[str, ...] = ()) -> Version | None:
    """The version of ``package``: from its ``version.py``, else from the folder of the
    first of ``distributions`` (its own name by default) installed beside it."""
    folders = _folders(package)
    text = _from_file(folders) or _from_dist_info(folders, distributions or (package,))
    return None if text is None else parse(text)
