"""Fail the image build unless tfboot's start-up file is active in this interpreter.

Run at build time with the base image's own Python. It checks that:

1. ``tfboot.pth`` sits in the interpreter's own site-packages directory (as ``sysconfig``
   names it; ``dist-packages`` on Debian and Ubuntu Pythons);
2. that directory is one that ``site`` processes at start-up;
3. a fresh interpreter, also in isolated mode (``python -I``), has imported the ``tfboot``
   package (which the ``.pth`` line, or on Python 3.15+ the ``tfboot.start`` entry point,
   imports) before any user code runs.

Standard library only: it runs before anything else is known to work.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig

PTH_NAME = "tfboot.pth"
MODULE = "tfboot"


def fail(message: str) -> None:
    """Print ``message`` and stop the build."""
    sys.stderr.write(f"check_install: {message}\n")
    raise SystemExit(1)


def installed_at() -> str:
    """Where pip actually put ``tfboot.pth`` (for the error message)."""
    from importlib import metadata

    try:
        return str(metadata.distribution("tfboot").locate_file(PTH_NAME))
    except metadata.PackageNotFoundError:
        return "nowhere: tfboot is not installed for this interpreter"


def loaded_at_startup(module: str, *flags: str) -> bool:
    """Whether a fresh interpreter started with ``flags`` has already imported ``module``."""
    # The package, not the one-file stand-in the wheel installs for a deleted folder.
    code = f"import sys; sys.exit(0 if hasattr(sys.modules.get({module!r}), '__path__') else 3)"
    return subprocess.run([sys.executable, *flags, "-c", code], check=False).returncode == 0


def main() -> None:
    """Run the three checks and print where the start-up file is."""
    purelib = sysconfig.get_paths()["purelib"]
    pth = os.path.join(purelib, PTH_NAME)
    if not os.path.isfile(pth):
        fail(
            f"{PTH_NAME} is not in {purelib}, this interpreter's site-packages; "
            f"pip put it at {installed_at()}"
        )
    site_dirs = {os.path.realpath(d) for d in site.getsitepackages()}
    if os.path.realpath(purelib) not in site_dirs:
        fail(f"{purelib} is not processed by site at start-up (site dirs: {sorted(site_dirs)})")
    for flags in ((), ("-I",)):
        if not loaded_at_startup(MODULE, *flags):
            fail(f"python {' '.join(flags)} did not import {MODULE} at start-up")
    print(f"check_install: {pth} is active ({MODULE} loads at start-up, also under -I)")


if __name__ == "__main__":
    main()
