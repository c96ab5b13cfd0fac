"""Stand-in for a ``tfboot`` package folder that is not beside it, so interpreter start stays
silent and an editable install works.

The tfboot wheel installs this file as ``tfboot.py`` next to the ``tfboot/`` package.
Python always imports the package when its folder exists, so this module costs nothing
then. It is imported only when the folder is not there:

- an editable install (``pip install -e``): the package lives in the source tree, which
  its own ``.pth`` puts on ``sys.path`` after site-packages. This module then loads that
  package in its own place, so ``tfboot.pth`` starts the real tfboot;
- the folder is gone (a partial uninstall, an image layer that deleted it) while
  ``tfboot.pth`` or ``tfboot.start`` was left behind: their start-up import finds this
  module instead of failing with a traceback at every interpreter start. Any other use of
  ``tfboot`` says what is wrong.
"""

import sys


def _load_package() -> bool:
    """Load the ``tfboot`` package from elsewhere on ``sys.path`` in this module's place."""
    try:
        import importlib.machinery
        import importlib.util
        import os

        here = os.path.dirname(os.path.abspath(__file__))
        path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec(__name__, path)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            return False
        module = importlib.util.module_from_spec(spec)
        sys.modules[__name__] = module
        spec.loader.exec_module(module)
        return True
    except BaseException:
        sys.modules[__name__] = _this
        return False


def _start() -> None:
    """The entry point named in ``tfboot.start`` (Python 3.15+): nothing to do here."""


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"module 'tfboot' has no attribute {name!r}: the tfboot package folder is missing "
        f"next to {__file__}; reinstall tfboot"
    )


_this = sys.modules[__name__]
_load_package()
