"""PNG charts for the benchmarks' ``--png`` option; matplotlib is imported only from here.

matplotlib is an optional extra (``pip install 'tfboot[bench]'``), never a dependency of
tfboot: a benchmark imports this module only when ``--png`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or exit saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--png needs matplotlib: pip install 'tfboot[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: Path) -> None:
    """Write ``figure`` as a small PNG at ``path`` and say where."""
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    print(f"chart written to {path}")
