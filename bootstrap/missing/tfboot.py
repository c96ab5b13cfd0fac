"""Stand-in for a missing ``tfboot`` package folder, so interpreter start stays silent.

The tfboot wheel installs this file as ``tfboot.py`` next to the ``tfboot/`` package.
Python always imports the package when its folder exists, so this module costs nothing
then. It is imported only when the folder is gone (a partial uninstall, an image layer
that deleted it) while ``tfboot.pth`` or ``tfboot.start`` was left behind: their
start-up import then finds this module instead of failing with a traceback at every
interpreter start. Any other use of ``tfboot`` says what is wrong.
"""


def _start() -> None:
    """The entry point named in ``tfboot.start`` (Python 3.15+): nothing to do here."""


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"module 'tfboot' has no attribute {name!r}: the tfboot package folder is missing "
        f"next to {__file__}; reinstall tfboot"
    )
