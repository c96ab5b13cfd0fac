"""Fail the image build unless tfboot's start-up file is active in this interpreter.

Run at build time with the base image's own Python. It checks that:

1. ``tfboot.pth`` sits in the interpreter's own site-packages directory (as ``sysconfig``
   names it; ``dist-packages`` on Debian and Ubuntu Pythons);
2. that directory is one that ``site`` processes at start-up;
3. a fresh interpreter, also in isolated mode (``python -I``), has imported the module the
   ``.pth`` line names, before any user code runs.

Standard library only: it runs before anything else is known to work.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig

PTH_NAME = "tfboot.pth"


def fail(message: str) -> None:
    """Print ``message`` and stop the build."""
    sys.stderr.write(f"check_install: {message}\n")
    raise SystemExit(1)


def startup_module(pth_path: str) -> str:
    """The module the ``import`` line of ``pth_path`` names."""
    with open(pth_path, encoding="utf-8") as fh:
        for line in fh:
            words = line.split()
            if len(words) >= 2 and words[0] == "import":
                return words[1].rstrip(";")
    fail(f"{pth_path} has no import line")
    raise AssertionError("unreachable")


def installed_at() -> str:
    """Where pip actually put ``tfboot.pth`` (for the error message)."""
    from importlib import metadata

    try:
        return str(metadata.distribution("tfboot").locate_file(PTH_NAME))
    except metadata.PackageNotFoundError:
        return "nowhere: tfboot is not installed for this interpreter"


def loaded_at_startup(module: str, *flags: str) -> bool:
    """Whether a fresh interpreter started with ``flags`` has already imported ``module``."""
    code = f"import sys; sys.exit(0 if {module!r} in sys.modules else 3)"
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
    module = startup_module(pth)
    for flags in ((), ("-I",)):
        if not loaded_at_startup(module, *flags):
            fail(f"python {' '.join(flags)} did not import {module} at start-up")
    print(f"check_install: {pth} is active ({module} loads at start-up, also under -I)")


if __name__ == "__main__":
    main()
