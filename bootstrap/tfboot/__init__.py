"""tfboot: make TensorFlow obey the container's GPU and CPU budget from environment variables.

Installed, it applies the environment at ``import tensorflow`` with no change to user code.
Explicit use::

    import tfboot
    tfboot.resolve()          # validated settings, without importing TensorFlow
    tfboot.apply()            # import TensorFlow and apply them (once per process)

``tfboot.pth`` (or, on Python 3.15+, ``tfboot.start``) imports this package at every
interpreter start, so importing it only puts the package itself on ``sys.meta_path`` as a
trampoline (``find_spec``); the first import of TensorFlow or Keras loads the real hooks
(``tfboot._startup``). Nothing else is imported here, and the public attributes load
lazily. If this folder is deleted while those files stay, the one-file stand-in
``tfboot.py`` installed beside it keeps start-up silent.
"""

import sys

__version__ = "0.1.0"
__all__ = ["ConfigError", "Settings", "apply", "last_result", "resolve", "uninstall"]

# The one table of frameworks: each watched module -> the adapter that configures it
# (tfboot.adapters.<name>) and how messages name it. Every other list of frameworks is
# derived from it (budget.roles.NAMES; the catalogue in tfboot.frameworks); plain literals,
# as the trampoline reads it at every interpreter start.
FRAMEWORKS = {
    "tensorflow": ("tensorflow", "TensorFlow"),
    "keras": ("keras", "Keras"),
    "tf_keras": ("keras", "Keras"),
    "jax": ("jax", "JAX"),
    "torch": ("torch", "PyTorch"),
}
_LAZY = {
    "ConfigError": "errors",
    "Settings": "settings",
    "resolve": "frameworks",
    "apply": "executor",
    "last_result": "executor",
    "uninstall": "_startup",
}


def find_spec(name: str, path: "object" = None, target: "object" = None) -> "object":
    """The trampoline: this module, on ``sys.meta_path``, hands a watched import to the hooks."""
    if name not in FRAMEWORKS:
        return None
    from ._startup import activate

    return activate(name, FRAMEWORKS)


def _start() -> None:
    """The PEP 829 entry point (``tfboot.start``): importing the package did the work."""


def __getattr__(name: str) -> "object":
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfboot' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


# Whether tfboot's start-up file imports this package, so the start-up hook runs in this
# interpreter: ``site`` processes .pth and .start files before it adds ``help`` to the
# builtins. Without it (a --target tree on PYTHONPATH, python -S) a plain framework import
# is not configured, and the commands say so.
STARTED = not sys.flags.no_site and not hasattr(sys.modules["builtins"], "help")
# The interpreter's start, as the start-up hook sees it: seconds since boot and the CPU
# seconds the process and its waited-for children had used (``os.times``'s first four, as
# ``usage.measure`` counts the tree). ``exec`` keeps the process's start time and CPU
# counters, so a shell that waited before it ``exec``ed Python would count its wait as the
# job's; the usage window begins here instead. ``site`` loaded ``os``; ``time`` is looked up
# and never imported here.
INTERPRETER: "tuple[float, float] | None" = None
if STARTED and hasattr(sys.modules.get("time"), "CLOCK_BOOTTIME"):
    INTERPRETER = (sys.modules["time"].clock_gettime(sys.modules["time"].CLOCK_BOOTTIME),
                   sum(sys.modules["os"].times()[:4]))  # fmt: skip

# Why tfboot stands aside in this interpreter ("": it does not): it runs on CPython 3.10 and
# later, and installs nothing under another (its modules would fail at a framework's import).
UNSUPPORTED = (
    ""
    if sys.implementation.name == "cpython" and sys.version_info >= (3, 10)
    else f"tfboot runs on CPython 3.10 and later, not {sys.implementation.name} "
    f"{sys.version_info[0]}.{sys.version_info[1]}: it configures nothing here"
)

# The package itself is the finder: a class would cost more at every interpreter start.
if not UNSUPPORTED and sys.modules[__name__] not in sys.meta_path:
    sys.meta_path.insert(0, sys.modules[__name__])
