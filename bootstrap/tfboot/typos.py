"""Misspelled names: a variable close to one of the contract's, and a ``TFBOOT_*`` name that
is none of tfboot's. A misspelled variable is the commonest mistake in an env contract, and
is otherwise silently not applied.

Nothing else in the environment is judged: a name is named only when it is not itself a
name tfboot or a framework reads and it is within ``CUTOFF`` of a contract name (difflib's
ratio: ``MEMORY_LIMT_MB`` against ``MEMORY_LIMIT_MB`` is 0.97; ``CUDA_VISIBLE_DEVICES``
against ``VISIBLE_GPU`` 0.52; ``MEMORY_LIMIT``, which other tools read, 0.89), or it starts
with ``TFBOOT_``. ``tfboot check`` fails on them; the import warns once. Values are never
shown: a misspelled name may hold a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .node.cpu import CGROUP_ROOT
from .node.nvml import LIBRARY_ENV
from .provenance import RECORD
from .settings import ALL_NAMES, FILE_NAMES

PREFIX = "TFBOOT_"
CUTOFF = 0.9
# tfboot's own names that no user sets: its records between processes, and test seams. The
# three named here are defined in layers above this one (cluster.engines.TASK, loaded only
# for a cluster; kube.template.CONTAINER_ENV; usage.job.RUN): tests/test_typos.py holds
# them equal.
INTERNAL = frozenset({RECORD, CGROUP_ROOT, LIBRARY_ENV,
                      "TFBOOT_TASK", "TFBOOT_INJECTED", "TFBOOT_USAGE_RUN"})  # fmt: skip
KNOWN = ALL_NAMES | FILE_NAMES | INTERNAL
CONTRACT = sorted(FILE_NAMES)  # what a misspelling is compared with: the contract and DIST_*
OWN = sorted(ALL_NAMES - FILE_NAMES)  # tfboot's own TFBOOT_* settings


def misspelled(names: Iterable[str]) -> list[tuple[str, str]]:
    """(name, message) for each name in ``names`` (an environment's) that looks like a
    misspelled tfboot variable; only names of the contract's shape (upper case, with an
    underscore) are compared."""
    found = []
    for name in sorted({n for n in names if "_" in n and n.isupper()} - KNOWN):
        if name.startswith(PREFIX):
            near = difflib.get_close_matches(name, OWN, n=1, cutoff=CUTOFF)
            guess = f"did you mean {near[0]}?" if near else f"tfboot's are {', '.join(OWN)}"
            found.append((name, f"{name} is not one of tfboot's variables: {guess} (not applied)"))
            continue
        near = difflib.get_close_matches(name, CONTRACT, n=1, cutoff=CUTOFF)
        if near:
            found.append((name, f"{name} is not a tfboot variable: did you mean {near[0]}? "
                                "(not applied)"))  # fmt: skip
    return found
