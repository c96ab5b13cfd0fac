"""``python -m tfboot``: the command line (under an interpreter tfboot does not run on, the
reason, and exit status 2)."""

import sys

from . import UNSUPPORTED

if UNSUPPORTED:
    sys.stderr.write(f"tfboot: error: {UNSUPPORTED}\n")
    sys.exit(2)

from .cli import main  # imported only where tfboot runs

sys.exit(main())
